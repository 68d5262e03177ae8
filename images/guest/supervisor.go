//go:build linux

package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"cubicle/images/guest/wire"
	"cubicle/images/guest/x11"
)

// Config is the driver's configuration (from the environment, overridden by flags).
type Config struct {
	RunDir  string // the socket is RunDir/guest.sock (wire.SocketName)
	Display string // ":0"
	Width   int
	Height  int
	// MaxWidth×MaxHeight is the X server's framebuffer: the largest size a resize reaches
	// (Xvfb's RandR range ends at its start size, so it starts this large and is resized to
	// Width×Height at once). 0: Width×Height.
	MaxWidth  int
	MaxHeight int
	Session   string // shell command line of the desktop session; "" = none
	Workspace string
	NoXServer bool   // attach to an existing display instead of starting Xvfb
	Xvfb      string // the X server program
	Version   string
	Log       *slog.Logger
	// DrawnWait bounds how long a screenshot waits for the session's first drawing before
	// answering that the desktop is still starting; 0 means 20 s.
	DrawnWait time.Duration
	// XStartWait bounds an X server's start, until the driver's connection to it is open;
	// 0 means 30 s (Xvfb answers in well under a second, a few on a machine under heavy load).
	// A server still not answering then is killed and started again.
	XStartWait time.Duration
	// Relay runs the exec link's relay instead of the driver (cubicle-guest --relay).
	Relay     bool
	RelayWait time.Duration
}

// stopGrace is how long children get after SIGTERM before SIGKILL: the container's stop
// must complete within 2 s.
const stopGrace = 800 * time.Millisecond

// supervisor is the driver's main owner: it runs the X server and the session (restarting
// them when they die), keeps the screen's X connection current and serves the socket.
type supervisor struct {
	cfg    Config
	log    *slog.Logger
	procs  *procs
	screen *screen
	start  time.Time

	mu        sync.Mutex // guards the fields below (read by health)
	xProc     *proc
	sessProc  *proc
	xRestarts int
}

func newSupervisor(cfg Config, pr *procs) *supervisor {
	sc := newScreen(cfg.Log, cfg.Session != "", cfg.Display)
	if cfg.DrawnWait > 0 {
		sc.drawnWait = cfg.DrawnWait
	}
	return &supervisor{cfg: cfg, log: cfg.Log, procs: pr, screen: sc, start: time.Now()}
}

func (s *supervisor) env() []string {
	env := os.Environ()
	env = append(env, "DISPLAY="+s.cfg.Display)
	if os.Getenv("HOME") == "" {
		if h, err := os.UserHomeDir(); err == nil {
			env = append(env, "HOME="+h)
		}
	}
	return env
}

// Run serves until ctx is done, then stops everything it started and removes the socket.
func (s *supervisor) Run(ctx context.Context) error {
	loopDone := make(chan struct{})
	go func() {
		defer close(loopDone)
		s.loop(ctx)
	}()
	defer func() {
		<-loopDone
		s.shutdown()
	}()
	// Serve only once the display is up, so the first handshake already knows the screen.
	if _, _, err := s.screen.get(ctx); err != nil {
		said := time.Now()
		for ctx.Err() == nil {
			if _, _, err = s.screen.get(ctx); err == nil {
				break
			}
			if time.Since(said) >= 15*time.Second {
				// What a host that gets no answer finds in the container's log.
				s.log.Warn("still waiting for the display; not serving yet", "since", time.Since(s.start).Round(time.Second))
				said = time.Now()
			}
		}
		if ctx.Err() != nil {
			return nil
		}
	}

	if err := os.MkdirAll(s.cfg.RunDir, 0o755); err != nil {
		return fmt.Errorf("run dir %s: %w", s.cfg.RunDir, err)
	}
	sock := filepath.Join(s.cfg.RunDir, wire.SocketName)
	// The socket is re-created when its file is deleted (the host reconnects to a new one);
	// it is removed on exit.
	ln, err := listenSocket(sock, time.Second, s.log)
	if err != nil {
		return fmt.Errorf("listen on %s: %w", sock, err)
	}
	defer ln.Close()

	srv := &server{
		log: s.log, version: s.cfg.Version, screen: s.screen,
		exec:   &execer{procs: s.procs, workspace: s.cfg.Workspace, env: s.env()},
		files:  files{workspace: s.cfg.Workspace},
		health: s.health,
	}
	s.log.Info("serving", "socket", sock, "display", s.cfg.Display, "protocol", wire.ProtocolVersion)
	return srv.serve(ctx, ln)
}

