//go:build linux

package main

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"

	"cubicle/images/guest/wire"
	"cubicle/images/guest/x11"
)

// epochShift splits a frame id into the X connection's epoch (high bits) and the screen
// generation within it, so ids keep growing across X server restarts.
const epochShift = 40

// screen holds the current X connection. The supervisor replaces it when the X server
// restarts; operations in between fail with wire.Unavailable.
type screen struct {
	log *slog.Logger

	mu    sync.Mutex // guards disp, epoch, ready
	disp  *x11.Display
	epoch uint64
	ready chan struct{} // closed when a display is set; replaced when it is cleared

	encMu sync.Mutex // guards enc and last
	enc   encoder
	last  cached // the last frame encoded, served again while the screen is unchanged
}

// cached is an encoded frame with what it was made from.
type cached struct {
	frame wire.Frame
	epoch uint64
	gen   uint64
	opts  wire.ScreenshotOptions
}

func newScreen(log *slog.Logger) *screen {
	return &screen{log: log, ready: make(chan struct{})}
}

// set installs a new display (nil clears it) and closes the previous one.
func (s *screen) set(d *x11.Display) {
	s.mu.Lock()
	old := s.disp
	s.disp = d
	if d != nil {
		s.epoch++
		close(s.ready)
	} else {
		select {
		case <-s.ready:
			s.ready = make(chan struct{})
		default:
		}
	}
	s.mu.Unlock()
	if old != nil && old != d {
		old.Close()
	}
}

// get returns the current display, waiting briefly (up to 2 s or ctx) for one to appear.
func (s *screen) get(ctx context.Context) (*x11.Display, uint64, error) {
	s.mu.Lock()
	d, ep, ready := s.disp, s.epoch, s.ready
	s.mu.Unlock()
	if d != nil {
		select {
		case <-d.Done():
		default:
			return d, ep, nil
		}
	}
	t := time.NewTimer(2 * time.Second)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil, 0, ctx.Err()
		case <-t.C:
			return nil, 0, wire.Unavailable("the X server is not running (it is being restarted); try again in a moment")
		case <-ready:
		case <-time.After(50 * time.Millisecond):
		}
		s.mu.Lock()
		d, ep, ready = s.disp, s.epoch, s.ready
		s.mu.Unlock()
		if d != nil {
			select {
			case <-d.Done():
			default:
				return d, ep, nil
			}
		}
	}
}

// unavailable turns an error of a dead connection into wire.Unavailable.
func unavailable(err error) error {
	if errors.Is(err, x11.ErrClosed) {
		return wire.Unavailable("the X server went away (it is being restarted); try again in a moment")
	}
	return err
}

// shoot captures and encodes one frame.
func (s *screen) shoot(ctx context.Context, o wire.ScreenshotOptions) (wire.Frame, error) {
	o, err := normalize(o)
	if err != nil {
		return wire.Frame{}, err
	}
	d, ep, err := s.get(ctx)
	if err != nil {
		return wire.Frame{}, err
	}
	// Make sure damage from drawing that already happened has been counted; then an
	// unchanged generation means unchanged pixels and the last encoding can be reused (a
	// second viewer, or a screenshot right after a settle wait, costs no encode).
	if err := d.SyncEvents(ctx); err != nil {
		if ctx.Err() != nil {
			return wire.Frame{}, ctx.Err()
		}
		return wire.Frame{}, unavailable(err)
	}
	s.encMu.Lock()
	defer s.encMu.Unlock()
	if gen, _, _ := d.Generation(); d.UsesDamage() && s.last.frame.Data != nil && s.last.epoch == ep && s.last.gen == gen && s.last.opts == o {
		return s.last.frame, nil
	}
	var (
		gen      uint64
		captured time.Time
		data     []byte
		w, h     int
	)
	sw, sh := d.Size()
	err = d.WithCapture(func(raw []byte, g uint64) error {
		gen, captured = g, time.Now()
		var err error
		data, w, h, err = s.enc.encode(nil, raw, sw, sh, o) // straight from the shared segment
		return err
	})
	if err != nil {
		return wire.Frame{}, unavailable(err)
	}
	f := wire.Frame{ID: ep<<epochShift | gen, Width: w, Height: h, Format: o.Format, Data: data, Captured: captured}
	s.last = cached{frame: f, epoch: ep, gen: gen, opts: o}
	return f, nil
}

