package app

import (
	"bytes"
	"flag"
	"image"
	"image/png"
	"os"
	"path/filepath"
	"testing"
)

var update = flag.Bool("update", false, "rewrite build/appicon.png, build/windows/icon.ico and build/darwin/iconfile.icns from the icon drawn in icon.go")

// appIconSize is the side of build/appicon.png; `wails build` derives the other icons from it.
const appIconSize = 1024

// TestAppIconFile checks that build/appicon.png is the icon icon.go draws. Refresh it with
// `go test ./app -run TestAppIconFile -update`.
func TestAppIconFile(t *testing.T) {
	path := filepath.Join("..", "build", "appicon.png")
	want := renderIcon(appIconSize)
	if *update {
		var buf bytes.Buffer
		if err := png.Encode(&buf, want); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, buf.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	f, err := os.Open(path)
	if err != nil {
		t.Fatalf("%v (create it with -update)", err)
	}
	defer f.Close()
	got, err := png.Decode(f)
	if err != nil {
		t.Fatalf("decode %s: %v", path, err)
	}
	if got.Bounds() != want.Bounds() {
		t.Fatalf("%s is %v, want %v", path, got.Bounds(), want.Bounds())
	}
	// Allow rounding differences (fused multiply-add differs between CPU architectures).
	const tolerance = 2
	bad := 0
	for y := 0; y < appIconSize; y++ {
		for x := 0; x < appIconSize; x++ {
			r1, g1, b1, a1 := got.At(x, y).RGBA()
			r2, g2, b2, a2 := want.At(x, y).RGBA()
			for _, d := range []int{diff8(r1, r2), diff8(g1, g2), diff8(b1, b2), diff8(a1, a2)} {
				if d > tolerance {
					bad++
					break
				}
			}
		}
	}
	if bad > 0 {
		t.Errorf("%d pixels of %s differ from the drawn icon; run with -update after changing icon.go", bad, path)
	}
}

func diff8(a, b uint32) int {
	d := int(a>>8) - int(b>>8)
	if d < 0 {
		return -d
	}
	return d
}

func TestWindowIcon(t *testing.T) {
	img, err := png.Decode(bytes.NewReader(iconPNG(256)))
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name      string
		x, y      int
		wantAlpha uint32 // 16-bit alpha
	}{
		{"corner is transparent", 2, 2, 0},
		{"centre is opaque", 128, 128, 0xffff},
		{"tile edge is opaque", 128, 20, 0xffff},
	}
	if img.Bounds() != image.Rect(0, 0, 256, 256) {
		t.Fatalf("icon is %v, want 256×256", img.Bounds())
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if _, _, _, a := img.At(tt.x, tt.y).RGBA(); a != tt.wantAlpha {
				t.Errorf("alpha at %d,%d = %#x, want %#x", tt.x, tt.y, a, tt.wantAlpha)
			}
		})
	}
}
