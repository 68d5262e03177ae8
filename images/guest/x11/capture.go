package x11

import (
	"encoding/binary"
	"fmt"
	"image"

	"github.com/jezek/xgb"
	"github.com/jezek/xgb/shm"
	"github.com/jezek/xgb/xproto"
)

// capturer reads the root window's pixels: through one persistent MIT-SHM segment when the
// server supports it (the pixels arrive in our memory without crossing the socket), else
// with GetImage. The owner serialises calls.
type capturer struct {
	root   xproto.Window
	w, h   int
	shm    bool
	seg    shm.Seg
	shmID  int
	shmBuf []byte
}

func (c *capturer) init(conn *xgb.Conn, root xproto.Window, w, h int) error {
	c.root, c.w, c.h = root, w, h
	if err := c.initSHM(conn); err != nil {
		c.shm = false // GetImage still works; only slower
	}
	// Probe once so a broken setup fails at Open, not at the first screenshot.
	if _, err := c.grab(conn); err != nil {
		return fmt.Errorf("x11: capture: %w", err)
	}
	return nil
}

func (c *capturer) initSHM(conn *xgb.Conn) error {
	if err := shm.Init(conn); err != nil {
		return err
	}
	if _, err := shm.QueryVersion(conn).Reply(); err != nil {
		return err
	}
	size := c.w * c.h * 4
	id, err := shmCreate(size)
	if err != nil {
		return err
	}
	buf, err := shmAttach(id)
	if err != nil {
		shmRemove(id)
		return err
	}
	seg, err := shm.NewSegId(conn)
	if err == nil {
		err = shm.AttachChecked(conn, seg, uint32(id), false).Check()
	}
	// Once the server has attached, mark the segment for removal: it disappears when both
	// sides detach, even if we crash.
	shmRemove(id)
	if err != nil {
		shmDetach(buf)
		return err
	}
	c.shm, c.seg, c.shmID, c.shmBuf = true, seg, id, buf
	return nil
}

func (c *capturer) release(conn *xgb.Conn) {
	if c.shm {
		shm.Detach(conn, c.seg)
		shmDetach(c.shmBuf)
		c.shm, c.shmBuf = false, nil
	}
}

// grab returns the screen as 32-bit BGRX rows (w*4 bytes each). The slice is only valid
// until the next grab.
func (c *capturer) grab(conn *xgb.Conn) ([]byte, error) {
	if c.shm {
		_, err := shm.GetImage(conn, xproto.Drawable(c.root), 0, 0, uint16(c.w), uint16(c.h),
			0xffffffff, xproto.ImageFormatZPixmap, c.seg, 0).Reply()
		if err != nil {
			return nil, err
		}
		return c.shmBuf[:c.w*c.h*4], nil
	}
	r, err := xproto.GetImage(conn, xproto.ImageFormatZPixmap, xproto.Drawable(c.root), 0, 0,
		uint16(c.w), uint16(c.h), 0xffffffff).Reply()
	if err != nil {
		return nil, err
	}
	if len(r.Data) < c.w*c.h*4 {
		return nil, fmt.Errorf("short image: %d bytes for %dx%d (only 24/32-bit screens are supported)", len(r.Data), c.w, c.h)
	}
	return r.Data, nil
}

// WithCapture captures the screen and calls fn with its BGRX pixels (w*4 bytes per row) and
// the generation observed just before the capture. With MIT-SHM the pixels are the shared
// segment itself — no copy at all — so fn must not keep them, and captures wait while fn
// runs.
func (d *Display) WithCapture(fn func(bgrx []byte, gen uint64) error) error {
	if err := d.alive(); err != nil {
		return err
	}
	gen, _, _ := d.Generation()
	d.capMu.Lock()
	defer d.capMu.Unlock()
	raw, err := d.cap.grab(d.conn)
	if err != nil {
		return fmt.Errorf("x11: capture: %w", err)
	}
	return fn(raw, gen)
}

// CaptureRaw copies the screen's BGRX pixels into dst (grown as needed) and returns it
// with the generation observed just before the capture.
func (d *Display) CaptureRaw(dst []byte) ([]byte, uint64, error) {
	if err := d.alive(); err != nil {
		return dst, 0, err
	}
	gen, _, _ := d.Generation()
	d.capMu.Lock()
	defer d.capMu.Unlock()
	raw, err := d.cap.grab(d.conn)
	if err != nil {
		return dst, 0, fmt.Errorf("x11: capture: %w", err)
	}
	dst = append(dst[:0], raw...)
	return dst, gen, nil
}

// Capture returns the screen as an RGBA image, reusing img's pixel buffer when it has the
// right size, with the generation observed just before the capture.
func (d *Display) Capture(img *image.RGBA) (*image.RGBA, uint64, error) {
	if err := d.alive(); err != nil {
		return img, 0, err
	}
	if img == nil || img.Rect.Dx() != d.width || img.Rect.Dy() != d.height {
		img = image.NewRGBA(image.Rect(0, 0, d.width, d.height))
	}
	gen, _, _ := d.Generation()
	d.capMu.Lock()
	defer d.capMu.Unlock()
	raw, err := d.cap.grab(d.conn)
	if err != nil {
		return img, 0, fmt.Errorf("x11: capture: %w", err)
	}
	bgrxToRGBA(img.Pix, raw)
	return img, gen, nil
}

// bgrxToRGBA swaps blue and red and sets alpha opaque, a 32-bit word at a time.
func bgrxToRGBA(dst, src []byte) {
	n := min(len(dst), len(src)) / 4
	for i := 0; i < n; i++ {
		v := binary.LittleEndian.Uint32(src[4*i:])
		binary.LittleEndian.PutUint32(dst[4*i:], 0xff000000|v&0x0000ff00|(v>>16)&0xff|(v&0xff)<<16)
	}
}
