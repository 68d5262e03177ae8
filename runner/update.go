package runner

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"time"

	"cubicle/backend/fault"
	"cubicle/runner/wire"
)

// ErrRestart is returned by Run after the runner replaced its executable with a verified new
// version: the caller closes the Runner and starts Executable() again (Reexec).
var ErrRestart = errors.New("runner: restart as the new version")

// Executable is the runner's executable file (the one an update replaces).
func (r *Runner) Executable() (string, error) {
	exe := r.cfg.Executable
	if exe == "" {
		var err error
		if exe, err = os.Executable(); err != nil {
			return "", err
		}
	}
	if real, err := filepath.EvalSymlinks(exe); err == nil {
		exe = real
	}
	return exe, nil
}

// selfUpdate downloads version u for this runner's platform over its token, checks its size and
// SHA-256 against u (what the server said over the authenticated link) and the download's
// header, checks that it runs and says it is u.Version, and then renames it over the
// executable. On any failure the executable is untouched and the error says why.
func (r *Runner) selfUpdate(ctx context.Context, u wire.Update) error {
	if u.Version == "" || len(u.SHA256) != 64 {
		return fault.Invalid("update: the server named no version or SHA-256")
	}
	exe, err := r.Executable()
	if err != nil {
		return fmt.Errorf("update: find my executable: %w", err)
	}
	tmp, err := os.CreateTemp(filepath.Dir(exe), ".cubicle-update-*")
	if err != nil {
		return fault.Unavailable("update: cannot write next to %s (the runner's user must be able to replace it): %v", exe, err)
	}
	keep := false
	defer func() {
		tmp.Close()
		if !keep {
			os.Remove(tmp.Name())
		}
	}()
	q := url.Values{"os": {runtime.GOOS}, "arch": {runtime.GOARCH}, "version": {u.Version}}
	base, _ := url.Parse(r.cfg.Server)
	base.Path = strings.TrimRight(base.Path, "/") + wire.DownloadPath
	base.RawQuery = q.Encode()
	dctx, cancel := context.WithTimeout(ctx, 10*time.Minute)
	defer cancel()
	req, err := http.NewRequestWithContext(dctx, http.MethodGet, base.String(), nil)
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "Bearer "+r.cfg.Token)
	resp, err := (&http.Client{Transport: &http.Transport{Proxy: http.ProxyFromEnvironment}}).Do(req)
	if err != nil {
		return fault.Unavailable("update: download %s: %v", u.Version, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		msg, _ := io.ReadAll(io.LimitReader(resp.Body, 4<<10))
		return fault.Unavailable("update: download %s: HTTP %d: %s", u.Version, resp.StatusCode, strings.TrimSpace(string(msg)))
	}
	if h := resp.Header.Get(wire.HeaderSHA256); h != "" && !strings.EqualFold(h, u.SHA256) {
		return fault.Unavailable("update: the download of %s says SHA-256 %s, the server's link said %s: refused", u.Version, h, u.SHA256)
	}
	sum := sha256.New()
	limit := u.Size
	if limit <= 0 {
		limit = 1 << 30
	}
	n, err := io.Copy(io.MultiWriter(tmp, sum), io.LimitReader(resp.Body, limit+1))
	if err != nil {
		return fault.Unavailable("update: download %s: %v", u.Version, err)
	}
	if u.Size > 0 && n != u.Size {
		return fault.Unavailable("update: the download of %s has %d bytes, want %d: refused", u.Version, n, u.Size)
	}
	if got := hex.EncodeToString(sum.Sum(nil)); !strings.EqualFold(got, u.SHA256) {
		return fault.Unavailable("update: the download of %s has SHA-256 %s, want %s: refused (the old version keeps running)", u.Version, got, u.SHA256)
	}
	if err := tmp.Sync(); err != nil {
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	if err := os.Chmod(tmp.Name(), 0o755); err != nil {
		return err
	}
	if err := checkRuns(ctx, tmp.Name(), u.Version); err != nil {
		return err
	}
	if err := replaceExecutable(tmp.Name(), exe); err != nil {
		return fmt.Errorf("update: replace %s: %w", exe, err)
	}
	keep = true
	r.log.Info("runner binary replaced; restarting", "from", r.cfg.Version, "to", u.Version, "exe", exe)
	return nil
}

// checkRuns runs `<bin> version` and checks it names want (a binary that does not start on this
// machine, or is another version, is refused before it replaces anything).
func checkRuns(ctx context.Context, bin, want string) error {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, "version")
	cmd.Env = append(os.Environ(), "CUBICLE_RUNNER_TOKEN=")
	out, err := cmd.Output()
	if err != nil {
		return fault.Unavailable("update: the new binary does not run here: %v", err)
	}
	if f := strings.Fields(string(out)); len(f) < 2 || f[1] != want {
		return fault.Unavailable("update: the new binary says %q, want version %s: refused", strings.TrimSpace(string(out)), want)
	}
	return nil
}
