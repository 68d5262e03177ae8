package nodes_test

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"cubicle/backend/fault"
	"cubicle/backend/nodes"
	"cubicle/runner"
	"cubicle/runner/wire"
)

// TestHostOpsOverTheLink: a connected runner's host runs the host ops over the real link
// (websocket + yamux): a command's output and exit code, a file larger than a frame written
// and read back byte for byte, and a cancelled command whose context ends the call at once.
func TestHostOpsOverTheLink(t *testing.T) {
	x := newHub(t)
	c, err := x.h.Create("box", false, x.srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	remote, _ := x.h.Node(c.ID)
	if err := remote.HostTools(); !errors.Is(err, fault.ErrUnavailable) {
		t.Fatalf("host tools of a runner that never connected: %v", err)
	}
	startRunner(t, x.srv.URL, c.Token)
	waitFor(t, "the runner to connect", func() bool { return x.h.Connected(c.ID) })
	ctx := context.Background()
	dir := t.TempDir()
	res, err := remote.HostShell(ctx, wire.HostShellArgs{Command: "echo out; echo err >&2; exit 7", Dir: dir, TimeoutMS: 60_000, MaxOutput: 1 << 10})
	if err != nil || res.ExitCode != 7 || string(res.Stdout) != "out\n" || string(res.Stderr) != "err\n" {
		t.Fatalf("host shell: %+v, %v", res, err)
	}
	home, err := remote.HostHome(ctx)
	if want, _ := os.UserHomeDir(); err != nil || home != want {
		t.Fatalf("host home %q, %v", home, err)
	}
	big := bytes.Repeat([]byte{0, 1, 2, 0xff}, (wire.MaxFrame+1024)/4)
	path := filepath.Join(dir, "big.bin")
	if err := remote.HostWriteFile(ctx, path, big, nil, nil); err != nil {
		t.Fatal(err)
	}
	if got, err := os.ReadFile(path); err != nil || !bytes.Equal(got, big) {
		t.Fatalf("written file: %d bytes, %v", len(got), err)
	}
	if got, err := remote.HostReadFile(ctx, path, int64(len(big)), nil, nil); err != nil || !bytes.Equal(got, big) {
		t.Fatalf("read back: %d bytes, %v", len(got), err)
	}
	if _, err := remote.HostReadFile(ctx, path, 10, nil, nil); !errors.Is(err, fault.ErrInvalid) {
		t.Fatalf("a file over the limit: %v", err)
	}
	if _, err := remote.HostReadFile(ctx, filepath.Join(dir, "nope"), 10, nil, nil); !errors.Is(err, fault.ErrNotFound) {
		t.Fatalf("a missing file: %v", err)
	}
	// Cancel: the call ends with the context, and the runner kills the command.
	marker := filepath.Join(dir, "after")
	cctx, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
	defer cancel()
	began := time.Now()
	_, err = remote.HostShell(cctx, wire.HostShellArgs{Command: "sleep 5; touch " + marker, TimeoutMS: 600_000})
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("cancelled host shell: %v after %v", err, time.Since(began))
	}
	time.Sleep(6 * time.Second)
	if _, err := os.Stat(marker); err == nil {
		t.Fatal("the cancelled command went on")
	}
}

