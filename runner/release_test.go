//go:build !windows

package runner_test

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"cubicle/backend"
	"cubicle/backend/cli"
	"cubicle/backend/nodes"
	"cubicle/backend/release"
	"cubicle/runner/wire"
)

// get sends GET path with an optional bearer token and no session; it returns status, headers
// and body.
func get(t *testing.T, s *server, path, bearer string, session bool) (int, http.Header, []byte) {
	t.Helper()
	req, _ := http.NewRequest("GET", s.url+path, nil)
	if bearer != "" {
		req.Header.Set("Authorization", "Bearer "+bearer)
	}
	c := http.DefaultClient
	if session {
		c = s.http
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header, raw
}

func hexSum(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

// TestRunnerDownload: the download route serves the binary for an os/arch to a runner's token
// or an admin session (never anonymously), with its SHA-256 in a header and in the listing;
// and the join command shown when a runner is added, pasted into a shell, downloads the
// binary and runs it as that runner (no engine needed).
func TestRunnerDownload(t *testing.T) {
	s := startServer(t, "127.0.0.1:0")
	var c nodes.Created
	s.do(t, "POST", "/api/app/admin/runners", map[string]any{"name": "new box"}, http.StatusCreated, &c)
	own := wire.DownloadPath + "?os=" + runtime.GOOS + "&arch=" + runtime.GOARCH

	for _, tc := range []struct {
		name, path, bearer string
		session            bool
		want               int
		says               string
	}{
		{"anonymous", own, "", false, 401, "Bearer"},
		{"a wrong runner token", own, c.ID + ".not-the-secret", false, 401, ""},
		{"a malformed token", own, "garbage", false, 401, ""},
		{"no platform", wire.DownloadPath, c.Token, false, 400, "os="},
		{"an unknown os", wire.DownloadPath + "?os=plan9&arch=amd64", c.Token, false, 400, "linux|darwin|windows"},
		{"a version that is a path", own + "&version=..%2F..%2Fetc", c.Token, false, 400, "version"},
		{"a platform not built", wire.DownloadPath + "?os=darwin&arch=arm64", c.Token, false, 404, "scripts/build.sh --runners"},
		{"a version not offered", own + "&version=9.9.9", "", true, 404, "9.9.9"},
		{"the listing, anonymous", "/api/runner/binaries", "", false, 401, ""},
	} {
		code, _, body := get(t, s, tc.path, tc.bearer, tc.session)
		if code != tc.want || !strings.Contains(string(body), tc.says) {
			t.Errorf("%s: HTTP %d %s, want %d saying %q", tc.name, code, body, tc.want, tc.says)
		}
	}

	// A runner's token and an admin session get the binary (here: the running executable),
	// whose SHA-256 the header and the listing give.
	code, hdr, body := get(t, s, own, c.Token, false)
	if code != 200 || hdr.Get(wire.HeaderSHA256) != hexSum(body) || hdr.Get(wire.HeaderVersion) != cli.Version {
		t.Fatalf("runner download: HTTP %d, %d bytes, headers %v", code, len(body), hdr)
	}
	self, _ := os.ReadFile(os.Args[0])
	if !bytes.Equal(self, body) {
		t.Fatal("the download is not the running executable")
	}
	if code, hdr2, _ := get(t, s, own, "", true); code != 200 || hdr2.Get(wire.HeaderSHA256) != hdr.Get(wire.HeaderSHA256) {
		t.Fatalf("admin download: HTTP %d", code)
	}
	// A member's session is not enough.
	s.do(t, "POST", "/api/app/admin/users", map[string]string{"username": "carol", "password": "member-pass-word-2", "role": "member"}, http.StatusCreated, nil)
	jar, _ := cookiejar.New(nil)
	member := &server{b: s.b, url: s.url, http: &http.Client{Jar: jar}}
	member.do(t, "POST", "/api/auth/login", map[string]string{"username": "carol", "password": "member-pass-word-2"}, http.StatusOK, nil)
	if code, _, body := get(t, member, own, "", true); code != 403 || !strings.Contains(string(body), "administrators") {
		t.Fatalf("member download: HTTP %d %s", code, body)
	}
	var list struct {
		Version  string
		Binaries []release.Binary
	}
	s.do(t, "GET", "/api/runner/binaries", nil, http.StatusOK, &list)
	found := false
	for _, b := range list.Binaries {
		found = found || b.OS == runtime.GOOS && b.Arch == runtime.GOARCH && b.SHA256 == hdr.Get(wire.HeaderSHA256) && b.Version == cli.Version
	}
	if !found || list.Version != cli.Version {
		t.Fatalf("listing %+v", list)
	}

	// The join command, pasted into a shell in an empty directory, downloads and runs the runner.
	dir := t.TempDir()
	cmd := exec.Command("bash", "-c", c.JoinCommand+" --data-dir "+filepath.Join(dir, "data"))
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), envChild+"=1", "CUBICLE_ENGINE=none", "CUBICLE_RUNNER_TOKEN=")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true} // the shell and the runner it starts
	out := &syncBuffer{}
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { cmd.Wait(); close(done) }()
	defer func() {
		syscall.Kill(-cmd.Process.Pid, syscall.SIGTERM) // the shell's process group: it and the runner
		select {
		case <-done:
		case <-time.After(60 * time.Second):
			syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
			<-done
		}
		if t.Failed() {
			t.Logf("join command output:\n%s", out.String())
		}
	}()
	v := s.waitStatus(t, c.ID, nodes.StatusConnected, 2*time.Minute)
	if v.Version != cli.Version || v.Name != "new box" {
		t.Fatalf("joined runner %+v", v)
	}
	got, err := os.ReadFile(filepath.Join(dir, "cubicle"))
	if err != nil || hexSum(got) != hdr.Get(wire.HeaderSHA256) {
		t.Fatalf("the join command's download: %v", err)
	}

	// A revoked runner's token downloads nothing.
	s.do(t, "DELETE", "/api/app/admin/runners/"+c.ID, nil, http.StatusOK, nil)
	if code, _, body := get(t, s, own, c.Token, false); code != 403 || !strings.Contains(string(body), "revoked") {
		t.Fatalf("revoked token: HTTP %d %s", code, body)
	}
}

