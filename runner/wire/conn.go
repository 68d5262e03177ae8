package wire

import (
	"io"
	"net"
	"sync"
	"time"

	"github.com/gorilla/websocket"
)

// Conn adapts a websocket to a net.Conn: each Write is one binary message, Read reads
// messages back to back. The multiplexer runs on it.
type Conn struct {
	ws *websocket.Conn

	rmu sync.Mutex // guards r
	r   io.Reader  // the message being read

	wmu sync.Mutex // serialises writes
}

// NewConn wraps ws.
func NewConn(ws *websocket.Conn) *Conn { return &Conn{ws: ws} }

// Read reads from the current binary message, moving to the next when it ends.
func (c *Conn) Read(p []byte) (int, error) {
	c.rmu.Lock()
	defer c.rmu.Unlock()
	for {
		if c.r == nil {
			typ, r, err := c.ws.NextReader()
			if err != nil {
				return 0, err
			}
			if typ != websocket.BinaryMessage {
				continue
			}
			c.r = r
		}
		n, err := c.r.Read(p)
		if err == io.EOF {
			c.r = nil
			if n > 0 {
				return n, nil
			}
			continue
		}
		return n, err
	}
}

// Write sends p as one binary message.
func (c *Conn) Write(p []byte) (int, error) {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	if err := c.ws.WriteMessage(websocket.BinaryMessage, p); err != nil {
		return 0, err
	}
	return len(p), nil
}

// Close closes the websocket.
func (c *Conn) Close() error { return c.ws.Close() }

// LocalAddr and RemoteAddr are the underlying connection's.
func (c *Conn) LocalAddr() net.Addr  { return c.ws.LocalAddr() }
func (c *Conn) RemoteAddr() net.Addr { return c.ws.RemoteAddr() }

// SetDeadline sets both deadlines.
func (c *Conn) SetDeadline(t time.Time) error {
	return errorsJoin(c.ws.SetReadDeadline(t), c.ws.SetWriteDeadline(t))
}

// SetReadDeadline and SetWriteDeadline set the websocket's deadlines.
func (c *Conn) SetReadDeadline(t time.Time) error  { return c.ws.SetReadDeadline(t) }
func (c *Conn) SetWriteDeadline(t time.Time) error { return c.ws.SetWriteDeadline(t) }

func errorsJoin(a, b error) error {
	if a != nil {
		return a
	}
	return b
}
