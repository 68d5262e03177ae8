// Package screentest runs the REAL in-guest driver (images/guest, built from this module) on
// a private host Xvfb, without a container; a small X client that reacts to input by drawing,
// so tests can see input turn into changed frames; and Client, a websocket client of the
// computer channel (docs/computer-protocol.md) for API tests and benchmarks.
//
// Tests that need Xvfb skip when it is missing, unless CUBICLE_REQUIRE_ALL=1 is set, in which
// case they fail (xvfbtest.Require).
package screentest

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jezek/xgb"
	"github.com/jezek/xgb/xproto"

	"cubicle/backend/guest"
	"cubicle/backend/guest/guesttest"
	"cubicle/images/guest/wire"
	"cubicle/images/guest/x11/xvfbtest"
)

// Desktop is a real driver serving a real Xvfb display.
type Desktop struct {
	// Display is the X display name, e.g. ":80".
	Display string
	// Client is connected to the driver; it is closed when the test ends.
	Client *guest.Client
	// Width and Height are the screen size.
	Width, Height int
	// Socket is the driver's socket (another process may connect to it too).
	Socket string
}

var build struct {
	mu  sync.Mutex
	bin string
}

// Cleanup removes the driver binary; call it from TestMain after m.Run.
func Cleanup() { guesttest.Cleanup() }

