// Package guesttest runs the real in-guest driver on a real Xvfb on the host, for tests of
// the code that drives desktops: the same binary and protocol as inside a container, without
// the container.
package guesttest

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"cubicle/backend/guest"
	"cubicle/images/guest/wire"
	"cubicle/images/guest/x11/xvfbtest"
	"cubicle/internal/testenv"
)

// Driver is a running driver.
type Driver struct {
	Socket    string // the bridge socket
	Workspace string // the driver's workspace directory on the host
	display   string
	bin       string
	env       []string
	cmd       *exec.Cmd
}

var build struct {
	mu   sync.Mutex
	dir  string            // temp dir holding the binaries; "" until the first build
	bins map[string]string // GOARCH → path of its binary
	errs map[string]error
	outs map[string][]byte
}

// Binary builds ./images/guest once per test process the way scripts/build.sh does (static,
// CGO-free, trimmed) for this machine's architecture and returns its path. Call Cleanup from
// TestMain to remove it.
func Binary(t testing.TB) string {
	t.Helper()
	return BinaryFor(t, runtime.GOARCH)
}

// BinaryFor is Binary for linux/goarch (the driver is pure Go: any architecture cross-builds).
func BinaryFor(t testing.TB, goarch string) string {
	t.Helper()
	build.mu.Lock()
	defer build.mu.Unlock()
	if build.bins == nil {
		build.bins, build.errs, build.outs = map[string]string{}, map[string]error{}, map[string][]byte{}
	}
	if _, ok := build.bins[goarch]; !ok && build.errs[goarch] == nil {
		build.errs[goarch] = func() error {
			root, err := exec.Command("go", "list", "-m", "-f", "{{.Dir}}").Output()
			if err != nil {
				return err
			}
			if build.dir == "" {
				if build.dir, err = os.MkdirTemp("", "cubicle-guesttest-"); err != nil {
					return err
				}
			}
			out := filepath.Join(build.dir, "cubicle-guest-"+goarch)
			cmd := exec.Command("go", "build", "-trimpath", "-ldflags=-s -w", "-o", out, "./images/guest")
			cmd.Dir = strings.TrimSpace(string(root))
			cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH="+goarch)
			if build.outs[goarch], err = cmd.CombinedOutput(); err != nil {
				return err
			}
			build.bins[goarch] = out
			return nil
		}()
	}
	if err := build.errs[goarch]; err != nil {
		t.Fatalf("build the driver for linux/%s: %v\n%s", goarch, err, build.outs[goarch])
	}
	return build.bins[goarch]
}

// Cleanup removes the binaries Binary and BinaryFor built; call it from TestMain after m.Run.
func Cleanup() {
	build.mu.Lock()
	defer build.mu.Unlock()
	if build.dir != "" {
		os.RemoveAll(build.dir)
		build.dir = ""
		build.bins = nil
	}
}

// Start builds the driver, starts it with its own Xvfb on display or, when another test on
// the machine holds that one, the next free display (xvfbtest.Reserve), with the given screen
// size ("" = 800x600) and no desktop session, and returns once its socket answers. The driver stops when the test ends. Without Xvfb the test is skipped, or
// fails when CUBICLE_REQUIRE_ALL=1.
func Start(t *testing.T, display, screen string) *Driver {
	t.Helper()
	testenv.Program(t, "Xvfb")
	if screen == "" {
		screen = "800x600"
	}
	n, err := strconv.Atoi(strings.TrimPrefix(display, ":"))
	if err != nil {
		t.Fatalf("display %q: want :N", display)
	}
	display = fmt.Sprintf(":%d", xvfbtest.Reserve(t, n))
	bin := Binary(t)
	dir := t.TempDir()
	d := &Driver{Socket: filepath.Join(dir, "run", wire.SocketName), Workspace: filepath.Join(dir, "workspace"),
		display: display, bin: bin}
	os.MkdirAll(d.Workspace, 0o755)
	os.MkdirAll(filepath.Dir(d.Socket), 0o755)
	d.env = append(os.Environ(), wire.EnvRunDir+"="+filepath.Dir(d.Socket), wire.EnvDisplay+"="+display,
		wire.EnvSession+"=none", wire.EnvWorkspace+"="+d.Workspace, wire.EnvScreen+"="+screen, wire.EnvLogLevel+"=warn")
	t.Cleanup(d.stop)
	d.start(t)
	return d
}

