//go:build windows

package sandbox

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"cubicle/backend/fault"
)

// TestAppContainerOrNone runs under Wine in CI (scripts/ports.sh): Wine has no AppContainers,
// so a Windows without them must report no sandbox with why — and refuse host commands then —
// never pretend to enforce. On a Windows that has them (not available to CI), the same test
// checks the enforcement itself: the working directory is read and written, the hidden data
// directory (outside it) and a hidden folder inside it are refused, and nothing is written
// outside the read-write paths.
func TestAppContainerOrNone(t *testing.T) {
	s, err := New(Auto)
	if err != nil {
		t.Fatal(err)
	}
	if avail := appContainerAvailable(); avail != nil {
		if s.Kind() != None || !strings.Contains(s.Problem(), "no AppContainers") {
			t.Fatalf("without AppContainers: kind %s, problem %q", s.Kind(), s.Problem())
		}
		if _, err := New(AppContainer); !errors.Is(err, fault.ErrInvalid) || !strings.Contains(err.Error(), "no AppContainers") {
			t.Errorf("forcing appcontainer without them: %v", err)
		}
		if _, err := s.Wrap(context.Background(), Policy{WorkDir: os.TempDir()}, []string{"cmd.exe"}); !errors.Is(err, fault.ErrUnavailable) {
			t.Errorf("a command with no sandbox and none allowed: %v, want refused", err)
		}
		t.Logf("no AppContainers here (%v): host commands refused unless allowed unsandboxed", avail)
		return
	}
	if s.Kind() != AppContainer {
		t.Fatalf("AppContainers are available, yet the sandbox is %s", s.Kind())
	}
	root := t.TempDir()
	data, work, outside := filepath.Join(root, "data"), filepath.Join(root, "work"), filepath.Join(root, "elsewhere")
	inner := filepath.Join(work, "private")
	for _, d := range []string{data, work, outside, inner} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	const secret = "SIGNING-KEY-5f1d0c"
	os.WriteFile(filepath.Join(data, "session.key"), []byte(secret), 0o600)
	os.WriteFile(filepath.Join(inner, "token"), []byte(secret), 0o600)
	os.WriteFile(filepath.Join(work, "notes.txt"), []byte("plain notes"), 0o644)
	p := Policy{WorkDir: work, Hidden: []string{data, inner}}
	run := func(script string) (string, int) {
		c, err := s.Wrap(context.Background(), p, []string{os.Getenv("ComSpec"), "/d", "/c", script})
		if err != nil {
			t.Fatal(err)
		}
		defer c.Cleanup()
		cmd := exec.Command(c.Argv[0], c.Argv[1:]...)
		cmd.Env, cmd.Dir = append(os.Environ(), c.Env...), work
		out, _ := cmd.CombinedOutput()
		return string(out), cmd.ProcessState.ExitCode()
	}
	if out, code := run("type notes.txt & echo made> made.txt"); code != 0 || !strings.Contains(out, "plain notes") {
		t.Errorf("work in the working directory: %d %q", code, out)
	}
	if b, err := os.ReadFile(filepath.Join(work, "made.txt")); err != nil || !strings.Contains(string(b), "made") {
		t.Errorf("the file written in the working directory: %q, %v", b, err)
	}
	for _, script := range []string{"type " + filepath.Join(data, "session.key"), "type private\\token", "dir " + data} {
		if out, _ := run(script); strings.Contains(out, secret) || strings.Contains(out, "session.key") {
			t.Errorf("%s: read a hidden path: %q", script, out)
		}
	}
	run("echo x> " + filepath.Join(outside, "x.txt"))
	if _, err := os.Stat(filepath.Join(outside, "x.txt")); err == nil {
		t.Error("wrote outside the read-write paths")
	}
}
