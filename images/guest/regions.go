//go:build linux

package main

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"image"
	"image/color"
	"image/png"

	"cubicle/images/guest/jpegenc"
	"cubicle/images/guest/pngenc"
	"cubicle/images/guest/wire"
)

// The region stream works on tiles of tileSize×tileSize pixels: changes are found per tile
// (to the pixel within it), classified per tile, and merged into rectangles of tiles of the
// same class, each encoded on its own.
const tileSize = 64

// box is a rectangle [x0,x1)×[y0,y1); empty when x1 <= x0.
type box struct{ x0, y0, x1, y1 int }

func (b box) empty() bool { return b.x1 <= b.x0 || b.y1 <= b.y0 }
func (b box) w() int      { return b.x1 - b.x0 }
func (b box) h() int      { return b.y1 - b.y0 }
func (b box) area() int   { return b.w() * b.h() }

// union returns the smallest box holding both (an empty box adds nothing).
func (b box) union(o box) box {
	if b.empty() {
		return o
	}
	if o.empty() {
		return b
	}
	return box{min(b.x0, o.x0), min(b.y0, o.y0), max(b.x1, o.x1), max(b.y1, o.y1)}
}

// grid is the tiling of a w×h screen.
type grid struct{ w, h, tw, th int }

func newGrid(w, h int) grid {
	return grid{w: w, h: h, tw: (w + tileSize - 1) / tileSize, th: (h + tileSize - 1) / tileSize}
}

func (g grid) tiles() int { return g.tw * g.th }

// tile returns the box of tile i.
func (g grid) tile(i int) box {
	tx, ty := i%g.tw, i/g.tw
	return box{tx * tileSize, ty * tileSize, min((tx+1)*tileSize, g.w), min((ty+1)*tileSize, g.h)}
}

// diffTiles compares the BGRX images cur and ref (same size, stride w*4) and sets, per tile,
// the bounding box of the pixels that differ (empty for unchanged tiles). It reports whether
// anything differs. Rows are compared whole first, so unchanged rows cost one memcmp.
func diffTiles(g grid, cur, ref []byte, dirty []box) bool {
	for i := range dirty {
		dirty[i] = box{}
	}
	stride := g.w * 4
	changed := false
	for y := 0; y < g.h; y++ {
		a, b := cur[y*stride:(y+1)*stride], ref[y*stride:(y+1)*stride]
		if bytes.Equal(a, b) {
			continue
		}
		changed = true
		ty := y / tileSize
		for tx := 0; tx < g.tw; tx++ {
			x0, x1 := tx*tileSize, min((tx+1)*tileSize, g.w)
			sa, sb := a[x0*4:x1*4], b[x0*4:x1*4]
			if bytes.Equal(sa, sb) {
				continue
			}
			first, last := diffSpan(sa, sb)
			d := &dirty[ty*g.tw+tx]
			*d = d.union(box{x0 + first, y, x0 + last + 1, y + 1})
		}
	}
	return changed
}

// diffSpan returns the first and last pixel index where two equal-length pixel rows differ
// (they must differ somewhere).
func diffSpan(a, b []byte) (first, last int) {
	n := len(a) / 4
	first, last = 0, n-1
	for first < n && binary.LittleEndian.Uint32(a[first*4:]) == binary.LittleEndian.Uint32(b[first*4:]) {
		first++
	}
	for last > first && binary.LittleEndian.Uint32(a[last*4:]) == binary.LittleEndian.Uint32(b[last*4:]) {
		last--
	}
	return first, last
}

// copyBox copies the pixels of b from src to dst (both BGRX, stride).
func copyBox(dst, src []byte, stride int, b box) {
	for y := b.y0; y < b.y1; y++ {
		o := y*stride + b.x0*4
		copy(dst[o:o+b.w()*4], src[o:o+b.w()*4])
	}
}

// Tile classes: how a tile's pixels are best encoded.
const (
	classFill  = iota // one colour
	classFew          // at most paletteMax colours: text, UI — lossless PNG, small
	classMany         // photographic: JPEG, refreshed losslessly once it stops changing
	classCount        // (number of classes)
)