// next waits for a frame newer than after (a frame id) and returns it.
func (s *screen) next(ctx context.Context, after uint64, o wire.ScreenshotOptions) (wire.Frame, error) {
	if _, err := normalize(o); err != nil {
		return wire.Frame{}, err
	}
	for {
		d, ep, err := s.get(ctx)
		if err != nil {
			return wire.Frame{}, err
		}
		if after != 0 && after>>epochShift == ep {
			gen := after & (1<<epochShift - 1)
			if _, err := d.WaitChange(ctx, gen); err != nil {
				if ctx.Err() != nil {
					return wire.Frame{}, ctx.Err()
				}
				continue // the display went away: wait for the next one
			}
		}
		f, err := s.shoot(ctx, o)
		if err != nil && wire.CodeOf(err) == wire.CodeUnavailable && ctx.Err() == nil {
			continue
		}
		return f, err
	}
}

// settle waits until the screen is quiet and returns a frame.
func (s *screen) settle(ctx context.Context, o wire.SettleOptions) (wire.Frame, error) {
	if o.Quiet <= 0 {
		o.Quiet = 300 * time.Millisecond
	}
	if o.Max <= 0 {
		o.Max = 5 * time.Second
	}
	if o.Quiet > time.Minute || o.Max > 5*time.Minute {
		return wire.Frame{}, wire.Invalid("settle wait too long (quiet %v, max %v; limits 1m and 5m)", o.Quiet, o.Max)
	}
	if _, err := normalize(o.Screenshot); err != nil {
		return wire.Frame{}, err
	}
	d, _, err := s.get(ctx)
	if err != nil {
		return wire.Frame{}, err
	}
	if _, _, err := d.WaitQuiet(ctx, o.Quiet, o.Max); err != nil {
		if ctx.Err() != nil {
			return wire.Frame{}, ctx.Err()
		}
		return wire.Frame{}, unavailable(err)
	}
	return s.shoot(ctx, o.Screenshot)
}

// input performs one input action.
func (s *screen) input(ctx context.Context, in wire.Input) error {
	d, _, err := s.get(ctx)
	if err != nil {
		return err
	}
	w, h := d.Size()
	inside := func(x, y int) error {
		if x < 0 || y < 0 || x >= w || y >= h {
			return wire.Invalid("point %d,%d is outside the %dx%d screen", x, y, w, h)
		}
		return nil
	}
	button := in.Button
	if button == 0 {
		button = 1
	}
	if button < 1 || button > 9 {
		return wire.Invalid("mouse button %d is not 1–9", in.Button)
	}
	switch in.Action {
	case "move", "click", "double_click", "right_click", "middle_click", "mouse_down", "mouse_up", "drag", "scroll":
		if err := inside(in.X, in.Y); err != nil {
			return err
		}
	}
	switch in.Action {
	case "move":
		err = d.Move(in.X, in.Y)
	case "click":
		err = d.Click(in.X, in.Y, button, 1)
	case "double_click":
		err = d.Click(in.X, in.Y, button, 2)
	case "right_click":
		err = d.Click(in.X, in.Y, 3, 1)
	case "middle_click":
		err = d.Click(in.X, in.Y, 2, 1)
	case "mouse_down":
		err = d.Button(in.X, in.Y, button, true)
	case "mouse_up":
		err = d.Button(in.X, in.Y, button, false)
	case "drag":
		if err := inside(in.ToX, in.ToY); err != nil {
			return err
		}
		err = d.Drag(in.X, in.Y, in.ToX, in.ToY, button)
	case "scroll":
		if in.DeltaX == 0 && in.DeltaY == 0 {
			return wire.Invalid("scroll needs delta_x or delta_y")
		}
		if abs(in.DeltaX) > 100 || abs(in.DeltaY) > 100 {
			return wire.Invalid("scroll of %d,%d clicks is over the limit of 100", in.DeltaX, in.DeltaY)
		}
		err = d.Scroll(in.X, in.Y, in.DeltaX, in.DeltaY)
	case "key":
		if in.Keys == "" {
			return wire.Invalid("key needs keys, e.g. \"ctrl+l\" or \"Return\"")
		}
		err = d.Keys(in.Keys)
		var bad x11.ErrBadKey
		if errors.As(err, &bad) {
			return wire.Invalid("%s", bad.Error())
		}
	case "type":
		if len(in.Text) > 64<<10 {
			return wire.Invalid("text of %d bytes is over the 64 KiB limit", len(in.Text))
		}
		err = d.Type(in.Text)
	default:
		return wire.Invalid("unknown input action %q", in.Action)
	}
	return unavailable(err)
}

func abs(n int) int {
	if n < 0 {
		return -n
	}
	return n
}