// Start runs Xvfb on display (a number the test owns) at width×height and the real driver
// attached to it, and waits until the driver answers and its X server is healthy. Both are
// stopped when the test ends.
func Start(t testing.TB, display, width, height int) *Desktop {
	t.Helper()
	name := xvfbtest.Start(t, display, width, height)
	bin := guesttest.Binary(t)
	dir := t.TempDir()
	run, ws := filepath.Join(dir, "run"), filepath.Join(dir, "workspace")
	for _, d := range []string{run, ws} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	cmd := exec.Command(bin)
	cmd.Env = append(os.Environ(), wire.EnvRunDir+"="+run, wire.EnvDisplay+"="+name, wire.EnvSession+"=none",
		wire.EnvNoXServer+"=1", wire.EnvWorkspace+"="+ws, fmt.Sprintf("%s=%dx%d", wire.EnvScreen, width, height),
		wire.EnvLogLevel+"=warn")
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	cmd.SysProcAttr = xvfbtest.OwnProcessGroup()
	if err := cmd.Start(); err != nil {
		t.Fatalf("start driver: %v", err)
	}
	exited := make(chan struct{})
	go func() { cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(5 * time.Second):
			cmd.Process.Kill()
			<-exited
		}
	})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := guest.WaitReady(ctx, filepath.Join(run, "guest.sock"))
	if err != nil {
		t.Fatalf("driver not ready: %v", err)
	}
	t.Cleanup(func() { c.Close() })
	for i := 0; ; i++ {
		h, err := c.Health(ctx)
		if err == nil && h.XServer {
			break
		}
		if i > 300 {
			t.Fatalf("X server never healthy: %+v %v", h, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
	return &Desktop{Display: name, Client: c, Width: width, Height: height, Socket: filepath.Join(run, "guest.sock")}
}

// Painter is a full-screen window that draws in reaction to input: a button press fills a
// 32×32 square centred on the pointer, a key press fills the top-left 64×64 square, each
// time in the next colour. Animate keeps the screen changing.
type Painter struct {
	conn *xgb.Conn
	win  xproto.Window
	gc   xproto.Gcontext
	w, h int

	mu     sync.Mutex // serialises drawing
	colour uint32     // guarded by mu

	done chan struct{}
}

// NewPainter maps the painter window on d's display, focused, and starts reacting to input.
// It is closed when the test ends.
func NewPainter(t testing.TB, d *Desktop) *Painter {
	t.Helper()
	c, err := xgb.NewConnDisplay(d.Display)
	if err != nil {
		t.Fatalf("connect %s: %v", d.Display, err)
	}
	scr := xproto.Setup(c).DefaultScreen(c)
	win, err := xproto.NewWindowId(c)
	if err != nil {
		t.Fatal(err)
	}
	err = xproto.CreateWindowChecked(c, scr.RootDepth, win, scr.Root, 0, 0, uint16(d.Width), uint16(d.Height), 0,
		xproto.WindowClassInputOutput, scr.RootVisual,
		xproto.CwBackPixel|xproto.CwOverrideRedirect|xproto.CwEventMask,
		[]uint32{0x202020, 1, xproto.EventMaskKeyPress | xproto.EventMaskButtonPress}).Check()
	if err != nil {
		t.Fatalf("create window: %v", err)
	}
	if err := xproto.MapWindowChecked(c, win).Check(); err != nil {
		t.Fatal(err)
	}
	if err := xproto.SetInputFocusChecked(c, xproto.InputFocusPointerRoot, win, xproto.TimeCurrentTime).Check(); err != nil {
		t.Fatal(err)
	}
	gc, err := xproto.NewGcontextId(c)
	if err != nil {
		t.Fatal(err)
	}
	if err := xproto.CreateGCChecked(c, gc, xproto.Drawable(win), xproto.GcForeground, []uint32{0xffffff}).Check(); err != nil {
		t.Fatal(err)
	}
	p := &Painter{conn: c, win: win, gc: gc, w: d.Width, h: d.Height, colour: 0x336699, done: make(chan struct{})}
	go p.loop()
	t.Cleanup(func() { c.Close(); <-p.done })
	return p
}

func (p *Painter) loop() {
	defer close(p.done)
	for {
		ev, xerr := p.conn.WaitForEvent()
		if ev == nil && xerr == nil {
			return
		}
		switch e := ev.(type) {
		case xproto.ButtonPressEvent:
			p.Fill(int(e.EventX)-16, int(e.EventY)-16, 32, 32)
		case xproto.KeyPressEvent:
			p.Fill(0, 0, 64, 64)
		}
	}
}

// Fill fills a rectangle in the next colour and waits until the X server has drawn it.
func (p *Painter) Fill(x, y, w, h int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.fillLocked(x, y, w, h)
	xproto.GetInputFocus(p.conn).Reply() // a round trip: everything before it is drawn
}

func (p *Painter) fillLocked(x, y, w, h int) {
	p.colour = (p.colour*1103515245 + 12345) & 0xffffff
	xproto.ChangeGC(p.conn, p.gc, xproto.GcForeground, []uint32{p.colour})
	xproto.PolyFillRectangle(p.conn, xproto.Drawable(p.win), p.gc,
		[]xproto.Rectangle{{X: int16(x), Y: int16(y), Width: uint16(w), Height: uint16(h)}})
}

// Noise paints the rectangle with random 4×4 blocks (an image that compresses badly, like a
// photo or a video) and waits until the X server has drawn it.
func (p *Painter) Noise(x, y, w, h int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	const rows = 32 // rows per PutImage request: well under the core request size limit
	buf := make([]byte, w*4*rows)
	for top := 0; top < h; top += rows {
		n := min(rows, h-top)
		for r := 0; r < n; r++ {
			for c := 0; c < w; c++ {
				if c%4 == 0 && (top+r)%4 == 0 || c == 0 {
					p.colour = (p.colour*1103515245 + 12345) & 0xffffff
				}
				i := (r*w + c) * 4
				buf[i], buf[i+1], buf[i+2] = byte(p.colour), byte(p.colour>>8), byte(p.colour>>16)
			}
		}
		xproto.PutImage(p.conn, xproto.ImageFormatZPixmap, xproto.Drawable(p.win), p.gc, uint16(w), uint16(n),
			int16(x), int16(y+top), 0, 24, buf[:w*4*n])
	}
	xproto.GetInputFocus(p.conn).Reply()
}

// AnimateNoise repaints the whole screen with Noise every interval until ctx ends.
func (p *Painter) AnimateNoise(ctx context.Context, interval time.Duration) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		p.Noise(0, 0, p.w, p.h)
	}
}

// Animate keeps changing the screen until ctx ends: every interval it moves a band of
// coloured blocks across the whole width (like scrolling or a video), so each frame differs
// from the last over a large area.
func (p *Painter) Animate(ctx context.Context, interval time.Duration) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for i := 0; ; i++ {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		band := p.h / 4
		y := (i * 7) % (p.h - band)
		p.mu.Lock()
		for x := 0; x < p.w; x += 80 {
			p.fillLocked(x, y, 80, band)
		}
		p.mu.Unlock()
		xproto.GetInputFocus(p.conn).Reply()
	}
}
