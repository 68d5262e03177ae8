//go:build linux

package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"sync"
	"time"

	"cubicle/images/guest/wire"
)

// server serves the bridge protocol on a listener: a handshake per connection, then
// requests handled concurrently and answered by id.
type server struct {
	log     *slog.Logger
	version string
	screen  *screen
	exec    *execer
	files   files
	health  func() wire.Health

	mu    sync.Mutex // guards conns
	conns map[net.Conn]struct{}
	wg    sync.WaitGroup
}

// serve accepts connections until ctx is done, then closes them all and waits for their
// handlers.
func (s *server) serve(ctx context.Context, ln net.Listener) error {
	s.conns = map[net.Conn]struct{}{}
	stop := context.AfterFunc(ctx, func() {
		ln.Close()
		s.mu.Lock()
		for c := range s.conns {
			c.Close()
		}
		s.mu.Unlock()
	})
	defer stop()
	defer s.wg.Wait()
	for {
		c, err := ln.Accept()
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				continue
			}
			return fmt.Errorf("accept: %w", err)
		}
		s.mu.Lock()
		if ctx.Err() != nil {
			s.mu.Unlock()
			c.Close()
			return nil
		}
		s.conns[c] = struct{}{}
		s.mu.Unlock()
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			s.handleConn(ctx, c)
			s.mu.Lock()
			delete(s.conns, c)
			s.mu.Unlock()
		}()
	}
}

// conn is one client connection.
type conn struct {
	c   net.Conn
	wmu sync.Mutex // serialises responses

	mu      sync.Mutex // guards cancels and streams
	cancels map[uint64]context.CancelFunc
	streams map[uint64]*stream // region streams of this connection, by the host's id
}

// stream returns the region stream id of this connection, creating it when create is set.
func (cn *conn) stream(id uint64, create bool) (*stream, error) {
	if id == 0 {
		return nil, wire.Invalid("a region stream needs a non-zero stream id")
	}
	cn.mu.Lock()
	defer cn.mu.Unlock()
	if st := cn.streams[id]; st != nil {
		return st, nil
	}
	if !create {
		return nil, wire.NotFound("no region stream %d on this connection; start it with next_update", id)
	}
	if len(cn.streams) >= wire.MaxUpdateStreams {
		return nil, wire.Invalid("this connection holds %d region streams already (the limit); end one with end_updates", len(cn.streams))
	}
	st := newStream(id)
	cn.streams[id] = st
	return st, nil
}

// endStream forgets a region stream (its memory goes with it).
func (cn *conn) endStream(id uint64) {
	cn.mu.Lock()
	delete(cn.streams, id)
	cn.mu.Unlock()
}

func (cn *conn) reply(id uint64, result any, blob []byte, err error) {
	env := &wire.Envelope{ID: id}
	if err != nil {
		env.Error = &wire.WireError{Code: wire.CodeOf(err), Message: err.Error()}
		blob = nil
	} else if result != nil {
		raw, merr := json.Marshal(result)
		if merr != nil {
			env.Error = &wire.WireError{Code: wire.CodeInternal, Message: merr.Error()}
		}
		env.Result = raw
	}
	cn.wmu.Lock()
	defer cn.wmu.Unlock()
	wire.WriteMessage(cn.c, env, blob) // a failed write shows up as a read error in the loop
}

