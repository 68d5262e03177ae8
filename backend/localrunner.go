package backend

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"time"

	"cubicle/backend/auth"
	"cubicle/backend/engineconn"
	"cubicle/backend/fault"
	"cubicle/backend/link"
	"cubicle/backend/store"
	"cubicle/runner"
	"cubicle/runner/wire"
)

// The managed local runner (SPEC §4, issue 12 item 3): with LocalNodeRunner the server's own
// node "local" is served by an in-process runner.Runner that wraps the server's vm.Manager and
// store, and the backend reaches it like any runner — nodes.Hub's accept path, hello, the yamux
// session and the stream calls (nodes.Remote) — over an in-memory connection. With
// LocalNodeDirect the backend calls the manager directly. See docs/runner-protocol.md.

// LocalNodeEnv chooses how node "local" is reached when Config.LocalNode is empty.
const LocalNodeEnv = "CUBICLE_LOCAL_NODE"

// How node "local" is reached (Config.LocalNode, $CUBICLE_LOCAL_NODE).
const (
	LocalNodeDirect = "direct" // the backend calls its vm.Manager
	LocalNodeRunner = "runner" // through the managed local runner's link
	// DefaultLocalNode is chosen from the benchmark (docs/runner-protocol.md).
	DefaultLocalNode = LocalNodeRunner
)

// localNodeMode resolves Config.LocalNode.
func localNodeMode(cfg string) (string, error) {
	m := cmp.Or(cfg, os.Getenv(LocalNodeEnv), DefaultLocalNode)
	if m != LocalNodeDirect && m != LocalNodeRunner {
		return "", fault.Invalid("%s=%q: use %q (the server calls its desktops directly) or %q (through the managed local runner)",
			LocalNodeEnv, m, LocalNodeDirect, LocalNodeRunner)
	}
	return m, nil
}

// localRunner is the managed local runner and the in-memory accept path it dials. Start runs
// it; stop ends it and waits.
//
// The runner connects in the background (issue 31: its connection took seconds on the
// server's critical path): until its link is first up, node "local" is served by the VM
// manager directly (fleet.Fleet.Local) — the same manager and store the runner wraps, so
// nothing a person has is lost or doubled — and the runner shows as connecting.
type localRunner struct {
	cfg runner.ManagedConfig // the runner's; its engine is named when it starts
	r   *runner.Runner       // set by start
	ln  *memListener
	srv *http.Server

	up     chan struct{} // closed once the runner's link was first up (linked)
	upOnce sync.Once
	onUp   func()        // set by start
	gate   chan struct{} // tests: when set, the accept path serves only once it is closed

	cancel context.CancelFunc
	wg     sync.WaitGroup
}

// buildLocalRunner makes the managed local runner's credential (on first start) and the runner.
func (b *Backend) buildLocalRunner() (*localRunner, error) {
	key, err := auth.LoadOrCreateKey(filepath.Join(b.cfg.DataDir, "secrets", "local-runner.key"))
	if err != nil {
		return nil, err
	}
	tok, err := b.Nodes.LocalCredential(key)
	if err != nil {
		return nil, err
	}
	lr := &localRunner{ln: newMemListener(), up: make(chan struct{})}
	mux := http.NewServeMux()
	mux.Handle("GET "+wire.ConnectPath, b.Nodes)
	lr.srv = &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second,
		ErrorLog: slog.NewLogLogger(b.log.Handler(), slog.LevelDebug)}
	lr.cfg = runner.ManagedConfig{VMs: b.VMs, Token: tok, Dial: lr.ln.dial, Version: b.cfg.Version,
		Logger: b.log.With("svc", "local-runner")}
	if _, err := runner.NewManaged(lr.cfg); err != nil { // checked now; made when it starts
		return nil, err
	}
	return lr, nil
}

// start serves the accept path and runs the runner, whose hello names engine (the
// engine's kind, "" when there is none, then engineErr says why), and returns at once:
// onUp runs when the runner's link is first up (linked). Until then Connected is false.
func (lr *localRunner) start(onUp func(), engine, engineErr string) error {
	cfg := lr.cfg
	cfg.Engine, cfg.EngineError = engine, engineErr
	r, err := runner.NewManaged(cfg)
	if err != nil {
		return err
	}
	lr.r = r
	rctx, cancel := context.WithCancel(context.Background())
	lr.cancel = cancel
	lr.onUp = onUp
	lr.wg.Add(2)
	go func() {
		defer lr.wg.Done()
		if lr.gate != nil {
			select {
			case <-lr.gate:
			case <-rctx.Done():
				return
			}
		}
		lr.srv.Serve(lr.ln)
	}()
	go func() {
		defer lr.wg.Done()
		lr.r.Run(rctx)
	}()
	return nil
}

