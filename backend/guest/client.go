package guest

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"sync"
	"time"

	"cubicle/backend/fault"
	"cubicle/images/guest/wire"
)

// Client is a connection to one driver. It is safe for concurrent use: requests are
// multiplexed by id on one socket and the driver serves them concurrently, so a long wait
// (a stream's next frame, a settle wait, an exec) never blocks other requests.
type Client struct {
	conn  net.Conn
	hello Hello

	wmu sync.Mutex // serialises writes to conn

	mu      sync.Mutex // guards the fields below
	nextID  uint64
	pending map[uint64]chan response
	err     error // set once the connection is gone

	done chan struct{} // closed when the reader ends
	wg   sync.WaitGroup
}

type response struct {
	env  wire.Envelope
	blob []byte
}

// Dial connects to the driver's socket and performs the versioned handshake. Nothing
// listening is fault.Unavailable; a driver speaking another protocol version is
// fault.Conflict.
func Dial(ctx context.Context, socketPath string) (*Client, error) {
	var d net.Dialer
	conn, err := d.DialContext(ctx, "unix", socketPath)
	if err != nil {
		if ctx.Err() != nil {
			return nil, fmt.Errorf("desktop driver: connect %s: %w", socketPath, ctx.Err())
		}
		return nil, fault.Unavailable("desktop driver: nothing answers at %s (is the desktop running?): %v", socketPath, err)
	}
	c := &Client{conn: conn, pending: map[uint64]chan response{}, done: make(chan struct{})}
	if dl, ok := ctx.Deadline(); ok {
		conn.SetDeadline(dl)
	} else {
		conn.SetDeadline(time.Now().Add(10 * time.Second))
	}
	args, _ := json.Marshal(wire.HelloArgs{Protocol: wire.ProtocolVersion, Client: "cubicle"})
	if err := wire.WriteMessage(conn, &wire.Envelope{ID: 0, Op: wire.OpHello, Args: args}, nil); err != nil {
		conn.Close()
		return nil, fault.Unavailable("desktop driver: handshake with %s: %v", socketPath, err)
	}
	br := bufio.NewReaderSize(conn, 64<<10)
	var env wire.Envelope
	if _, err := wire.ReadMessage(br, &env); err != nil {
		conn.Close()
		return nil, fault.Unavailable("desktop driver: handshake with %s: %v", socketPath, err)
	}
	var h Hello
	if len(env.Result) > 0 {
		if err := json.Unmarshal(env.Result, &h); err != nil {
			conn.Close()
			return nil, fault.Unavailable("desktop driver: handshake with %s: bad reply: %v", socketPath, err)
		}
	}
	if h.Protocol != wire.ProtocolVersion {
		conn.Close()
		return nil, fault.Conflict("desktop driver at %s speaks bridge protocol %d (driver %s), this Cubicle speaks %d: update the desktop image (prepare it again) or Cubicle so both match",
			socketPath, h.Protocol, h.Driver, wire.ProtocolVersion)
	}
	if env.Error != nil {
		conn.Close()
		return nil, ErrorFor(wire.OpHello, env.Error)
	}
	conn.SetDeadline(time.Time{})
	c.hello = h
	c.wg.Add(1)
	go c.readLoop(br)
	return c, nil
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

// Close closes the connection; pending calls fail with fault.Unavailable. It waits for the
// reader goroutine.
func (c *Client) Close() error {
	err := c.conn.Close()
	c.wg.Wait()
	return err
}

func (c *Client) readLoop(br *bufio.Reader) {
	defer c.wg.Done()
	defer close(c.done)
	for {
		var env wire.Envelope
		blob, err := wire.ReadMessage(br, &env)
		if err != nil {
			c.mu.Lock()
			c.err = fault.Unavailable("desktop driver: connection lost: %v", err)
			c.mu.Unlock()
			c.conn.Close()
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
		return nil, err
	}
	c.nextID++
	id := c.nextID
	c.pending[id] = ch
	c.mu.Unlock()

	c.wmu.Lock()
	err = wire.WriteMessage(c.conn, &wire.Envelope{ID: id, Op: op, Args: raw}, blob)
	c.wmu.Unlock()
	if err != nil {
		c.forget(id)
		if errors.Is(err, wire.ErrTooLarge) {
			return nil, fault.Invalid("desktop driver: %s: %v", op, err)
		}
		return nil, fault.Unavailable("desktop driver: %s: %v", op, err)
	}
	select {
	case r := <-ch:
		if r.env.Error != nil {
			return nil, ErrorFor(op, r.env.Error)
		}
		if result != nil && len(r.env.Result) > 0 {
			if err := json.Unmarshal(r.env.Result, result); err != nil {
				return nil, fmt.Errorf("desktop driver: %s: bad reply: %w", op, err)
			}
		}
		return r.blob, nil
	case <-ctx.Done():
		c.forget(id)
		cargs, _ := json.Marshal(wire.CancelArgs{ID: id})
		c.wmu.Lock()
		c.conn.SetWriteDeadline(time.Now().Add(time.Second))
		wire.WriteMessage(c.conn, &wire.Envelope{ID: 0, Op: wire.OpCancel, Args: cargs}, nil)
		c.conn.SetWriteDeadline(time.Time{})
		c.wmu.Unlock()
		return nil, fmt.Errorf("desktop driver: %s: %w", op, ctx.Err())
	case <-c.done:
		// The reader may have delivered our response just before ending.
		select {
		case r := <-ch:
			if r.env.Error != nil {
				return nil, ErrorFor(op, r.env.Error)
			}
			if result != nil && len(r.env.Result) > 0 {
				json.Unmarshal(r.env.Result, result)
			}
			return r.blob, nil
		default:
		}
		c.mu.Lock()
		err := c.err
		c.mu.Unlock()
		return nil, fmt.Errorf("desktop driver: %s: %w", op, err)
	}
}

func (c *Client) forget(id uint64) {
	c.mu.Lock()
	delete(c.pending, id)
	c.mu.Unlock()
}

// Health reports whether the X server and session are up.
func (c *Client) Health(ctx context.Context) (Health, error) {
	var h Health
	_, err := c.call(ctx, wire.OpHealth, struct{}{}, nil, &h)
	return h, err
}

// Screenshot captures and encodes the screen now.
func (c *Client) Screenshot(ctx context.Context, o ScreenshotOptions) (Frame, error) {
	var f Frame
	blob, err := c.call(ctx, wire.OpScreenshot, o, nil, &f)
	f.Data = blob
	return f, err
}

// WaitSettled waits until the screen has not changed for o.Quiet (counted from the call, so
// the effect of an action just sent is awaited), at most o.Max, and returns a screenshot.
func (c *Client) WaitSettled(ctx context.Context, o SettleOptions) (Frame, error) {
	var f Frame
	blob, err := c.call(ctx, wire.OpWaitSettled, o, nil, &f)
	f.Data = blob
	return f, err
}

// Input performs one input action; it returns once the X server has processed it.
func (c *Client) Input(ctx context.Context, in Input) error {
	_, err := c.call(ctx, wire.OpInput, in, nil, nil)
	return err
}

// Exec runs a command in the guest and returns how it ended. A non-zero exit code is a
// result, not an error.
func (c *Client) Exec(ctx context.Context, r ExecRequest) (ExecResult, error) {
	var res ExecResult
	blob, err := c.call(ctx, wire.OpExec, r, r.Stdin, &res)
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
	blob, err := c.call(ctx, wire.OpReadFile, wire.FileArgs{Path: path, MaxBytes: maxBytes}, nil, nil)
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
	_, err := c.call(ctx, wire.OpWriteFile, wire.FileArgs{Path: path, Mode: mode}, data, nil)
	return err
}

// Stat describes one path (symlinks are not followed).
func (c *Client) Stat(ctx context.Context, path string) (FileInfo, error) {
	var fi FileInfo
	_, err := c.call(ctx, wire.OpStat, wire.FileArgs{Path: path}, nil, &fi)
	return fi, err
}

// ListDir lists a directory, sorted by name.
func (c *Client) ListDir(ctx context.Context, path string) ([]FileInfo, error) {
	var list []FileInfo
	_, err := c.call(ctx, wire.OpListDir, wire.FileArgs{Path: path}, nil, &list)
	return list, err
}

// Mkdir creates a directory (with parents: like mkdir -p, and no error if it exists).
func (c *Client) Mkdir(ctx context.Context, path string, parents bool) error {
	_, err := c.call(ctx, wire.OpMkdir, wire.FileArgs{Path: path, Parents: parents}, nil, nil)
	return err
}

// Done is closed when the connection to the driver is gone (closed, or the desktop stopped).
func (c *Client) Done() <-chan struct{} { return c.done }
