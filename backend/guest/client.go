package guest

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"cubicle/backend/fault"
	"cubicle/images/guest/wire"
)

// Options tune a Client. The zero value is usable: no heartbeat.
type Options struct {
	// Name says what the stream reaches, for messages: a socket path, "the exec link to …".
	Name string
	// Heartbeat is how often the client pings the driver; 0 sends no pings. With a heartbeat
	// a driver that stops answering (hung, stopped, a link that silently went away) ends the
	// connection: every pending call fails with fault.ErrUnavailable instead of waiting.
	Heartbeat time.Duration
	// Timeout is how long a ping may go unanswered while nothing shows the driver alive (no
	// byte read, no long write progressing) before the connection is declared dead; 0 means
	// 3 × Heartbeat.
	Timeout time.Duration
	// CallTimeout replaces the package's CallTimeout for this client (tests shorten it); 0
	// keeps it. FileTimeout and the extra time of exec and settle waits scale with it.
	CallTimeout time.Duration
}

// Per-call deadlines for calls whose context has none: a call never waits forever for a
// driver that accepted it. Exec and settle waits get their own duration on top.
const (
	// CallTimeout bounds health, ping, screenshot, input, stat, list and mkdir calls.
	CallTimeout = time.Minute
	// FileTimeout bounds a file read or write (up to 64 MiB over a slow link): 5 × CallTimeout.
	FileTimeout = 5 * CallTimeout
	// handshakeTimeout bounds the handshake when the context has no deadline.
	handshakeTimeout = 10 * time.Second
	// writeChunk is the most written in one Write, so a long write shows progress to the
	// heartbeat.
	writeChunk = 256 << 10
)

// Client is a connection to one driver over a byte stream: a unix socket, an exec session's
// stdin/stdout, or anything else that carries the protocol. It is safe for concurrent use:
// requests are multiplexed by id on the one stream and the driver serves them concurrently,
// so a long wait (a stream's next frame, a settle wait, an exec) never blocks other requests.
//
// The Client owns the stream and up to three kinds of goroutine: the reader, the heartbeat
// (with Options.Heartbeat) and short-lived writers of cancel messages. Close ends them all
// and waits.
type Client struct {
	rw    io.ReadWriteCloser
	name  string
	opts  Options
	hello Hello

	wsem   chan struct{} // one slot: held while writing a message
	lastIO atomic.Int64  // unix nanoseconds of the last sign of life on the stream (see tracked)

	mu      sync.Mutex // guards the fields below
	nextID  uint64
	pending map[uint64]chan response
	err     error // set once the connection is gone

	done      chan struct{} // closed when the reader ends (the connection is gone)
	stop      chan struct{} // closed by Close
	closeOnce sync.Once
	wg        sync.WaitGroup
}

type response struct {
	env  wire.Envelope
	blob []byte
}

// Dial connects to the driver's unix socket and performs the versioned handshake (no
// heartbeat; see NewClient). Nothing listening is fault.Unavailable; a driver speaking
// another protocol version is fault.Conflict.
func Dial(ctx context.Context, socketPath string) (*Client, error) {
	conn, err := DialSocket(ctx, socketPath)
	if err != nil {
		return nil, err
	}
	return NewClient(ctx, conn, Options{Name: socketPath})
}

// DialSocket opens a connection to the driver's unix socket (no handshake). Nothing
// listening is fault.Unavailable.
func DialSocket(ctx context.Context, socketPath string) (net.Conn, error) {
	var d net.Dialer
	conn, err := d.DialContext(ctx, "unix", socketPath)
	if err != nil {
		if ctx.Err() != nil {
			return nil, fmt.Errorf("desktop driver: connect %s: %w", socketPath, ctx.Err())
		}
		return nil, fault.Unavailable("desktop driver: nothing answers at %s (is the desktop running?): %v", socketPath, err)
	}
	return conn, nil
}

