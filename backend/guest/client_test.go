package guest

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"net"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"cubicle/backend/fault"
	"cubicle/images/guest/wire"
)

// fakeDriver is an in-process peer speaking the wire format, with a scripted handler.
type fakeDriver struct {
	ln      net.Listener
	path    string
	hello   Hello
	handle  func(env wire.Envelope, blob []byte) (result any, out []byte, werr *wire.WireError)
	mu      sync.Mutex
	ops     []string // every op received, cancel included
	wg      sync.WaitGroup
	reverse bool // answer pairs of requests in reverse order
}

// newFake starts a fake driver; configure may set handle and reverse before it serves.
func newFake(t *testing.T, protocol int, configure func(*fakeDriver)) *fakeDriver {
	t.Helper()
	path := filepath.Join(t.TempDir(), "guest.sock")
	ln, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	f := &fakeDriver{ln: ln, path: path, hello: Hello{Protocol: protocol, Driver: "fake", Screen: Size{Width: 1280, Height: 800}}}
	if configure != nil {
		configure(f)
	}
	f.wg.Add(1)
	go f.accept()
	t.Cleanup(func() { ln.Close(); f.wg.Wait() })
	return f
}

func (f *fakeDriver) accept() {
	defer f.wg.Done()
	for {
		c, err := f.ln.Accept()
		if err != nil {
			return
		}
		f.wg.Add(1)
		go func() { defer f.wg.Done(); f.serve(c) }()
	}
}

func (f *fakeDriver) serve(c net.Conn) {
	defer c.Close()
	br := bufio.NewReader(c)
	var env wire.Envelope
	if _, err := wire.ReadMessage(br, &env); err != nil {
		return
	}
	raw, _ := json.Marshal(f.hello)
	wire.WriteMessage(c, &wire.Envelope{ID: env.ID, Result: raw}, nil)
	var held *wire.Envelope
	for {
		var env wire.Envelope
		blob, err := wire.ReadMessage(br, &env)
		if err != nil {
			return
		}
		f.mu.Lock()
		f.ops = append(f.ops, env.Op)
		f.mu.Unlock()
		if env.Op == wire.OpCancel {
			continue
		}
		reply := func(env wire.Envelope, blob []byte) {
			res, out, werr := f.handle(env, blob)
			raw, _ := json.Marshal(res)
			wire.WriteMessage(c, &wire.Envelope{ID: env.ID, Result: raw, Error: werr}, out)
		}
		if f.reverse {
			if held == nil {
				e := env
				held = &e
				continue
			}
			reply(env, blob)
			reply(*held, nil)
			held = nil
			continue
		}
		reply(env, blob)
	}
}

func TestDialNothingListening(t *testing.T) {
	_, err := Dial(context.Background(), filepath.Join(t.TempDir(), "none.sock"))
	if !errors.Is(err, fault.ErrUnavailable) {
		t.Fatalf("err = %v, want unavailable", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 150*time.Millisecond)
	defer cancel()
	if _, err := WaitReady(ctx, filepath.Join(t.TempDir(), "none.sock")); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("WaitReady = %v, want deadline exceeded", err)
	}
}

func TestHandshakeVersionMismatch(t *testing.T) {
	f := newFake(t, ProtocolVersion+1, nil)
	for name, dial := range map[string]func(context.Context, string) (*Client, error){"Dial": Dial, "WaitReady": WaitReady} {
		t.Run(name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			_, err := dial(ctx, f.path)
			if !errors.Is(err, fault.ErrConflict) {
				t.Fatalf("err = %v, want conflict", err)
			}
			msg := err.Error()
			for _, want := range []string{"protocol 2", "speaks 1", "update the desktop image"} {
				if !strings.Contains(msg, want) {
					t.Errorf("message %q lacks %q", msg, want)
				}
			}
		})
	}
}

func TestErrorClasses(t *testing.T) {
	f := newFake(t, ProtocolVersion, func(f *fakeDriver) {
		f.handle = func(env wire.Envelope, _ []byte) (any, []byte, *wire.WireError) {
			var a wire.FileArgs
			json.Unmarshal(env.Args, &a)
			return nil, nil, &wire.WireError{Code: a.Path, Message: "boom " + a.Path}
		}
	})
	codes := map[string]error{
		wire.CodeNotFound: fault.ErrNotFound, wire.CodeExists: fault.ErrExists, wire.CodeConflict: fault.ErrConflict,
		wire.CodeInvalid: fault.ErrInvalid, wire.CodeForbidden: fault.ErrForbidden, wire.CodeUnavailable: fault.ErrUnavailable,
		wire.CodeInternal: nil,
	}
	c, err := Dial(context.Background(), f.path)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if h := c.Hello(); h.Driver != "fake" || h.Screen.Width != 1280 {
		t.Fatalf("hello %+v", h)
	}
	for code, class := range codes {
		t.Run(code, func(t *testing.T) {
			_, err := c.Stat(context.Background(), code)
			if err == nil || fault.Class(err) != class || !strings.Contains(err.Error(), "boom "+code) {
				t.Fatalf("err = %v (class %v), want class %v", err, fault.Class(err), class)
			}
		})
	}
}

func TestMultiplexAndCancel(t *testing.T) {
	f := newFake(t, ProtocolVersion, func(f *fakeDriver) {
		f.reverse = true
		f.handle = func(env wire.Envelope, blob []byte) (any, []byte, *wire.WireError) {
			var a wire.FileArgs
			json.Unmarshal(env.Args, &a)
			return nil, []byte("content of " + a.Path), nil
		}
	})
	c, err := Dial(context.Background(), f.path)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	var wg sync.WaitGroup
	for _, p := range []string{"a", "b"} {
		wg.Add(1)
		go func(p string) {
			defer wg.Done()
			got, err := c.ReadFile(context.Background(), p, 0)
			if err != nil || string(got) != "content of "+p {
				t.Errorf("ReadFile(%s) = %q, %v", p, got, err)
			}
		}(p)
		time.Sleep(20 * time.Millisecond) // a then b, answered b then a
	}
	wg.Wait()

	// A request whose context ends is cancelled on the driver and fails with the context's error.
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if _, err := c.ReadFile(ctx, "held", 0); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("err = %v", err)
	}
	time.Sleep(50 * time.Millisecond)
	f.mu.Lock()
	ops := strings.Join(f.ops, ",")
	f.mu.Unlock()
	if !strings.HasSuffix(ops, wire.OpReadFile+","+wire.OpCancel) {
		t.Errorf("driver saw %s, want a cancel after the read", ops)
	}
	c.Close()
	if _, err := c.Health(context.Background()); !errors.Is(err, fault.ErrUnavailable) {
		t.Errorf("after Close: %v, want unavailable", err)
	}
}
