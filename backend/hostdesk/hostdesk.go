// Package hostdesk is the execution node's own desktop: the screen of the machine Cubicle
// runs on (captured with github.com/kbinani/screenshot, per display) and its input, sent
// through the platform's own API — XTEST on Linux/X11 (the in-guest driver's pure-Go xgb code,
// images/guest/x11), CGEvent on macOS (cgo; the only cgo in the package), SendInput on Windows
// (user32 through golang.org/x/sys/windows, no cgo). It backs the host desktop tools of a
// "host" computer (host_screenshot, host_click, host_type, host_key, host_scroll) and the live
// host screen of the computer panel.
//
// Whether the operating system allows it is [Desktop.Permission]: on Linux a reachable X
// display (with XTEST and Xinerama), on macOS the Screen Recording and Accessibility
// permissions (CGPreflightScreenCaptureAccess, AXIsProcessTrusted), on Windows an interactive
// desktop. Whether Cubicle may use it at all is the admin's node setting "Host screen
// control", decided by the computer gate, not here.
//
// A Desktop is safe for concurrent use: input actions are serialised (their events never
// interleave), captures run in parallel. It owns no goroutine; Close releases the input
// connection.
package hostdesk

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"image"
	"image/jpeg"
	"image/png"
	"log/slog"
	"sync"
	"time"

	"github.com/kbinani/screenshot"

	"cubicle/backend/computer"
	"cubicle/backend/fault"
	"cubicle/backend/guest"
)

// Display is one monitor of the host. X and Y are its origin relative to the primary display.
type Display struct {
	Index   int  `json:"index"`
	X       int  `json:"x"`
	Y       int  `json:"y"`
	Width   int  `json:"width"`
	Height  int  `json:"height"`
	Primary bool `json:"primary"`
}

// injector sends input to the host's display in global coordinates; one per platform.
// Calls are serialised by the Desktop.
type injector interface {
	move(x, y int) error
	click(x, y, button, count int) error
	button(x, y, button int, down bool) error
	drag(x, y, toX, toY, button int) error
	scroll(x, y, dx, dy int) error
	keys(spec string) error
	typeText(text string) error
	close() error
}

// Desktop is the host's screen and input.
type Desktop struct {
	log *slog.Logger

	inMu sync.Mutex // serialises input and guards in
	in   injector   // opened on first use, reopened after it failed

	genMu sync.Mutex
	gen   uint64 // a frame counter for screenshot ids
}

// New returns the host desktop. Nothing is opened until it is used.
func New(log *slog.Logger) *Desktop {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	quietX11()
	return &Desktop{log: log}
}

// Permission reports whether the operating system lets this process see the screen and send
// input, and if not, what is missing and how to grant it.
func (d *Desktop) Permission() computer.Permission { return permission() }

// Displays lists the host's displays; the primary one is index 0.
func (d *Desktop) Displays() ([]Display, error) {
	if p := permission(); !p.Granted {
		return nil, fault.Unavailable("the host's screen cannot be used: %s; %s", p.Missing, p.HowToGrant)
	}
	n := screenshot.NumActiveDisplays()
	if n <= 0 {
		return nil, fault.Unavailable("the host reports no display (on Linux the X server needs the Xinerama extension)")
	}
	out := make([]Display, 0, n)
	for i := 0; i < n; i++ {
		r := screenshot.GetDisplayBounds(i)
		out = append(out, Display{Index: i, X: r.Min.X, Y: r.Min.Y, Width: r.Dx(), Height: r.Dy(), Primary: i == 0})
	}
	return out, nil
}

func (d *Desktop) display(index int) (Display, error) {
	ds, err := d.Displays()
	if err != nil {
		return Display{}, err
	}
	if index < 0 || index >= len(ds) {
		return Display{}, fault.Invalid("display %d does not exist: the host has %d display(s), numbered from 0", index, len(ds))
	}
	return ds[index], nil
}

// Screenshot captures display index and encodes it as o asks (JPEG by default, PNG, scaled
// down to o.MaxWidth).
func (d *Desktop) Screenshot(ctx context.Context, index int, o guest.ScreenshotOptions) (guest.Frame, error) {
	if err := ctx.Err(); err != nil {
		return guest.Frame{}, err
	}
	ds, err := d.display(index)
	if err != nil {
		return guest.Frame{}, err
	}
	img, err := screenshot.CaptureRect(image.Rect(ds.X, ds.Y, ds.X+ds.Width, ds.Y+ds.Height))
	if err != nil {
		return guest.Frame{}, fault.Unavailable("capture the host's display %d: %v", index, err)
	}
	d.genMu.Lock()
	d.gen++
	id := d.gen
	d.genMu.Unlock()
	return encode(img, o, id)
}

// encode turns a capture into a frame.
func encode(img *image.RGBA, o guest.ScreenshotOptions, id uint64) (guest.Frame, error) {
	var src image.Image = img
	if o.MaxWidth > 0 && img.Rect.Dx() > o.MaxWidth {
		src = shrink(img, o.MaxWidth)
	}
	var buf bytes.Buffer
	f := guest.Frame{ID: id, Width: src.Bounds().Dx(), Height: src.Bounds().Dy(), Captured: time.Now().UTC()}
	switch o.Format {
	case "png":
		f.Format = "png"
		if err := (&png.Encoder{CompressionLevel: png.BestSpeed}).Encode(&buf, src); err != nil {
			return guest.Frame{}, fmt.Errorf("encode png: %w", err)
		}
	case "", "jpeg", "jpg":
		f.Format = "jpeg"
		q := o.Quality
		if q <= 0 || q > 100 {
			q = 80
		}
		if err := jpeg.Encode(&buf, src, &jpeg.Options{Quality: q}); err != nil {
			return guest.Frame{}, fmt.Errorf("encode jpeg: %w", err)
		}
	default:
		return guest.Frame{}, fault.Invalid("screenshot format %q: use jpeg or png", o.Format)
	}
	f.Data = buf.Bytes()
	return f, nil
}

