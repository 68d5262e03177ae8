package bench

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// rfbClient is the peer's viewer: an RFB (VNC) client that asks for what noVNC — the viewer
// of the Anthropic computer-use demo and of most agent desktops built on x11vnc — asks for
// (CopyRect, Tight with JPEG quality level 6 and compression level 2, rich cursor, the
// incremental request after each update) and reads every update completely, without drawing
// it, counting the bytes that arrive. Only the message framing is parsed (enough to follow
// the stream); Tight's zlib and JPEG data are skipped by their lengths.
type rfbClient struct {
	conn    net.Conn
	br      *bufio.Reader
	read    atomic.Int64 // bytes read from the connection
	updates atomic.Int64 // framebuffer updates read
	tight   atomic.Int64 // Tight rectangles read (the encoding x11vnc should pick)
	jpegs   atomic.Int64 // of them, JPEG ones
	w, h    int

	wmu  sync.Mutex // serialises writes
	done chan struct{}
	err  error // why the reader ended; set before done closes
}

// Encodings and pseudo-encodings (RFC 6143 and the community extensions).
const (
	rfbRaw          = 0
	rfbCopyRect     = 1
	rfbHextile      = 5
	rfbTight        = 7
	rfbZRLE         = 16
	rfbCursor       = -239
	rfbDesktopSize  = -223
	rfbLastRect     = -224
	rfbQualityLevel = -32  // + 0..9
	rfbCompressLvl  = -256 // + 0..9
)

// noVNCEncodings is what noVNC announces by default (quality 6, compression 2), minus what
// x11vnc does not offer.
var noVNCEncodings = []int32{rfbCopyRect, rfbTight, rfbZRLE, rfbHextile, rfbRaw,
	rfbQualityLevel + 6, rfbCompressLvl + 2, rfbDesktopSize, rfbLastRect, rfbCursor}

type countingReader struct {
	r io.Reader
	n *atomic.Int64
}

func (c countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n.Add(int64(n))
	return n, err
}

// dialRFB connects to an RFB server through dial, performs the 3.8 handshake (security
// None), sets a 32-bit true-colour pixel format and the encodings, and starts reading
// updates (each followed by the next incremental request) in its own goroutine; close it.
func dialRFB(ctx context.Context, dial func(context.Context) (net.Conn, error)) (*rfbClient, error) {
	conn, err := dial(ctx)
	if err != nil {
		return nil, fmt.Errorf("rfb: connect: %w", err)
	}
	c := &rfbClient{conn: conn, done: make(chan struct{})}
	c.br = bufio.NewReaderSize(countingReader{conn, &c.read}, 64<<10)
	conn.SetDeadline(time.Now().Add(10 * time.Second))
	if err := c.handshake(); err != nil {
		conn.Close()
		return nil, fmt.Errorf("rfb: handshake: %w", err)
	}
	conn.SetDeadline(time.Time{})
	go c.loop() // owned: close ends it
	return c, nil
}

func (c *rfbClient) handshake() error {
	ver := make([]byte, 12)
	if _, err := io.ReadFull(c.br, ver); err != nil {
		return err
	}
	if string(ver[:4]) != "RFB " {
		return fmt.Errorf("not an RFB server: %q", ver)
	}
	if _, err := c.conn.Write([]byte("RFB 003.008\n")); err != nil {
		return err
	}
	n, err := c.br.ReadByte()
	if err != nil {
		return err
	}
	if n == 0 {
		return errors.New("the server refused the connection")
	}
	types := make([]byte, n)
	if _, err := io.ReadFull(c.br, types); err != nil {
		return err
	}
	none := false
	for _, t := range types {
		none = none || t == 1
	}
	if !none {
		return fmt.Errorf("the server offers no security type None (%v)", types)
	}
	if _, err := c.conn.Write([]byte{1, 1}); err != nil { // security None, then ClientInit: shared
		return err
	}
	var res [4]byte
	if _, err := io.ReadFull(c.br, res[:]); err != nil {
		return err
	}
	if binary.BigEndian.Uint32(res[:]) != 0 {
		return errors.New("security handshake failed")
	}
	var init [24]byte
	if _, err := io.ReadFull(c.br, init[:]); err != nil {
		return err
	}
	c.w, c.h = int(binary.BigEndian.Uint16(init[0:])), int(binary.BigEndian.Uint16(init[2:]))
	if _, err := io.CopyN(io.Discard, c.br, int64(binary.BigEndian.Uint32(init[20:]))); err != nil { // the name
		return err
	}
	// SetPixelFormat: 32 bpp, depth 24, little-endian, true colour, 255 per channel, RGB shifts 16/8/0.
	pf := []byte{0, 0, 0, 0, 32, 24, 0, 1, 0, 255, 0, 255, 0, 255, 16, 8, 0, 0, 0, 0}
	enc := make([]byte, 4+4*len(noVNCEncodings))
	enc[0] = 2
	binary.BigEndian.PutUint16(enc[2:], uint16(len(noVNCEncodings)))
	for i, e := range noVNCEncodings {
		binary.BigEndian.PutUint32(enc[4+4*i:], uint32(e))
	}
	if _, err := c.conn.Write(append(pf, enc...)); err != nil {
		return err
	}
	return c.request(false)
}

