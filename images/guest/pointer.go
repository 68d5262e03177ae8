//go:build linux

package main

import (
	"bytes"
	"context"
	"image"
	"image/png"
	"sync"
	"time"

	"cubicle/images/guest/wire"
	"cubicle/images/guest/x11"
)

// cursorPNG caches the PNG of the last cursor image sent.
type cursorPNG struct {
	mu     sync.Mutex
	serial uint32
	data   []byte
}

// nextPointer answers next_pointer: it waits until the pointer moved or changed its image
// since a.After and returns where it is, with the image as PNG when the host's (a.Shape) is
// not the current one. Generations carry the X connection's epoch in their high bits, so an
// After from before an X server restart is answered at once.
func (s *screen) nextPointer(ctx context.Context, a wire.PointerArgs) (wire.PointerState, []byte, error) {
	poll := a.Poll
	if poll == 0 {
		poll = 33 * time.Millisecond
	}
	if poll < 8*time.Millisecond || poll > 10*time.Second {
		return wire.PointerState{}, nil, wire.Invalid("pointer poll interval %v is outside 8ms–10s", poll)
	}
	d, ep, err := s.get(ctx)
	if err != nil {
		return wire.PointerState{}, nil, err
	}
	var (
		p   x11.Pointer
		gen uint64
	)
	if a.After == 0 || a.After>>epochShift != ep {
		// A first request, or one from before an X server restart: the state now.
		err = d.UpdatePointer()
		p, gen, _ = d.PointerState()
	} else {
		p, gen, err = d.WaitPointer(ctx, a.After&(1<<epochShift-1), poll)
	}
	if err != nil {
		if ctx.Err() != nil {
			return wire.PointerState{}, nil, ctx.Err()
		}
		return wire.PointerState{}, nil, unavailable(err)
	}
	st := wire.PointerState{Gen: ep<<epochShift | gen, X: p.X, Y: p.Y, Serial: p.Serial}
	if !d.UsesCursor() || p.Serial == a.Shape {
		return st, nil, nil
	}
	cur, err := d.CursorImage()
	if err != nil {
		return wire.PointerState{}, nil, unavailable(err)
	}
	data, err := s.cursor.encode(cur)
	if err != nil {
		return wire.PointerState{}, nil, err
	}
	st.Serial = cur.Serial
	st.Shape = &wire.CursorShape{Width: cur.Width, Height: cur.Height, HotX: cur.HotX, HotY: cur.HotY}
	return st, data, nil
}

// encode returns the PNG of c (straight alpha), from the cache when c was the last one.
func (cp *cursorPNG) encode(c *x11.Cursor) ([]byte, error) {
	cp.mu.Lock()
	defer cp.mu.Unlock()
	if cp.data != nil && cp.serial == c.Serial {
		return cp.data, nil
	}
	img := image.NewNRGBA(image.Rect(0, 0, max(c.Width, 1), max(c.Height, 1)))
	for i, px := range c.Pixels {
		a := px >> 24
		o := img.Pix[i*4 : i*4+4 : i*4+4]
		o[3] = uint8(a)
		if a == 0 {
			continue
		}
		// Undo the premultiplication.
		o[0] = uint8(min(255, (((px>>16)&0xff)*255+a/2)/a))
		o[1] = uint8(min(255, (((px>>8)&0xff)*255+a/2)/a))
		o[2] = uint8(min(255, ((px&0xff)*255+a/2)/a))
	}
	var buf bytes.Buffer
	if err := (&png.Encoder{CompressionLevel: png.BestSpeed}).Encode(&buf, img); err != nil {
		return nil, wire.Errorf(wire.CodeInternal, "encode the cursor image: %v", err)
	}
	cp.serial, cp.data = c.Serial, buf.Bytes()
	return cp.data, nil
}
