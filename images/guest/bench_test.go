//go:build linux

package main

import (
	"bytes"
	"context"
	"image"
	"image/color"
	"image/jpeg"
	"log/slog"
	"math/rand"
	"sort"
	"syscall"
	"testing"
	"time"

	"cubicle/backend/guest"
	"cubicle/images/guest/wire"
	"cubicle/images/guest/x11/xvfbtest"

	"github.com/jezek/xgb/xproto"
)

// desktopLike draws a deterministic 1280×800 image with the mix a desktop has: flat panels,
// gradients, many small high-contrast shapes (text-like) and a photo-like noisy region.
func desktopLike() *image.RGBA {
	const w, h = 1280, 800
	img := image.NewRGBA(image.Rect(0, 0, w, h))
	for y := 0; y < h; y++ {
		for x := 0; x < w; x++ {
			img.SetRGBA(x, y, color.RGBA{uint8(40 + x/16), uint8(60 + y/10), 120, 255})
		}
	}
	rng := rand.New(rand.NewSource(1))
	fill := func(x0, y0, x1, y1 int, c color.RGBA) {
		for y := max(y0, 0); y < min(y1, h); y++ {
			for x := max(x0, 0); x < min(x1, w); x++ {
				img.SetRGBA(x, y, c)
			}
		}
	}
	fill(0, 0, w, 28, color.RGBA{230, 230, 230, 255})        // panel
	fill(100, 80, 1000, 700, color.RGBA{255, 255, 255, 255}) // window
	for i := 0; i < 3000; i++ {                              // "glyphs"
		x, y := 110+rng.Intn(880), 90+rng.Intn(600)
		fill(x, y, x+1+rng.Intn(6), y+2+rng.Intn(9), color.RGBA{uint8(rng.Intn(80)), uint8(rng.Intn(80)), uint8(rng.Intn(80)), 255})
	}
	for y := 400; y < 680; y++ { // "photo"
		for x := 600; x < 980; x++ {
			img.SetRGBA(x, y, color.RGBA{uint8(x + rng.Intn(40)), uint8(y + rng.Intn(40)), uint8(rng.Intn(255)), 255})
		}
	}
	return img
}

func rgbaToBGRX(img *image.RGBA) []byte {
	out := make([]byte, len(img.Pix))
	for i := 0; i < len(out); i += 4 {
		out[i], out[i+1], out[i+2], out[i+3] = img.Pix[i+2], img.Pix[i+1], img.Pix[i], 0
	}
	return out
}

// cpuClock measures the CPU time the process used: on a shared, loaded machine wall-clock
// numbers mostly measure the queue for a core, CPU time per operation does not.
type cpuClock struct{ start time.Duration }

