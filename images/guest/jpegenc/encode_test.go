package jpegenc

import (
	"bytes"
	"image"
	"image/color"
	"image/draw"
	"image/jpeg"
	"image/png"
	"math"
	"math/rand"
	"os"
	"testing"
)

// testImage has gradients, sharp edges and noise, so every code path of the entropy coder
// runs (long zero runs, large coefficients, 0xff bytes to stuff).
func testImage(w, h int, seed int64) *image.RGBA {
	img := image.NewRGBA(image.Rect(0, 0, w, h))
	rng := rand.New(rand.NewSource(seed))
	for y := 0; y < h; y++ {
		for x := 0; x < w; x++ {
			c := color.RGBA{uint8(x * 255 / max(w, 1)), uint8(y * 255 / max(h, 1)), 128, 255}
			switch {
			case (x/16+y/16)%5 == 0:
				c = color.RGBA{255, 255, 255, 255}
			case x > w/2 && y > h/2:
				c = color.RGBA{uint8(rng.Intn(256)), uint8(rng.Intn(256)), uint8(rng.Intn(256)), 255}
			}
			img.SetRGBA(x, y, c)
		}
	}
	return img
}

func toBGRX(img *image.RGBA) []byte {
	out := make([]byte, len(img.Pix))
	for i := 0; i < len(out); i += 4 {
		out[i], out[i+1], out[i+2], out[i+3] = img.Pix[i+2], img.Pix[i+1], img.Pix[i], 0
	}
	return out
}

// psnr compares a decoded image with the original.
func psnr(t *testing.T, a *image.RGBA, b image.Image) float64 {
	t.Helper()
	if a.Bounds() != b.Bounds() {
		t.Fatalf("bounds %v vs %v", a.Bounds(), b.Bounds())
	}
	var se float64
	for y := 0; y < a.Rect.Dy(); y++ {
		for x := 0; x < a.Rect.Dx(); x++ {
			r1, g1, b1, _ := a.At(x, y).RGBA()
			r2, g2, b2, _ := b.At(x, y).RGBA()
			for _, d := range []float64{float64(r1>>8) - float64(r2>>8), float64(g1>>8) - float64(g2>>8), float64(b1>>8) - float64(b2>>8)} {
				se += d * d
			}
		}
	}
	mse := se / float64(3*a.Rect.Dx()*a.Rect.Dy())
	if mse == 0 {
		return 99
	}
	return 10 * math.Log10(255*255/mse)
}

func TestMatchesImageJPEGQuality(t *testing.T) {
	tests := []struct {
		name    string
		w, h    int
		quality int
		workers int
		bgr     bool
	}{
		{"screen", 1280, 800, 80, 0, true},
		{"odd size", 333, 77, 80, 2, false},
		{"one pixel", 1, 1, 80, 1, true},
		{"narrow tall", 17, 300, 90, 4, true},
		{"low quality", 200, 120, 10, 2, false},
		{"max quality", 200, 120, 100, 2, true},
		{"single worker", 640, 480, 80, 1, true},
	}
	var enc Encoder
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			img := testImage(tt.w, tt.h, 1)
			m := Image{Pix: img.Pix, Stride: img.Stride, Width: tt.w, Height: tt.h}
			if tt.bgr {
				m.Pix, m.BGR = toBGRX(img), true
			}
			enc.Workers = tt.workers
			out, err := enc.Encode(nil, m, tt.quality)
			if err != nil {
				t.Fatal(err)
			}
			got, err := jpeg.Decode(bytes.NewReader(out))
			if err != nil {
				t.Fatalf("decode: %v", err)
			}
			var ref bytes.Buffer
			jpeg.Encode(&ref, img, &jpeg.Options{Quality: tt.quality})
			refLen := ref.Len()
			want, _ := jpeg.Decode(&ref)
			p, pr := psnr(t, img, got), psnr(t, img, want)
			t.Logf("PSNR %.2f dB (image/jpeg %.2f dB), %d bytes (image/jpeg %d)", p, pr, len(out), refLen)
			if p < pr-0.5 {
				t.Errorf("PSNR %.2f dB is below image/jpeg's %.2f dB", p, pr)
			}
			if float64(len(out)) > 1.05*float64(refLen)+200 {
				t.Errorf("%d bytes, image/jpeg needs %d", len(out), refLen)
			}
		})
	}
	if _, err := enc.Encode(nil, Image{Pix: make([]byte, 10), Stride: 4, Width: 4, Height: 4}, 80); err == nil {
		t.Error("short buffer accepted")
	}
}

func BenchmarkEncode1280x800(b *testing.B) {
	img := testImage(1280, 800, 1)
	m := Image{Pix: toBGRX(img), Stride: img.Stride, Width: 1280, Height: 800, BGR: true}
	var enc Encoder
	var out []byte
	for i := 0; i < b.N; i++ {
		out, _ = enc.Encode(out[:0], m, 80)
	}
}

