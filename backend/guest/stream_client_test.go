package guest

import (
	"bufio"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"net"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"cubicle/backend/fault"
	"cubicle/images/guest/wire"
)

// pipeDriver is an in-process peer on a net.Pipe: it answers the handshake, then hands every
// request to handle, which may answer (reply), stay silent, or block.
type pipeDriver struct {
	conn   net.Conn
	wmu    sync.Mutex
	pings  atomic.Int64
	handle func(d *pipeDriver, env wire.Envelope, blob []byte)
	done   chan struct{}
}

func newPipeDriver(t *testing.T, handle func(d *pipeDriver, env wire.Envelope, blob []byte)) (*pipeDriver, net.Conn) {
	t.Helper()
	host, drv := net.Pipe()
	d := &pipeDriver{conn: drv, handle: handle, done: make(chan struct{})}
	go d.serve()
	t.Cleanup(func() { drv.Close(); <-d.done })
	return d, host
}

func (d *pipeDriver) serve() {
	defer close(d.done)
	br := bufio.NewReader(d.conn)
	var env wire.Envelope
	if _, err := wire.ReadMessage(br, &env); err != nil {
		return
	}
	d.reply(env.ID, Hello{Protocol: wire.ProtocolVersion, Driver: "pipe"}, nil)
	for {
		var env wire.Envelope
		blob, err := wire.ReadMessage(br, &env)
		if err != nil {
			return
		}
		if env.Op == wire.OpPing {
			d.pings.Add(1)
		}
		d.handle(d, env, blob)
	}
}

func (d *pipeDriver) reply(id uint64, result any, blob []byte) {
	raw, _ := json.Marshal(result)
	d.wmu.Lock()
	defer d.wmu.Unlock()
	wire.WriteMessage(d.conn, &wire.Envelope{ID: id, Result: raw}, blob)
}

func (d *pipeDriver) replyErr(id uint64, code, msg string) {
	d.wmu.Lock()
	defer d.wmu.Unlock()
	wire.WriteMessage(d.conn, &wire.Envelope{ID: id, Error: &wire.WireError{Code: code, Message: msg}}, nil)
}