// paletteMax is the most colours a region may have to be sent as a paletted PNG.
const paletteMax = 256

// smallLossless: a photographic region this small (pixels) is sent as PNG anyway; a JPEG's
// headers alone cost ~600 bytes.
const smallLossless = 48 * 48

// palette is a small open-addressing set of colours (0xRRGGBB) with their insertion index.
type palette struct {
	keys [1024]uint32 // colour+1 (0 = empty slot)
	idx  [1024]uint16
	list []uint32
}

func (p *palette) reset() {
	clear(p.keys[:])
	p.list = p.list[:0]
}

// add inserts c and returns its index, or -1 once paletteMax colours are exceeded.
func (p *palette) add(c uint32) int {
	h := (c * 0x9e3779b1) >> 22
	for {
		k := p.keys[h]
		if k == 0 {
			if len(p.list) == paletteMax {
				return -1
			}
			p.keys[h] = c + 1
			p.idx[h] = uint16(len(p.list))
			p.list = append(p.list, c)
			return len(p.list) - 1
		}
		if k == c+1 {
			return int(p.idx[h])
		}
		h = (h + 1) & 1023
	}
}

// classify returns the class of the pixels of b (and the colour of a fill). Few colours are
// not enough for lossless: a smooth gradient has few colours per tile too, yet compresses
// far better as JPEG. Text and user interfaces also repeat a pixel along the row most of the
// time; so beyond fewColours, a region counts as few only when most pixels equal their left
// neighbour.
func classify(pix []byte, stride int, b box, p *palette) (class int, fill uint32) {
	p.reset()
	same, total := 0, 0
	for y := b.y0; y < b.y1; y++ {
		row := pix[y*stride+b.x0*4 : y*stride+b.x1*4]
		prev := uint32(1 << 31) // not a colour: forces the first lookup
		for i := 0; i+4 <= len(row); i += 4 {
			c := binary.LittleEndian.Uint32(row[i:]) & 0xffffff
			total++
			if c == prev {
				same++
				continue // runs are common; skip the hash
			}
			prev = c
			if p.add(c) < 0 {
				return classMany, 0
			}
		}
	}
	switch {
	case len(p.list) == 1:
		return classFill, p.list[0] // BGRX read little-endian: 0x00RRGGBB
	case len(p.list) > fewColours && same*2 < total:
		return classMany, 0
	}
	return classFew, 0
}

// fewColours: a region with at most this many colours is lossless whatever its runs.
const fewColours = 16

// regionEncoder encodes rectangles of a BGRX image; it keeps its buffers between calls. Not
// safe for concurrent use.
type regionEncoder struct {
	jpeg  jpegenc.Encoder
	pal   palette
	rgba  *image.RGBA
	pimg  *image.Paletted
	buf   bytes.Buffer
	half  []byte         // a region at half size (scale 2)
	fast  pngenc.Encoder // large truecolour regions: speed first, straight from the frame
	large png.Encoder    // large paletted regions: speed first
	small png.Encoder    // small regions (text that changes): fewer bytes, still cheap at their size
}

// smallPNG: regions up to this many pixels are compressed harder; they are what keeps
// changing (a clock, a terminal line), so their bytes add up. Harder is zlib's default level,
// not its best: on desktop regions of 3–10 kpx the best level took 6–16 ms for 1–3 % fewer
// bytes than the default (under 2 ms), and those milliseconds were most of the live view's
// input → changed frame time when a menu closed (BenchmarkRegionUpdate/TextLine: 0.9 ms against 1.5 ms).
const smallPNG = 128 * 128

func newRegionEncoder() *regionEncoder {
	return &regionEncoder{large: png.Encoder{CompressionLevel: png.BestSpeed},
		small: png.Encoder{CompressionLevel: png.DefaultCompression}}
}