// request sends a FramebufferUpdateRequest for the whole screen.
func (c *rfbClient) request(incremental bool) error {
	m := []byte{3, 0, 0, 0, 0, 0, 0, 0, 0, 0}
	if incremental {
		m[1] = 1
	}
	binary.BigEndian.PutUint16(m[6:], uint16(c.w))
	binary.BigEndian.PutUint16(m[8:], uint16(c.h))
	c.wmu.Lock()
	defer c.wmu.Unlock()
	_, err := c.conn.Write(m)
	return err
}

func (c *rfbClient) loop() {
	defer close(c.done)
	for {
		t, err := c.br.ReadByte()
		if err == nil {
			err = c.message(t)
		}
		if err != nil {
			c.err = err
			return
		}
	}
}

func (c *rfbClient) message(t byte) error {
	switch t {
	case 0: // FramebufferUpdate
		var h [3]byte
		if _, err := io.ReadFull(c.br, h[:]); err != nil {
			return err
		}
		n := int(binary.BigEndian.Uint16(h[1:]))
		for i := 0; i < n || n == 0xffff; i++ {
			last, err := c.rect()
			if err != nil {
				return fmt.Errorf("rfb: update rectangle %d: %w", i, err)
			}
			if last {
				break
			}
		}
		c.updates.Add(1)
		return c.request(true)
	case 1: // SetColourMapEntries
		var h [5]byte
		if _, err := io.ReadFull(c.br, h[:]); err != nil {
			return err
		}
		return c.skip(6 * int(binary.BigEndian.Uint16(h[3:])))
	case 2: // Bell
		return nil
	case 3: // ServerCutText
		var h [7]byte
		if _, err := io.ReadFull(c.br, h[:]); err != nil {
			return err
		}
		return c.skip(int(binary.BigEndian.Uint32(h[3:])))
	}
	return fmt.Errorf("rfb: unknown server message %d", t)
}

func (c *rfbClient) skip(n int) error {
	_, err := io.CopyN(io.Discard, c.br, int64(n))
	return err
}

// rect reads one rectangle of an update; last is set for a LastRect.
func (c *rfbClient) rect() (last bool, err error) {
	var h [12]byte
	if _, err := io.ReadFull(c.br, h[:]); err != nil {
		return false, err
	}
	w, hh := int(binary.BigEndian.Uint16(h[4:])), int(binary.BigEndian.Uint16(h[6:]))
	enc := int32(binary.BigEndian.Uint32(h[8:]))
	switch enc {
	case rfbRaw:
		return false, c.skip(w * hh * 4)
	case rfbCopyRect:
		return false, c.skip(4)
	case rfbLastRect:
		return true, nil
	case rfbDesktopSize:
		c.w, c.h = w, hh
		return false, nil
	case rfbCursor:
		return false, c.skip(w*hh*4 + (w+7)/8*hh)
	case rfbZRLE:
		var l [4]byte
		if _, err := io.ReadFull(c.br, l[:]); err != nil {
			return false, err
		}
		return false, c.skip(int(binary.BigEndian.Uint32(l[:])))
	case rfbTight:
		c.tight.Add(1)
		return false, c.tightRect(w, hh)
	}
	return false, fmt.Errorf("encoding %d is not followed by this client", enc)
}

// tightRect skips one Tight rectangle (3-byte pixels: 32 bpp, depth 24, 8 bits per channel).
func (c *rfbClient) tightRect(w, h int) error {
	ctl, err := c.br.ReadByte()
	if err != nil {
		return err
	}
	switch ctl >> 4 {
	case 8: // fill
		return c.skip(3)
	case 9: // JPEG
		c.jpegs.Add(1)
		n, err := c.compactLen()
		if err != nil {
			return err
		}
		return c.skip(n)
	}
	if ctl&0x80 != 0 {
		return fmt.Errorf("tight: unknown compression control %#x", ctl)
	}
	size := w * h * 3 // copy filter
	if ctl&0x40 != 0 {
		filter, err := c.br.ReadByte()
		if err != nil {
			return err
		}
		switch filter {
		case 0, 2: // copy, gradient
		case 1: // palette
			nc, err := c.br.ReadByte()
			if err != nil {
				return err
			}
			colours := int(nc) + 1
			if err := c.skip(3 * colours); err != nil {
				return err
			}
			if colours == 2 {
				size = (w + 7) / 8 * h
			} else {
				size = w * h
			}
		default:
			return fmt.Errorf("tight: unknown filter %d", filter)
		}
	}
	if size < 12 {
		return c.skip(size) // small data goes uncompressed
	}
	n, err := c.compactLen()
	if err != nil {
		return err
	}
	return c.skip(n)
}

// compactLen reads Tight's 1–3 byte length.
func (c *rfbClient) compactLen() (int, error) {
	n := 0
	for i := 0; i < 3; i++ {
		b, err := c.br.ReadByte()
		if err != nil {
			return 0, err
		}
		if i == 2 {
			return n | int(b)<<14, nil
		}
		n |= int(b&0x7f) << (7 * i)
		if b&0x80 == 0 {
			return n, nil
		}
	}
	return n, nil
}

// alive reports why the reader ended, or nil while it runs.
func (c *rfbClient) alive() error {
	select {
	case <-c.done:
		if c.err == nil {
			return errors.New("rfb: connection closed")
		}
		return c.err
	default:
		return nil
	}
}

func (c *rfbClient) close() {
	c.conn.Close()
	<-c.done
}
