// Package link reaches the in-guest drivers of running desktops. A transport opens a byte
// stream to one desktop's driver — the unix socket in the desktop's run directory (Socket:
// Linux with a local engine, the fast path) or an exec session through the engine API that
// runs the driver's relay (Exec: engines in a VM, remote engines; the desktop needs no bind
// mount) — and guest.Client speaks the protocol over it. A runner relay (a desktop on another
// node) is one more Transport.
//
// Links keeps exactly one connection per running desktop, shared by everything that drives or
// watches it (chat sessions, the computer channel, the bench). Each connection has a
// heartbeat (guest.Options.Heartbeat): a driver that dies, hangs or loses its link ends the
// connection, pending calls fail at once with fault.ErrUnavailable, and the desktop's State
// says it is unhealthy until a Connect succeeds again. Links never starts or restarts a
// desktop: its owner (the VM manager) repairs a desktop whose driver cannot be reached.
//
// Ownership: Links owns its connections and one watcher goroutine per connection (it logs
// the end of a link); Drop closes one, Close closes all and waits. Everything is safe for
// concurrent use; connects of one desktop are serialised, different desktops connect in
// parallel.
package link

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"sync"
	"time"

	"cubicle/backend/engine"
	"cubicle/backend/fault"
	"cubicle/backend/guest"
	"cubicle/images/guest/wire"
)

// Transport names.
const (
	NameSocket = "socket"
	NameExec   = "exec"
)

// Target names one desktop's driver for the transports.
type Target struct {
	InstanceID  string
	ContainerID string // the container (id or name): the exec transport
	Socket      string // the driver's socket on this host: the socket transport; "" when the desktop has no run-directory mount
}

// Transport opens a byte stream to a desktop's driver; the caller speaks the protocol over
// it (or turns it into a tunnel) and closes it. The stream is a net.Conn, so deadlines work
// on every transport. Open honours ctx (a driver that is still starting may make it wait).
// Implementations are safe for concurrent use.
type Transport interface {
	Name() string
	Open(ctx context.Context, t Target) (net.Conn, error)
}

// Socket is the unix-socket transport: the run directory on this host is bind-mounted into
// the desktop, where the driver creates its socket.
type Socket struct{}

// Name is "socket".
func (Socket) Name() string { return NameSocket }

// Open connects to the socket; nothing listening is fault.ErrUnavailable.
func (Socket) Open(ctx context.Context, t Target) (net.Conn, error) {
	if t.Socket == "" {
		return nil, fault.Unavailable("desktop %s has no driver socket on this host (it was created for the exec link)", t.InstanceID)
	}
	return guest.DialSocket(ctx, t.Socket)
}

// Execer starts an attached exec session (engine/podman and engine/docker implement it).
type Execer interface {
	ExecAttach(ctx context.Context, id string, spec engine.ExecSpec) (*engine.ExecStream, error)
}

// Exec is the exec transport: a long-lived exec session through the engine API runs the
// driver's relay (cubicle-guest --relay) in the desktop, whose stdin/stdout carry the
// protocol; every request and the frame stream multiplex over that one session.
type Exec struct{ Engine Execer }

// Name is "exec".
func (Exec) Name() string { return NameExec }

// Open starts the relay. Any failure — the container is not running or gone, the engine does
// not answer — is fault.ErrUnavailable: the driver cannot be reached now (fault.ErrConflict
// is kept for a driver that speaks another protocol).
func (e Exec) Open(ctx context.Context, t Target) (net.Conn, error) {
	if t.ContainerID == "" {
		return nil, fault.Unavailable("desktop %s has no container to run the exec link in", t.InstanceID)
	}
	st, err := e.Engine.ExecAttach(ctx, t.ContainerID, engine.ExecSpec{Command: wire.RelayCommand()})
	if err != nil {
		if ctx.Err() != nil {
			return nil, fmt.Errorf("open the exec link: %w", err)
		}
		return nil, fault.Unavailable("open the exec link: %v", err)
	}
	return st, nil
}

// stderrer is a stream that kept what its far end wrote to stderr (engine.ExecStream).
type stderrer interface{ Stderr() string }