// TestRunnerChannelsAndRefusals: the channels' admin API validates and changes nothing on a
// bad request; a runner's channel and the rollout decide its target version; a runner that
// advertises fewer capabilities (an older one) gets a 409 naming it and what it lacks when a
// node setting it cannot apply is changed, and cannot be updated remotely.
func TestRunnerChannelsAndRefusals(t *testing.T) {
	s := startServer(t, "127.0.0.1:0")
	type channels struct {
		Release, Canary release.Channel
		ServerVersion   string
		Versions        []string
	}
	var ch channels
	s.do(t, "GET", "/api/app/admin/runner-channels", nil, http.StatusOK, &ch)
	if ch.Release != (release.Channel{Version: cli.Version, RolloutPercent: 100}) || ch.Canary.RolloutPercent != 0 || ch.ServerVersion != cli.Version {
		t.Fatalf("default channels %+v", ch)
	}
	good := map[string]any{"release": map[string]any{"version": cli.Version, "rolloutPercent": 0},
		"canary": map[string]any{"version": cli.Version, "rolloutPercent": 100}}
	for _, bad := range []map[string]any{
		{"release": good["release"]},
		{"release": map[string]any{"version": cli.Version, "rolloutPercent": 101}, "canary": good["canary"]},
		{"release": map[string]any{"version": "../x", "rolloutPercent": 1}, "canary": good["canary"]},
		{"release": good["release"], "canary": map[string]any{"version": "7.7.7", "rolloutPercent": 5}},
	} {
		s.do(t, "PUT", "/api/app/admin/runner-channels", bad, http.StatusBadRequest, nil)
	}
	s.do(t, "GET", "/api/app/admin/runner-channels", nil, http.StatusOK, &ch)
	if ch.Release.RolloutPercent != 100 {
		t.Fatalf("a refused request changed the channels: %+v", ch)
	}

	var old, cur nodes.Created
	s.do(t, "POST", "/api/app/admin/runners", map[string]any{"name": "old-box"}, http.StatusCreated, &old)
	s.do(t, "POST", "/api/app/admin/runners", map[string]any{"name": "new-box"}, http.StatusCreated, &cur)
	s.do(t, "PUT", "/api/app/admin/runners/"+old.ID+"/channel", map[string]string{"channel": "beta"}, http.StatusBadRequest, nil)
	s.do(t, "PUT", "/api/app/admin/runners/r-000000000000/channel", map[string]string{"channel": "canary"}, http.StatusNotFound, nil)
	if v := s.runnerView(t, old.ID); v.Channel != "release" || v.TargetVersion != cli.Version || v.UpdateAvailable {
		t.Fatalf("a new runner: %+v", v)
	}

	// An "older" runner: no idle policy, node settings or self-update (test-only variable).
	startRunnerEnv(t, nil, []string{"CUBICLE_RUNNER_TEST_DROP_CAPS=" + wire.CapIdlePolicy + "," + wire.CapNodeSettings + "," + wire.CapSelfUpdate},
		"--server", s.url, "--token", old.Token, "--data-dir", filepath.Join(t.TempDir(), "old"), "--engine", "none")
	startRunner(t, nil, "--server", s.url, "--token", cur.Token, "--data-dir", filepath.Join(t.TempDir(), "new"), "--engine", "none")
	s.waitStatus(t, old.ID, nodes.StatusConnected, time.Minute)
	s.waitStatus(t, cur.ID, nodes.StatusConnected, time.Minute)

	for _, tc := range []struct{ path, capability string }{
		{"/api/app/admin/local-vm/idle-policy", wire.CapIdlePolicy},
		{"/api/app/admin/local-vm/policy", wire.CapNodeSettings},
		{"/api/app/admin/local-vm/image-sources", wire.CapNodeSettings},
	} {
		body := map[string]any{"requestId": "q1", "idleStopMinutes": 7, "isolation": "shared", "maxInstances": 1}
		if strings.HasSuffix(tc.path, "image-sources") {
			body = map[string]any{}
		}
		raw := s.do(t, "PUT", tc.path+"?node="+old.ID, body, http.StatusConflict, nil)
		want := "runner old-box (" + old.ID + ") runs version " + cli.Version + " without " + tc.capability +
			": update it (Settings → Runners → Update) before this setting"
		if !strings.Contains(raw, want) {
			t.Errorf("%s on an older runner: %s\nwant %q", tc.path, raw, want)
		}
		// The runner with the capability is not refused for it.
		code, _ := s.status(t, "PUT", tc.path+"?node="+cur.ID, body)
		if code == http.StatusConflict {
			t.Errorf("%s on a current runner: 409", tc.path)
		}
	}
	// The older runner's settings did not change (its own store answers).
	var st struct{ Policy struct{ IdleStopMinutes int } }
	s.do(t, "GET", "/api/app/admin/local-vm?node="+old.ID, nil, http.StatusOK, &st)
	if st.Policy.IdleStopMinutes == 7 {
		t.Fatal("a refused setting reached the older runner")
	}

	// Update: nothing to do for a runner on the wanted version; an older runner without
	// self-update cannot be updated remotely, and the list says so.
	raw := s.do(t, "POST", "/api/app/admin/runners/"+cur.ID+"/update", nil, http.StatusConflict, nil)
	if !strings.Contains(raw, "new-box") || !strings.Contains(raw, "no update") {
		t.Fatalf("update of a current runner: %s", raw)
	}
	raw = s.do(t, "POST", "/api/app/admin/runners/"+old.ID+"/update", nil, http.StatusConflict, nil)
	if !strings.Contains(raw, wire.CapSelfUpdate) {
		t.Fatalf("update of a runner without self-update: %s", raw)
	}

	// Channel and rollout: release at 0 % (nobody), canary at 100 %; the canary runner's
	// target is the canary version, the release runner has none.
	s.do(t, "PUT", "/api/app/admin/runner-channels", good, http.StatusOK, nil)
	s.do(t, "PUT", "/api/app/admin/runners/"+cur.ID+"/channel", map[string]string{"channel": "canary"}, http.StatusOK, nil)
	if v := s.runnerView(t, cur.ID); v.Channel != "canary" || v.TargetVersion != cli.Version || v.UpdateAvailable {
		t.Fatalf("canary runner %+v", v)
	}
	if v := s.runnerView(t, old.ID); v.Channel != "release" || v.TargetVersion != "" || v.UpdateAvailable {
		t.Fatalf("release runner outside the rollout %+v", v)
	}
}