// NewClient performs the versioned handshake over rw and returns a Client that owns rw (it
// is closed on failure too). The handshake is bounded by ctx's deadline, else 10 s. A
// failed handshake is fault.Unavailable; a driver speaking another protocol version
// fault.Conflict.
func NewClient(ctx context.Context, rw io.ReadWriteCloser, opts Options) (*Client, error) {
	if opts.Name == "" {
		opts.Name = "the desktop driver"
	}
	if opts.Heartbeat > 0 && opts.Timeout <= 0 {
		opts.Timeout = 3 * opts.Heartbeat
	}
	if opts.CallTimeout <= 0 {
		opts.CallTimeout = CallTimeout
	}
	c := &Client{rw: rw, name: opts.Name, opts: opts, wsem: make(chan struct{}, 1),
		pending: map[uint64]chan response{}, done: make(chan struct{}), stop: make(chan struct{})}
	c.lastIO.Store(time.Now().UnixNano())
	hctx, cancel := context.WithTimeout(ctx, handshakeTimeout)
	if _, ok := ctx.Deadline(); ok {
		hctx, cancel = context.WithCancel(ctx)
	}
	defer cancel()
	// A stream without deadlines is unblocked by closing it.
	unblock := context.AfterFunc(hctx, func() { rw.Close() })
	h, br, err := c.handshake()
	if !unblock() || err != nil {
		rw.Close()
		if err == nil || (hctx.Err() != nil && fault.Class(err) != fault.ErrConflict) {
			if ctx.Err() != nil {
				return nil, fmt.Errorf("desktop driver: handshake with %s: %w", c.name, ctx.Err())
			}
			return nil, fault.Unavailable("desktop driver: handshake with %s: no answer within %s", c.name, handshakeTimeout)
		}
		return nil, err
	}
	c.hello = h
	c.wg.Add(1)
	go c.readLoop(br)
	if opts.Heartbeat > 0 {
		c.wg.Add(1)
		go c.heartbeat()
	}
	return c, nil
}

// handshake sends hello and reads the driver's answer.
func (c *Client) handshake() (Hello, *bufio.Reader, error) {
	args, _ := json.Marshal(wire.HelloArgs{Protocol: wire.ProtocolVersion, Client: "cubicle"})
	if err := wire.WriteMessage(c.rw, &wire.Envelope{ID: 0, Op: wire.OpHello, Args: args}, nil); err != nil {
		return Hello{}, nil, fault.Unavailable("desktop driver: handshake with %s: %v", c.name, err)
	}
	br := bufio.NewReaderSize(tracked{c.rw, &c.lastIO}, 64<<10)
	var env wire.Envelope
	if _, err := wire.ReadMessage(br, &env); err != nil {
		return Hello{}, nil, fault.Unavailable("desktop driver: handshake with %s: %v", c.name, err)
	}
	var h Hello
	if len(env.Result) > 0 {
		if err := json.Unmarshal(env.Result, &h); err != nil {
			return Hello{}, nil, fault.Unavailable("desktop driver: handshake with %s: bad reply: %v", c.name, err)
		}
	}
	if h.Protocol != wire.ProtocolVersion {
		return Hello{}, nil, fault.Conflict("desktop driver at %s speaks bridge protocol %d (driver %s), this Cubicle speaks %d: update the desktop image (prepare it again) or Cubicle so both match",
			c.name, h.Protocol, h.Driver, wire.ProtocolVersion)
	}
	if env.Error != nil {
		return Hello{}, nil, ErrorFor(wire.OpHello, env.Error)
	}
	return h, br, nil
}

// tracked records, for the heartbeat, when the stream last showed that its peer is alive: any
// byte read, and a write that went on past its first chunk. A small write is no sign of life:
// it lands in the transport's buffers (a yamux stream, a socket) even when nobody reads, so the
// heartbeat's own pings, or a caller's repeated small calls, must not keep a dead stream busy.
// A long write progresses only as the peer reads, so its later chunks count.
type tracked struct {
	io.ReadWriter
	last *atomic.Int64
}

func (t tracked) Read(p []byte) (int, error) {
	n, err := t.ReadWriter.Read(p)
	if n > 0 {
		t.last.Store(time.Now().UnixNano())
	}
	return n, err
}

func (t tracked) Write(p []byte) (int, error) {
	written := 0
	for len(p) > 0 {
		n, err := t.ReadWriter.Write(p[:min(len(p), writeChunk)])
		written += n
		if n > 0 && written > writeChunk {
			t.last.Store(time.Now().UnixNano())
		}
		if err != nil {
			return written, err
		}
		p = p[n:]
	}
	return written, nil
}

