// Package xvfbtest starts a private Xvfb for tests and provides a small X client (a window
// that records the keys it receives, and drawing helpers) to check what the driver did.
//
// A test that needs Xvfb skips when it is not installed, unless CUBICLE_REQUIRE_ALL=1 is set,
// in which case it fails: CI can never count a skip as a pass.
package xvfbtest

import (
	"fmt"
	"image"
	"os/exec"
	"sync"
	"syscall"
	"testing"
	"time"

	"cubicle/internal/testenv"

	"github.com/jezek/xgb"
	"github.com/jezek/xgb/xproto"
)

// Require skips (or, under CUBICLE_REQUIRE_ALL=1, fails) the test when program is missing.
func Require(t testing.TB, program string) string {
	t.Helper()
	p := testenv.Program(t, program)
	return p
}

// Start runs `Xvfb :display -screen 0 WxHx24 -nolisten tcp -noreset` (without -noreset
// the server resets whenever its last client leaves and refuses connections meanwhile) and waits until it accepts
// connections. It is stopped when the test ends. display is where the search for a free
// number starts (Reserve); the name of the display actually started is returned.
func Start(t testing.TB, display, width, height int) string {
	t.Helper()
	return StartWith(t, display, width, height)
}

// StartWith is Start with extra Xvfb arguments (e.g. "+xinerama").
func StartWith(t testing.TB, display, width, height int, extra ...string) string {
	t.Helper()
	xvfb := Require(t, "Xvfb")
	display = Reserve(t, display) // the number asked for, or the next one free on this machine
	name := fmt.Sprintf(":%d", display)
	args := append([]string{name, "-screen", "0", fmt.Sprintf("%dx%dx24", width, height), "-nolisten", "tcp", "-noreset"}, extra...)
	cmd := exec.Command(xvfb, args...)
	cmd.SysProcAttr = OwnProcessGroup()
	if err := cmd.Start(); err != nil {
		t.Fatalf("start Xvfb %s: %v", name, err)
	}
	exited := make(chan struct{})
	go func() { cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(3 * time.Second):
			cmd.Process.Kill()
			<-exited
		}
	})
	deadline := time.Now().Add(10 * time.Second)
	for {
		c, err := xgb.NewConnDisplay(name)
		if err == nil {
			c.Close()
			return name
		}
		select {
		case <-exited:
			t.Fatalf("Xvfb %s exited at start (display in use?)", name)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("Xvfb %s not ready after 10s: %v", name, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// Key is one KeyPress a Window received.
type Key struct {
	Keysym xproto.Keysym
	State  uint16 // modifier mask (xproto.ModMask*)
}

// Window is a mapped, focused top-level window on its own connection that records key
// presses, translated with the keyboard map current when each event is read.
type Window struct {
	Conn *xgb.Conn
	ID   xproto.Window
	Root xproto.Window

	mu   sync.Mutex
	keys []Key
	done chan struct{}
}

// NewWindow creates a w×h window at (x, y) with the given background colour (0xRRGGBB),
// maps it, focuses it and starts recording keys. It is closed when the test ends.
func NewWindow(t testing.TB, display string, x, y, w, h int, bg uint32) *Window {
	t.Helper()
	c, err := xgb.NewConnDisplay(display)
	if err != nil {
		t.Fatalf("connect %s: %v", display, err)
	}
	scr := xproto.Setup(c).DefaultScreen(c)
	id, err := xproto.NewWindowId(c)
	if err != nil {
		t.Fatal(err)
	}
	err = xproto.CreateWindowChecked(c, scr.RootDepth, id, scr.Root, int16(x), int16(y), uint16(w), uint16(h), 0,
		xproto.WindowClassInputOutput, scr.RootVisual,
		xproto.CwBackPixel|xproto.CwOverrideRedirect|xproto.CwEventMask,
		[]uint32{bg, 1, xproto.EventMaskKeyPress | xproto.EventMaskExposure}).Check()
	if err != nil {
		t.Fatalf("create window: %v", err)
	}
	if err := xproto.MapWindowChecked(c, id).Check(); err != nil {
		t.Fatal(err)
	}
	if err := xproto.SetInputFocusChecked(c, xproto.InputFocusPointerRoot, id, xproto.TimeCurrentTime).Check(); err != nil {
		t.Fatal(err)
	}
	win := &Window{Conn: c, ID: id, Root: scr.Root, done: make(chan struct{})}
	go win.loop()
	t.Cleanup(func() { c.Close(); <-win.done })
	return win
}

func (w *Window) loop() {
	defer close(w.done)
	for {
		ev, xerr := w.Conn.WaitForEvent()
		if ev == nil && xerr == nil {
			return
		}
		kp, ok := ev.(xproto.KeyPressEvent)
		if !ok {
			continue
		}
		m, err := xproto.GetKeyboardMapping(w.Conn, kp.Detail, 1).Reply()
		if err != nil || len(m.Keysyms) == 0 {
			continue
		}
		ks := m.Keysyms[0]
		if kp.State&xproto.ModMaskShift != 0 && len(m.Keysyms) > 1 && m.Keysyms[1] != 0 {
			ks = m.Keysyms[1]
		}
		w.mu.Lock()
		w.keys = append(w.keys, Key{Keysym: ks, State: kp.State})
		w.mu.Unlock()
	}
}

// Keys returns the key presses recorded so far.
func (w *Window) Keys() []Key {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]Key(nil), w.keys...)
}

// WaitKeys waits until at least n key presses arrived (or timeout) and returns them.
func (w *Window) WaitKeys(n int, timeout time.Duration) []Key {
	deadline := time.Now().Add(timeout)
	for {
		k := w.Keys()
		if len(k) >= n || time.Now().After(deadline) {
			return k
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// Fill fills a rectangle of the window with colour (0xRRGGBB) and waits until drawn.
func (w *Window) Fill(t testing.TB, x, y, width, height int, colour uint32) {
	t.Helper()
	gc, err := xproto.NewGcontextId(w.Conn)
	if err != nil {
		t.Fatal(err)
	}
	xproto.CreateGC(w.Conn, gc, xproto.Drawable(w.ID), xproto.GcForeground, []uint32{colour})
	xproto.PolyFillRectangle(w.Conn, xproto.Drawable(w.ID), gc, []xproto.Rectangle{{X: int16(x), Y: int16(y), Width: uint16(width), Height: uint16(height)}})
	xproto.FreeGC(w.Conn, gc)
	if _, err := xproto.GetInputFocus(w.Conn).Reply(); err != nil {
		t.Fatal(err)
	}
}

// Put draws img (RGBA) into the window at (x, y) and waits until drawn. Large images go in
// bands of rows, under the X server's request size limit.
func (w *Window) Put(t testing.TB, x, y int, img *image.RGBA) {
	t.Helper()
	gc, err := xproto.NewGcontextId(w.Conn)
	if err != nil {
		t.Fatal(err)
	}
	xproto.CreateGC(w.Conn, gc, xproto.Drawable(w.ID), 0, nil)
	defer xproto.FreeGC(w.Conn, gc)
	b := img.Bounds()
	band := max(1, (200<<10)/(b.Dx()*4))
	for y0 := 0; y0 < b.Dy(); y0 += band {
		h := min(band, b.Dy()-y0)
		data := make([]byte, 0, b.Dx()*h*4)
		for yy := y0; yy < y0+h; yy++ {
			for xx := 0; xx < b.Dx(); xx++ {
				o := img.PixOffset(b.Min.X+xx, b.Min.Y+yy)
				data = append(data, img.Pix[o+2], img.Pix[o+1], img.Pix[o], 0) // BGRX
			}
		}
		xproto.PutImage(w.Conn, xproto.ImageFormatZPixmap, xproto.Drawable(w.ID), gc, uint16(b.Dx()), uint16(h),
			int16(x), int16(y+y0), 0, 24, data)
	}
	if _, err := xproto.GetInputFocus(w.Conn).Reply(); err != nil {
		t.Fatal(err)
	}
}

// Copy copies a rectangle of the window to another place in it (as scrolling does) and
// waits until drawn.
func (w *Window) Copy(t testing.TB, sx, sy, width, height, dx, dy int) {
	t.Helper()
	gc, err := xproto.NewGcontextId(w.Conn)
	if err != nil {
		t.Fatal(err)
	}
	xproto.CreateGC(w.Conn, gc, xproto.Drawable(w.ID), xproto.GcGraphicsExposures, []uint32{0})
	defer xproto.FreeGC(w.Conn, gc)
	xproto.CopyArea(w.Conn, xproto.Drawable(w.ID), xproto.Drawable(w.ID), gc, int16(sx), int16(sy), int16(dx), int16(dy),
		uint16(width), uint16(height))
	if _, err := xproto.GetInputFocus(w.Conn).Reply(); err != nil {
		t.Fatal(err)
	}
}