// Config configures Links. Choice is required.
type Config struct {
	Choice Choice
	// Socket and Exec are the transports; nil Socket is Socket{}, nil Exec disables the exec
	// link (an engine without ExecAttach).
	Socket, Exec Transport
	// Heartbeat and Timeout tune each connection (guest.Options); 0 = 3 s and 10 s.
	Heartbeat, Timeout time.Duration
	// CallTimeout bounds calls without a deadline (guest.Options); 0 = guest.CallTimeout.
	CallTimeout time.Duration
	// FallbackAfter is how long Connect with wait tries the socket before it also tries the
	// exec link (auto mode on a local engine); 0 = 3 s.
	FallbackAfter time.Duration
	Logger        *slog.Logger
}

// State is what Links knows about one desktop's link.
type State struct {
	Transport string    // of the current or last connection; "" when none was made
	Connected bool      // a connection is up
	Healthy   bool      // connected, or never failed since it was last dropped
	LastError string    // why the last connection ended or the last connect failed
	Since     time.Time // when Connected or LastError last changed
}

// Links keeps one driver connection per running desktop. Create it with New; Close it.
type Links struct {
	cfg Config
	log *slog.Logger

	wg sync.WaitGroup // watchers

	mu        sync.Mutex        // guards the fields below
	entries   map[string]*entry // by instance id
	socketBad string            // why the socket link was given up on this engine ("" while it works)
	closed    bool
}

type entry struct {
	op sync.Mutex // serialises connects of this desktop

	// guarded by Links.mu
	client    *guest.Client
	transport string
	lastErr   string
	failedAt  time.Time
	since     time.Time
}

// New returns empty Links.
func New(cfg Config) *Links {
	if cfg.Socket == nil {
		cfg.Socket = Socket{}
	}
	if cfg.Heartbeat <= 0 {
		cfg.Heartbeat = 3 * time.Second
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = 10 * time.Second
	}
	if cfg.FallbackAfter <= 0 {
		cfg.FallbackAfter = 3 * time.Second
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	return &Links{cfg: cfg, log: cfg.Logger, entries: map[string]*entry{}}
}

// SetEngine sets the choice and the exec transport once the engine they depend on is
// connected (a manager whose engine connects in the background starts with the default
// choice and no exec link). Connections made before keep their transport.
func (l *Links) SetEngine(c Choice, exec Transport) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.cfg.Choice, l.cfg.Exec = c, exec
}

// Choice returns how new desktops are reached: the configured choice, or exec once the
// socket link failed on this engine (auto mode).
func (l *Links) Choice() Choice {
	l.mu.Lock()
	defer l.mu.Unlock()
	c := l.cfg.Choice
	if l.socketBad != "" && c.Fallback == NameExec {
		c.Primary, c.Fallback = NameExec, ""
		c.Reason = "the socket link failed on this engine (" + l.socketBad + "), so the exec link is used"
	}
	return c
}

// Get returns desktop id's live connection without connecting.
func (l *Links) Get(id string) (*guest.Client, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if e := l.entries[id]; e != nil && e.client != nil && e.client.Err() == nil {
		return e.client, true
	}
	return nil, false
}

// retryQuiet is how long after a failed connect (without wait) another one answers the same
// error at once, so viewers polling a broken desktop do not hammer the engine.
const retryQuiet = 2 * time.Second