// status sends a JSON request and returns its status and body (any status).
func (s *server) status(t *testing.T, method, path string, body any) (int, string) {
	t.Helper()
	var rd io.Reader
	if body != nil {
		raw, _ := json.Marshal(body)
		rd = bytes.NewReader(raw)
	}
	req, _ := http.NewRequest(method, s.url+path, rd)
	req.Header.Set("Content-Type", "application/json")
	resp, err := s.http.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(raw)
}

// buildCubicle builds the cubicle command with version v into path.
func buildCubicle(t *testing.T, v, path string) {
	t.Helper()
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("go", "build", "-ldflags", "-X cubicle/backend/cli.Version="+v, "-o", path, ".")
	cmd.Dir = root
	// The build's settings are the test binaries' own (GOFLAGS, cgo as the machine has it), so
	// every package comes from Go's build cache and only the link runs; a released runner is
	// built with CGO_ENABLED=0, which changes nothing of the self-update under test (and, on a
	// fresh machine, would compile the whole tree once more).
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("build cubicle %s: %v\n%s", v, err, out)
	}
}

// sameBuildAs writes to path a copy of the binary at src whose version string old (set with
// -X at its link) reads new, of the same length: the build of the other version, without a
// second link of the whole program.
func sameBuildAs(t *testing.T, src, old, new, path string) {
	t.Helper()
	if len(old) != len(new) {
		t.Fatalf("versions %q and %q differ in length", old, new)
	}
	raw, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Count(raw, []byte(old)) == 0 {
		t.Fatalf("%s does not contain its version %q", src, old)
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, bytes.ReplaceAll(raw, []byte(old), []byte(new)), 0o755); err != nil {
		t.Fatal(err)
	}
}