// loop keeps the X server and the session running until ctx is done.
func (s *supervisor) loop(ctx context.Context) {
	xBackoff, sessBackoff := 100*time.Millisecond, time.Second
	var sessRetry <-chan time.Time
	defer s.log.Info("stopping")
	for ctx.Err() == nil {
		// X server (or an existing display).
		s.mu.Lock()
		xp := s.xProc
		s.mu.Unlock()
		var xDone <-chan struct{}
		if s.cfg.NoXServer {
			if _, _, err := s.screen.get(expired); err != nil {
				d, err := x11.Open(s.cfg.Display)
				if err != nil {
					s.log.Warn("display not reachable; retrying", "display", s.cfg.Display, "err", err)
					sleepCtx(ctx, time.Second)
					continue
				}
				s.screen.set(d)
				s.logDisplay(d)
			}
		} else if xp == nil {
			if err := s.startX(ctx); err != nil {
				s.log.Error("X server failed to start; retrying", "err", err, "backoff", xBackoff)
				sleepCtx(ctx, xBackoff)
				xBackoff = min(2*xBackoff, 5*time.Second)
				continue
			}
			xBackoff = 100 * time.Millisecond
			s.mu.Lock()
			xp = s.xProc
			s.mu.Unlock()
		}
		if xp != nil {
			xDone = xp.done
		}
		// Session.
		s.mu.Lock()
		sp := s.sessProc
		s.mu.Unlock()
		var sessDone <-chan struct{}
		if sp == nil && s.cfg.Session != "" && sessRetry == nil {
			if err := s.startSession(); err != nil {
				s.log.Error("session failed to start", "err", err)
				sessRetry = time.After(sessBackoff)
				sessBackoff = min(2*sessBackoff, 10*time.Second)
			}
			s.mu.Lock()
			sp = s.sessProc
			s.mu.Unlock()
		}
		if sp != nil {
			sessDone = sp.done
		}
		var dispDone <-chan struct{}
		if d, _, err := s.screen.get(expired); err == nil {
			dispDone = d.Done()
		}
		select {
		case <-ctx.Done():
		case <-xDone:
			s.log.Warn("X server exited; restarting it and the session", "status", xp.exitCode())
			t0 := time.Now()
			s.screen.set(nil)
			s.log.Debug("display closed", "took", time.Since(t0))
			s.mu.Lock()
			s.xProc = nil
			s.xRestarts++
			sp := s.sessProc
			s.mu.Unlock()
			if sp != nil {
				s.stopProcs(sp)
				s.log.Debug("session stopped", "took", time.Since(t0))
				s.mu.Lock()
				s.sessProc = nil
				s.mu.Unlock()
			}
			sessRetry, sessBackoff = nil, time.Second // a fresh session as soon as X is back
		case <-sessDone:
			s.log.Warn("session exited; restarting it", "status", sp.exitCode(), "after", sessBackoff)
			s.mu.Lock()
			s.sessProc = nil
			s.mu.Unlock()
			sessRetry = time.After(sessBackoff)
			sessBackoff = min(2*sessBackoff, 10*time.Second)
		case <-sessRetry:
			sessRetry = nil
		case <-dispDone:
			if d, _, err := s.screen.get(expired); err == nil && d.Done() != dispDone {
				continue // replaced on purpose (a resize): the new connection is current
			}
			// Our connection broke while the server lives on: reconnect.
			s.screen.set(nil)
			if xp == nil && !s.cfg.NoXServer {
				continue
			}
			if d, err := x11.Open(s.cfg.Display); err == nil {
				s.screen.set(d)
			} else {
				sleepCtx(ctx, 200*time.Millisecond)
			}
		}
	}
}