// WaitReady dials until the driver answers the handshake or ctx is done. A protocol
// mismatch is returned at once: retrying cannot fix it.
func WaitReady(ctx context.Context, socketPath string) (*Client, error) {
	delay := 20 * time.Millisecond
	for {
		c, err := Dial(ctx, socketPath)
		if err == nil || errors.Is(err, fault.ErrConflict) {
			return c, err
		}
		t := time.NewTimer(delay)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, fmt.Errorf("desktop driver not ready: %w (last error: %w)", ctx.Err(), err)
		case <-t.C:
		}
		if delay < 500*time.Millisecond {
			delay *= 2
		}
	}
}

// Hello returns what the driver said in the handshake.
func (c *Client) Hello() Hello { return c.hello }

// Name says what the client is connected to (Options.Name).
func (c *Client) Name() string { return c.name }

// Close closes the connection; pending calls fail with fault.Unavailable. It waits for the
// client's goroutines and is idempotent.
func (c *Client) Close() error {
	c.closeOnce.Do(func() {
		c.fail(fault.Unavailable("the link to %s was closed", c.name))
		close(c.stop)
	})
	c.wg.Wait()
	return nil
}

// fail ends the connection with err (the first reason wins) and closes the stream.
func (c *Client) fail(err error) {
	c.mu.Lock()
	if c.err == nil {
		c.err = err
	}
	c.mu.Unlock()
	c.rw.Close()
}

// reason is why the connection ended, as soon as it is decided (before the reader is done).
func (c *Client) reason() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.err == nil {
		return fault.Unavailable("the link to %s ended", c.name)
	}
	return c.err
}

// Err returns why the connection ended (fault.ErrUnavailable), or nil while it is up.
func (c *Client) Err() error {
	select {
	case <-c.done:
	default:
		return nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.err
}

func (c *Client) readLoop(br *bufio.Reader) {
	defer c.wg.Done()
	defer close(c.done)
	for {
		var env wire.Envelope
		blob, err := wire.ReadMessage(br, &env)
		if err != nil {
			c.fail(c.lost(err))
			return
		}
		c.mu.Lock()
		ch := c.pending[env.ID]
		delete(c.pending, env.ID)
		c.mu.Unlock()
		if ch != nil {
			ch <- response{env: env, blob: blob} // buffered: never blocks
		}
	}
}

// lost is the error of a connection whose stream failed.
func (c *Client) lost(err error) error {
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE) {
		return fault.Unavailable("the link to %s ended (the desktop stopped, or its driver or link went away)", c.name)
	}
	return fault.Unavailable("the link to %s ended: %v", c.name, err)
}

// heartbeat pings the driver every Options.Heartbeat and ends the connection when a ping
// goes unanswered for Options.Timeout while nothing else moves on the stream.
func (c *Client) heartbeat() {
	defer c.wg.Done()
	t := time.NewTicker(c.opts.Heartbeat)
	defer t.Stop()
	for {
		select {
		case <-c.done:
			return
		case <-t.C:
		}
		ctx, cancel := context.WithTimeout(context.Background(), c.opts.Timeout)
		_, err := c.call(ctx, wire.OpPing, struct{}{}, nil, nil)
		cancel()
		if err == nil || !errors.Is(err, context.DeadlineExceeded) {
			continue // answered (an old driver answers an unknown op with an error), or the connection ended
		}
		if idle := time.Since(time.Unix(0, c.lastIO.Load())); idle >= c.opts.Timeout {
			c.fail(fault.Unavailable("%s stopped answering (no reply to a heartbeat for %s)", c.name, c.opts.Timeout))
			return
		}
	}
}

// write sends one message, waiting for the stream's write slot as long as ctx allows. A
// message is written whole or the stream fails: a partial write cannot be taken back.
func (c *Client) write(ctx context.Context, env *wire.Envelope, blob []byte) error {
	select {
	case c.wsem <- struct{}{}:
	case <-ctx.Done():
		return ctx.Err()
	case <-c.done:
		return c.reason()
	}
	defer func() { <-c.wsem }()
	err := wire.WriteMessage(tracked{c.rw, &c.lastIO}, env, blob)
	if err != nil && !errors.Is(err, wire.ErrTooLarge) {
		c.fail(c.lost(err))
	}
	return err
}