// TestCloudFlag: PATCH's SetCloud and the connected cloud nodes.
func TestCloudFlag(t *testing.T) {
	x := newHub(t)
	a, _ := x.h.Create("b-cloud", false, x.srv.URL)
	b, _ := x.h.Create("a-cloud", false, x.srv.URL)
	if _, err := x.h.SetCloud("local", true); !errors.Is(err, fault.ErrInvalid) {
		t.Fatalf("local as cloud: %v", err)
	}
	if _, err := x.h.SetCloud("r-nope", true); !errors.Is(err, fault.ErrNotFound) {
		t.Fatalf("unknown runner: %v", err)
	}
	for _, id := range []string{a.ID, b.ID} {
		if r, err := x.h.SetCloud(id, true); err != nil || !r.Cloud {
			t.Fatalf("set cloud: %+v, %v", r, err)
		}
	}
	if cs, err := x.h.CloudNodes(); err != nil || len(cs) != 0 {
		t.Fatalf("cloud nodes before any connected: %v, %v", cs, err)
	}
	startRunner(t, x.srv.URL, a.Token)
	startRunner(t, x.srv.URL, b.Token)
	waitFor(t, "the runners to connect", func() bool { return x.h.Connected(a.ID) && x.h.Connected(b.ID) })
	cs, err := x.h.CloudNodes()
	if err != nil || len(cs) != 2 || cs[0].ID != b.ID || cs[1].ID != a.ID {
		t.Fatalf("cloud nodes by name: %+v, %v", cs, err)
	}
	x.h.SetCloud(b.ID, false)
	if err := x.h.Revoke(a.ID); err != nil {
		t.Fatal(err)
	}
	if cs, _ := x.h.CloudNodes(); len(cs) != 0 {
		t.Fatalf("cloud nodes after unmarking and revoking: %+v", cs)
	}
	if _, err := x.h.SetCloud(a.ID, false); !errors.Is(err, fault.ErrConflict) || !strings.Contains(err.Error(), "revoked") {
		t.Fatalf("a revoked runner: %v", err)
	}
}