// tamperer is a reverse proxy to the server that, while on, flips a byte in the middle of
// every runner binary download (a corrupted transfer); everything else, the runner's
// websocket included, passes through.
type tamperer struct {
	srv *httptest.Server
	on  atomic.Bool
}

func newTamperer(t *testing.T, target string) *tamperer {
	u, _ := url.Parse(target)
	tp := &tamperer{}
	rp := httputil.NewSingleHostReverseProxy(u)
	rp.ModifyResponse = func(resp *http.Response) error {
		if resp.Request.URL.Path != wire.DownloadPath || !tp.on.Load() || resp.StatusCode != 200 {
			return nil
		}
		raw, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil {
			return err
		}
		raw[len(raw)/2] ^= 0xff
		resp.Body = io.NopCloser(bytes.NewReader(raw))
		return nil
	}
	tp.srv = httptest.NewServer(rp)
	t.Cleanup(tp.srv.Close)
	return tp
}

// TestRunnerSelfUpdate: real processes of two builds of cubicle with different versions (the
// second a copy of the first with its version string changed: see sameBuildAs). A
// runner on the old one, behind a link that corrupts downloads, refuses the corrupted binary
// and keeps running the old version; asked again over a clean link it replaces its
// executable, restarts as the new version and reconnects. A runner started with
// --auto-update switches by itself when it connects.
func TestRunnerSelfUpdate(t *testing.T) {
	if testing.Short() {
		t.Skip("builds two cubicle binaries; run without -short")
	}
	work := t.TempDir()
	dist := filepath.Join(work, "dist")
	oldBin := filepath.Join(work, "old", "cubicle")
	newBin := filepath.Join(dist, release.FileName(runtime.GOOS, runtime.GOARCH))
	buildCubicle(t, "9.0.0-old", oldBin)
	sameBuildAs(t, oldBin, "9.0.0-old", "9.1.0-new", newBin)
	oldRaw, _ := os.ReadFile(oldBin)
	newRaw, _ := os.ReadFile(newBin)

	// The server is version 9.1.0-new and offers its binaries from dist.
	s := startServerWith(t, "127.0.0.1:0", func(c *backend.Config) {
		c.Version = "9.1.0-new"
		c.DistDirs = []string{dist}
	})
	tp := newTamperer(t, s.url)
	var c nodes.Created
	s.do(t, "POST", "/api/app/admin/runners", map[string]any{"name": "upd"}, http.StatusCreated, &c)

	// Copies of the old binary, one per runner (each replaces its own file).
	copyOld := func(name string) string {
		p := filepath.Join(work, name, "cubicle")
		os.MkdirAll(filepath.Dir(p), 0o755)
		if err := os.WriteFile(p, oldRaw, 0o755); err != nil {
			t.Fatal(err)
		}
		return p
	}
	exe := copyOld("a")
	p := startProc(t, exe, "runner", "--server", tp.srv.URL, "--token", c.Token, "--data-dir", filepath.Join(work, "a", "data"), "--engine", "none")
	v := s.waitStatus(t, c.ID, nodes.StatusConnected, time.Minute)
	if v.Version != "9.0.0-old" || !v.UpdateAvailable || v.TargetVersion != "9.1.0-new" || v.Channel != "release" {
		t.Fatalf("old runner %+v", v)
	}

	// A corrupted download is refused: the runner says so, keeps its binary and its link.
	tp.on.Store(true)
	raw := s.do(t, "POST", "/api/app/admin/runners/"+c.ID+"/update", nil, http.StatusServiceUnavailable, nil)
	if !strings.Contains(raw, "SHA-256") || !strings.Contains(raw, "kept version 9.0.0-old") {
		t.Fatalf("corrupted update: %s", raw)
	}
	if cur, _ := os.ReadFile(exe); !bytes.Equal(cur, oldRaw) {
		t.Fatal("a refused update changed the executable")
	}
	if leftovers, _ := filepath.Glob(filepath.Join(filepath.Dir(exe), ".cubicle-update-*")); len(leftovers) > 0 {
		t.Fatalf("a refused update left %v", leftovers)
	}
	if v := s.runnerView(t, c.ID); v.Status != nodes.StatusConnected || v.Version != "9.0.0-old" {
		t.Fatalf("after a refused update %+v", v)
	}
	select {
	case <-p.done:
		t.Fatalf("the runner ended after a refused update:\n%s", p.out.String())
	default:
	}

	// --auto-update over the corrupting link: refused, the runner keeps its version, reconnects
	// and reports why in its hello; the list shows it.
	var c3 nodes.Created
	s.do(t, "POST", "/api/app/admin/runners", map[string]any{"name": "auto-bad"}, http.StatusCreated, &c3)
	exe3 := copyOld("c")
	p3 := startProc(t, exe3, "runner", "--server", tp.srv.URL, "--token", c3.Token, "--data-dir", filepath.Join(work, "c", "data"), "--engine", "none", "--auto-update")
	waitFor(t, 2*time.Minute, "the failed automatic update is reported", func() bool {
		v := s.runnerView(t, c3.ID)
		return v.Status == nodes.StatusConnected && strings.Contains(v.UpdateProblem, "SHA-256")
	})
	if v := s.runnerView(t, c3.ID); v.Version != "9.0.0-old" || !strings.Contains(v.UpdateProblem, "last automatic update to 9.1.0-new failed") {
		t.Fatalf("after a refused automatic update %+v", v)
	}
	if cur, _ := os.ReadFile(exe3); !bytes.Equal(cur, oldRaw) {
		t.Fatal("a refused automatic update changed the executable")
	}
	select {
	case <-p3.done:
		t.Fatalf("the runner ended after a refused automatic update:\n%s", p3.out.String())
	default:
	}

	// A clean download: the runner replaces its executable and comes back as the new version
	// (the same process, re-executed).
	tp.on.Store(false)
	var res struct{ From, Version string }
	s.do(t, "POST", "/api/app/admin/runners/"+c.ID+"/update", nil, http.StatusAccepted, &res)
	if res.From != "9.0.0-old" || res.Version != "9.1.0-new" {
		t.Fatalf("update answer %+v", res)
	}
	waitFor(t, 2*time.Minute, "the runner reconnects as 9.1.0-new", func() bool {
		v := s.runnerView(t, c.ID)
		return v.Status == nodes.StatusConnected && v.Version == "9.1.0-new"
	})
	if v := s.runnerView(t, c.ID); v.UpdateAvailable {
		t.Fatalf("updated runner %+v", v)
	}
	if cur, _ := os.ReadFile(exe); !bytes.Equal(cur, newRaw) {
		t.Fatal("the executable is not the new binary")
	}
	select {
	case <-p.done:
		t.Fatalf("the runner process ended instead of re-executing:\n%s", p.out.String())
	default:
	}

	// --auto-update: a runner on the old version switches as soon as it connects.
	var c2 nodes.Created
	s.do(t, "POST", "/api/app/admin/runners", map[string]any{"name": "auto"}, http.StatusCreated, &c2)
	exe2 := copyOld("b")
	startProc(t, exe2, "runner", "--server", s.url, "--token", c2.Token, "--data-dir", filepath.Join(work, "b", "data"), "--engine", "none", "--auto-update")
	waitFor(t, 2*time.Minute, "the auto-updating runner connects as 9.1.0-new", func() bool {
		v := s.runnerView(t, c2.ID)
		return v.Status == nodes.StatusConnected && v.Version == "9.1.0-new"
	})
	if cur, _ := os.ReadFile(exe2); !bytes.Equal(cur, newRaw) {
		t.Fatal("the auto-updated executable is not the new binary")
	}
}

// startProc starts a real program (not the test binary) and stops it at the end of the test.
func startProc(t *testing.T, exe string, args ...string) *proc {
	t.Helper()
	cmd := exec.Command(exe, args...)
	cmd.Env = append(os.Environ(), "CUBICLE_RUNNER_TOKEN=")
	p := &proc{cmd: cmd, out: &syncBuffer{}, done: make(chan struct{})}
	cmd.Stdout, cmd.Stderr = p.out, p.out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		p.err = cmd.Wait()
		close(p.done)
	}()
	t.Cleanup(func() {
		select {
		case <-p.done:
		default:
			cmd.Process.Signal(os.Interrupt)
			select {
			case <-p.done:
			case <-time.After(60 * time.Second):
				cmd.Process.Kill()
				<-p.done
			}
		}
		if t.Failed() {
			t.Logf("%s output:\n%s", exe, p.out.String())
		}
	})
	return p
}
