package images_test

// Helpers of the integration tests: timing and screenshot comparisons.

import (
	"bytes"
	"context"
	"image"
	"image/png"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"cubicle/backend/guest"
)

// timing is what measure found.
type timing struct {
	n       int
	p50     time.Duration
	nsPerOp time.Duration // of the last testing.Benchmark run
}

// measure runs op under testing.Benchmark, repeating the benchmark until at least minRuns
// operations were timed, and returns the median of all per-op durations.
func measure(t *testing.T, name string, minRuns int, op func() error) timing {
	t.Helper()
	var (
		durs   []time.Duration
		opErr  error
		failed bool
		res    testing.BenchmarkResult
	)
	for len(durs) < minRuns && !failed {
		res = testing.Benchmark(func(b *testing.B) {
			for i := 0; i < b.N; i++ {
				start := time.Now()
				if err := op(); err != nil {
					opErr, failed = err, true
					b.FailNow()
				}
				durs = append(durs, time.Since(start))
			}
		})
	}
	if failed {
		t.Fatalf("%s: %v", name, opErr)
	}
	slices.Sort(durs)
	tm := timing{n: len(durs), p50: durs[len(durs)/2], nsPerOp: time.Duration(res.NsPerOp())}
	t.Logf("%s: last run %s; %d ops timed, p50 %s", name, res.String(), tm.n, tm.p50)
	return tm
}

func decodePNG(t *testing.T, f guest.Frame) *image.RGBA {
	t.Helper()
	if f.Format != "png" {
		t.Fatalf("frame format %q, want png", f.Format)
	}
	img, err := png.Decode(bytes.NewReader(f.Data))
	if err != nil {
		t.Fatalf("decode screenshot: %v", err)
	}
	if img.Bounds().Dx() != f.Width || img.Bounds().Dy() != f.Height {
		t.Fatalf("frame says %dx%d, png is %v", f.Width, f.Height, img.Bounds())
	}
	rgba := image.NewRGBA(img.Bounds())
	for y := img.Bounds().Min.Y; y < img.Bounds().Max.Y; y++ {
		for x := img.Bounds().Min.X; x < img.Bounds().Max.X; x++ {
			rgba.Set(x, y, img.At(x, y))
		}
	}
	return rgba
}

func distinctColours(img *image.RGBA) int {
	seen := map[[3]uint8]struct{}{}
	p := img.Pix
	for i := 0; i+3 < len(p); i += 4 {
		seen[[3]uint8{p[i], p[i+1], p[i+2]}] = struct{}{}
	}
	return len(seen)
}

// changed counts the pixels that differ between a and b (same size) by more than tol per
// channel.
func changed(a, b *image.RGBA, tol int) int {
	if a.Bounds() != b.Bounds() {
		return a.Bounds().Dx() * a.Bounds().Dy()
	}
	n := 0
	for i := 0; i+3 < len(a.Pix); i += 4 {
		for k := 0; k < 3; k++ {
			d := int(a.Pix[i+k]) - int(b.Pix[i+k])
			if d > tol || -d > tol {
				n++
				break
			}
		}
	}
	return n
}

// waitChange polls screenshots until at least minPixels differ from base; nil on timeout.
func waitChange(t *testing.T, ctx context.Context, c *guest.Client, base *image.RGBA, minPixels int, within time.Duration) *image.RGBA {
	t.Helper()
	deadline := time.Now().Add(within)
	for time.Now().Before(deadline) {
		f, err := c.Screenshot(ctx, guest.ScreenshotOptions{Format: "png"})
		if err != nil {
			t.Fatal(err)
		}
		img := decodePNG(t, f)
		if changed(base, img, 8) >= minPixels {
			return img
		}
		time.Sleep(200 * time.Millisecond)
	}
	return nil
}

func saveArtifact(t *testing.T, name string, img image.Image) {
	t.Helper()
	var buf bytes.Buffer
	if err := png.Encode(&buf, img); err != nil {
		t.Fatal(err)
	}
	writeArtifact(t, name, buf.Bytes())
}

func writeArtifact(t *testing.T, name string, data []byte) {
	t.Helper()
	dir := filepath.Join(repoRoot(t), "test-artifacts")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, data, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("wrote %s", p)
}