func (d *Driver) start(t *testing.T) {
	t.Helper()
	d.cmd = exec.Command(d.bin)
	d.cmd.Env = d.env
	d.cmd.Stdout, d.cmd.Stderr = os.Stderr, os.Stderr
	if err := d.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), readyWait)
	defer cancel()
	c, err := guest.WaitReady(ctx, d.Socket)
	if err != nil {
		// What the next run needs to tell a slow machine from a hung X server.
		t.Fatalf("driver not ready after %s: %v\n%s", readyWait, err, processReport(d.cmd.Process.Pid))
	}
	c.Close()
}

// readyWait bounds a driver's start until its socket answers. It exceeds the driver's own
// bound on an X server's start (30 s, then the server is killed and started again), so a
// start that hangs once on a machine loaded by the whole suite (CI saw one Xvfb not answer
// for 30 s) still comes up.
const readyWait = 75 * time.Second

// Kill kills the driver with SIGKILL, as a crash would (no clean-up: its socket file stays),
// and the X server it started.
func (d *Driver) Kill() {
	if d.cmd.ProcessState != nil || d.cmd.Process == nil {
		return
	}
	d.cmd.Process.Kill()
	d.cmd.Wait()
	// The X server outlives its killed parent: end it so the display is free again.
	lock := fmt.Sprintf("/tmp/.X%s-lock", strings.TrimPrefix(d.display, ":"))
	if b, err := os.ReadFile(lock); err == nil {
		if pid, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil && pid > 1 {
			killAndWait(pid)
		}
	}
}

// Restart starts the driver again after Kill or Stop, with the same socket and workspace,
// and returns once it answers.
func (d *Driver) Restart(t *testing.T) {
	t.Helper()
	d.stop()
	d.start(t)
}

// Dial connects a new client; it is closed when the test ends.
func (d *Driver) Dial(t *testing.T) *guest.Client {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := guest.WaitReady(ctx, d.Socket)
	if err != nil {
		t.Fatalf("driver not ready: %v", err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// Stop stops the driver now (SIGTERM, then SIGKILL after 5 s).
func (d *Driver) Stop() { d.stop() }

func (d *Driver) stop() {
	if d.cmd.ProcessState != nil || d.cmd.Process == nil {
		return
	}
	d.cmd.Process.Signal(os.Interrupt)
	done := make(chan struct{})
	go func() { d.cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		d.cmd.Process.Kill()
		<-done
	}
}

// processReport describes the driver, its children and every X server and keymap compiler
// on the machine, for a failure message: each one's state, kernel wait channel and age, and
// the machine's load.
func processReport(pid int) string {
	var b strings.Builder
	if la, err := os.ReadFile("/proc/loadavg"); err == nil {
		fmt.Fprintf(&b, "load: %s", la)
	}
	out, err := exec.Command("ps", "-eo", "pid,ppid,pgid,stat,wchan:24,etime,args").Output()
	if err != nil {
		fmt.Fprintf(&b, "ps: %v\n", err)
	}
	me := strconv.Itoa(pid)
	for i, line := range strings.Split(string(out), "\n") {
		f := strings.Fields(line)
		if i == 0 || len(f) > 1 && (f[0] == me || f[1] == me) ||
			strings.Contains(line, "Xvfb") || strings.Contains(line, "xkbcomp") {
			b.WriteString(line + "\n")
		}
	}
	return b.String()
}
