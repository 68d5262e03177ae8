//go:build linux

// The tests of the shared links run the real driver (a Linux program) on Xvfb; choice_test.go
// holds the portable ones.

package link

import (
	"bytes"
	"context"
	"errors"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"cubicle/backend/fault"
	"cubicle/backend/guest"
	"cubicle/backend/guest/guesttest"
	"cubicle/images/guest/wire"
)

// Displays :86–:88 belong to this package's tests.

func TestMain(m *testing.M) {
	code := m.Run()
	guesttest.Cleanup()
	os.Exit(code)
}

// relayExec is an exec transport without an engine: it runs the real driver binary's relay
// as a child process whose stdin/stdout carry the protocol, exactly what an exec session
// runs in a desktop.
type relayExec struct {
	bin   string
	opens atomic.Int64
	mu    sync.Mutex
	procs []*childStream
}

func (r *relayExec) Name() string { return NameExec }

func (r *relayExec) Open(ctx context.Context, t Target) (net.Conn, error) {
	r.opens.Add(1)
	// A socket pair stands in for the exec session: one end is the relay's stdin and stdout.
	fds, err := syscall.Socketpair(syscall.AF_UNIX, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	mine, theirs := os.NewFile(uintptr(fds[0]), "host"), os.NewFile(uintptr(fds[1]), "relay")
	defer theirs.Close()
	conn, err := net.FileConn(mine)
	mine.Close()
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(r.bin, wire.RelayFlag, "--relay-wait", "2s")
	cmd.Env = append(os.Environ(), wire.EnvRunDir+"="+filepath.Dir(t.ContainerID)) // the test's "container" is the socket's directory
	cmd.Stdin, cmd.Stdout = theirs, theirs
	st := &childStream{Conn: conn, exited: make(chan struct{})}
	cmd.Stderr = &st.stderr
	if err := cmd.Start(); err != nil {
		conn.Close()
		return nil, err
	}
	go func() { cmd.Wait(); close(st.exited) }()
	r.mu.Lock()
	r.procs = append(r.procs, st)
	r.mu.Unlock()
	return st, nil
}

// running counts relay processes that have not exited.
func (r *relayExec) running() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, c := range r.procs {
		select {
		case <-c.exited:
		default:
			n++
		}
	}
	return n
}

// childStream is the host's end of a relay child's stdin/stdout.
type childStream struct {
	net.Conn
	exited chan struct{}
	stderr bytes.Buffer
}

func (c *childStream) Stderr() string { <-c.exited; return c.stderr.String() }

func testLinks(t *testing.T, choice Choice, ex Transport) *Links {
	t.Helper()
	// Short enough for quick tests, long enough for a loaded machine: a driver (another
	// process) that stands still for half a second is not dead, and a socket that takes that
	// long to answer must not bring in the exec link ("the exec link is never opened").
	l := New(Config{Choice: choice, Exec: ex, Heartbeat: 50 * time.Millisecond, Timeout: 2 * time.Second,
		FallbackAfter: 2 * time.Second})
	t.Cleanup(func() { l.Close() })
	return l
}

func TestOneSharedConnection(t *testing.T) {
	drv := guesttest.Start(t, ":86", "")
	l := testLinks(t, Choose(SocketMode, Engine{}), nil)
	target := Target{InstanceID: "d1", Socket: drv.Socket}
	var wg sync.WaitGroup
	clients := make([]*guest.Client, 20)
	for i := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			c, err := l.Connect(ctx, target, true)
			if err != nil {
				t.Errorf("Connect: %v", err)
			}
			clients[i] = c
		}()
	}
	wg.Wait()
	for _, c := range clients {
		if c != clients[0] || c == nil {
			t.Fatal("concurrent Connects got different connections")
		}
	}
	if st := l.State("d1"); !st.Connected || !st.Healthy || st.Transport != NameSocket {
		t.Fatalf("state %+v", st)
	}
	if c, ok := l.Get("d1"); !ok || c != clients[0] {
		t.Fatal("Get does not return the shared connection")
	}
	res, err := clients[0].Exec(context.Background(), guest.ExecRequest{Shell: "echo shared"})
	if err != nil || strings.TrimSpace(string(res.Stdout)) != "shared" {
		t.Fatalf("exec: %+v %v", res, err)
	}

	// Dropping (the desktop stopped) closes it: calls fail, state is clean again.
	l.Drop("d1")
	if _, err := clients[0].Health(context.Background()); !errors.Is(err, fault.ErrUnavailable) {
		t.Fatalf("call after Drop: %v", err)
	}
	if st := l.State("d1"); st.Connected || !st.Healthy || st.LastError != "" {
		t.Fatalf("state after Drop %+v", st)
	}
}

