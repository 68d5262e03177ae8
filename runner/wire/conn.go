package wire

import (
	"encoding/binary"
	"io"
	"net"
	"sync"
	"time"

	"github.com/gorilla/websocket"
)

// Conn adapts a websocket to a net.Conn: Read reads binary messages back to back; each Write
// is one binary message, except that a yamux data frame's header is held and sent in one
// message with the body that follows it (yamux writes them separately; two messages would
// double the writes, frames and reads per data frame). The multiplexer runs on it.
type Conn struct {
	ws *websocket.Conn

	rmu sync.Mutex // guards r
	r   io.Reader  // the message being read

	wmu  sync.Mutex // serialises writes; guards hdr
	hdr  [yamuxHeader]byte
	held bool // hdr holds a data frame's header whose body comes next
}

// yamuxHeader is the size of a yamux frame header: version, type, flags (2), stream id (4),
// length (4). A data frame (type 0) with a length is followed by that many bytes of body.
const yamuxHeader = 12

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

// Write sends p as one binary message; a data frame's header waits for its body (see Conn).
func (c *Conn) Write(p []byte) (int, error) {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	if c.held {
		c.held = false
		if int(binary.BigEndian.Uint32(c.hdr[8:])) == len(p) {
			if err := c.writeTwo(c.hdr[:], p); err != nil {
				return 0, err
			}
			return len(p), nil
		}
		// Not the body announced (never from yamux): the header goes on its own.
		if err := c.ws.WriteMessage(websocket.BinaryMessage, c.hdr[:]); err != nil {
			return 0, err
		}
	}
	if len(p) == yamuxHeader && p[1] == 0 && binary.BigEndian.Uint32(p[8:]) > 0 {
		copy(c.hdr[:], p)
		c.held = true
		return len(p), nil
	}
	if err := c.ws.WriteMessage(websocket.BinaryMessage, p); err != nil {
		return 0, err
	}
	return len(p), nil
}

// writeTwo sends a and b as one binary message.
func (c *Conn) writeTwo(a, b []byte) error {
	w, err := c.ws.NextWriter(websocket.BinaryMessage)
	if err != nil {
		return err
	}
	if _, err := w.Write(a); err != nil {
		w.Close()
		return err
	}
	if _, err := w.Write(b); err != nil {
		w.Close()
		return err
	}
	return w.Close()
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
