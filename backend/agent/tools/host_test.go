package tools

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"cubicle/backend/fault"
	"cubicle/internal/testenv"
)

// The host shell on this OS, tested with the interpreter the platform picks (Unix: sh) or,
// on Windows, with cmd.exe (shells_windows_test.go covers the interpreter choice).

// helperEnv makes this test binary act as a long-running grandchild of the host shell.
const helperEnv = "CUBICLE_TOOLS_HELPER_PIDFILE"

// TestHelperSleeper is not a test: run by the host shell with helperEnv set, it writes its
// pid and sleeps, standing in for a command that starts a long-lived process.
func TestHelperSleeper(t *testing.T) {
	path := os.Getenv(helperEnv)
	if path == "" {
		return
	}
	if err := os.WriteFile(path+".tmp", []byte(strconv.Itoa(os.Getpid())), 0o644); err == nil {
		os.Rename(path+".tmp", path)
	}
	time.Sleep(5 * time.Minute) // longer than any deadline below: only a kill ends it early
	os.Exit(0)
}

// testHost is the LocalHost under test and the commands it understands.
func testHost(t *testing.T) (LocalHost, func(kind string, args ...string) string) {
	t.Helper()
	if runtime.GOOS != "windows" {
		return LocalHost{}, func(kind string, args ...string) string {
			switch kind {
			case "echo-both":
				return "echo out-" + args[0] + "; echo err-" + args[0] + " >&2"
			case "exit":
				return "exit " + args[0]
			case "pwd":
				return "pwd"
			case "spawn":
				return helperEnv + "=" + args[1] + " '" + args[0] + "' -test.run=^TestHelperSleeper$ & wait"
			}
			t.Fatalf("no command %q", kind)
			return ""
		}
	}
	cmd := os.Getenv("ComSpec")
	if cmd == "" {
		cmd = `C:\windows\system32\cmd.exe`
	}
	return LocalHost{Interpreter: cmd}, func(kind string, args ...string) string {
		switch kind {
		case "echo-both":
			return "echo out-" + args[0] + "& echo err-" + args[0] + " 1>&2"
		case "exit":
			return "exit /b " + args[0]
		case "pwd":
			return "cd"
		case "spawn":
			return "set " + helperEnv + "=" + args[1] + "& \"" + args[0] + "\" -test.run=^TestHelperSleeper$"
		}
		t.Fatalf("no command %q", kind)
		return ""
	}
}

func TestLocalHostShell(t *testing.T) {
	h, script := testHost(t)
	dir := testenv.TempDir(t)
	ctx := context.Background()

	res, err := h.Shell(ctx, script("echo-both", "ü✓"), dir, time.Minute, 1<<10)
	if err != nil || res.ExitCode != 0 || res.TimedOut {
		t.Fatalf("echo: %+v, %v", res, err)
	}
	if got := strings.TrimSpace(string(res.Stdout)); got != "out-ü✓" {
		t.Errorf("stdout = %q, want out-ü✓ (UTF-8 intact)", res.Stdout)
	}
	if got := strings.TrimSpace(string(res.Stderr)); got != "err-ü✓" {
		t.Errorf("stderr = %q, want err-ü✓", res.Stderr)
	}

	res, err = h.Shell(ctx, script("exit", "7"), dir, time.Minute, 1<<10)
	if err != nil || res.ExitCode != 7 {
		t.Errorf("exit 7: %+v, %v", res, err)
	}

	res, err = h.Shell(ctx, script("pwd"), dir, time.Minute, 1<<10)
	if err != nil || !sameDir(t, strings.TrimSpace(string(res.Stdout)), dir) {
		t.Errorf("pwd in %s: %+v (%q), %v", dir, res, res.Stdout, err)
	}

	res, err = h.Shell(ctx, script("echo-both", strings.Repeat("x", 4096)), dir, time.Minute, 100)
	if err != nil || !res.Truncated || len(res.Stdout) != 100 {
		t.Errorf("capped output: truncated=%v len=%d, %v", res.Truncated, len(res.Stdout), err)
	}

	missing := filepath.Join(dir, "does-not-exist")
	if _, err := h.Shell(ctx, script("pwd"), missing, time.Minute, 1<<10); !errors.Is(err, fault.ErrNotFound) || !strings.Contains(err.Error(), missing) {
		t.Errorf("missing directory: %v, want not found naming it", err)
	}
}

// TestLocalHostShellKillsTree cancels a command that started a long-lived process: the
// cancellation (the same path a timeout takes) must kill that process too, not only the
// shell.
func TestLocalHostShellKillsTree(t *testing.T) {
	h, script := testHost(t)
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	dir := testenv.TempDir(t)
	pidFile := filepath.Join(dir, "pid")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	type outcome struct {
		res ShellResult
		err error
	}
	done := make(chan outcome, 1)
	go func() {
		res, err := h.Shell(ctx, script("spawn", self, pidFile), dir, 10*time.Minute, 1<<10)
		done <- outcome{res, err}
	}()
	var pid int
	for deadline := time.Now().Add(2 * time.Minute); pid == 0; {
		select {
		case o := <-done:
			t.Fatalf("the shell ended before its child wrote a pid: %+v (%s), %v", o.res, o.res.Stderr, o.err)
		case <-time.After(20 * time.Millisecond):
		}
		if b, err := os.ReadFile(pidFile); err == nil {
			pid, _ = strconv.Atoi(string(b))
		}
		if time.Now().After(deadline) {
			t.Fatal("the helper process never wrote its pid")
		}
	}
	if !processAlive(pid) {
		t.Fatalf("helper %d is not running", pid)
	}
	cancel()
	select {
	case o := <-done:
		if o.err != nil || o.res.ExitCode == 0 {
			t.Fatalf("cancelled shell: %+v, %v; want a non-zero exit", o.res, o.err)
		}
	case <-time.After(2 * time.Minute):
		t.Fatal("the shell did not return after cancellation")
	}
	for deadline := time.Now().Add(time.Minute); processAlive(pid); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("helper %d outlived the cancelled shell", pid)
		}
	}
}

// TestLocalHostShellTimeout runs a command longer than its timeout: it is reported as timed
// out with exit code -1, and its output so far is kept.
func TestLocalHostShellTimeout(t *testing.T) {
	h, script := testHost(t)
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	dir := testenv.TempDir(t)
	res, err := h.Shell(context.Background(), script("echo-both", "before")+sep()+script("spawn", self, filepath.Join(dir, "pid")), dir, time.Second, 1<<10)
	if err != nil || !res.TimedOut || res.ExitCode != -1 {
		t.Fatalf("timed-out shell: %+v, %v", res, err)
	}
}

// sep joins two commands of testHost's language.
func sep() string {
	if runtime.GOOS == "windows" {
		return " & "
	}
	return "; "
}

// sameDir reports whether two paths name the same directory.
func sameDir(t *testing.T, a, b string) bool {
	t.Helper()
	sa, err1 := os.Stat(a)
	sb, err2 := os.Stat(b)
	return err1 == nil && err2 == nil && os.SameFile(sa, sb)
}
