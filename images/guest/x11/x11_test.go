package x11

import (
	"context"
	"image"
	"image/color"
	"io"
	"log"
	"os"
	"sort"
	"testing"
	"time"

	"cubicle/images/guest/x11/xvfbtest"

	"github.com/jezek/xgb"
	"github.com/jezek/xgb/xproto"
)

func TestMain(m *testing.M) {
	xgb.Logger = log.New(io.Discard, "", 0) // no chatter about a missing ~/.Xauthority
	os.Exit(m.Run())
}

// Displays :60–:64 belong to this package's tests (:65–:69 to the driver's).
func openTest(t *testing.T, display int) (*Display, string) {
	t.Helper()
	name := xvfbtest.Start(t, display, 640, 480)
	d, err := Open(name)
	if err != nil {
		t.Fatalf("Open(%s): %v", name, err)
	}
	t.Cleanup(func() { d.Close() })
	return d, name
}

func near(a, b uint8) bool { return a-b < 3 || b-a < 3 }

func TestCapturePattern(t *testing.T) {
	d, name := openTest(t, 60)
	if !d.UsesSHM() {
		t.Errorf("MIT-SHM not used against Xvfb")
	}
	if !d.UsesDamage() {
		t.Errorf("XDAMAGE not used against Xvfb")
	}
	win := xvfbtest.NewWindow(t, name, 0, 0, 640, 480, 0x000000)
	rects := []struct {
		name       string
		x, y, w, h int
		rgb        uint32
	}{
		{"red", 10, 10, 100, 50, 0xff0000},
		{"green", 200, 100, 60, 60, 0x00ff00},
		{"blue", 400, 300, 120, 80, 0x0000ff},
		{"grey", 599, 439, 40, 40, 0x808080},
	}
	for _, r := range rects {
		win.Fill(t, r.x, r.y, r.w, r.h, r.rgb)
	}
	img, _, err := d.Capture(nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range rects {
		t.Run(r.name, func(t *testing.T) {
			want := color.RGBA{uint8(r.rgb >> 16), uint8(r.rgb >> 8), uint8(r.rgb), 0xff}
			for _, p := range []image.Point{{r.x, r.y}, {r.x + r.w - 1, r.y + r.h - 1}, {r.x + r.w/2, r.y + r.h/2}} {
				if got := img.RGBAAt(p.X, p.Y); got != want {
					t.Errorf("pixel %v = %v, want %v", p, got, want)
				}
			}
			if got := img.RGBAAt(r.x-1, r.y-1); got != (color.RGBA{0, 0, 0, 0xff}) {
				t.Errorf("pixel outside the rectangle = %v, want black", got)
			}
		})
	}
}

func TestDamageCounts(t *testing.T) {
	d, name := openTest(t, 61)
	win := xvfbtest.NewWindow(t, name, 0, 0, 200, 200, 0x000000)
	time.Sleep(100 * time.Millisecond) // let the map's damage arrive
	gen, _, _ := d.Generation()
	win.Fill(t, 0, 0, 10, 10, 0xffffff)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if _, err := d.WaitChange(ctx, gen); err != nil {
		t.Fatalf("no change after drawing: %v", err)
	}
	gen, _, _ = d.Generation()
	ctx2, cancel2 := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel2()
	if g, err := d.WaitChange(ctx2, gen); err == nil {
		t.Fatalf("change reported (gen %d→%d) with nothing drawn", gen, g)
	}
	start := time.Now()
	if _, settled, err := d.WaitQuiet(context.Background(), 100*time.Millisecond, time.Second); err != nil || !settled {
		t.Fatalf("WaitQuiet: settled=%v err=%v", settled, err)
	}
	if el := time.Since(start); el < 100*time.Millisecond || el > 500*time.Millisecond {
		t.Errorf("WaitQuiet on a still screen took %v, want ≈100ms", el)
	}
}

func TestTypeAndKeys(t *testing.T) {
	d, name := openTest(t, 62)
	win := xvfbtest.NewWindow(t, name, 0, 0, 100, 100, 0)
	tests := []struct {
		name  string
		do    func() error
		want  string
		state uint16 // required modifiers on the last key
	}{
		{"ascii", func() error { return d.Type("Hello, World!") }, "Hello, World!", 0},
		{"chinese", func() error { return d.Type("hello 你好") }, "hello 你好", 0},
		{"mixed twice", func() error { return d.Type("é你x你") }, "é你x你", 0},
		{"every script", func() error { return d.Type("héllo 你好 日本語 한국어 😀 Ωß ñ") }, "héllo 你好 日本語 한국어 😀 Ωß ñ", 0},
		{"combo", func() error { return d.Keys("ctrl+alt+t") }, "t", xproto.ModMaskControl | xproto.ModMask1},
		{"ctrl+l", func() error { return d.Keys("ctrl+l") }, "l", xproto.ModMaskControl},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before := len(win.Keys())
			if err := tt.do(); err != nil {
				t.Fatal(err)
			}
			var got []rune
			var last Key
			keys := win.WaitKeys(before+64, 300*time.Millisecond)[before:]
			for _, k := range keys {
				if r := KeysymRune(k.Keysym); r != 0 {
					got = append(got, r)
					last = Key(k)
				}
			}
			if string(got) != tt.want {
				t.Fatalf("window received %q, want %q (events %v)", string(got), tt.want, keys)
			}
			if last.State&tt.state != tt.state {
				t.Errorf("modifier state %#x, want %#x set", last.State, tt.state)
			}
		})
	}
	if err := d.Keys("ctrl+nosuchkey"); err == nil {
		t.Errorf("unknown key accepted")
	}
}