// call sends one request and waits for its response. On ctx done it asks the driver to
// cancel the request and returns the context's error.
func (c *Client) call(ctx context.Context, op string, args any, blob []byte, result any) ([]byte, error) {
	raw, err := json.Marshal(args)
	if err != nil {
		return nil, fault.Invalid("desktop driver: %s: %v", op, err)
	}
	ch := make(chan response, 1)
	c.mu.Lock()
	if c.err != nil {
		err := c.err
		c.mu.Unlock()
		return nil, fmt.Errorf("desktop driver: %s: %w", op, err)
	}
	c.nextID++
	id := c.nextID
	c.pending[id] = ch
	c.mu.Unlock()

	if err := c.write(ctx, &wire.Envelope{ID: id, Op: op, Args: raw}, blob); err != nil {
		c.forget(id)
		switch {
		case errors.Is(err, wire.ErrTooLarge):
			return nil, fault.Invalid("desktop driver: %s: %v", op, err)
		case ctx.Err() != nil:
			return nil, fmt.Errorf("desktop driver: %s: %w", op, ctx.Err())
		}
		return nil, fmt.Errorf("desktop driver: %s: %w", op, c.reason())
	}
	select {
	case r := <-ch:
		return c.reply(op, r, result)
	case <-ctx.Done():
		c.forget(id)
		c.cancel(id)
		return nil, fmt.Errorf("desktop driver: %s: %w", op, ctx.Err())
	case <-c.done:
		// The reader may have delivered our response just before ending.
		select {
		case r := <-ch:
			return c.reply(op, r, result)
		default:
		}
		return nil, fmt.Errorf("desktop driver: %s: %w", op, c.reason())
	}
}

func (c *Client) reply(op string, r response, result any) ([]byte, error) {
	if r.env.Error != nil {
		return nil, ErrorFor(op, r.env.Error)
	}
	if result != nil && len(r.env.Result) > 0 {
		if err := json.Unmarshal(r.env.Result, result); err != nil {
			return nil, fmt.Errorf("desktop driver: %s: bad reply: %w", op, err)
		}
	}
	return r.blob, nil
}

// cancel asks the driver to drop request id, from a goroutine of its own: the caller has
// stopped waiting and must not wait for the stream either.
func (c *Client) cancel(id uint64) {
	cargs, _ := json.Marshal(wire.CancelArgs{ID: id})
	c.wg.Add(1)
	go func() {
		defer c.wg.Done()
		ctx, cancel := context.WithTimeout(context.Background(), c.cancelWait())
		defer cancel()
		c.write(ctx, &wire.Envelope{ID: 0, Op: wire.OpCancel, Args: cargs}, nil)
	}()
}

// cancelWait is how long a cancel message may wait for the write slot.
func (c *Client) cancelWait() time.Duration {
	if c.opts.Timeout > 0 {
		return c.opts.Timeout
	}
	return 10 * time.Second
}

func (c *Client) forget(id uint64) {
	c.mu.Lock()
	delete(c.pending, id)
	c.mu.Unlock()
}

// callWithin is call with d as the deadline when ctx has none (d <= 0: no deadline). A call
// that runs out of d is fault.ErrUnavailable: the driver took the request and never answered.
func (c *Client) callWithin(ctx context.Context, d time.Duration, op string, args any, blob []byte, result any) ([]byte, error) {
	if _, ok := ctx.Deadline(); ok || d <= 0 {
		return c.call(ctx, op, args, blob, result)
	}
	cctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	out, err := c.call(cctx, op, args, blob, result)
	if err != nil && cctx.Err() != nil && ctx.Err() == nil {
		return nil, fault.Unavailable("desktop driver: %s: %s did not answer within %s (is the desktop hung or overloaded?)", op, c.name, d)
	}
	return out, err
}

// settleMax is the longest a settle wait may take (the driver's default max is 5 s).
func settleMax(o SettleOptions) time.Duration {
	if o.Max > 0 {
		return o.Max
	}
	return 5 * time.Second
}

// Ping asks the driver to answer at once (the heartbeat's request). A driver older than
// the ping operation answers with fault.ErrInvalid, which still proves it is alive.
func (c *Client) Ping(ctx context.Context) error {
	_, err := c.callWithin(ctx, c.opts.CallTimeout, wire.OpPing, struct{}{}, nil, nil)
	return err
}

// Health reports whether the X server and session are up.
func (c *Client) Health(ctx context.Context) (Health, error) {
	var h Health
	_, err := c.callWithin(ctx, c.opts.CallTimeout, wire.OpHealth, struct{}{}, nil, &h)
	return h, err
}