func TestDeadDriverIsUnhealthyUntilReconnected(t *testing.T) {
	drv := guesttest.Start(t, ":87", "")
	l := testLinks(t, Choose(SocketMode, Engine{}), nil)
	target := Target{InstanceID: "d1", Socket: drv.Socket}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	c, err := l.Connect(ctx, target, true)
	if err != nil {
		t.Fatal(err)
	}
	// A long exec is in flight when the driver dies.
	execErr := make(chan error, 1)
	go func() { _, err := c.Exec(context.Background(), guest.ExecRequest{Shell: "sleep 60"}); execErr <- err }()
	time.Sleep(200 * time.Millisecond)
	drv.Kill()
	select {
	case err := <-execErr:
		if !errors.Is(err, fault.ErrUnavailable) {
			t.Fatalf("in-flight exec ended with %v, want unavailable", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("the in-flight exec still waits 20 s after the driver died")
	}
	deadline := time.Now().Add(10 * time.Second)
	for l.State("d1").Healthy && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	st := l.State("d1")
	if st.Healthy || st.Connected || !strings.Contains(st.LastError, "the link to desktop d1 (socket ") {
		t.Fatalf("state after the driver died: %+v", st)
	}
	// Without a driver a connect fails fast, and a second one within retryQuiet does not
	// even try.
	if _, err := l.Connect(ctx, target, false); !errors.Is(err, fault.ErrUnavailable) {
		t.Fatalf("connect to a dead driver: %v", err)
	}
	start := time.Now()
	if _, err := l.Connect(ctx, target, false); !errors.Is(err, fault.ErrUnavailable) || time.Since(start) > time.Second {
		t.Fatalf("second connect: %v after %v", err, time.Since(start))
	}
	// The driver comes back (what a container restart does): a waiting connect repairs it.
	drv.Restart(t)
	c2, err := l.Connect(ctx, target, true)
	if err != nil || c2 == c {
		t.Fatalf("reconnect: %v (same client: %v)", err, c2 == c)
	}
	if st := l.State("d1"); !st.Healthy || !st.Connected || st.LastError != "" {
		t.Fatalf("state after reconnect %+v", st)
	}
}

func TestAutoFallsBackToExec(t *testing.T) {
	drv := guesttest.Start(t, ":88", "")
	rx := &relayExec{bin: guesttest.Binary(t)}
	choice := Choose(Auto, Engine{GOOS: "linux", Socket: "unix:///run/podman/podman.sock"})
	if choice.Primary != NameSocket || choice.Fallback != NameExec || !choice.Mount {
		t.Fatalf("auto on a local engine: %+v", choice)
	}
	l := testLinks(t, choice, rx)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	// The socket works: it is used, the exec link is never opened.
	c, err := l.Connect(ctx, Target{InstanceID: "good", ContainerID: drv.Socket, Socket: drv.Socket}, true)
	if err != nil || l.State("good").Transport != NameSocket || rx.opens.Load() != 0 {
		t.Fatalf("socket desktop: %v, %+v, %d exec opens", err, l.State("good"), rx.opens.Load())
	}
	_ = c
	// This desktop's socket is not reachable from here (as from another mount namespace),
	// but the driver runs: the exec link is used and remembered for new desktops.
	bad := Target{InstanceID: "bad", ContainerID: drv.Socket, Socket: filepath.Join(t.TempDir(), "guest.sock")}
	c, err = l.Connect(ctx, bad, true)
	if err != nil {
		t.Fatalf("fallback: %v", err)
	}
	if st := l.State("bad"); st.Transport != NameExec || !st.Connected {
		t.Fatalf("fallback state %+v", st)
	}
	if res, err := c.Exec(ctx, guest.ExecRequest{Shell: "echo over exec"}); err != nil || string(res.Stdout) != "over exec\n" {
		t.Fatalf("exec over the fallback: %+v %v", res, err)
	}
	if ch := l.Choice(); ch.Primary != NameExec || !strings.Contains(ch.Reason, "socket link failed") {
		t.Fatalf("choice after a failed socket: %+v", ch)
	}
	// The next new desktop goes straight to the exec link.
	before := rx.opens.Load()
	if _, err := l.Connect(ctx, Target{InstanceID: "next", ContainerID: drv.Socket, Socket: drv.Socket}, true); err != nil {
		t.Fatal(err)
	}
	if st := l.State("next"); st.Transport != NameExec || rx.opens.Load() != before+1 {
		t.Fatalf("next desktop: %+v, %d opens", st, rx.opens.Load()-before)
	}
	// Closing Links ends every relay.
	l.Close()
	deadline := time.Now().Add(20 * time.Second)
	for rx.running() > 0 {
		if time.Now().After(deadline) {
			t.Fatalf("%d relay processes still run 20 s after Close", rx.running())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// eofExec is an exec transport whose relay exits at once with a message, as an image from
// before the relay existed answers the unknown flag.
type eofExec struct{}

func (eofExec) Name() string { return NameExec }
func (eofExec) Open(ctx context.Context, t Target) (net.Conn, error) {
	host, relay := net.Pipe()
	relay.Close()
	return &deadStream{Conn: host, msg: "flag provided but not defined: -relay"}, nil
}

// deadStream is a session whose far end is gone, with what it said on stderr.
type deadStream struct {
	net.Conn
	msg string
}

func (d *deadStream) Stderr() string { return d.msg }

func TestExecLinkToAnOldImage(t *testing.T) {
	l := testLinks(t, Choose(ExecMode, Engine{}), eofExec{})
	_, err := l.Connect(context.Background(), Target{InstanceID: "old", ContainerID: "c"}, false)
	if !errors.Is(err, fault.ErrUnavailable) || !strings.Contains(err.Error(), "flag provided but not defined") ||
		!strings.Contains(err.Error(), "prepare the image again") {
		t.Fatalf("connect: %v", err)
	}
	if st := l.State("old"); st.Healthy || st.LastError == "" {
		t.Fatalf("state %+v", st)
	}
	// Without an exec transport the exec mode says what to do.
	l2 := testLinks(t, Choose(ExecMode, Engine{}), nil)
	if _, err := l2.Connect(context.Background(), Target{InstanceID: "x"}, false); err == nil || !strings.Contains(err.Error(), "CUBICLE_GUEST_LINK") {
		t.Fatalf("exec without a transport: %v", err)
	}
}