func (s *server) handleConn(ctx context.Context, c net.Conn) {
	defer c.Close()
	br := bufio.NewReaderSize(c, 64<<10)
	cn := &conn{c: c, cancels: map[uint64]context.CancelFunc{}, streams: map[uint64]*stream{}}

	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	var env wire.Envelope
	if _, err := wire.ReadMessage(br, &env); err != nil {
		return
	}
	var ha wire.HelloArgs
	hello := s.hello()
	if env.Op != wire.OpHello || json.Unmarshal(env.Args, &ha) != nil {
		cn.replyHello(env.ID, hello, wire.Invalid("the first message must be hello"))
		return
	}
	if ha.Protocol != wire.ProtocolVersion {
		s.log.Warn("refusing client with another protocol", "client_protocol", ha.Protocol, "driver_protocol", wire.ProtocolVersion)
		cn.replyHello(env.ID, hello, wire.Conflict("client speaks bridge protocol %d, this driver (%s) speaks %d: update the desktop image or Cubicle so both match",
			ha.Protocol, s.version, wire.ProtocolVersion))
		return
	}
	cn.reply(env.ID, hello, nil, nil)
	c.SetReadDeadline(time.Time{})

	var wg sync.WaitGroup
	defer wg.Wait()
	cctx, cancelAll := context.WithCancel(ctx)
	defer cancelAll()
	for {
		var env wire.Envelope
		blob, err := wire.ReadMessage(br, &env)
		if err != nil {
			if !errors.Is(err, io.EOF) && ctx.Err() == nil && !errors.Is(err, net.ErrClosed) {
				s.log.Debug("connection ended", "err", err)
			}
			return
		}
		if env.Op == wire.OpTunnel {
			// The connection becomes the tunnel's byte stream: nothing else may be in flight.
			cn.mu.Lock()
			busy := len(cn.cancels) > 0
			cn.mu.Unlock()
			if busy {
				cn.reply(env.ID, nil, nil, wire.Conflict("a tunnel must be the only request of its connection"))
				continue
			}
			wg.Wait()
			s.tunnel(cctx, cn, br, env)
			return
		}
		if env.Op == wire.OpCancel {
			var a struct {
				ID uint64 `json:"id"`
			}
			json.Unmarshal(env.Args, &a)
			cn.mu.Lock()
			if cancel := cn.cancels[a.ID]; cancel != nil {
				cancel()
			}
			cn.mu.Unlock()
			continue
		}
		rctx, cancel := context.WithCancel(cctx)
		cn.mu.Lock()
		cn.cancels[env.ID] = cancel
		cn.mu.Unlock()
		wg.Add(1)
		go func(env wire.Envelope, blob []byte) {
			defer wg.Done()
			defer func() {
				cn.mu.Lock()
				delete(cn.cancels, env.ID)
				cn.mu.Unlock()
				cancel()
			}()
			result, out, err := s.dispatch(rctx, cn, env.Op, env.Args, blob)
			if rctx.Err() != nil && err != nil {
				return // cancelled: the client stopped waiting
			}
			if err != nil && wire.CodeOf(err) == wire.CodeInternal {
				s.log.Warn("operation failed", "op", env.Op, "err", err)
			}
			cn.reply(env.ID, result, out, err)
		}(env, blob)
	}
}

func (cn *conn) replyHello(id uint64, h wire.Hello, err error) {
	raw, _ := json.Marshal(h)
	env := &wire.Envelope{ID: id, Result: raw, Error: &wire.WireError{Code: wire.CodeOf(err), Message: err.Error()}}
	cn.wmu.Lock()
	defer cn.wmu.Unlock()
	wire.WriteMessage(cn.c, env, nil)
}

func (s *server) hello() wire.Hello {
	h := wire.Hello{Protocol: wire.ProtocolVersion, Driver: s.version,
		Features: []string{wire.FeatureTunnel, wire.FeatureRegions, wire.FeaturePointer, wire.FeatureClipboard, wire.FeatureWatch}}
	if d, _, err := s.screen.get(expired); err == nil {
		h.Screen.Width, h.Screen.Height = d.Size()
		if mw, mh, err := d.SizeRange(); err == nil {
			h.Features = append(h.Features, wire.FeatureResize)
			h.MaxScreen = &wire.Size{Width: mw, Height: mh}
		}
	}
	return h
}

// expired is a context that is already done: screen.get with it returns at once.
var expired = func() context.Context {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	return ctx
}()

func decode(raw json.RawMessage, v any) error {
	if len(raw) == 0 {
		return nil
	}
	if err := json.Unmarshal(raw, v); err != nil {
		return wire.Invalid("malformed arguments: %v", err)
	}
	return nil
}