// Screenshot captures and encodes the screen now.
func (c *Client) Screenshot(ctx context.Context, o ScreenshotOptions) (Frame, error) {
	var f Frame
	blob, err := c.callWithin(ctx, c.opts.CallTimeout, wire.OpScreenshot, o, nil, &f)
	f.Data = blob
	return f, err
}

// WaitSettled waits until the screen has not changed for o.Quiet (counted from the call, so
// the effect of an action just sent is awaited), at most o.Max, and returns a screenshot.
func (c *Client) WaitSettled(ctx context.Context, o SettleOptions) (Frame, error) {
	var f Frame
	blob, err := c.callWithin(ctx, settleMax(o)+c.opts.CallTimeout, wire.OpWaitSettled, o, nil, &f)
	f.Data = blob
	return f, err
}

// Input performs one input action; it returns once the X server has processed it.
func (c *Client) Input(ctx context.Context, in Input) error {
	_, err := c.callWithin(ctx, c.opts.CallTimeout, wire.OpInput, in, nil, nil)
	return err
}

// Exec runs a command in the guest and returns how it ended. A non-zero exit code is a
// result, not an error.
func (c *Client) Exec(ctx context.Context, r ExecRequest) (ExecResult, error) {
	var res ExecResult
	var within time.Duration // no timeout asked: the caller's context (and the heartbeat) bound it
	if r.Timeout > 0 {
		within = r.Timeout + c.opts.CallTimeout
	}
	blob, err := c.callWithin(ctx, within, wire.OpExec, r, r.Stdin, &res)
	if err != nil {
		return res, err
	}
	if res.StdoutLen+res.StderrLen != len(blob) {
		return res, fmt.Errorf("desktop driver: exec: reply has %d bytes of output, announced %d+%d", len(blob), res.StdoutLen, res.StderrLen)
	}
	res.Stdout, res.Stderr = blob[:res.StdoutLen:res.StdoutLen], blob[res.StdoutLen:]
	return res, nil
}

// ReadFile returns a file's contents. maxBytes caps the size (0 or above MaxFileSize means
// MaxFileSize); a larger file is fault.Invalid.
func (c *Client) ReadFile(ctx context.Context, path string, maxBytes int64) ([]byte, error) {
	blob, err := c.callWithin(ctx, 5*c.opts.CallTimeout, wire.OpReadFile, wire.FileArgs{Path: path, MaxBytes: maxBytes}, nil, nil)
	if err == nil && blob == nil {
		blob = []byte{}
	}
	return blob, err
}

// WriteFile writes data atomically (a temporary file in the same directory, then rename);
// mode 0 means 0644. The parent directory must exist.
func (c *Client) WriteFile(ctx context.Context, path string, data []byte, mode os.FileMode) error {
	if len(data) > MaxFileSize {
		return fault.Invalid("desktop driver: write %s: %d bytes is over the %d MiB limit per file", path, len(data), MaxFileSize>>20)
	}
	_, err := c.callWithin(ctx, 5*c.opts.CallTimeout, wire.OpWriteFile, wire.FileArgs{Path: path, Mode: mode}, data, nil)
	return err
}

// Stat describes one path (symlinks are not followed).
func (c *Client) Stat(ctx context.Context, path string) (FileInfo, error) {
	var fi FileInfo
	_, err := c.callWithin(ctx, c.opts.CallTimeout, wire.OpStat, wire.FileArgs{Path: path}, nil, &fi)
	return fi, err
}

// ListDir lists a directory, sorted by name.
func (c *Client) ListDir(ctx context.Context, path string) ([]FileInfo, error) {
	var list []FileInfo
	_, err := c.callWithin(ctx, c.opts.CallTimeout, wire.OpListDir, wire.FileArgs{Path: path}, nil, &list)
	return list, err
}

// Mkdir creates a directory (with parents: like mkdir -p, and no error if it exists).
func (c *Client) Mkdir(ctx context.Context, path string, parents bool) error {
	_, err := c.callWithin(ctx, c.opts.CallTimeout, wire.OpMkdir, wire.FileArgs{Path: path, Parents: parents}, nil, nil)
	return err
}

// Done is closed when the connection to the driver is gone (closed, or the desktop stopped).
func (c *Client) Done() <-chan struct{} { return c.done }