// shrink scales img down to width w, averaging the source pixels each target pixel covers.
func shrink(img *image.RGBA, w int) *image.RGBA {
	sw, sh := img.Rect.Dx(), img.Rect.Dy()
	h := max(1, sh*w/sw)
	dst := image.NewRGBA(image.Rect(0, 0, w, h))
	for y := 0; y < h; y++ {
		y0, y1 := y*sh/h, max((y+1)*sh/h, y*sh/h+1)
		for x := 0; x < w; x++ {
			x0, x1 := x*sw/w, max((x+1)*sw/w, x*sw/w+1)
			var r, g, b, n uint32
			for sy := y0; sy < y1; sy++ {
				row := img.Pix[(sy)*img.Stride:]
				for sx := x0; sx < x1; sx++ {
					p := row[sx*4 : sx*4+4]
					r, g, b, n = r+uint32(p[0]), g+uint32(p[1]), b+uint32(p[2]), n+1
				}
			}
			o := dst.PixOffset(x, y)
			dst.Pix[o], dst.Pix[o+1], dst.Pix[o+2], dst.Pix[o+3] = uint8(r/n), uint8(g/n), uint8(b/n), 255
		}
	}
	return dst
}

// Input performs one input action on display index; coordinates are pixels of that display
// (as in its screenshot at full size). The vocabulary is the desktop driver's (guest.Input).
func (d *Desktop) Input(ctx context.Context, index int, in guest.Input) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	ds, err := d.display(index)
	if err != nil {
		return err
	}
	inside := func(x, y int) error {
		if x < 0 || y < 0 || x >= ds.Width || y >= ds.Height {
			return fault.Invalid("point %d,%d is outside display %d (%dx%d)", x, y, index, ds.Width, ds.Height)
		}
		return nil
	}
	button := in.Button
	if button == 0 {
		button = 1
	}
	if button < 1 || button > 3 {
		return fault.Invalid("mouse button %d is not 1 (left), 2 (middle) or 3 (right)", in.Button)
	}
	switch in.Action {
	case "move", "click", "double_click", "right_click", "middle_click", "mouse_down", "mouse_up", "drag", "scroll":
		if err := inside(in.X, in.Y); err != nil {
			return err
		}
	}
	x, y := ds.X+in.X, ds.Y+in.Y
	return d.withInjector(func(j injector) error {
		switch in.Action {
		case "move":
			return j.move(x, y)
		case "click":
			return j.click(x, y, button, 1)
		case "double_click":
			return j.click(x, y, button, 2)
		case "right_click":
			return j.click(x, y, 3, 1)
		case "middle_click":
			return j.click(x, y, 2, 1)
		case "mouse_down":
			return j.button(x, y, button, true)
		case "mouse_up":
			return j.button(x, y, button, false)
		case "drag":
			if err := inside(in.ToX, in.ToY); err != nil {
				return err
			}
			return j.drag(x, y, ds.X+in.ToX, ds.Y+in.ToY, button)
		case "scroll":
			if in.DeltaX == 0 && in.DeltaY == 0 {
				return fault.Invalid("scroll needs dx or dy")
			}
			if abs(in.DeltaX) > 100 || abs(in.DeltaY) > 100 {
				return fault.Invalid("scroll of %d,%d clicks is over the limit of 100", in.DeltaX, in.DeltaY)
			}
			return j.scroll(x, y, in.DeltaX, in.DeltaY)
		case "key":
			if in.Keys == "" {
				return fault.Invalid("key needs keys, e.g. \"ctrl+l\" or \"Return\"")
			}
			return j.keys(in.Keys)
		case "type":
			if in.Text == "" {
				return fault.Invalid("type needs text")
			}
			if len(in.Text) > 64<<10 {
				return fault.Invalid("text of %d bytes is over the 64 KiB limit", len(in.Text))
			}
			return j.typeText(in.Text)
		}
		return fault.Invalid("unknown input action %q", in.Action)
	})
}

// withInjector runs fn with the input connection, opening it when needed and dropping it when
// it failed for a reason other than bad input (the next action reopens it).
func (d *Desktop) withInjector(fn func(injector) error) error {
	d.inMu.Lock()
	defer d.inMu.Unlock()
	if d.in == nil {
		j, err := newInjector()
		if err != nil {
			return err
		}
		d.in = j
	}
	err := fn(d.in)
	if err != nil && fault.Class(err) == nil {
		d.in.close()
		d.in = nil
		return fault.Unavailable("host input failed: %v", err)
	}
	return err
}

// Close releases the input connection. The Desktop can be used again afterwards.
func (d *Desktop) Close() error {
	d.inMu.Lock()
	defer d.inMu.Unlock()
	if d.in == nil {
		return nil
	}
	err := d.in.close()
	d.in = nil
	return err
}

func abs(n int) int {
	if n < 0 {
		return -n
	}
	return n
}

// errBadKey is a key name no table knows.
func errBadKey(name string) error {
	return fault.Invalid("unknown key %q (use names like ctrl, alt, shift, super, Return, Tab, Escape, BackSpace, Delete, "+
		"Home, End, Page_Up, Page_Down, Left, Right, Up, Down, F1–F12, space, or a single character)", name)
}

// errNoInput says input cannot be sent on this platform or build.
var errNoInput = errors.New("host input is not supported on this platform")