func connectPipe(t *testing.T, host net.Conn, o Options) *Client {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := NewClient(ctx, host, o)
	if err != nil {
		t.Fatalf("NewClient: %v", err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// waitPings waits until the driver has been pinged n times (a fixed sleep is too short on a
// loaded machine).
func waitPings(t *testing.T, d *pipeDriver, n int64) {
	t.Helper()
	for deadline := time.Now().Add(20 * time.Second); d.pings.Load() < n; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%d pings after 20 s, want %d", d.pings.Load(), n)
		}
	}
}

// within fails the test when f has not returned after d: a call that hangs is the bug these
// tests look for, so they must fail rather than hang themselves.
func within(t *testing.T, d time.Duration, what string, f func()) {
	t.Helper()
	done := make(chan struct{})
	go func() { defer close(done); f() }()
	select {
	case <-done:
	case <-time.After(d):
		buf := make([]byte, 1<<16)
		t.Fatalf("%s still waits after %v\n%s", what, d, buf[:runtime.Stack(buf, true)])
	}
}

func TestHeartbeatEndsAHungDriver(t *testing.T) {
	// The driver answers pings until it "hangs": then nothing comes back, as with a stopped
	// (SIGSTOP) driver or a link that silently went away.
	var hung atomic.Bool
	d, host := newPipeDriver(t, func(d *pipeDriver, env wire.Envelope, _ []byte) {
		if !hung.Load() && env.Op == wire.OpPing {
			d.reply(env.ID, struct{}{}, nil)
		}
	})
	// The timeouts in these tests leave room for a loaded machine, where a process can stand
	// still for a tenth of a second: that must not read as a dead driver.
	c := connectPipe(t, host, Options{Name: "pipe", Heartbeat: 20 * time.Millisecond, Timeout: time.Second})
	waitPings(t, d, 3)
	if c.Err() != nil {
		t.Fatalf("healthy link: err %v, %d pings", c.Err(), d.pings.Load())
	}
	hung.Store(true)
	var err error
	within(t, 20*time.Second, "an exec on a hung driver", func() {
		_, err = c.Exec(context.Background(), ExecRequest{Shell: "sleep 100"})
	})
	if !errors.Is(err, fault.ErrUnavailable) || !strings.Contains(err.Error(), "stopped answering") {
		t.Fatalf("exec on a hung driver: %v, want unavailable, stopped answering", err)
	}
	select {
	case <-c.Done():
	default:
		t.Fatal("Done not closed after the heartbeat failed")
	}
	if !errors.Is(c.Err(), fault.ErrUnavailable) {
		t.Fatalf("Err() = %v", c.Err())
	}
	if _, err := c.Health(context.Background()); !errors.Is(err, fault.ErrUnavailable) {
		t.Fatalf("a call after the failure: %v", err)
	}
}

func TestHeartbeatNotFooledBySmallWrites(t *testing.T) {
	// The driver went away but its stream still takes small writes (a yamux stream, a socket
	// buffer), and callers keep sending small calls (a health check, the agent's next step).
	// Those writes are no sign of life: the heartbeat must still end the link. (A managed
	// runner's relay once kept an in-flight /shell waiting a minute this way.)
	d, host := newPipeDriver(t, func(*pipeDriver, wire.Envelope, []byte) {})
	c := connectPipe(t, host, Options{Name: "pipe", Heartbeat: 20 * time.Millisecond, Timeout: time.Second})
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-stop:
				return
			case <-c.Done():
				return
			case <-time.After(50 * time.Millisecond):
			}
			go func() {
				ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
				defer cancel()
				c.Health(ctx)
			}()
		}
	}()
	defer func() { close(stop); wg.Wait() }()
	within(t, 20*time.Second, "the heartbeat under a stream of small calls", func() { <-c.Done() })
	if !errors.Is(c.Err(), fault.ErrUnavailable) || !strings.Contains(c.Err().Error(), "stopped answering") {
		t.Fatalf("Err() = %v, want unavailable, stopped answering", c.Err())
	}
	if d.pings.Load() == 0 {
		t.Fatal("no pings were sent")
	}
}

func TestHeartbeatToleratesABusyLink(t *testing.T) {
	// Pings are never answered, but a large reply trickles in for longer than the timeout:
	// bytes moving means the driver is alive, so the link must stay up.
	d, host := newPipeDriver(t, func(d *pipeDriver, env wire.Envelope, _ []byte) {
		if env.Op != wire.OpReadFile {
			return
		}
		go func() {
			raw, _ := json.Marshal(struct{}{})
			js, _ := json.Marshal(&wire.Envelope{ID: env.ID, Result: raw})
			blob := make([]byte, 64<<10)
			d.wmu.Lock()
			defer d.wmu.Unlock()
			var hdr [8]byte
			binary.BigEndian.PutUint32(hdr[0:], uint32(len(js)))
			binary.BigEndian.PutUint32(hdr[4:], uint32(len(blob)))
			d.conn.Write(hdr[:])
			d.conn.Write(js)
			for i := 0; i < len(blob); i += 4 << 10 {
				time.Sleep(200 * time.Millisecond) // 16 × 200 ms = 3.2 s, over 3 timeouts
				if _, err := d.conn.Write(blob[i : i+4<<10]); err != nil {
					return
				}
			}
		}()
	})
	c := connectPipe(t, host, Options{Name: "pipe", Heartbeat: 20 * time.Millisecond, Timeout: time.Second})
	data, err := c.ReadFile(context.Background(), "big", 0)
	if err != nil || len(data) != 64<<10 {
		t.Fatalf("ReadFile over a slow link = %d bytes, %v", len(data), err)
	}
	if d.pings.Load() == 0 {
		t.Fatal("no pings were sent during the read")
	}
	// Nothing moves now and pings go unanswered: the link ends.
	within(t, 20*time.Second, "the heartbeat", func() { <-c.Done() })
}

