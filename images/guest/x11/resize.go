package x11

import (
	"fmt"

	"github.com/jezek/xgb/randr"
	"github.com/jezek/xgb/xproto"
)

// Screen sizes a resize accepts (the upper bound is also the X server's own maximum).
const (
	MinWidth  = 320
	MinHeight = 240
)

// SizeRange returns the largest screen the X server can be resized to (RandR), or an error
// when it cannot resize.
func (d *Display) SizeRange() (maxW, maxH int, err error) {
	if err := d.initRandR(); err != nil {
		return 0, 0, err
	}
	r, err := randr.GetScreenSizeRange(d.conn, d.root).Reply()
	if err != nil {
		return 0, 0, fmt.Errorf("x11: screen size range: %w", err)
	}
	return int(r.MaxWidth), int(r.MaxHeight), nil
}

func (d *Display) initRandR() error {
	d.randrOnce.Do(func() {
		if err := randr.Init(d.conn); err != nil {
			d.randrErr = fmt.Errorf("x11: the X server lacks RandR: %w", err)
			return
		}
		if _, err := randr.QueryVersion(d.conn, 1, 3).Reply(); err != nil {
			d.randrErr = fmt.Errorf("x11: RandR version: %w", err)
		}
	})
	return d.randrErr
}

// Resize changes the screen to w×h with RandR: a mode of that size on the first output, the
// screen resized and the CRTC set to the mode (what `xrandr --fb`/`--newmode` do on Xvfb).
// This Display keeps the size it was opened with: the caller opens a new one.
func (d *Display) Resize(w, h int) error {
	if err := d.alive(); err != nil {
		return err
	}
	maxW, maxH, err := d.SizeRange()
	if err != nil {
		return err
	}
	if w < MinWidth || h < MinHeight || w > maxW || h > maxH {
		return fmt.Errorf("x11: screen size %dx%d is outside %dx%d…%dx%d", w, h, MinWidth, MinHeight, maxW, maxH)
	}
	d.kb.mu.Lock() // no input while the screen changes under it
	defer d.kb.mu.Unlock()
	res, err := randr.GetScreenResourcesCurrent(d.conn, d.root).Reply()
	if err != nil {
		return fmt.Errorf("x11: screen resources: %w", err)
	}
	if len(res.Outputs) == 0 || len(res.Crtcs) == 0 {
		return fmt.Errorf("x11: the X server has no RandR output to resize")
	}
	out, crtc := res.Outputs[0], res.Crtcs[0]
	// Where the pointer is on the screen as it is: X clamps it into a smaller screen (to its
	// corner, where the driver's first shrink from the start size would leave it); it is kept
	// at the same relative place instead.
	geo, gerr := xproto.GetGeometry(d.conn, xproto.Drawable(d.root)).Reply()
	ptr, perr := xproto.QueryPointer(d.conn, d.root).Reply()
	// A mode of that size: reuse one the server has, else create it.
	var mode randr.Mode
	for _, m := range res.Modes {
		if int(m.Width) == w && int(m.Height) == h {
			mode = randr.Mode(m.Id)
			break
		}
	}
	if mode == 0 {
		name := fmt.Sprintf("cubicle-%dx%d", w, h)
		info := randr.ModeInfo{Width: uint16(w), Height: uint16(h), DotClock: uint32(w * h * 60),
			HsyncStart: uint16(w), HsyncEnd: uint16(w), Htotal: uint16(w), VsyncStart: uint16(h),
			VsyncEnd: uint16(h), Vtotal: uint16(h), NameLen: uint16(len(name))}
		r, err := randr.CreateMode(d.conn, d.root, info, name).Reply()
		if err != nil {
			return fmt.Errorf("x11: create mode %s: %w", name, err)
		}
		mode = r.Mode
	}
	if err := randr.AddOutputModeChecked(d.conn, out, mode).Check(); err != nil {
		return fmt.Errorf("x11: add mode to output: %w", err)
	}
	// The CRTC must fit the screen at every step: switch it off, resize, switch it on.
	if _, err := randr.SetCrtcConfig(d.conn, crtc, xproto.TimeCurrentTime, res.ConfigTimestamp, 0, 0, 0,
		randr.RotationRotate0, nil).Reply(); err != nil {
		return fmt.Errorf("x11: disable crtc: %w", err)
	}
	mmW, mmH := uint32(w*254/960), uint32(h*254/960) // 96 dpi
	if err := randr.SetScreenSizeChecked(d.conn, d.root, uint16(w), uint16(h), mmW, mmH).Check(); err != nil {
		return fmt.Errorf("x11: set screen size %dx%d: %w", w, h, err)
	}
	if _, err := randr.SetCrtcConfig(d.conn, crtc, xproto.TimeCurrentTime, res.ConfigTimestamp, 0, 0, mode,
		randr.RotationRotate0, []randr.Output{out}).Reply(); err != nil {
		return fmt.Errorf("x11: set crtc to %dx%d: %w", w, h, err)
	}
	if gerr == nil && perr == nil && geo.Width > 0 && geo.Height > 0 {
		x := int(ptr.RootX) * w / int(geo.Width)
		y := int(ptr.RootY) * h / int(geo.Height)
		if err := xproto.WarpPointerChecked(d.conn, xproto.WindowNone, d.root, 0, 0, 0, 0, int16(x), int16(y)).Check(); err != nil {
			return fmt.Errorf("x11: keep the pointer in place: %w", err)
		}
	}
	return nil
}