func cpuNow() time.Duration {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func startCPU() cpuClock { return cpuClock{cpuNow()} }

// report adds cpu-ms/op: the CPU time of the whole process (driver and client ends, all
// threads) per operation.
func (c cpuClock) report(b *testing.B) {
	b.ReportMetric(float64((cpuNow()-c.start).Microseconds())/1000/float64(b.N), "cpu-ms/op")
}

// p50 records durations and reports their median.
type p50 struct{ d []time.Duration }

func (p *p50) add(d time.Duration) { p.d = append(p.d, d) }
func (p *p50) report(b *testing.B) {
	if len(p.d) == 0 {
		return
	}
	sort.Slice(p.d, func(i, j int) bool { return p.d[i] < p.d[j] })
	b.ReportMetric(float64(p.d[len(p.d)/2].Microseconds())/1000, "p50-ms")
}

func BenchmarkEncodeJPEG1280x800(b *testing.B) {
	raw := rgbaToBGRX(desktopLike())
	var e encoder
	var out []byte
	var p p50
	cpu := startCPU()
	for i := 0; i < b.N; i++ {
		t0 := time.Now()
		var err error
		if out, _, _, err = e.encode(out[:0], raw, 1280, 800, guest.ScreenshotOptions{Format: "jpeg", Quality: 80}); err != nil {
			b.Fatal(err)
		}
		p.add(time.Since(t0))
	}
	cpu.report(b)
	b.ReportMetric(float64(len(out))/1024, "KiB")
	p.report(b)
}

func BenchmarkEncodePNG1280x800(b *testing.B) {
	raw := rgbaToBGRX(desktopLike())
	var e encoder
	var out []byte
	cpu := startCPU()
	defer cpu.report(b)
	for i := 0; i < b.N; i++ {
		var err error
		if out, _, _, err = e.encode(out[:0], raw, 1280, 800, guest.ScreenshotOptions{Format: "png"}); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(len(out))/1024, "KiB")
}

// BenchmarkEncodeImageJPEG1280x800 is the standard library's encoder on the same image,
// for comparison.
func BenchmarkEncodeImageJPEG1280x800(b *testing.B) {
	img := desktopLike()
	var buf bytes.Buffer
	cpu := startCPU()
	for i := 0; i < b.N; i++ {
		buf.Reset()
		jpeg.Encode(&buf, img, &jpeg.Options{Quality: 80})
	}
	cpu.report(b)
}

// benchDriver is a driver on a 1280×800 Xvfb showing desktopLike().
func benchDriver(b *testing.B) (*harness, *xvfbtest.Window) {
	h := startDriver(b, 66, 1280, 800)
	win := xvfbtest.NewWindow(b, h.display, 0, 0, 1280, 800, 0)
	img := desktopLike()
	gc, _ := xproto.NewGcontextId(win.Conn)
	xproto.CreateGC(win.Conn, gc, xproto.Drawable(win.ID), 0, nil)
	scr := xproto.Setup(win.Conn).DefaultScreen(win.Conn)
	const rows = 40
	data := make([]byte, 1280*4*rows)
	for y := 0; y < 800; y += rows {
		for i := 0; i < 1280*rows; i++ { // RGBA → the server's BGRX
			s := img.Pix[(y*1280+i)*4:]
			data[i*4], data[i*4+1], data[i*4+2], data[i*4+3] = s[2], s[1], s[0], 0
		}
		xproto.PutImage(win.Conn, xproto.ImageFormatZPixmap, xproto.Drawable(win.ID), gc, 1280, rows, 0, int16(y), 0, scr.RootDepth, data)
	}
	xproto.GetInputFocus(win.Conn).Reply()
	return h, win
}

// BenchmarkScreenshotBridge takes a 1280×800 JPEG over the socket of a screen that changed
// since the last one (a pixel is drawn before each, outside the timing): capture, encode and
// transfer every time.
func BenchmarkScreenshotBridge(b *testing.B) {
	h, win := benchDriver(b)
	ctx := context.Background()
	var p p50
	var size int
	b.ResetTimer()
	cpu := startCPU()
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		win.Fill(b, 0, 0, 1, 1, uint32(i))
		b.StartTimer()
		t0 := time.Now()
		f, err := h.client.Screenshot(ctx, guest.ScreenshotOptions{})
		if err != nil {
			b.Fatal(err)
		}
		p.add(time.Since(t0))
		size = len(f.Data)
	}
	cpu.report(b)
	b.ReportMetric(float64(size)/1024, "KiB")
	p.report(b)
}

// BenchmarkScreenshotBridgeUnchanged asks again for a screen that did not change: the
// driver checks for pending damage and sends the frame it encoded last.
func BenchmarkScreenshotBridgeUnchanged(b *testing.B) {
	h, _ := benchDriver(b)
	ctx := context.Background()
	var p p50
	b.ResetTimer()
	cpu := startCPU()
	for i := 0; i < b.N; i++ {
		t0 := time.Now()
		if _, err := h.client.Screenshot(ctx, guest.ScreenshotOptions{}); err != nil {
			b.Fatal(err)
		}
		p.add(time.Since(t0))
	}
	cpu.report(b)
	p.report(b)
}