// encode appends the encoding of rectangle b of pix (class as classified, fill its colour)
// to blob and returns the region. lossless forces a lossless encoding. lossy reports a JPEG,
// one part per entry of qs.
func (e *regionEncoder) encode(blob []byte, pix []byte, stride int, b box, class int, fill uint32,
	qs []jpegPart, lossless bool) (out []byte, r wire.Region, lossy bool, err error) {
	r = wire.Region{X: b.x0, Y: b.y0, W: b.w(), H: b.h()}
	switch {
	case class == classFill:
		r.Enc, r.Color = wire.EncFill, fill
		return blob, r, false, nil
	case class == classMany && !lossless && b.area() > smallLossless:
		r.Enc = wire.EncJPEG
		full := jpegenc.Image{Pix: pix[b.y0*stride+b.x0*4:], Stride: stride, Width: b.w(), Height: b.h(), BGR: true}
		var half *jpegenc.Image
		for _, p := range qs {
			m, part := full, wire.Part{}
			if p.scale == 2 && b.w() >= 16 && b.h() >= 16 {
				if half == nil {
					half = e.halve(pix, stride, b)
				}
				m, part.W, part.H = *half, half.Width, half.Height
			}
			part.Off = len(blob)
			if blob, err = e.jpeg.Encode(blob, m, p.quality); err != nil {
				return blob, r, false, fmt.Errorf("encode jpeg region: %w", err)
			}
			part.Len = len(blob) - part.Off
			r.Parts = append(r.Parts, part)
		}
		return blob, r, true, nil
	}
	r.Enc = wire.EncPNG
	e.buf.Reset()
	var img image.Image
	if class != classMany {
		if c, _ := classify(pix, stride, b, &e.pal); c != classMany {
			img = e.paletted(pix, stride, b)
		}
	}
	off := len(blob)
	switch {
	case img == nil && b.area() > smallPNG:
		m := pngenc.Image{Pix: pix[b.y0*stride+b.x0*4:], Stride: stride, Width: b.w(), Height: b.h(), BGR: true}
		if blob, err = e.fast.Encode(blob, m); err != nil {
			return blob, r, false, fmt.Errorf("encode png region: %w", err)
		}
	default:
		if img == nil {
			img = e.truecolour(pix, stride, b)
		}
		enc := &e.small
		if b.area() > smallPNG {
			enc = &e.large
		}
		if err := enc.Encode(&e.buf, img); err != nil {
			return blob, r, false, fmt.Errorf("encode png region: %w", err)
		}
		blob = append(blob, e.buf.Bytes()...)
	}
	r.Parts = []wire.Part{{Off: off, Len: len(blob) - off}}
	return blob, r, false, nil
}

// halve returns rectangle b of pix at half its size in each direction (rounded up), each
// pixel the average of the 2×2 it covers.
func (e *regionEncoder) halve(pix []byte, stride int, b box) *jpegenc.Image {
	w, h := (b.w()+1)/2, (b.h()+1)/2
	if cap(e.half) < w*h*4 {
		e.half = make([]byte, w*h*4)
	}
	out := e.half[:w*h*4]
	for y := 0; y < h; y++ {
		r0 := pix[(b.y0+2*y)*stride+b.x0*4:]
		r1 := r0
		if b.y0+2*y+1 < b.y1 {
			r1 = pix[(b.y0+2*y+1)*stride+b.x0*4:]
		}
		d := out[y*w*4:]
		for x := 0; x < w; x++ {
			a, c := 8*x, 8*x+4
			if 2*x+1 >= b.w() {
				c = a
			}
			for k := 0; k < 3; k++ {
				d[4*x+k] = uint8((uint(r0[a+k]) + uint(r0[c+k]) + uint(r1[a+k]) + uint(r1[c+k]) + 2) / 4)
			}
		}
	}
	return &jpegenc.Image{Pix: out, Stride: w * 4, Width: w, Height: h, BGR: true}
}