func BenchmarkEncode1280x800OneWorker(b *testing.B) {
	img := testImage(1280, 800, 1)
	m := Image{Pix: toBGRX(img), Stride: img.Stride, Width: 1280, Height: 800, BGR: true}
	enc := Encoder{Workers: 1}
	var out []byte
	for i := 0; i < b.N; i++ {
		out, _ = enc.Encode(out[:0], m, 80)
	}
}

func BenchmarkImageJPEG1280x800(b *testing.B) {
	img := testImage(1280, 800, 1)
	var buf bytes.Buffer
	for i := 0; i < b.N; i++ {
		buf.Reset()
		jpeg.Encode(&buf, img, &jpeg.Options{Quality: 80})
	}
}

// desktop is a real 1280x800 XFCE desktop (wallpaper, panel, icons), as BGRX.
func desktop(t testing.TB) Image {
	t.Helper()
	f, err := os.Open("testdata/xfce-desktop.png")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	src, err := png.Decode(f)
	if err != nil {
		t.Fatal(err)
	}
	img := image.NewRGBA(src.Bounds())
	draw.Draw(img, img.Rect, src, src.Bounds().Min, draw.Src)
	return Image{Pix: toBGRX(img), Stride: img.Stride, Width: img.Rect.Dx(), Height: img.Rect.Dy(), BGR: true}
}

// withFlat runs f with the flat-block fast path on or off.
func withFlat(on bool, f func()) {
	old := flatOK
	flatOK = on
	defer func() { flatOK = old }()
	f()
}

// TestFlatFastPathIdentical: skipping the DCT of one-colour blocks and MCUs changes nothing
// in the output, byte for byte.
func TestFlatFastPathIdentical(t *testing.T) {
	if !flatOK {
		t.Fatal("the DCT of a flat block has AC coefficients: the fast path is off")
	}
	flat := testImage(320, 200, 3)
	for y := 40; y < 160; y++ { // a large one-colour area, not aligned to MCUs
		for x := 13; x < 250; x++ {
			flat.SetRGBA(x, y, color.RGBA{30, 60, 90, 255})
		}
	}
	images := map[string]Image{
		"desktop": desktop(t),
		"flat":    {Pix: toBGRX(flat), Stride: flat.Stride, Width: 320, Height: 200, BGR: true},
		"rgba":    {Pix: flat.Pix, Stride: flat.Stride, Width: 320, Height: 200},
	}
	for name, m := range images {
		for _, q := range []int{20, 75, 100} {
			var fast, slow []byte
			var enc Encoder
			withFlat(true, func() { fast, _ = enc.Encode(nil, m, q) })
			withFlat(false, func() { slow, _ = enc.Encode(nil, m, q) })
			if !bytes.Equal(fast, slow) {
				t.Errorf("%s q%d: the fast path changes the output (%d vs %d bytes)", name, q, len(fast), len(slow))
			}
		}
	}
}

// BenchmarkDesktop1280x800 encodes a real desktop screenshot, the agent's format (q75), with
// the flat-block fast path (Fast) and without (the encoder before it), in the same run; and
// image/jpeg for reference.
func BenchmarkDesktop1280x800(b *testing.B) {
	m := desktop(b)
	for _, bc := range []struct {
		name string
		flat bool
	}{{"Fast", true}, {"NoFlatPath", false}} {
		b.Run(bc.name, func(b *testing.B) {
			withFlat(bc.flat, func() {
				var enc Encoder
				var out []byte
				c0 := cpuTime()
				for i := 0; i < b.N; i++ {
					out, _ = enc.Encode(out[:0], m, 75)
				}
				b.ReportMetric(float64((cpuTime()-c0).Microseconds())/1000/float64(b.N), "cpu-ms/op")
				b.ReportMetric(float64(len(out))/1024, "KiB")
			})
		})
	}
	b.Run("ImageJPEG", func(b *testing.B) {
		img := image.NewRGBA(image.Rect(0, 0, m.Width, m.Height))
		for i := 0; i < len(img.Pix); i += 4 {
			img.Pix[i], img.Pix[i+1], img.Pix[i+2], img.Pix[i+3] = m.Pix[i+2], m.Pix[i+1], m.Pix[i], 255
		}
		var buf bytes.Buffer
		c0 := cpuTime()
		for i := 0; i < b.N; i++ {
			buf.Reset()
			jpeg.Encode(&buf, img, &jpeg.Options{Quality: 75})
		}
		b.ReportMetric(float64((cpuTime()-c0).Microseconds())/1000/float64(b.N), "cpu-ms/op")
	})
}
