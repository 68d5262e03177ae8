package screentest

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"image"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gorilla/websocket"
)

// Client is a test client of the computer channel (docs/computer-protocol.md) over a real
// gorilla websocket; unless it was dialled as a slow client, it reads every message in its
// own goroutine. Its methods are for the test goroutine only.
type Client struct {
	// WS is the websocket.
	WS *websocket.Conn

	t     testing.TB
	read  atomic.Int64 // bytes read from the TCP connection
	msgs  chan Msg
	done  chan struct{}
	frame atomic.Uint64 // newest frame id received
	// backlog holds messages call read past while waiting for its reply; next returns them
	// first. Only the test goroutine uses it.
	backlog []Msg

	cmu      sync.Mutex // guards canvas, lossless, applyErr
	canvas   Canvas     // version 2: every update applied as it arrives
	lossless bool       // the last update left the canvas exact
	applyErr error
}

// Msg is one message from the server.
type Msg struct {
	Frame  *FrameHeader   // set for a binary frame (version 1)
	Update *Update        // set for an update message (version 2)
	Data   []byte         // the frame's image
	JSON   map[string]any // set for a text message
	At     time.Time      // when it was read
	Closed error          // set for the last Msg: why the connection ended
}

// FrameHeader is a binary frame's header.
type FrameHeader struct {
	ID            uint64
	Width, Height uint32
	Encoding      byte // 1 JPEG, 2 PNG
}

type countConn struct {
	net.Conn
	n *atomic.Int64
}

func (c countConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	c.n.Add(int64(n))
	return n, err
}

// Dial opens the channel at u (ws://…) with header h; reading=false leaves every message
// unread and shrinks the socket's receive buffer (a slow client). It is closed when the test
// ends.
func Dial(t testing.TB, u string, h http.Header, reading bool) (*Client, *http.Response, error) {
	t.Helper()
	c := &Client{t: t, msgs: make(chan Msg, 8192), done: make(chan struct{})}
	d := websocket.Dialer{HandshakeTimeout: 5 * time.Second, ReadBufferSize: 64 << 10,
		NetDialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			conn, err := (&net.Dialer{}).DialContext(ctx, network, addr)
			if err != nil {
				return nil, err
			}
			if !reading {
				conn.(*net.TCPConn).SetReadBuffer(4 << 10)
			}
			return countConn{conn, &c.read}, nil
		}}
	if h == nil {
		h = http.Header{}
	}
	ws, resp, err := d.Dial(u, h)
	if err != nil {
		return nil, resp, err
	}
	c.WS = ws
	t.Cleanup(func() { ws.Close(); <-c.done })
	if !reading {
		close(c.done)
		return c, resp, nil
	}
	go func() {
		defer close(c.done)
		for {
			typ, data, err := ws.ReadMessage()
			if err != nil {
				c.msgs <- Msg{Closed: err}
				return
			}
			m := Msg{At: time.Now()}
			if typ == websocket.BinaryMessage && len(data) > 4 && data[4] == 2 {
				u, err := ParseUpdate(data)
				if err != nil {
					t.Errorf("bad update message: %v", err)
					continue
				}
				m.Update = u
				c.frame.Store(u.FrameID)
				c.cmu.Lock()
				if err := c.canvas.Apply(u); err != nil && c.applyErr == nil {
					c.applyErr = err
				}
				c.lossless = u.Lossless
				c.cmu.Unlock()
			} else if typ == websocket.BinaryMessage {
				if len(data) < 24 || string(data[:4]) != "CBFR" || data[4] != 1 || data[5] != 24 {
					t.Errorf("bad frame header % x", data[:min(len(data), 24)])
					continue
				}
				m.Frame = &FrameHeader{ID: binary.BigEndian.Uint64(data[8:]), Width: binary.BigEndian.Uint32(data[16:]),
					Height: binary.BigEndian.Uint32(data[20:]), Encoding: data[6]}
				m.Data = data[24:]
				c.frame.Store(m.Frame.ID)
			} else if err := json.Unmarshal(data, &m.JSON); err != nil {
				t.Errorf("bad JSON message %q", data)
				continue
			}
			select {
			case c.msgs <- m:
			default:
				t.Error("test client queue full")
			}
		}
	}()
	return c, resp, nil
}

