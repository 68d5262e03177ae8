package pngenc

import (
	"bytes"
	"image"
	"image/color"
	"image/draw"
	"image/png"
	"math/rand"
	"os"
	"testing"
)

// desktop is a real XFCE screenshot (shared with jpegenc's tests).
func desktop(t testing.TB) *image.RGBA {
	t.Helper()
	f, err := os.Open("../jpegenc/testdata/xfce-desktop.png")
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
	return img
}

// noisy has flat areas, gradients and noise: every byte value in the filtered rows.
func noisy(w, h int, seed int64) *image.RGBA {
	img := image.NewRGBA(image.Rect(0, 0, w, h))
	rng := rand.New(rand.NewSource(seed))
	for y := 0; y < h; y++ {
		for x := 0; x < w; x++ {
			c := color.RGBA{uint8(x * 255 / max(w, 1)), uint8(y * 255 / max(h, 1)), 128, 255}
			switch {
			case (x/7+y/5)%4 == 0:
				c = color.RGBA{255, 255, 255, 255}
			case x > w/2:
				c = color.RGBA{uint8(rng.Intn(256)), uint8(rng.Intn(256)), uint8(rng.Intn(256)), 255}
			}
			img.SetRGBA(x, y, c)
		}
	}
	return img
}

// frame lays img out as 32-bit pixels with stride padding bytes after each row and
// garbage in the fourth byte (the encoder must ignore it), in BGR or RGB order.
func frame(img *image.RGBA, bgr bool, padding int) Image {
	w, h := img.Rect.Dx(), img.Rect.Dy()
	stride := 4*w + padding
	pix := make([]byte, stride*h)
	for i := range pix {
		pix[i] = 0xa5
	}
	for y := 0; y < h; y++ {
		for x := 0; x < w; x++ {
			s := img.Pix[y*img.Stride+4*x:]
			d := pix[y*stride+4*x:]
			if bgr {
				d[0], d[1], d[2] = s[2], s[1], s[0]
			} else {
				d[0], d[1], d[2] = s[0], s[1], s[2]
			}
			d[3] = uint8(x * 31)
		}
	}
	return Image{Pix: pix, Stride: stride, Width: w, Height: h, BGR: bgr}
}

// TestExactPixels: what image/png decodes is the input, pixel for pixel, for both channel
// orders, padded strides, odd sizes and a reused encoder (buffers of another size before).
func TestExactPixels(t *testing.T) {
	cases := []struct {
		name string
		img  *image.RGBA
	}{
		{"desktop", desktop(t)},
		{"1x1", noisy(1, 1, 1)},
		{"odd", noisy(333, 77, 2)},
		{"tall", noisy(3, 500, 3)},
		{"wide", noisy(1000, 2, 4)},
	}
	var e Encoder
	for _, c := range cases {
		for _, bgr := range []bool{true, false} {
			for _, pad := range []int{0, 12} {
				out, err := e.Encode([]byte("kept"), frame(c.img, bgr, pad))
				if err != nil {
					t.Fatalf("%s: %v", c.name, err)
				}
				if !bytes.HasPrefix(out, []byte("kept\x89PNG")) {
					t.Fatalf("%s: the encoding was not appended to dst", c.name)
				}
				got, err := png.Decode(bytes.NewReader(out[4:]))
				if err != nil {
					t.Fatalf("%s bgr=%v pad=%d: decode: %v", c.name, bgr, pad, err)
				}
				if got.Bounds() != c.img.Rect {
					t.Fatalf("%s: bounds %v, want %v", c.name, got.Bounds(), c.img.Rect)
				}
				for y := 0; y < c.img.Rect.Dy(); y++ {
					for x := 0; x < c.img.Rect.Dx(); x++ {
						r, g, b, a := got.At(x, y).RGBA()
						w := c.img.RGBAAt(x, y)
						if uint8(r>>8) != w.R || uint8(g>>8) != w.G || uint8(b>>8) != w.B || a != 0xffff {
							t.Fatalf("%s bgr=%v pad=%d: pixel (%d,%d) = %d,%d,%d,%d, want %v", c.name, bgr, pad, x, y, r>>8, g>>8, b>>8, a>>8, w)
						}
					}
				}
			}
		}
	}
}

// TestRefusesBadSizes: a frame whose pixels do not cover its size is an error, not a panic.
func TestRefusesBadSizes(t *testing.T) {
	var e Encoder
	for _, m := range []Image{
		{Pix: make([]byte, 16), Stride: 16, Width: 0, Height: 1},
		{Pix: make([]byte, 16), Stride: 16, Width: 4, Height: 2},
		{Pix: make([]byte, 16), Stride: 8, Width: 4, Height: 1},
		{Pix: nil, Stride: 4, Width: 1, Height: -1},
	} {
		if out, err := e.Encode(nil, m); err == nil {
			t.Errorf("%+v: encoded %d bytes, want an error", m, len(out))
		}
	}
}

// BenchmarkDesktop compares with image/png at BestSpeed (what the driver used before) on
// the real screenshot: time per frame and the size of the result.
func BenchmarkDesktop(b *testing.B) {
	img := desktop(b)
	m := frame(img, true, 0)
	b.Run("pngenc", func(b *testing.B) {
		var e Encoder
		var out []byte
		for i := 0; i < b.N; i++ {
			var err error
			if out, err = e.Encode(out[:0], m); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(len(out))/1024, "KiB")
	})
	b.Run("image-png", func(b *testing.B) {
		enc := png.Encoder{CompressionLevel: png.BestSpeed}
		var buf bytes.Buffer
		for i := 0; i < b.N; i++ {
			buf.Reset()
			if err := enc.Encode(&buf, img); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(buf.Len())/1024, "KiB")
	})
}
