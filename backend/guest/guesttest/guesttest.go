// Package guesttest runs the real in-guest driver on a real Xvfb on the host, for tests of
// the code that drives desktops: the same binary and protocol as inside a container, without
// the container.
package guesttest

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"cubicle/backend/guest"
	"cubicle/images/guest/wire"
)

// Driver is a running driver.
type Driver struct {
	Socket    string // the bridge socket
	Workspace string // the driver's workspace directory on the host
	cmd       *exec.Cmd
}

var build struct {
	mu  sync.Mutex
	dir string // temp dir holding the binary; "" until built
	err error
	out []byte
}

// Binary builds ./images/guest once per test process the way scripts/build.sh does (static,
// CGO-free, trimmed) and returns its path. Call Cleanup from TestMain to remove it.
func Binary(t testing.TB) string {
	t.Helper()
	build.mu.Lock()
	defer build.mu.Unlock()
	if build.dir == "" && build.err == nil {
		build.err = func() error {
			root, err := exec.Command("go", "list", "-m", "-f", "{{.Dir}}").Output()
			if err != nil {
				return err
			}
			dir, err := os.MkdirTemp("", "cubicle-guesttest-")
			if err != nil {
				return err
			}
			cmd := exec.Command("go", "build", "-trimpath", "-ldflags=-s -w", "-o", filepath.Join(dir, "cubicle-guest"), "./images/guest")
			cmd.Dir = strings.TrimSpace(string(root))
			cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux")
			if build.out, err = cmd.CombinedOutput(); err != nil {
				os.RemoveAll(dir)
				return err
			}
			build.dir = dir
			return nil
		}()
	}
	if build.err != nil {
		t.Fatalf("build the driver: %v\n%s", build.err, build.out)
	}
	return filepath.Join(build.dir, "cubicle-guest")
}

// Cleanup removes the binary Binary built; call it from TestMain after m.Run.
func Cleanup() {
	build.mu.Lock()
	defer build.mu.Unlock()
	if build.dir != "" {
		os.RemoveAll(build.dir)
		build.dir = ""
	}
}

// Start builds the driver, starts it on display (which must be free; it starts its own Xvfb)
// with the given screen size ("" = 800x600) and no desktop session, and returns once its
// socket answers. The driver stops when the test ends. Without Xvfb the test is skipped, or
// fails when CUBICLE_REQUIRE_ALL=1.
func Start(t *testing.T, display, screen string) *Driver {
	t.Helper()
	if _, err := exec.LookPath("Xvfb"); err != nil {
		if os.Getenv("CUBICLE_REQUIRE_ALL") == "1" {
			t.Fatal("Xvfb is required (CUBICLE_REQUIRE_ALL=1)")
		}
		t.Skip("Xvfb not installed")
	}
	if screen == "" {
		screen = "800x600"
	}
	bin := Binary(t)
	dir := t.TempDir()
	d := &Driver{Socket: filepath.Join(dir, "run", wire.SocketName), Workspace: filepath.Join(dir, "workspace")}
	os.MkdirAll(d.Workspace, 0o755)
	os.MkdirAll(filepath.Dir(d.Socket), 0o755)
	d.cmd = exec.Command(bin)
	d.cmd.Env = append(os.Environ(), wire.EnvRunDir+"="+filepath.Dir(d.Socket), wire.EnvDisplay+"="+display,
		wire.EnvSession+"=none", wire.EnvWorkspace+"="+d.Workspace, wire.EnvScreen+"="+screen, wire.EnvLogLevel+"=warn")
	d.cmd.Stdout, d.cmd.Stderr = os.Stderr, os.Stderr
	if err := d.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(d.stop)
	c := d.Dial(t)
	c.Close()
	return d
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