// TestHostHomePerLink: the runner user's home is asked once per link connection and kept —
// a change of the runner's HOME is not seen while the link lasts — and asked again on the
// next connection (a runner that comes back may run as another user).
func TestHostHomePerLink(t *testing.T) {
	first, second := filepath.Join(t.TempDir(), "first"), filepath.Join(t.TempDir(), "second")
	t.Setenv("HOME", first) // the in-process runner's os.UserHomeDir
	x := newHub(t)
	c, err := x.h.Create("box", false, x.srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	p := newProxy(t, strings.TrimPrefix(x.srv.URL, "http://"))
	startRunner(t, "http://"+p.ln.Addr().String(), c.Token)
	waitFor(t, "the runner to connect", func() bool { return x.h.Connected(c.ID) })
	remote, _ := x.h.Node(c.ID)
	ctx := context.Background()
	if home, err := remote.HostHome(ctx); err != nil || home != first {
		t.Fatalf("host home %q, %v; want %q", home, err, first)
	}
	os.Setenv("HOME", second) // restored by t.Setenv's cleanup
	if home, err := remote.HostHome(ctx); err != nil || home != first {
		t.Fatalf("host home on the same link %q, %v; want the kept %q", home, err, first)
	}
	p.cut()
	// The next connection asks again (polled: a call may still meet the old link, or none).
	waitFor(t, "the new link's home", func() bool {
		home, err := remote.HostHome(ctx)
		return err == nil && home == second
	})
}

// TestHostGuardOverTheLink: a runner with wire.CapHostGuard says its data directory
// (HostProtected), refuses over the real link a read or write that resolves on its disk into a
// protected path the server sent or into that directory, and still serves ordinary files. A
// runner without the capability (an older one) is asked hostHome, says nothing of its own, and
// is sent no protected paths: the server's own check is all there is.
func TestHostGuardOverTheLink(t *testing.T) {
	x := newHub(t)
	root := t.TempDir()
	home, data := filepath.Join(root, "home"), filepath.Join(root, "data")
	t.Setenv("HOME", home)
	keys := filepath.Join(home, ".ssh")
	if err := os.MkdirAll(keys, 0o700); err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(keys, "id_rsa"), []byte("KEY"), 0o600)
	os.Symlink(keys, filepath.Join(home, "notes"))
	os.Symlink(data, filepath.Join(home, "db"))
	start := func(name, dataDir string, drop ...string) *nodes.Remote {
		c, err := x.h.Create(name, false, x.srv.URL)
		if err != nil {
			t.Fatal(err)
		}
		startRunnerWith(t, runner.Config{Server: x.srv.URL, Token: c.Token, DataDir: dataDir, Engine: "none", Version: "9.9.9",
			MaxBackoff: 200 * time.Millisecond, DropCapabilities: drop})
		waitFor(t, "the runner to connect", func() bool { return x.h.Connected(c.ID) })
		remote, _ := x.h.Node(c.ID)
		return remote
	}
	ctx := context.Background()
	rem := start("new box", data)
	if own, err := rem.HostProtected(ctx); err != nil || len(own) != 1 || own[0] != data {
		t.Fatalf("the runner's own protected paths: %q, %v", own, err)
	}
	if h, err := rem.HostHome(ctx); err != nil || h != home {
		t.Fatalf("home: %q, %v", h, err)
	}
	before, err := os.ReadFile(filepath.Join(data, runner.DBFile))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := rem.HostReadFile(ctx, filepath.Join(home, "notes", "id_rsa"), 100, []string{keys}, nil); !errors.Is(err, fault.ErrForbidden) ||
		!strings.Contains(err.Error(), "protected location "+keys) {
		t.Fatalf("read through a link into ~/.ssh: %v", err)
	}
	if _, err := rem.HostReadFile(ctx, filepath.Join(home, "db", runner.DBFile), 1<<20, nil, nil); !errors.Is(err, fault.ErrForbidden) ||
		!strings.Contains(err.Error(), "data directory") {
		t.Fatalf("read of the runner's data file through a link: %v", err)
	}
	big := bytes.Repeat([]byte("x"), wire.MaxFrame+1024) // larger than a frame: the runner reads it all before it refuses
	if err := rem.HostWriteFile(ctx, filepath.Join(home, "db", runner.DBFile), big, nil, nil); !errors.Is(err, fault.ErrForbidden) {
		t.Fatalf("write over the runner's data file through a link: %v", err)
	}
	if after, _ := os.ReadFile(filepath.Join(data, runner.DBFile)); !bytes.Equal(after, before) {
		t.Fatal("the runner's data file changed")
	}
	if err := rem.HostWriteFile(ctx, filepath.Join(home, "plain.txt"), []byte("plain"), []string{keys}, nil); err != nil {
		t.Fatalf("an ordinary write: %v", err)
	}
	if got, err := rem.HostReadFile(ctx, filepath.Join(home, "plain.txt"), 100, []string{keys}, nil); err != nil || string(got) != "plain" {
		t.Fatalf("an ordinary read: %q, %v", got, err)
	}

	old := start("old box", filepath.Join(root, "old-data"), wire.CapHostGuard)
	if h, err := old.HostHome(ctx); err != nil || h != home {
		t.Fatalf("home of a runner without %s: %q, %v", wire.CapHostGuard, h, err)
	}
	if own, err := old.HostProtected(ctx); err != nil || len(own) != 0 {
		t.Fatalf("own protected paths of a runner without %s: %q, %v", wire.CapHostGuard, own, err)
	}
	// (~/.ssh itself stays hidden by the runner's host sandbox whatever the server sends: a
	// path only the server's settings protect shows what is sent.)
	private := filepath.Join(home, "private")
	os.MkdirAll(private, 0o700)
	os.WriteFile(filepath.Join(private, "vault.txt"), []byte("VAULT"), 0o600)
	if got, err := old.HostReadFile(ctx, filepath.Join(private, "vault.txt"), 100, []string{private}, nil); err != nil || string(got) != "VAULT" {
		t.Fatalf("a runner without %s was sent the protected paths (or refused anyway): %q, %v", wire.CapHostGuard, got, err)
	}
	if _, err := old.HostReadFile(ctx, filepath.Join(home, "notes", "id_rsa"), 100, []string{keys}, nil); !errors.Is(err, fault.ErrForbidden) {
		t.Fatalf("~/.ssh read through a link on a runner with a host sandbox: %v", err)
	}
}

// startRunnerWith runs a runner made with cfg in this process until the test ends.
func startRunnerWith(t *testing.T, cfg runner.Config) {
	t.Helper()
	r, err := runner.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		r.Run(ctx)
	}()
	t.Cleanup(func() {
		cancel()
		select {
		case <-stopped:
		case <-time.After(30 * time.Second):
			t.Error("runner did not stop")
		}
		r.Close()
	})
}