// Next returns the next message, or fails after timeout.
func (c *Client) Next(timeout time.Duration) (Msg, bool) {
	if len(c.backlog) > 0 {
		m := c.backlog[0]
		c.backlog = c.backlog[1:]
		return m, true
	}
	select {
	case m := <-c.msgs:
		if m.Closed != nil {
			c.t.Fatalf("connection closed: %v", m.Closed)
		}
		return m, true
	case <-time.After(timeout):
		return Msg{}, false
	}
}

// Expect skips messages until a JSON message of type typ (and, if id != "", that id).
func (c *Client) Expect(typ, id string, timeout time.Duration) map[string]any {
	c.t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		m, ok := c.Next(time.Until(deadline))
		if !ok {
			c.t.Fatalf("no %q message within %v", typ, timeout)
		}
		if m.JSON != nil && m.JSON["type"] == typ && (id == "" || m.JSON["id"] == id) {
			return m.JSON
		}
	}
}

// Status skips to the next status message satisfying cond.
func (c *Client) Status(timeout time.Duration, cond func(map[string]any) bool) map[string]any {
	c.t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		st := c.Expect("status", "", time.Until(deadline))
		if cond(st) {
			return st
		}
	}
}

// FrameAfter skips to the first frame with an id above after.
func (c *Client) FrameAfter(after uint64, timeout time.Duration) (Msg, bool) {
	deadline := time.Now().Add(timeout)
	for {
		m, ok := c.Next(time.Until(deadline))
		if !ok {
			return Msg{}, false
		}
		if m.Frame != nil && m.Frame.ID > after {
			return m, true
		}
	}
}

// UpdateAfter skips to the first version 2 update with a frame id above after (or a
// keyframe).
func (c *Client) UpdateAfter(after uint64, timeout time.Duration) (Msg, bool) {
	deadline := time.Now().Add(timeout)
	for {
		m, ok := c.Next(time.Until(deadline))
		if !ok {
			return Msg{}, false
		}
		if m.Update != nil && (m.Update.FrameID > after || m.Update.Key) {
			return m, true
		}
	}
}

// Quiet reads until nothing arrives for d.
func (c *Client) Quiet(d time.Duration) {
	for {
		if _, ok := c.Next(d); !ok {
			return
		}
	}
}

// Send sends m as JSON.
func (c *Client) Send(m map[string]any) {
	c.t.Helper()
	if err := c.WS.WriteJSON(m); err != nil {
		c.t.Fatalf("send %v: %v", m, err)
	}
}

// Call sends m with a fresh id and returns the reply (lease, ok or error).
func (c *Client) Call(m map[string]any) map[string]any {
	c.t.Helper()
	id := fmt.Sprintf("r%d", time.Now().UnixNano())
	m["id"] = id
	c.Send(m)
	deadline := time.Now().Add(10 * time.Second)
	var skipped []Msg
	defer func() { c.backlog = append(skipped, c.backlog...) }()
	for {
		msg, ok := c.Next(time.Until(deadline))
		if !ok {
			c.t.Fatalf("no reply to %v", m)
		}
		if msg.JSON != nil && msg.JSON["id"] == id {
			return msg.JSON
		}
		skipped = append(skipped, msg)
	}
}

// Screen returns a copy of the screen rebuilt from the version 2 updates so far, whether the
// last update left it exact, and the first error applying one.
func (c *Client) Screen() (*image.RGBA, bool, error) {
	c.cmu.Lock()
	defer c.cmu.Unlock()
	if c.canvas.Img == nil {
		return nil, false, c.applyErr
	}
	img := *c.canvas.Img
	img.Pix = append([]byte(nil), img.Pix...)
	return &img, c.lossless, c.applyErr
}

// Frame returns the id of the newest frame received.
func (c *Client) Frame() uint64 { return c.frame.Load() }

// BytesRead returns how many bytes were read from the connection so far.
func (c *Client) BytesRead() int64 { return c.read.Load() }

// Messages returns the raw message channel (the last message has Closed set).
func (c *Client) Messages() <-chan Msg { return c.msgs }