func (s *supervisor) logDisplay(d *x11.Display) {
	w, h := d.Size()
	s.log.Info("display ready", "display", s.cfg.Display, "width", w, "height", h, "shm", d.UsesSHM(), "damage", d.UsesDamage())
}

// startX starts Xvfb and waits until the driver's X connection is open.
func (s *supervisor) startX(ctx context.Context) error {
	num := strings.TrimPrefix(s.cfg.Display, ":")
	if i := strings.IndexByte(num, '.'); i >= 0 {
		num = num[:i]
	}
	// Our previous server is dead (we reaped it), so its lock and socket are stale.
	os.Remove("/tmp/.X" + num + "-lock")
	os.Remove("/tmp/.X11-unix/X" + num)
	if err := os.Mkdir("/tmp/.X11-unix", 0o777); err == nil {
		os.Chmod("/tmp/.X11-unix", os.ModeSticky|0o777) // as X expects; the umask dropped bits
	}
	fbW, fbH := max(s.cfg.MaxWidth, s.cfg.Width), max(s.cfg.MaxHeight, s.cfg.Height)
	cmd := exec.Command(s.cfg.Xvfb, s.cfg.Display, "-screen", "0", fmt.Sprintf("%dx%dx24", fbW, fbH),
		"-nolisten", "tcp", "-noreset")
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	pr, err := s.procs.start(cmd)
	if err != nil {
		return fmt.Errorf("start %s: %w", s.cfg.Xvfb, err)
	}
	s.log.Info("X server started", "program", s.cfg.Xvfb, "pid", pr.pid, "display", s.cfg.Display)
	// Connecting is bounded: a server that accepts the connection but never answers (wedged
	// in its start) would otherwise hold the driver before it serves anything, for ever. At
	// the deadline the server is killed, which ends a connection attempt stuck in it.
	wait := s.cfg.XStartWait
	if wait <= 0 {
		wait = 30 * time.Second
	}
	deadline := time.NewTimer(wait)
	defer deadline.Stop()
	exited := func() error {
		return fmt.Errorf("%s exited at start with status %d (display %s in use?)", s.cfg.Xvfb, pr.exitCode(), s.cfg.Display)
	}
	for {
		res := make(chan xConn, 1)
		go func() {
			d, err := s.connectX(fbW, fbH)
			res <- xConn{d, err}
		}()
		var failed error
		select {
		case r := <-res:
			if r.err == nil {
				s.mu.Lock()
				s.xProc = pr
				s.mu.Unlock()
				s.screen.set(r.d)
				s.logDisplay(r.d)
				return nil
			}
			// Not accepting connections yet: again shortly.
			select {
			case <-time.After(10 * time.Millisecond):
				continue
			case <-pr.done:
				failed = exited()
			case <-deadline.C:
				failed = fmt.Errorf("%s did not accept connections within %s: %w", s.cfg.Xvfb, wait, r.err)
			case <-ctx.Done():
				failed = ctx.Err()
			}
			s.stopProcs(pr)
			return failed
		case <-pr.done:
			failed = exited()
		case <-deadline.C:
			failed = fmt.Errorf("%s did not answer the driver's connection within %s (killed; it is started again)", s.cfg.Xvfb, wait)
		case <-ctx.Done():
			failed = ctx.Err()
		}
		s.stopProcs(pr) // ends the connection attempt stuck in it
		s.abandon(res)
		return failed
	}
}

// xConn is the outcome of a connection attempt to the X server.
type xConn struct {
	d   *x11.Display
	err error
}

// connectX opens the driver's connection to the X server just started, first resizing its
// fbW×fbH framebuffer down to the configured size before anything draws.
func (s *supervisor) connectX(fbW, fbH int) (*x11.Display, error) {
	d, err := x11.Open(s.cfg.Display)
	if err == nil && (fbW != s.cfg.Width || fbH != s.cfg.Height) {
		// The new connection sees the new size.
		if rerr := d.Resize(s.cfg.Width, s.cfg.Height); rerr != nil {
			s.log.Warn("cannot resize the X server to the configured size; keeping its start size", "err", rerr)
		}
		d.Close()
		d, err = x11.Open(s.cfg.Display)
	}
	return d, err
}

