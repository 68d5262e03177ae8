package engine

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/windows"

	"cubicle/internal/testenv"
)

// TestDiscoverRealNamedPipe serves an engine's ping and version on a real named pipe, as
// Docker Desktop does, and finds it through DOCKER_HOST=npipe://… with the real pipe dialer
// (go-winio).
func TestDiscoverRealNamedPipe(t *testing.T) {
	name := fmt.Sprintf(`\\.\pipe\cubicle-test-%d`, time.Now().UnixNano())
	ln := listenPipe(t, name)
	srv := &http.Server{Handler: dockerLike}
	go srv.Serve(ln)
	defer srv.Close()

	uid := 1000
	eps, err := Discover(context.Background(), DiscoverOptions{
		Getenv:   envMap(map[string]string{"DOCKER_HOST": pipeURI(name), "USERPROFILE": testenv.TempDir(t)}),
		LookPath: noCLI, UID: &uid, Timeout: 10 * time.Second,
	})
	if err != nil {
		t.Fatal(err)
	}
	ep := eps[0]
	if ep.Source != SourceDockerHost || ep.Socket != pipeURI(name) || !ep.Reachable || ep.Version != "27.3.1" || !ep.VM || ep.Remote {
		t.Fatalf("named pipe endpoint: %+v", ep)
	}
	for _, other := range eps[1:] {
		if other.Reachable {
			t.Errorf("%s answered on this machine: %+v", other.Socket, other)
		}
	}
	missing := Endpoint{Kind: Docker, Source: SourceDockerDesktop, Socket: pipeURI(name + "-none")}
	probeEndpoint(context.Background(), &missing, DiscoverOptions{Timeout: 5 * time.Second}.withDefaults())
	if missing.Reachable || missing.Err != `no named pipe `+name+`-none` {
		t.Errorf("missing pipe: %+v", missing)
	}
}

// pipeListener serves a named pipe with plain blocking calls: go-winio's own listener waits
// for completions Wine does not deliver, and this is only the test's server side; the code
// under test dials with go-winio. One pipe instance always waits for a client while the
// listener is open (the first is made before listenPipe returns, the next before Accept
// hands a connection out), so a client never finds the name missing.
type pipeListener struct {
	name string
	mu   sync.Mutex
	next windows.Handle // the instance waiting for the next client; guarded by mu
	done bool           // guarded by mu
}

func listenPipe(t *testing.T, name string) *pipeListener {
	t.Helper()
	l := &pipeListener{name: name}
	h, err := l.instance()
	if err != nil {
		t.Fatalf("create the named pipe %s: %v", name, err)
	}
	l.next = h
	t.Cleanup(func() { l.Close() })
	return l
}

// instance creates one more instance of the pipe.
func (l *pipeListener) instance() (windows.Handle, error) {
	p, err := windows.UTF16PtrFromString(l.name)
	if err != nil {
		return 0, err
	}
	return windows.CreateNamedPipe(p, windows.PIPE_ACCESS_DUPLEX,
		windows.PIPE_TYPE_BYTE|windows.PIPE_READMODE_BYTE|windows.PIPE_WAIT,
		windows.PIPE_UNLIMITED_INSTANCES, 64<<10, 64<<10, 0, nil)
}

func (l *pipeListener) Accept() (net.Conn, error) {
	l.mu.Lock()
	h, done := l.next, l.done
	l.mu.Unlock()
	if done {
		return nil, net.ErrClosed
	}
	if err := windows.ConnectNamedPipe(h, nil); err != nil && !errors.Is(err, windows.ERROR_PIPE_CONNECTED) {
		return nil, err
	}
	next, err := l.instance()
	if err != nil {
		windows.CloseHandle(h)
		return nil, err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.next = next
	if l.done {
		windows.CloseHandle(h)
		windows.CloseHandle(next)
		return nil, net.ErrClosed
	}
	return pipeConn{os.NewFile(uintptr(h), l.name)}, nil
}

// Close stops Accept: it marks the listener closed and connects once (waiting at most 5 s)
// to release a blocked ConnectNamedPipe.
func (l *pipeListener) Close() error {
	l.mu.Lock()
	if l.done {
		l.mu.Unlock()
		return nil
	}
	l.done = true
	l.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if c, err := dialPipe(ctx, l.name); err == nil {
		c.Close()
	}
	return nil
}

func (l *pipeListener) Addr() net.Addr { return pipeAddr(l.name) }

type pipeAddr string

func (a pipeAddr) Network() string { return "pipe" }
func (a pipeAddr) String() string  { return string(a) }

// pipeConn is a connected pipe instance; deadlines are not supported (the server does not
// need them).
type pipeConn struct{ *os.File }

func (c pipeConn) LocalAddr() net.Addr                { return pipeAddr(c.Name()) }
func (c pipeConn) RemoteAddr() net.Addr               { return pipeAddr(c.Name()) }
func (c pipeConn) SetDeadline(t time.Time) error      { return nil }
func (c pipeConn) SetReadDeadline(t time.Time) error  { return nil }
func (c pipeConn) SetWriteDeadline(t time.Time) error { return nil }