// Connect returns desktop t's shared connection, opening one when there is none or the last
// one ended. With wait it keeps trying until ctx ends (a desktop that was just started);
// without, it tries each transport once within ctx. A failure marks the desktop unhealthy.
// A driver speaking another protocol is fault.ErrConflict; an unreachable one
// fault.ErrUnavailable.
func (l *Links) Connect(ctx context.Context, t Target, wait bool) (*guest.Client, error) {
	e, err := l.entry(t.InstanceID)
	if err != nil {
		return nil, err
	}
	e.op.Lock()
	defer e.op.Unlock()
	l.mu.Lock()
	if e.client != nil && e.client.Err() == nil {
		c := e.client
		l.mu.Unlock()
		return c, nil
	}
	if !wait && e.lastErr != "" && time.Since(e.failedAt) < retryQuiet && e.client == nil {
		msg := e.lastErr
		l.mu.Unlock()
		return nil, fault.Unavailable("%s", msg)
	}
	l.mu.Unlock()
	c, tr, err := l.open(ctx, t, wait, true)
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		if c != nil {
			c.Close()
		}
		return nil, fault.Unavailable("the desktop links are shut down")
	}
	if old := e.client; old != nil {
		old.Close() // ended already; this releases it
		e.client = nil
	}
	if err != nil {
		e.lastErr, e.failedAt, e.since = err.Error(), time.Now(), time.Now()
		return nil, err
	}
	e.client, e.transport, e.lastErr, e.since = c, tr, "", time.Now()
	l.wg.Add(1)
	go l.watch(t.InstanceID, e, c, tr)
	return c, nil
}

// Open opens a connection to t that Links does not keep (a probe desktop); the caller
// closes it.
func (l *Links) Open(ctx context.Context, t Target, wait bool) (*guest.Client, error) {
	c, _, err := l.open(ctx, t, wait, false)
	return c, err
}

func (l *Links) entry(id string) (*entry, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return nil, fault.Unavailable("the desktop links are shut down")
	}
	e := l.entries[id]
	if e == nil {
		e = &entry{}
		l.entries[id] = e
	}
	return e, nil
}

// watch logs the end of a connection that was not dropped.
func (l *Links) watch(id string, e *entry, c *guest.Client, tr string) {
	defer l.wg.Done()
	<-c.Done()
	l.mu.Lock()
	current := e.client == c
	if current {
		e.lastErr, e.failedAt, e.since = c.Err().Error(), time.Now(), time.Now()
	}
	l.mu.Unlock()
	if current {
		l.log.Warn("desktop driver link ended; the desktop is unhealthy until it is reconnected or restarted",
			"instance", id, "transport", tr, "err", c.Err())
	}
}

// Stream opens a new byte stream to desktop t's driver (a tunnel needs a stream of its own)
// over the transport its link uses, else the chosen one (with the fallback in auto mode).
func (l *Links) Stream(ctx context.Context, t Target) (net.Conn, error) {
	choice := l.Choice()
	names := []string{choice.Primary, choice.Fallback}
	l.mu.Lock()
	if e := l.entries[t.InstanceID]; e != nil && e.transport != "" {
		names = []string{e.transport}
	}
	l.mu.Unlock()
	var errs []error
	for _, n := range names {
		tr := l.transport(n)
		if tr == nil {
			continue
		}
		conn, err := tr.Open(ctx, t)
		if err == nil {
			return conn, nil
		}
		errs = append(errs, err)
	}
	if len(errs) == 0 {
		return nil, fault.Unavailable("the %s link is not available with this engine: set CUBICLE_GUEST_LINK=socket or auto", choice.Primary)
	}
	return nil, errors.Join(errs...)
}

// State reports desktop id's link.
func (l *Links) State(id string) State {
	l.mu.Lock()
	defer l.mu.Unlock()
	e := l.entries[id]
	if e == nil {
		return State{Healthy: true}
	}
	st := State{Transport: e.transport, LastError: e.lastErr, Since: e.since}
	st.Connected = e.client != nil && e.client.Err() == nil
	st.Healthy = st.Connected || e.lastErr == ""
	return st
}

// Drop closes desktop id's connection and forgets its state (the desktop stopped or was
// removed: nothing is unhealthy about it). Pending calls fail with fault.ErrUnavailable.
func (l *Links) Drop(id string) {
	l.mu.Lock()
	e := l.entries[id]
	delete(l.entries, id)
	var c *guest.Client
	if e != nil {
		c, e.client = e.client, nil
	}
	l.mu.Unlock()
	if c != nil {
		c.Close()
	}
}

// Close closes every connection and waits for the watchers. It is idempotent.
func (l *Links) Close() error {
	l.mu.Lock()
	l.closed = true
	var cs []*guest.Client
	for id, e := range l.entries {
		if e.client != nil {
			cs = append(cs, e.client)
			e.client = nil
		}
		delete(l.entries, id)
	}
	l.mu.Unlock()
	for _, c := range cs {
		c.Close()
	}
	l.wg.Wait()
	return nil
}