// abandon waits briefly for a connection attempt whose server was killed to end, closing
// what it opened; one that still hangs (a server stuck in the kernel) is left to close its
// connection whenever it ends.
func (s *supervisor) abandon(res <-chan xConn) {
	closeIt := func(r xConn) {
		if r.d != nil {
			r.d.Close()
		}
	}
	select {
	case r := <-res:
		closeIt(r)
	case <-time.After(2 * time.Second):
		s.log.Warn("a connection attempt to the killed X server still hangs; leaving it")
		go func() { closeIt(<-res) }()
	}
}

func (s *supervisor) startSession() error {
	cmd := exec.Command("/bin/sh", "-c", "exec "+s.cfg.Session)
	cmd.Env = s.env()
	cmd.Dir = s.cfg.Workspace
	if _, err := os.Stat(cmd.Dir); err != nil {
		cmd.Dir = "/"
	}
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	pr, err := s.procs.start(cmd)
	if err != nil {
		return fmt.Errorf("start session %q: %w", s.cfg.Session, err)
	}
	s.mu.Lock()
	s.sessProc = pr
	s.mu.Unlock()
	s.log.Info("session started", "command", s.cfg.Session, "pid", pr.pid)
	return nil
}

// stopProcs sends SIGTERM to the processes' groups, and SIGKILL after stopGrace.
func (s *supervisor) stopProcs(ps ...*proc) {
	for _, p := range ps {
		p.signalGroup(syscall.SIGTERM)
	}
	deadline := time.After(stopGrace)
	for _, p := range ps {
		select {
		case <-p.done:
		case <-deadline:
			p.signalGroup(syscall.SIGKILL)
			select {
			case <-p.done:
			case <-time.After(time.Second):
				s.log.Warn("process did not die", "pid", p.pid)
			}
		}
	}
	for _, p := range ps {
		p.signalGroup(syscall.SIGKILL) // stragglers left in the group
	}
}

// shutdown stops the session and the X server together; as PID 1 it also ends every other
// process left in the container, so the container's stop never waits for the engine's kill.
func (s *supervisor) shutdown() {
	start := time.Now()
	defer func() { s.log.Info("stopped", "took", time.Since(start)) }()
	s.mu.Lock()
	sp, xp := s.sessProc, s.xProc
	s.sessProc, s.xProc = nil, nil
	s.mu.Unlock()
	var ps []*proc
	if sp != nil {
		ps = append(ps, sp)
	}
	if xp != nil {
		ps = append(ps, xp)
	}
	s.screen.set(nil)
	pid1 := os.Getpid() == 1
	if pid1 {
		// kill(-1) reaches every process we may signal except ourselves: only safe as the
		// container's init.
		syscall.Kill(-1, syscall.SIGTERM)
	}
	s.stopProcs(ps...)
	if pid1 {
		deadline := time.Now().Add(stopGrace / 2)
		for syscall.Kill(-1, 0) == nil && time.Now().Before(deadline) {
			time.Sleep(10 * time.Millisecond)
		}
		syscall.Kill(-1, syscall.SIGKILL)
		deadline = time.Now().Add(300 * time.Millisecond)
		for syscall.Kill(-1, 0) == nil && time.Now().Before(deadline) {
			time.Sleep(5 * time.Millisecond) // the reaper collects them
		}
	}
}

func (s *supervisor) health() wire.Health {
	s.mu.Lock()
	h := wire.Health{
		Session:   s.sessProc != nil,
		Uptime:    time.Since(s.start),
		XRestarts: s.xRestarts,
	}
	s.mu.Unlock()
	if d, _, err := s.screen.get(expired); err == nil {
		if err := d.Ping(); err == nil {
			h.XServer = true
			h.Screen.Width, h.Screen.Height = d.Size()
			h.SHM, h.Damage, h.Cursor = d.UsesSHM(), d.UsesDamage(), d.UsesCursor()
			h.Drawn = s.screen.isDrawn()
		}
	}
	return h
}

func sleepCtx(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}