// Key mirrors xvfbtest.Key for the conversion above.
type Key = xvfbtest.Key

func TestPointer(t *testing.T) {
	d, name := openTest(t, 63)
	_ = name
	for _, p := range []image.Point{{10, 20}, {300, 400}} {
		if err := d.Move(p.X, p.Y); err != nil {
			t.Fatal(err)
		}
		r, err := xproto.QueryPointer(d.conn, d.root).Reply()
		if err != nil {
			t.Fatal(err)
		}
		if int(r.RootX) != p.X || int(r.RootY) != p.Y {
			t.Errorf("pointer at %d,%d, want %v", r.RootX, r.RootY, p)
		}
	}
	if err := d.Click(5, 5, 1, 2); err != nil {
		t.Fatal(err)
	}
	if err := d.Drag(5, 5, 50, 60, 1); err != nil {
		t.Fatal(err)
	}
	if err := d.Scroll(5, 5, 1, -3); err != nil {
		t.Fatal(err)
	}
}

// BenchmarkCaptureSHM is the capture itself: the X server writes the 1280×800 screen into
// the shared segment and answers.
func BenchmarkCaptureSHM(b *testing.B) {
	name := xvfbtest.Start(b, 64, 1280, 800)
	d, err := Open(name)
	if err != nil {
		b.Fatal(err)
	}
	defer d.Close()
	if !d.UsesSHM() {
		b.Fatal("MIT-SHM not available")
	}
	var p p50
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		t0 := time.Now()
		if err := d.WithCapture(func([]byte, uint64) error { return nil }); err != nil {
			b.Fatal(err)
		}
		p.add(time.Since(t0))
	}
	p.report(b)
}

// p50 records durations and reports their median.
type p50 struct{ d []time.Duration }

func (p *p50) add(d time.Duration) { p.d = append(p.d, d) }
func (p *p50) report(b *testing.B) {
	sort.Slice(p.d, func(i, j int) bool { return p.d[i] < p.d[j] })
	if len(p.d) > 0 {
		b.ReportMetric(float64(p.d[len(p.d)/2].Microseconds())/1000, "p50-ms")
	}
}

// BenchmarkCaptureRaw is a capture plus a copy of the pixels out of the segment.
func BenchmarkCaptureRaw(b *testing.B) {
	name := xvfbtest.Start(b, 64, 1280, 800)
	d, err := Open(name)
	if err != nil {
		b.Fatal(err)
	}
	defer d.Close()
	var buf []byte
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		if buf, _, err = d.CaptureRaw(buf); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkCaptureRGBA(b *testing.B) {
	name := xvfbtest.Start(b, 64, 1280, 800)
	d, err := Open(name)
	if err != nil {
		b.Fatal(err)
	}
	defer d.Close()
	var img *image.RGBA
	for i := 0; i < b.N; i++ {
		if img, _, err = d.Capture(img); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkInputMove(b *testing.B) {
	name := xvfbtest.Start(b, 64, 1280, 800)
	d, err := Open(name)
	if err != nil {
		b.Fatal(err)
	}
	defer d.Close()
	var p p50
	for i := 0; i < b.N; i++ {
		t0 := time.Now()
		if err := d.Move(i%1280, i%800); err != nil {
			b.Fatal(err)
		}
		p.add(time.Since(t0))
	}
	p.report(b)
}
