//go:build linux

package main

import (
	"errors"
	"log/slog"
	"net"
	"os"
	"sync"
	"time"
)

// sockListener serves a unix socket at a fixed path and keeps it there: when the path
// vanishes (someone deleted the socket file) or stops being our socket, it listens again at
// the path, so new connections keep working without a restart. Connections accepted before
// stay open. It implements net.Listener.
//
// It owns one goroutine per underlying listener (its accept loop) and one watcher; Close
// stops them all, waits, and removes the socket file if it is still ours.
type sockListener struct {
	path  string
	every time.Duration
	log   *slog.Logger

	conns chan net.Conn
	stop  chan struct{}
	wg    sync.WaitGroup

	mu     sync.Mutex // guards cur, info, closed
	cur    *net.UnixListener
	info   os.FileInfo // the socket file of cur
	closed bool
	once   sync.Once
}

// listenSocket listens at path (removing a stale file first), makes the socket connectable
// by any uid (the host may map the container's users), and checks the path every interval.
func listenSocket(path string, every time.Duration, log *slog.Logger) (*sockListener, error) {
	l := &sockListener{path: path, every: every, log: log, conns: make(chan net.Conn), stop: make(chan struct{})}
	if err := l.relisten(); err != nil {
		return nil, err
	}
	l.wg.Add(1)
	go l.watch()
	return l, nil
}

// relisten replaces the current listener by a new one at the path.
func (l *sockListener) relisten() error {
	os.Remove(l.path)
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: l.path, Net: "unix"})
	if err != nil {
		return err
	}
	ln.SetUnlinkOnClose(false) // the path may belong to the next listener already
	if err := os.Chmod(l.path, 0o666); err != nil {
		ln.Close()
		return err
	}
	fi, err := os.Lstat(l.path)
	if err != nil {
		ln.Close()
		return err
	}
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		ln.Close()
		os.Remove(l.path)
		return net.ErrClosed
	}
	old := l.cur
	l.cur, l.info = ln, fi
	l.wg.Add(1)
	l.mu.Unlock()
	go l.acceptLoop(ln)
	if old != nil {
		old.Close() // nobody can reach it any more
	}
	return nil
}

func (l *sockListener) acceptLoop(ln *net.UnixListener) {
	defer l.wg.Done()
	for {
		c, err := ln.Accept()
		if err != nil {
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				continue
			}
			return // closed (replaced, or Close)
		}
		select {
		case l.conns <- c:
		case <-l.stop:
			c.Close()
			return
		}
	}
}

// watch re-creates the socket when its file is gone or replaced.
func (l *sockListener) watch() {
	defer l.wg.Done()
	t := time.NewTicker(l.every)
	defer t.Stop()
	for {
		select {
		case <-l.stop:
			return
		case <-t.C:
		}
		if l.ours() {
			continue
		}
		if err := l.relisten(); err != nil {
			if !errors.Is(err, net.ErrClosed) {
				l.log.Warn("the driver socket vanished and could not be re-created; retrying", "socket", l.path, "err", err)
			}
			continue
		}
		l.log.Warn("the driver socket vanished; listening again", "socket", l.path)
	}
}

// ours reports whether the path still is the current listener's socket.
func (l *sockListener) ours() bool {
	fi, err := os.Lstat(l.path)
	l.mu.Lock()
	defer l.mu.Unlock()
	return err == nil && l.info != nil && os.SameFile(fi, l.info)
}

// Accept waits for the next connection on any of the socket's listeners.
func (l *sockListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.conns:
		return c, nil
	case <-l.stop:
		return nil, net.ErrClosed
	}
}

// Close stops listening and waits for the goroutines; the socket file is removed if it is
// still ours. Connections already accepted stay open.
func (l *sockListener) Close() error {
	l.once.Do(func() {
		mine := l.ours()
		l.mu.Lock()
		l.closed = true
		cur := l.cur
		l.mu.Unlock()
		close(l.stop)
		if cur != nil {
			cur.Close()
		}
		l.wg.Wait()
		if mine {
			os.Remove(l.path)
		}
	})
	return nil
}

// Addr is the socket's address.
func (l *sockListener) Addr() net.Addr { return &net.UnixAddr{Name: l.path, Net: "unix"} }