func TestHeartbeatAcceptsAnOldDriver(t *testing.T) {
	// A driver from before the ping operation answers it as unknown: still an answer.
	d, host := newPipeDriver(t, func(d *pipeDriver, env wire.Envelope, _ []byte) {
		d.replyErr(env.ID, wire.CodeInvalid, "unknown operation \"ping\"")
	})
	c := connectPipe(t, host, Options{Name: "pipe", Heartbeat: 10 * time.Millisecond, Timeout: time.Second})
	waitPings(t, d, 150) // over a second: longer than the timeout
	if err := c.Err(); err != nil {
		t.Fatalf("old driver: err %v after %d pings", err, d.pings.Load())
	}
}

func TestCallTimeout(t *testing.T) {
	// The driver is alive (it answers pings) but never answers a screenshot.
	_, host := newPipeDriver(t, func(d *pipeDriver, env wire.Envelope, _ []byte) {
		if env.Op == wire.OpPing {
			d.reply(env.ID, struct{}{}, nil)
		}
	})
	// (The heartbeat's own timeout, by default 3 heartbeats, would end the link after a 60 ms
	// stall of this process: it gets a loaded machine's margin.)
	c := connectPipe(t, host, Options{Name: "pipe", Heartbeat: 20 * time.Millisecond, Timeout: 2 * time.Second,
		CallTimeout: 150 * time.Millisecond})
	var err error
	within(t, 20*time.Second, "a screenshot nobody answers", func() { _, err = c.Screenshot(context.Background(), ScreenshotOptions{}) })
	if !errors.Is(err, fault.ErrUnavailable) || !strings.Contains(err.Error(), "did not answer within") {
		t.Fatalf("screenshot: %v, want unavailable after the call timeout", err)
	}
	// The caller's own deadline wins and keeps its error.
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if _, err := c.Screenshot(ctx, ScreenshotOptions{}); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("with the caller's deadline: %v", err)
	}
	if c.Err() != nil {
		t.Fatalf("the link failed: %v", c.Err())
	}
}

func TestCancelWhileTheStreamIsStuck(t *testing.T) {
	// The driver stops reading: a large write blocks, holding the write slot. Another call
	// must still return when its context ends, and Close must end everything.
	block := make(chan struct{})
	_, host := newPipeDriver(t, func(d *pipeDriver, env wire.Envelope, _ []byte) {
		if env.Op == wire.OpHealth {
			<-block // stop reading the pipe
		}
	})
	defer close(block)
	c := connectPipe(t, host, Options{Name: "pipe"})
	go c.Health(context.Background())
	time.Sleep(50 * time.Millisecond)
	go c.WriteFile(context.Background(), "big", make([]byte, 8<<20), 0) // blocks on the pipe
	time.Sleep(50 * time.Millisecond)
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	var err error
	within(t, 10*time.Second, "a call waiting for the write slot", func() { _, err = c.Stat(ctx, "x") })
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("stat: %v", err)
	}
	within(t, 10*time.Second, "Close", func() { c.Close() })
}

func TestHandshakeOverSilentStream(t *testing.T) {
	host, peer := net.Pipe()
	defer peer.Close()
	go func() { // reads the hello, never answers
		bufio.NewReader(peer).ReadByte()
		select {}
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	var err error
	within(t, 10*time.Second, "NewClient", func() { _, err = NewClient(ctx, host, Options{Name: "silent"}) })
	if !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "silent") {
		t.Fatalf("NewClient = %v", err)
	}
	if _, err := host.Write([]byte("x")); err == nil {
		t.Fatal("the stream is still open after a failed handshake")
	}
}

func TestClosedStreamEndsCalls(t *testing.T) {
	// The stream ends mid-call (an exec session that ended, a driver killed): the call gets
	// a clear error at once.
	got := make(chan struct{})
	d, host := newPipeDriver(t, func(d *pipeDriver, env wire.Envelope, _ []byte) {
		if env.Op == wire.OpExec {
			close(got)
		}
	})
	c := connectPipe(t, host, Options{Name: "desktop d (exec link)"})
	go func() { <-got; d.conn.Close() }()
	var err error
	within(t, 10*time.Second, "an exec whose stream ended", func() { _, err = c.Exec(context.Background(), ExecRequest{Shell: "sleep 100"}) })
	if !errors.Is(err, fault.ErrUnavailable) || !strings.Contains(err.Error(), "the link to desktop d (exec link) ended") {
		t.Fatalf("exec: %v", err)
	}
}