// dispatch runs one operation of connection cn.
func (s *server) dispatch(ctx context.Context, cn *conn, op string, raw json.RawMessage, blob []byte) (any, []byte, error) {
	switch op {
	case wire.OpNextUpdate:
		var a wire.UpdateArgs
		if err := decode(raw, &a); err != nil {
			return nil, nil, err
		}
		st, err := cn.stream(a.Stream, true)
		if err != nil {
			return nil, nil, err
		}
		u, err := s.screen.nextUpdate(ctx, st, a)
		return u, u.Data, err
	case wire.OpKeyframe:
		var a wire.KeyframeArgs
		if err := decode(raw, &a); err != nil {
			return nil, nil, err
		}
		st, err := cn.stream(a.Stream, false)
		if err != nil {
			return nil, nil, err
		}
		u, err := s.screen.keyframe(st, a)
		return u, u.Data, err
	case wire.OpEndUpdates:
		var a wire.EndUpdatesArgs
		if err := decode(raw, &a); err != nil {
			return nil, nil, err
		}
		cn.endStream(a.Stream)
		return nil, nil, nil
	case wire.OpNextPointer:
		var a wire.PointerArgs
		if err := decode(raw, &a); err != nil {
			return nil, nil, err
		}
		p, data, err := s.screen.nextPointer(ctx, a)
		return p, data, err
	case wire.OpPing:
		return struct{}{}, nil, nil
	case wire.OpClipboardGet:
		var a wire.ClipboardArgs
		if err := decode(raw, &a); err != nil {
			return nil, nil, err
		}
		c, err := s.screen.clipboardGet(ctx, a)
		return c, c.Data, err
	case wire.OpClipboardSet:
		var a wire.ClipboardArgs
		if err := decode(raw, &a); err != nil {
			return nil, nil, err
		}
		return nil, nil, s.screen.clipboardSet(ctx, a, blob)
	case wire.OpNextClipboard:
		var a wire.ClipboardWaitArgs
		if err := decode(raw, &a); err != nil {
			return nil, nil, err
		}
		ch, err := s.screen.nextClipboard(ctx, a)
		return ch, nil, err
	case wire.OpResize:
		var a wire.ResizeArgs
		if err := decode(raw, &a); err != nil {
			return nil, nil, err
		}
		sz, err := s.screen.resize(ctx, a)
		return sz, nil, err
	case wire.OpHealth:
		return s.health(), nil, nil
	case wire.OpScreenshot:
		var o wire.ScreenshotOptions
		if err := decode(raw, &o); err != nil {
			return nil, nil, err
		}
		f, err := s.screen.shoot(ctx, o, false)
		return f, f.Data, err
	case wire.OpWaitSettled:
		var o wire.SettleOptions
		if err := decode(raw, &o); err != nil {
			return nil, nil, err
		}
		f, err := s.screen.settle(ctx, o)
		return f, f.Data, err
	case wire.OpNextFrame:
		var a wire.NextFrameArgs
		if err := decode(raw, &a); err != nil {
			return nil, nil, err
		}
		f, err := s.screen.next(ctx, a.After, a.Screenshot)
		return f, f.Data, err
	case wire.OpInput:
		var in wire.Input
		if err := decode(raw, &in); err != nil {
			return nil, nil, err
		}
		return nil, nil, s.screen.input(ctx, in)
	case wire.OpExec:
		var r wire.ExecRequest
		if err := decode(raw, &r); err != nil {
			return nil, nil, err
		}
		r.Stdin = blob
		res, err := s.exec.run(ctx, r)
		if err != nil {
			return nil, nil, err
		}
		out := make([]byte, 0, len(res.Stdout)+len(res.Stderr))
		out = append(append(out, res.Stdout...), res.Stderr...)
		return res, out, nil
	case wire.OpWaitDir:
		var a wire.WaitDirArgs
		if err := decode(raw, &a); err != nil {
			return nil, nil, err
		}
		ch, err := s.files.waitDir(ctx, a)
		return ch, nil, err
	case wire.OpReadFile, wire.OpWriteFile, wire.OpStat, wire.OpListDir, wire.OpMkdir:
		var a wire.FileArgs
		if err := decode(raw, &a); err != nil {
			return nil, nil, err
		}
		switch op {
		case wire.OpReadFile:
			data, err := s.files.read(a)
			return nil, data, err
		case wire.OpWriteFile:
			return nil, nil, s.files.write(a, blob)
		case wire.OpStat:
			fi, err := s.files.stat(a)
			return fi, nil, err
		case wire.OpListDir:
			l, err := s.files.list(a)
			return l, nil, err
		default:
			return nil, nil, s.files.mkdir(a)
		}
	}
	return nil, nil, wire.Invalid("unknown operation %q (this driver speaks protocol %d)", op, wire.ProtocolVersion)
}
