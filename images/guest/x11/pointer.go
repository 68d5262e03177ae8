package x11

import (
	"context"
	"fmt"
	"time"

	"github.com/jezek/xgb/xfixes"
	"github.com/jezek/xgb/xproto"
)

// Pointer is where the pointer is and which cursor image it shows.
type Pointer struct {
	X, Y int
	// Serial is the XFIXES serial of the cursor image shown; it changes whenever the image
	// does. 0 when the server has no XFIXES (then no image is known either).
	Serial uint32
}

// Cursor is one cursor image: premultiplied ARGB pixels (0xAARRGGBB, row-major), its size
// and its hot spot (the pixel that is "the pointer's position").
type Cursor struct {
	Serial        uint32
	Width, Height int
	HotX, HotY    int
	Pixels        []uint32
}

// initCursor asks XFIXES for cursor-change notifications and reads the current cursor. The
// caller has initialised XFIXES.
func (d *Display) initCursor() error {
	err := xfixes.SelectCursorInputChecked(d.conn, d.root, xfixes.CursorNotifyMaskDisplayCursor).Check()
	if err != nil {
		return err
	}
	r, err := xfixes.GetCursorImage(d.conn).Reply()
	if err != nil {
		return err
	}
	d.ptr = Pointer{X: int(r.X), Y: int(r.Y), Serial: r.CursorSerial}
	d.cursorOK = true
	return nil
}

// UsesCursor reports whether the cursor image and its changes come from XFIXES.
func (d *Display) UsesCursor() bool { return d.cursorOK }

// PointerState returns the pointer as last observed, its generation (bumped on every move
// or change of image) and a channel closed at the next change. It asks the server nothing;
// UpdatePointer does.
func (d *Display) PointerState() (p Pointer, gen uint64, next <-chan struct{}) {
	d.ptrMu.Lock()
	defer d.ptrMu.Unlock()
	return d.ptr, d.ptrGen, d.ptrChanged
}

// setPointer records p, bumping the generation when it differs. Callers pass the serial to
// keep (position updates) or the position to keep (shape notifications) from the current state.
func (d *Display) setPointer(update func(p *Pointer)) {
	d.ptrMu.Lock()
	defer d.ptrMu.Unlock()
	p := d.ptr
	update(&p)
	if p == d.ptr {
		return
	}
	d.ptr = p
	d.ptrGen++
	close(d.ptrChanged)
	d.ptrChanged = make(chan struct{})
}

// UpdatePointer asks the server where the pointer is (one round trip) and records it. The
// driver calls it after every input action, so a move is reported without waiting for a poll.
func (d *Display) UpdatePointer() error {
	if err := d.alive(); err != nil {
		return err
	}
	r, err := xproto.QueryPointer(d.conn, d.root).Reply()
	if err != nil {
		return fmt.Errorf("x11: query pointer: %w", err)
	}
	d.setPointer(func(p *Pointer) { p.X, p.Y = int(r.RootX), int(r.RootY) })
	return nil
}

// WaitPointer waits until the pointer generation exceeds after and returns the state. While
// it waits it polls the position every poll (pointer motion by programs other than the
// driver raises no event we could select on the root window alone); image changes arrive as
// XFIXES events at once.
func (d *Display) WaitPointer(ctx context.Context, after uint64, poll time.Duration) (Pointer, uint64, error) {
	if poll <= 0 {
		poll = 50 * time.Millisecond
	}
	t := time.NewTimer(0)
	defer t.Stop()
	for {
		p, gen, next := d.PointerState()
		if gen > after {
			return p, gen, nil
		}
		select {
		case <-ctx.Done():
			return p, gen, ctx.Err()
		case <-d.done:
			return p, gen, ErrClosed
		case <-next:
		case <-t.C:
			if err := d.UpdatePointer(); err != nil {
				return p, gen, err
			}
			t.Reset(poll)
		}
	}
}

// CursorImage returns the cursor image shown now. Images are cached by serial, so asking
// again while it has not changed costs nothing; the result must not be modified.
func (d *Display) CursorImage() (*Cursor, error) {
	if !d.cursorOK {
		return nil, fmt.Errorf("x11: the X server has no XFIXES cursor support")
	}
	if err := d.alive(); err != nil {
		return nil, err
	}
	p, _, _ := d.PointerState()
	d.curMu.Lock()
	c := d.cursor
	d.curMu.Unlock()
	if c != nil && c.Serial == p.Serial {
		return c, nil
	}
	r, err := xfixes.GetCursorImage(d.conn).Reply()
	if err != nil {
		return nil, fmt.Errorf("x11: cursor image: %w", err)
	}
	n := int(r.Width) * int(r.Height)
	if len(r.CursorImage) < n {
		return nil, fmt.Errorf("x11: cursor image has %d pixels for %dx%d", len(r.CursorImage), r.Width, r.Height)
	}
	c = &Cursor{Serial: r.CursorSerial, Width: int(r.Width), Height: int(r.Height), HotX: int(r.Xhot), HotY: int(r.Yhot),
		Pixels: append([]uint32(nil), r.CursorImage[:n]...)}
	d.curMu.Lock()
	d.cursor = c
	d.curMu.Unlock()
	d.setPointer(func(p *Pointer) { p.X, p.Y, p.Serial = int(r.X), int(r.Y), r.CursorSerial })
	return c, nil
}

// Draw blends the cursor over a 32-bit BGRX image (stride bytes per row, w×h pixels) with
// its hot spot at (x, y), as the screen shows it. Parts outside the image are clipped.
func (c *Cursor) Draw(bgrx []byte, stride, w, h, x, y int) {
	if c == nil {
		return
	}
	x0, y0 := x-c.HotX, y-c.HotY
	for j := 0; j < c.Height; j++ {
		py := y0 + j
		if py < 0 || py >= h {
			continue
		}
		row := bgrx[py*stride:]
		for i := 0; i < c.Width; i++ {
			px := x0 + i
			if px < 0 || px >= w {
				continue
			}
			s := c.Pixels[j*c.Width+i]
			a := s >> 24
			if a == 0 {
				continue
			}
			o := row[px*4 : px*4+4 : px*4+4]
			inv := 255 - a
			// Premultiplied "over": out = src + dst × (1 − α).
			o[0] = uint8(min(255, s&0xff+(uint32(o[0])*inv+127)/255))
			o[1] = uint8(min(255, (s>>8)&0xff+(uint32(o[1])*inv+127)/255))
			o[2] = uint8(min(255, (s>>16)&0xff+(uint32(o[2])*inv+127)/255))
		}
	}
}

// Bounds is the rectangle the cursor covers with its hot spot at (x, y).
func (c *Cursor) Bounds(x, y int) (x0, y0, x1, y1 int) {
	return x - c.HotX, y - c.HotY, x - c.HotX + c.Width, y - c.HotY + c.Height
}