// open makes a new connection to t through the chosen transports (see Connect) and says
// which transport it used. learn records a socket that fails where the exec link works.
func (l *Links) open(ctx context.Context, t Target, wait, learn bool) (*guest.Client, string, error) {
	choice := l.Choice()
	primary := l.transport(choice.Primary)
	if primary == nil {
		return nil, "", fault.Unavailable("the %s link is not available with this engine: set CUBICLE_GUEST_LINK=socket or auto", choice.Primary)
	}
	fallback := l.transport(choice.Fallback)
	if fallback == nil {
		c, err := l.try(ctx, primary, t, wait)
		return c, primary.Name(), err
	}
	// Auto on a local engine: the socket first; when it does not answer within
	// FallbackAfter, the exec link too. The exec link answering while the socket still does
	// not means the socket cannot work here (another mount namespace, a VM, a security
	// policy): remember it, and use the exec link.
	sctx, cancel := context.WithTimeout(ctx, l.cfg.FallbackAfter)
	c, err := l.try(sctx, primary, t, wait)
	cancel()
	if err == nil || errors.Is(err, fault.ErrConflict) || ctx.Err() != nil {
		return c, primary.Name(), err
	}
	sockErr := err
	c, err = l.try(ctx, fallback, t, wait)
	if err != nil {
		return nil, "", fmt.Errorf("%w (and over the socket: %v)", err, sockErr)
	}
	// One more socket try now that the driver is known to run.
	qctx, cancel := context.WithTimeout(ctx, time.Second)
	sc, serr := l.try(qctx, primary, t, false)
	cancel()
	if serr == nil {
		c.Close()
		return sc, primary.Name(), nil
	}
	if learn {
		l.mu.Lock()
		if l.socketBad == "" {
			l.socketBad = serr.Error()
			l.log.Warn("the driver socket does not answer while the exec link does; new desktops use the exec link",
				"instance", t.InstanceID, "socket_err", serr)
		}
		l.mu.Unlock()
	}
	return c, fallback.Name(), nil
}

func (l *Links) transport(name string) Transport {
	switch name {
	case NameSocket:
		return l.cfg.Socket
	case NameExec:
		l.mu.Lock()
		defer l.mu.Unlock()
		return l.cfg.Exec
	}
	return nil
}

// try opens tr and does the handshake, retrying until ctx ends when wait is set. A protocol
// mismatch is returned at once: retrying cannot fix it.
func (l *Links) try(ctx context.Context, tr Transport, t Target, wait bool) (*guest.Client, error) {
	name := "desktop " + t.InstanceID + " (" + tr.Name() + " link)"
	if tr.Name() == NameSocket && t.Socket != "" {
		name = "desktop " + t.InstanceID + " (socket " + t.Socket + ")"
	}
	opts := guest.Options{Name: name, Heartbeat: l.cfg.Heartbeat, Timeout: l.cfg.Timeout, CallTimeout: l.cfg.CallTimeout}
	for {
		c, err := l.tryOnce(ctx, tr, t, opts)
		if err == nil || !wait || errors.Is(err, fault.ErrConflict) {
			return c, err
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("desktop driver not ready over the %s link: %w (last error: %w)", tr.Name(), ctx.Err(), err)
		case <-time.After(25 * time.Millisecond):
		}
	}
}

func (l *Links) tryOnce(ctx context.Context, tr Transport, t Target, opts guest.Options) (*guest.Client, error) {
	rw, err := tr.Open(ctx, t)
	if err != nil {
		return nil, err
	}
	c, err := guest.NewClient(ctx, rw, opts)
	if err != nil {
		if se, ok := rw.(stderrer); ok {
			if msg := strings.TrimSpace(se.Stderr()); msg != "" {
				return nil, fmt.Errorf("%w; the relay in the desktop said: %s (a desktop image prepared by an older Cubicle "+
					"has no relay: prepare the image again)", err, msg)
			}
		}
		return nil, err
	}
	return c, nil
}