func BenchmarkInputBridge(b *testing.B) {
	h := startDriver(b, 67, 1280, 800)
	ctx := context.Background()
	var p p50
	b.ResetTimer()
	cpu := startCPU()
	for i := 0; i < b.N; i++ {
		t0 := time.Now()
		if err := h.client.Input(ctx, guest.Input{Action: "move", X: i % 1280, Y: i % 800}); err != nil {
			b.Fatal(err)
		}
		p.add(time.Since(t0))
	}
	cpu.report(b)
	p.report(b)
}

func BenchmarkExecBridge(b *testing.B) {
	h := startDriver(b, 68, 320, 240)
	ctx := context.Background()
	var p p50
	b.ResetTimer()
	cpu := startCPU()
	for i := 0; i < b.N; i++ {
		t0 := time.Now()
		r, err := h.client.Exec(ctx, guest.ExecRequest{Command: []string{"true"}})
		if err != nil || r.ExitCode != 0 {
			b.Fatal(r, err)
		}
		p.add(time.Since(t0))
	}
	cpu.report(b)
	p.report(b)
}

// plasmaLike is a w×h image of smooth colour waves with noise (a video or photo frame),
// different for each seed.
func plasmaLike(w, h int, seed int64) *image.RGBA {
	rng := rand.New(rand.NewSource(seed))
	img := image.NewRGBA(image.Rect(0, 0, w, h))
	f := float64(seed)
	for y := 0; y < h; y++ {
		for x := 0; x < w; x++ {
			v := (x*3+y*2+int(f)*40)%256 + rng.Intn(24)
			img.SetRGBA(x, y, color.RGBA{uint8(v), uint8((v + y/3) % 256), uint8((x/5 + int(f)*17) % 256), 255})
		}
	}
	return img
}

// BenchmarkRegionUpdate is one region stream update without X: compare a new 1280×800 screen
// with the stream's copy, find a scroll, classify and merge the changed tiles, encode them
// (JPEG at one quality) and bring the copy up to date. Cases: the whole screen changed (a
// video), a few lines of text changed (a terminal), the page scrolled by 40 pixels. Reports
// the CPU time per update and the update's size.
func BenchmarkRegionUpdate(b *testing.B) {
	const w, h = 1280, 800
	desk := rgbaToBGRX(desktopLike())
	cases := []struct {
		name string
		a, b []byte
	}{
		{"FullScreen", rgbaToBGRX(plasmaLike(w, h, 1)), rgbaToBGRX(plasmaLike(w, h, 2))},
		{"TextLine", desk, func() []byte {
			c := append([]byte(nil), desk...)
			for y := 300; y < 316; y++ {
				for x := 120; x < 400; x++ {
					if (x/3+y)%5 == 0 {
						o := (y*w + x) * 4
						c[o], c[o+1], c[o+2] = 10, 10, 10
					}
				}
			}
			return c
		}()},
		{"Scroll", desk, func() []byte {
			c := append([]byte(nil), desk...)
			for y := 90; y < 660; y++ { // the window's content moves up 40 rows
				copy(c[(y*w+100)*4:(y*w+1000)*4], desk[((y+40)*w+100)*4:((y+40)*w+1000)*4])
			}
			return c
		}()},
	}
	for _, tc := range cases {
		b.Run(tc.name, func(b *testing.B) {
			s := newScreen(slog.New(slog.DiscardHandler), false, "")
			st := newStream(1)
			st.reset(1, w, h)
			var u wire.Update
			cpu := startCPU()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				b.StopTimer()
				copy(st.ref, tc.a)
				for j := range st.lossy {
					st.lossy[j] = false
				}
				b.StartTimer()
				if _, changed := st.absorb(tc.b); !changed {
					b.Fatal("no change found")
				}
				var err error
				if u, err = s.encodeDirty(st, wire.Update{}, []jpegPart{{75, 1}}, false, true); err != nil {
					b.Fatal(err)
				}
			}
			cpu.report(b)
			b.ReportMetric(float64(len(u.Data))/1024, "KiB/update")
			b.ReportMetric(float64(len(u.Regions)), "regions")
		})
	}
}
