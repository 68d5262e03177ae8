//go:build linux

package main

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"sync/atomic"
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
	// waitDrawn: screenshots wait until the desktop session has drawn (a session is
	// configured); else the screen counts as drawn at once.
	waitDrawn bool
	drawnWait time.Duration // how long one screenshot waits for the first drawing

	mu         sync.Mutex // guards disp, epoch, ready, setAt, drawnEpoch
	disp       *x11.Display
	epoch      uint64
	ready      chan struct{} // closed when a display is set; replaced when it is cleared
	setAt      time.Time     // when disp was set
	drawnEpoch uint64        // the epoch whose screen has been drawn (0: none yet)

	display  string     // the X display's name (resize opens a new connection to it)
	resizeMu sync.Mutex // one resize at a time

	lastInput atomic.Int64 // unix nanoseconds when the last input action was performed
	cursor    cursorPNG    // the last cursor image sent, as PNG

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
	ptr   x11.Pointer // where the pointer was drawn (when it was)
}

func newScreen(log *slog.Logger, waitDrawn bool, display string) *screen {
	return &screen{log: log, waitDrawn: waitDrawn, drawnWait: drawnWait, ready: make(chan struct{}), display: display}
}

// set installs a new display (nil clears it) and closes the previous one.
func (s *screen) set(d *x11.Display) {
	s.mu.Lock()
	old := s.disp
	s.disp = d
	if d != nil {
		s.epoch++
		s.setAt = time.Now()
		select {
		case <-s.ready: // a display replaced by another (a resize): ready stays closed
		default:
			close(s.ready)
		}
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

// shoot captures and encodes one frame, with the pointer drawn in unless o.NoPointer or
// stream (frame streams never draw it: a pointer move must not re-encode the screen). It
// waits until the desktop has been drawn.
func (s *screen) shoot(ctx context.Context, o wire.ScreenshotOptions, stream bool) (wire.Frame, error) {
	o, err := normalize(o)
	if err != nil {
		return wire.Frame{}, err
	}
	if err := s.drawn(ctx); err != nil {
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
	var (
		cur *x11.Cursor
		ptr x11.Pointer
	)
	withPointer := !o.NoPointer && !stream && d.UsesCursor()
	if withPointer {
		if err := d.UpdatePointer(); err != nil {
			return wire.Frame{}, unavailable(err)
		}
		if cur, err = d.CursorImage(); err != nil {
			return wire.Frame{}, unavailable(err)
		}
		ptr, _, _ = d.PointerState()
	}
	s.encMu.Lock()
	defer s.encMu.Unlock()
	if gen, _, _ := d.Generation(); d.UsesDamage() && s.last.frame.Data != nil && s.last.epoch == ep && s.last.gen == gen &&
		s.last.opts == o && (!withPointer || s.last.ptr == ptr) && withPointer == !s.last.opts.NoPointer {
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
		if withPointer {
			cur.Draw(raw, sw*4, sw, sh, ptr.X, ptr.Y) // our own copy of the pixels (the shared segment)
		}
		var err error
		data, w, h, err = s.enc.encode(nil, raw, sw, sh, o) // straight from the shared segment
		return err
	})
	if err != nil {
		return wire.Frame{}, unavailable(err)
	}
	f := wire.Frame{ID: ep<<epochShift | gen, Width: w, Height: h, Format: o.Format, Data: data, Captured: captured}
	if !withPointer {
		o.NoPointer = true // the cache key says what the image shows
	}
	s.last = cached{frame: f, epoch: ep, gen: gen, opts: o, ptr: ptr}
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
		f, err := s.shoot(ctx, o, true)
		if err != nil && wire.CodeOf(err) == wire.CodeUnavailable && ctx.Err() == nil {
			continue
		}
		return f, err
	}
}

// settle waits until the screen is quiet and returns a frame: with o.Quiet, until nothing
// changed for that long; else until it settled by the adaptive rules of x11.WaitSettled.
func (s *screen) settle(ctx context.Context, o wire.SettleOptions) (wire.Frame, error) {
	if o.Max <= 0 {
		o.Max = 5 * time.Second
	}
	if o.Quiet < 0 || o.React < 0 || o.MinQuiet < 0 || o.MaxQuiet < 0 {
		return wire.Frame{}, wire.Invalid("settle durations must not be negative")
	}
	if o.Quiet > time.Minute || o.Max > 5*time.Minute || o.React > time.Minute || o.MinQuiet > time.Minute || o.MaxQuiet > time.Minute {
		return wire.Frame{}, wire.Invalid("settle wait too long (quiet %v, max %v; limits 1m and 5m)", max(o.Quiet, o.React, o.MinQuiet, o.MaxQuiet), o.Max)
	}
	if _, err := normalize(o.Screenshot); err != nil {
		return wire.Frame{}, err
	}
	d, _, err := s.get(ctx)
	if err != nil {
		return wire.Frame{}, err
	}
	// Changes that happened before the request have been counted, so they do not look like
	// an effect of the action the caller just performed.
	if err := d.SyncEvents(ctx); err != nil {
		if ctx.Err() != nil {
			return wire.Frame{}, ctx.Err()
		}
		return wire.Frame{}, unavailable(err)
	}
	var rep wire.SettleReport
	if o.Quiet > 0 {
		start := time.Now()
		_, settled, err := d.WaitQuiet(ctx, o.Quiet, o.Max)
		if err != nil {
			if ctx.Err() != nil {
				return wire.Frame{}, ctx.Err()
			}
			return wire.Frame{}, unavailable(err)
		}
		rep = wire.SettleReport{Settled: settled, Changes: len(d.ChangesSince(start)), Quiet: o.Quiet, Waited: time.Since(start)}
	} else {
		// The effect of an input awaited is counted from the input itself when it came just
		// before (the agent's tools act, then ask to settle): an application that redrew at
		// once and will draw more in a moment must not look quiet.
		var since time.Time
		if at := time.Unix(0, s.lastInput.Load()); time.Since(at) < time.Second {
			since = at
		}
		// Busy: the desktop's programs used CPU since the request (≥ 20 ms of it) or a
		// program started since — a browser navigating, a program starting — so a first
		// change may still come. Once seen, it holds for the rest of the wait (the extension
		// is bounded anyway).
		t0, p0 := activity()
		seen := false
		busy := func() bool {
			if !seen {
				t, p := activity()
				seen = int64(t-t0) >= 2 || started(p0, p)
			}
			return seen
		}
		r, err := d.WaitSettled(ctx, x11.SettlePolicy{React: o.React, MinQuiet: o.MinQuiet, MaxQuiet: o.MaxQuiet, Max: o.Max,
			Since: since, Busy: busy})
		if err != nil {
			if ctx.Err() != nil {
				return wire.Frame{}, ctx.Err()
			}
			return wire.Frame{}, unavailable(err)
		}
		rep = wire.SettleReport{Settled: r.Settled, Changes: r.Changes, Quiet: r.Quiet, Waited: r.Waited}
	}
	f, err := s.shoot(ctx, o.Screenshot, false)
	if err != nil {
		return f, err
	}
	f.Settle = &rep
	return f, nil
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
	started := time.Now()
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
	if err == nil {
		s.lastInput.Store(started.UnixNano())
		// Pointer watchers learn of a move now rather than at their next poll.
		err = d.UpdatePointer()
	}
	return unavailable(err)
}

func abs(n int) int {
	if n < 0 {
		return -n
	}
	return n
}
