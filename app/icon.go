package app

import (
	"bytes"
	"image"
	"image/color"
	"image/png"
	"math"
)

// The icon is drawn in code so the window icon and build/appicon.png (used by `wails build`
// and the .desktop entry) come from one source; icon_test.go checks that the PNG matches.

// iconShape is one filled rounded rectangle of the icon, in units of the icon's side.
type iconShape struct {
	cx, cy, hw, hh, r float64    // centre, half width, half height, corner radius
	top, bottom       color.RGBA // vertical gradient over the icon's full height
}

// iconShapes are painted in order: tile, monitor bezel, screen, two lines of text, stand.
var iconShapes = []iconShape{
	{0.5, 0.5, 0.44, 0.44, 0.2, color.RGBA{0x4f, 0x46, 0xe5, 0xff}, color.RGBA{0x0e, 0xa5, 0xe9, 0xff}},
	{0.5, 0.44, 0.3, 0.21, 0.05, color.RGBA{0xff, 0xff, 0xff, 0xff}, color.RGBA{0xff, 0xff, 0xff, 0xff}},
	{0.5, 0.44, 0.255, 0.165, 0.02, color.RGBA{0x1e, 0x1b, 0x4b, 0xff}, color.RGBA{0x1e, 0x1b, 0x4b, 0xff}},
	{0.42, 0.39, 0.12, 0.022, 0.022, color.RGBA{0x7d, 0xd3, 0xfc, 0xff}, color.RGBA{0x7d, 0xd3, 0xfc, 0xff}},
	{0.385, 0.47, 0.085, 0.022, 0.022, color.RGBA{0x5e, 0xea, 0xd4, 0xff}, color.RGBA{0x5e, 0xea, 0xd4, 0xff}},
	{0.5, 0.685, 0.045, 0.04, 0, color.RGBA{0xff, 0xff, 0xff, 0xff}, color.RGBA{0xff, 0xff, 0xff, 0xff}},
	{0.5, 0.74, 0.15, 0.028, 0.028, color.RGBA{0xff, 0xff, 0xff, 0xff}, color.RGBA{0xff, 0xff, 0xff, 0xff}},
}

// distance is the signed distance from (x, y) to the rounded rectangle's edge (< 0 inside).
func (s iconShape) distance(x, y float64) float64 {
	qx := math.Abs(x-s.cx) - s.hw + s.r
	qy := math.Abs(y-s.cy) - s.hh + s.r
	return math.Hypot(math.Max(qx, 0), math.Max(qy, 0)) + math.Min(math.Max(qx, qy), 0) - s.r
}

// renderIcon draws the icon at size×size pixels. Edges are anti-aliased from the signed
// distance: a pixel is covered by the part of its width that lies inside the shape.
func renderIcon(size int) *image.NRGBA {
	img := image.NewNRGBA(image.Rect(0, 0, size, size))
	n := float64(size)
	for py := 0; py < size; py++ {
		y := (float64(py) + 0.5) / n
		for px := 0; px < size; px++ {
			x := (float64(px) + 0.5) / n
			var r, g, b, a float64 // premultiplied, 0..1
			for _, s := range iconShapes {
				cover := math.Min(math.Max(0.5-s.distance(x, y)*n, 0), 1)
				if cover == 0 {
					continue
				}
				mix := func(top, bottom uint8) float64 { return (float64(top)*(1-y) + float64(bottom)*y) / 255 }
				r = mix(s.top.R, s.bottom.R)*cover + r*(1-cover)
				g = mix(s.top.G, s.bottom.G)*cover + g*(1-cover)
				b = mix(s.top.B, s.bottom.B)*cover + b*(1-cover)
				a = cover + a*(1-cover)
			}
			if a == 0 {
				continue
			}
			img.SetNRGBA(px, py, color.NRGBA{
				R: uint8(math.Round(r / a * 255)),
				G: uint8(math.Round(g / a * 255)),
				B: uint8(math.Round(b / a * 255)),
				A: uint8(math.Round(a * 255)),
			})
		}
	}
	return img
}

// iconPNG returns the icon at size×size as PNG bytes.
func iconPNG(size int) []byte {
	var buf bytes.Buffer
	if err := png.Encode(&buf, renderIcon(size)); err != nil {
		panic(err) // encoding an in-memory NRGBA image into a buffer cannot fail
	}
	return buf.Bytes()
}