// paletted builds a paletted image of b from the palette classify just filled.
func (e *regionEncoder) paletted(pix []byte, stride int, b box) image.Image {
	pal := make(color.Palette, len(e.pal.list))
	for i, c := range e.pal.list {
		pal[i] = color.RGBA{uint8(c >> 16), uint8(c >> 8), uint8(c), 0xff}
	}
	w, h := b.w(), b.h()
	if e.pimg == nil || cap(e.pimg.Pix) < w*h {
		e.pimg = &image.Paletted{Pix: make([]uint8, w*h)}
	}
	e.pimg.Pix, e.pimg.Stride, e.pimg.Rect, e.pimg.Palette = e.pimg.Pix[:w*h], w, image.Rect(0, 0, w, h), pal
	for y := 0; y < h; y++ {
		row := pix[(b.y0+y)*stride+b.x0*4:]
		out := e.pimg.Pix[y*w : (y+1)*w]
		for x := range out {
			out[x] = uint8(e.pal.add(binary.LittleEndian.Uint32(row[x*4:]) & 0xffffff))
		}
	}
	return e.pimg
}

// truecolour copies b into an opaque RGBA image.
func (e *regionEncoder) truecolour(pix []byte, stride int, b box) image.Image {
	w, h := b.w(), b.h()
	if e.rgba == nil || cap(e.rgba.Pix) < w*h*4 {
		e.rgba = &image.RGBA{Pix: make([]uint8, w*h*4)}
	}
	e.rgba.Pix, e.rgba.Stride, e.rgba.Rect = e.rgba.Pix[:w*h*4], w*4, image.Rect(0, 0, w, h)
	for y := 0; y < h; y++ {
		o := (b.y0+y)*stride + b.x0*4
		bgrxToRGBA(e.rgba.Pix[y*w*4:(y+1)*w*4], pix[o:o+w*4])
	}
	return e.rgba
}

// rect is a merged rectangle of tiles of one class, ready to encode.
type rect struct {
	b     box
	class int
	fill  uint32
	t0    int // first tile column and row it spans, and one past the last
	t1    int
	r0    int
	r1    int
}

// mergeTiles groups dirty tiles (boxes[i] non-empty) into rectangles: runs of horizontally
// adjacent tiles of one class (one colour for fills) in a tile row, then runs with the same
// columns and class in consecutive rows. Each rectangle is the union of its tiles' boxes.
func mergeTiles(g grid, boxes []box, class []int, fill []uint32, out []rect) []rect {
	out = out[:0]
	open := map[[4]uint32]int{} // (t0, t1, class, fill) of a run in the previous row → index in out
	next := map[[4]uint32]int{}
	for ty := 0; ty < g.th; ty++ {
		clear(next)
		for tx := 0; tx < g.tw; {
			i := ty*g.tw + tx
			if boxes[i].empty() {
				tx++
				continue
			}
			c, f := class[i], fill[i]
			b := boxes[i]
			t0 := tx
			for tx++; tx < g.tw; tx++ {
				j := ty*g.tw + tx
				if boxes[j].empty() || class[j] != c || (c == classFill && fill[j] != f) {
					break
				}
				b = b.union(boxes[j])
			}
			key := [4]uint32{uint32(t0), uint32(tx), uint32(c), f}
			if k, ok := open[key]; ok && out[k].r1 == ty {
				out[k].b = out[k].b.union(b)
				out[k].r1 = ty + 1
				next[key] = k
				continue
			}
			out = append(out, rect{b: b, class: c, fill: f, t0: t0, t1: tx, r0: ty, r1: ty + 1})
			next[key] = len(out) - 1
		}
		open, next = next, open
	}
	return out
}

// uniform reports whether every pixel of b is colour c (0xRRGGBB).
func uniform(pix []byte, stride int, b box, c uint32) bool {
	for y := b.y0; y < b.y1; y++ {
		row := pix[y*stride+b.x0*4 : y*stride+b.x1*4]
		for i := 0; i+4 <= len(row); i += 4 {
			if binary.LittleEndian.Uint32(row[i:])&0xffffff != c {
				return false
			}
		}
	}
	return true
}