// linked hears from the hub (nodes.Config.OnConnect) that the runner's link is up: the
// first time, node "local" moves onto it and onUp runs. (A poll of the hub's state missed a
// link that came and went between two looks, and left node local served directly.)
func (lr *localRunner) linked() {
	lr.upOnce.Do(func() {
		close(lr.up)
		if lr.onUp != nil {
			lr.onUp()
		}
	})
}

// Connected reports whether the runner's link was up at least once (from then on node
// "local" is reached through it; a link that breaks is reconnected by the runner).
func (lr *localRunner) Connected() bool {
	select {
	case <-lr.up:
		return true
	default:
		return false
	}
}

// stop ends the runner and the accept path and waits for them.
func (lr *localRunner) stop() error {
	if lr.cancel == nil {
		return nil
	}
	lr.cancel()
	err := lr.srv.Close() // closes the listener and the hijacked link is the hub's: Nodes.Close ends it
	lr.ln.Close()
	lr.wg.Wait()
	if errors.Is(err, http.ErrServerClosed) {
		err = nil
	}
	return err
}

// memListener is an in-memory net.Listener: dial hands one end of a net.Pipe to Accept.
// Nothing listens on a port, so nothing but this process can reach the accept path this way.
type memListener struct {
	conns chan net.Conn
	done  chan struct{}
	once  sync.Once

	mu   sync.Mutex
	open map[*memConn]bool // both ends of every open connection, for drop
}

// memConn is one end of an in-memory connection; it leaves its listener's set when closed.
type memConn struct {
	net.Conn
	l    *memListener
	once sync.Once
}

// Close closes the end and forgets it.
func (c *memConn) Close() error {
	c.once.Do(func() {
		c.l.mu.Lock()
		delete(c.l.open, c)
		c.l.mu.Unlock()
	})
	return c.Conn.Close()
}

func newMemListener() *memListener {
	return &memListener{conns: make(chan net.Conn), done: make(chan struct{}), open: map[*memConn]bool{}}
}

// memAddr is the listener's address.
type memAddr struct{}

func (memAddr) Network() string { return "memory" }
func (memAddr) String() string  { return "local-runner" }

// dial connects to the listener (runner.Config.Dial).
func (l *memListener) dial(ctx context.Context, _, _ string) (_ net.Conn, err error) {
	pc, ps := net.Pipe()
	c, s := &memConn{Conn: pc, l: l}, &memConn{Conn: ps, l: l}
	l.mu.Lock()
	l.open[c], l.open[s] = true, true
	l.mu.Unlock()
	select {
	case l.conns <- s:
		return c, nil
	case <-l.done:
		err = fmt.Errorf("the local runner's accept path is closed: %w", net.ErrClosed)
	case <-ctx.Done():
		err = ctx.Err()
	}
	c.Close()
	s.Close()
	return nil, err
}

// Accept waits for a dial.
func (l *memListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.conns:
		return c, nil
	case <-l.done:
		return nil, net.ErrClosed
	}
}

// Close stops Accept and dial and closes every connection made.
func (l *memListener) Close() error {
	l.once.Do(func() { close(l.done) })
	l.drop()
	return nil
}

// drop closes every connection made so far (a link that breaks; the runner reconnects).
func (l *memListener) drop() {
	l.mu.Lock()
	open := l.open
	l.open = map[*memConn]bool{}
	l.mu.Unlock()
	for c := range open {
		c.Close()
	}
}

// Addr is the listener's address.
func (l *memListener) Addr() net.Addr { return memAddr{} }

// ConnectRunnerEngine connects the desktops' engine settings s choose with the server's
// discovery (engineconn.ConnectEngineWith) for `cubicle runner` (runner.Config.ConnectEngine). On
// Kubernetes the desktops are the cluster's Pods, reached over the exec link, their egress
// policies NetworkPolicies, and their images are built by the local engine (when one answers)
// and pushed to s.Registry.
func ConnectRunnerEngine(ctx context.Context, s store.EngineSettings, mode link.Mode, log *slog.Logger) (runner.Engine, error) {
	eng, err := engineconn.ConnectEngineWith(ctx, s, log)
	if err != nil {
		return runner.Engine{}, err
	}
	re := runner.Engine{Kind: string(eng.Endpoint.Kind), MapsUsers: eng.MapsUsers(), ImagesProblem: eng.ImagesProblem, Close: eng.Close}
	if eng.Client != nil { // a nil engineconn.EngineClient must stay a nil interface
		re.Client = eng.Client
	}
	if eng.Kube != nil {
		re.Desktops, re.Policies, re.Link = eng.Kube, eng.Kube, engineconn.KubeLinkChoice(mode, eng.Kube.Host())
		re.Registry, re.RegistryInsecure = eng.Settings.Registry, eng.Settings.RegistryInsecure
	} else {
		re.Link = engineconn.GuestLinkChoice(ctx, mode, eng)
	}
	return re, nil
}
