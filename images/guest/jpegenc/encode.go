// Package jpegenc encodes screen frames as baseline JPEG (4:2:0, the standard tables) faster
// than image/jpeg, whose DCT and tables it reuses: it reads 32-bit BGRX (X11 ZPixmap) or
// RGBA pixels directly, subsamples chroma by summing 2×2 pixels before the colour
// conversion, quantises with exact reciprocals, writes bits through a 64-bit accumulator
// into a byte slice, and encodes horizontal stripes of the image in parallel, separated by
// restart markers (part of baseline JPEG; every decoder supports them).
package jpegenc

import (
	"errors"
	"math/bits"
	"runtime"
	"sync"
	"sync/atomic"
)

const (
	nQuantIndex = 2
	nHuffIndex  = 4
)

func init() {
	for i, s := range theHuffmanSpec {
		theHuffmanLUT[i].init(s)
	}
	// The DCT of a block of one value v has only a DC coefficient; remember it (and check
	// the AC part really is zero, else the flat fast path stays off).
	flatOK = true
	for v := range flatDCT {
		var b block
		for i := range b {
			b[i] = int32(v)
		}
		fdct(&b)
		flatDCT[v] = b[0]
		for _, ac := range b[1:] {
			if ac != 0 {
				flatOK = false
			}
		}
	}
}

// flatDCT[v] is the DC coefficient of a block whose 64 samples are all v; flatOK says the
// AC coefficients of such blocks are all zero, so a flat block can skip the DCT.
var (
	flatDCT [256]int32
	flatOK  bool
)

// Image is a 32-bit-per-pixel image.
type Image struct {
	Pix    []byte
	Stride int // bytes per row
	Width  int
	Height int
	BGR    bool // bytes are B,G,R,X (X11 ZPixmap on little-endian); else R,G,B,A
}

// Encoder encodes images, reusing its buffers between calls. It is not safe for concurrent
// use; Encode's own goroutines end before it returns.
type Encoder struct {
	// Workers caps the parallel stripes; 0 means GOMAXPROCS.
	Workers int

	stripes [][]byte
}

type tables struct {
	quant [nQuantIndex][blockSize]byte   // zig-zag order, as written in DQT
	recip [nQuantIndex][blockSize]uint64 // 2^32 / (8*quant) + 1, zig-zag order
	half  [nQuantIndex][blockSize]int32  // (8*quant) / 2
}

func newTables(quality int) *tables {
	quality = min(max(quality, 1), 100)
	scale := 200 - quality*2
	if quality < 50 {
		scale = 5000 / quality
	}
	t := new(tables)
	for i := range t.quant {
		for j := range t.quant[i] {
			x := (int(unscaledQuant[i][j])*scale + 50) / 100
			x = min(max(x, 1), 255)
			t.quant[i][j] = uint8(x)
			d := uint64(8 * x) // the DCT's output is scaled by 8
			t.recip[i][j] = (1<<32)/d + 1
			t.half[i][j] = int32(d / 2)
		}
	}
	return t
}

// quantize divides the block's coefficients by the table's divisors (rounding half away
// from zero, like image/jpeg's div) into zig-zag order. The reciprocals are exact for
// |a| < 2^15 and divisors ≤ 2040; the sign is handled without branches.
// It returns a mask with bit zig set for every non-zero coefficient.
func (t *tables) quantize(dst *[blockSize]int32, b *block, q int) (nonzero uint64) {
	recip, half := &t.recip[q], &t.half[q]
	for zig := 0; zig < blockSize; zig++ {
		a := b[unzig[zig]]
		s := a >> 31
		abs := (a ^ s) - s
		v := int32((uint64(abs+half[zig]) * recip[zig]) >> 32)
		dst[zig] = (v ^ s) - s
		nonzero |= uint64(uint32(-v)>>31) << zig // v ≥ 0 here: -v < 0 iff v > 0
	}
	return nonzero
}

// stripeEnc holds one stripe's bit writer.
type stripeEnc struct {
	t   *tables
	out []byte
	acc uint64
	n   uint // pending bits in acc (< 8 between calls)

	dcY, dcCb, dcCr int32 // DC predictors carried between MCU rows of a stripe
}

func (s *stripeEnc) emit(code uint64, n uint) {
	s.acc = s.acc<<n | code
	s.n += n
	for s.n >= 8 {
		s.n -= 8
		b := byte(s.acc >> s.n)
		if b == 0xff {
			s.out = append(s.out, 0xff, 0x00)
		} else {
			s.out = append(s.out, b)
		}
	}
}

// emitValue writes a Huffman symbol (run<<4 | size) and the value's size low bits.
func (s *stripeEnc) emitValue(h int, run, v int32) {
	a, b := v, v
	if a < 0 {
		a, b = -v, v-1
	}
	size := uint(bits.Len32(uint32(a)))
	x := theHuffmanLUT[h][run<<4|int32(size)]
	codeLen := uint(x >> 24)
	code := uint64(x & (1<<24 - 1))
	s.emit(code<<size|uint64(uint32(b)&(1<<size-1)), codeLen+size)
}

func (s *stripeEnc) emitHuff(h int, sym int32) {
	x := theHuffmanLUT[h][sym]
	s.emit(uint64(x&(1<<24-1)), uint(x>>24))
}

// pad fills the last byte with 1 bits.
func (s *stripeEnc) pad() {
	if s.n > 0 {
		s.emit(1<<(8-s.n)-1, 8-s.n)
	}
	s.acc, s.n = 0, 0
}

// flat reports whether all 64 samples of b are equal.
func (b *block) flat() bool {
	v := b[0]
	for _, x := range b[1:] {
		if x != v {
			return false
		}
	}
	return true
}

// flatBlock encodes a block whose samples are all v: its DC and an end of block. Screens are
// mostly such blocks (backgrounds, window fills), and skipping their DCT is most of the speed.
func (s *stripeEnc) flatBlock(v int32, q int, prevDC int32) int32 {
	a := flatDCT[v]
	sign := a >> 31
	abs := (a ^ sign) - sign
	dc := int32((uint64(abs+s.t.half[q][0]) * s.t.recip[q][0]) >> 32)
	dc = (dc ^ sign) - sign
	s.emitValue(2*q, 0, dc-prevDC)
	s.emitHuff(2*q+1, 0x00)
	return dc
}

func (s *stripeEnc) block(b *block, q int, prevDC int32) int32 {
	if flatOK && b.flat() {
		return s.flatBlock(b[0], q, prevDC)
	}
	fdct(b)
	var z [blockSize]int32
	nz := s.t.quantize(&z, b, q)
	dc := z[0]
	s.emitValue(2*q, 0, dc-prevDC)
	// Visit only the non-zero AC coefficients; the zero runs between them are bit counts.
	h, last := 2*q+1, 0
	for m := nz &^ 1; m != 0; m &= m - 1 {
		zig := bits.TrailingZeros64(m)
		run := int32(zig - last - 1)
		for run > 15 {
			s.emitHuff(h, 0xf0)
			run -= 16
		}
		s.emitValue(h, run, z[zig])
		last = zig
	}
	if last != blockSize-1 {
		s.emitHuff(h, 0x00) // end of block
	}
	return dc
}

// encodeRows encodes MCU rows [r0, r1) into s.out.
func (s *stripeEnc) encodeRows(m *Image, xo []int, r0, r1 int) {
	ri, bi := 0, 2
	if m.BGR {
		ri, bi = 2, 0
	}
	var yb, cb, cr block
	var rows [16][]byte
	mcuCols := len(xo) / 16
	for my := r0; my < r1; my++ {
		for j := range rows {
			y := min(my*16+j, m.Height-1)
			rows[j] = m.Pix[y*m.Stride:]
		}
		var dcY, dcCb, dcCr int32
		if my != r0 {
			dcY, dcCb, dcCr = s.dcY, s.dcCb, s.dcCr
		}
		for mx := 0; mx < mcuCols; mx++ {
			x0 := mx * 16
			if flatOK && flatMCU(&rows, xo[x0:x0+16]) {
				// One colour: its Y, Cb and Cr once, six DC-only blocks.
				p := rows[0][xo[x0] : xo[x0]+4 : xo[x0]+4]
				R, G, B := int32(p[ri]), int32(p[1]), int32(p[bi])
				y := (19595*R + 38470*G + 7471*B + 1<<15) >> 16
				for k := 0; k < 4; k++ {
					dcY = s.flatBlock(y, 0, dcY)
				}
				R, G, B = 4*R, 4*G, 4*B
				dcCb = s.flatBlock(clamp((-11056*R-21712*G+32768*B+4*257<<15)>>18), 1, dcCb)
				dcCr = s.flatBlock(clamp((32768*R-27440*G-5328*B+4*257<<15)>>18), 1, dcCr)
				continue
			}
			// Chroma: sum each 2×2 group, convert once.
			for j := 0; j < 8; j++ {
				r0w, r1w := rows[2*j], rows[2*j+1]
				for i := 0; i < 8; i++ {
					o0, o1 := xo[x0+2*i], xo[x0+2*i+1]
					p, q, u, v := r0w[o0:o0+4:o0+4], r0w[o1:o1+4:o1+4], r1w[o0:o0+4:o0+4], r1w[o1:o1+4:o1+4]
					R := int32(p[ri]) + int32(q[ri]) + int32(u[ri]) + int32(v[ri])
					G := int32(p[1]) + int32(q[1]) + int32(u[1]) + int32(v[1])
					B := int32(p[bi]) + int32(q[bi]) + int32(u[bi]) + int32(v[bi])
					cb[8*j+i] = clamp((-11056*R - 21712*G + 32768*B + 4*257<<15) >> 18)
					cr[8*j+i] = clamp((32768*R - 27440*G - 5328*B + 4*257<<15) >> 18)
				}
			}
			// Luma: four 8×8 blocks.
			for k := 0; k < 4; k++ {
				bx, by := x0+(k&1)*8, (k>>1)*8
				for j := 0; j < 8; j++ {
					row := rows[by+j]
					for i := 0; i < 8; i++ {
						o := xo[bx+i]
						p := row[o : o+4 : o+4]
						yb[8*j+i] = (19595*int32(p[ri]) + 38470*int32(p[1]) + 7471*int32(p[bi]) + 1<<15) >> 16
					}
				}
				dcY = s.block(&yb, 0, dcY)
			}
			dcCb = s.block(&cb, 1, dcCb)
			dcCr = s.block(&cr, 1, dcCr)
		}
		s.dcY, s.dcCb, s.dcCr = dcY, dcCb, dcCr
	}
	s.pad()
}

// flatMCU reports whether the 16×16 pixels of an MCU (rows, at byte offsets xo) all have
// one colour (the fourth byte, padding or alpha, is ignored).
func flatMCU(rows *[16][]byte, xo []int) bool {
	first := rows[0][xo[0]:]
	v := uint32(first[0]) | uint32(first[1])<<8 | uint32(first[2])<<16
	for _, row := range rows {
		for _, o := range xo {
			p := row[o : o+4 : o+4]
			if uint32(p[0])|uint32(p[1])<<8|uint32(p[2])<<16 != v {
				return false
			}
		}
	}
	return true
}

func clamp(v int32) int32 {
	return min(max(v, 0), 255)
}

// stripeRows is how many MCU rows (16 pixels each) one restart interval covers; small
// enough to balance two to eight workers, large enough that markers cost nothing.
func stripeRows(mcuRows, mcuCols int) int {
	r := max((mcuRows+7)/8, 1)
	for r*mcuCols > 0xffff && r > 1 { // the restart interval is 16 bits
		r--
	}
	return r
}

// Encode appends the JPEG encoding of m at quality (1–100) to dst and returns it.
func (e *Encoder) Encode(dst []byte, m Image, quality int) ([]byte, error) {
	if m.Width <= 0 || m.Height <= 0 || m.Width >= 1<<16 || m.Height >= 1<<16 {
		return dst, errors.New("jpegenc: image size out of range")
	}
	if m.Stride < 4*m.Width || len(m.Pix) < m.Stride*(m.Height-1)+4*m.Width {
		return dst, errors.New("jpegenc: pixel buffer too small")
	}
	t := newTables(quality)
	mcuCols, mcuRows := (m.Width+15)/16, (m.Height+15)/16
	xo := make([]int, mcuCols*16) // byte offset of each (edge-clamped) column
	for x := range xo {
		xo[x] = min(x, m.Width-1) * 4
	}
	per := stripeRows(mcuRows, mcuCols)
	n := (mcuRows + per - 1) / per
	for len(e.stripes) < n {
		e.stripes = append(e.stripes, nil)
	}
	workers := e.Workers
	if workers <= 0 {
		workers = runtime.GOMAXPROCS(0)
	}
	workers = min(workers, n)
	var next atomic.Int32
	work := func() {
		s := stripeEnc{t: t}
		for {
			k := int(next.Add(1)) - 1
			if k >= n {
				return
			}
			s.out = e.stripes[k][:0]
			s.encodeRows(&m, xo, k*per, min((k+1)*per, mcuRows))
			e.stripes[k] = s.out
		}
	}
	var wg sync.WaitGroup
	for i := 1; i < workers; i++ {
		wg.Add(1)
		go func() { defer wg.Done(); work() }()
	}
	work()
	wg.Wait()

	dst = writeHeader(dst, t, m.Width, m.Height, per*mcuCols)
	for k := 0; k < n; k++ {
		dst = append(dst, e.stripes[k]...)
		if k < n-1 {
			dst = append(dst, 0xff, 0xd0+byte(k&7)) // RSTk
		}
	}
	return append(dst, 0xff, 0xd9), nil // EOI
}

func writeHeader(dst []byte, t *tables, w, h, restart int) []byte {
	dst = append(dst, 0xff, 0xd8) // SOI
	// DQT
	dst = append(dst, 0xff, 0xdb, 0, 2+nQuantIndex*(1+blockSize))
	for i := range t.quant {
		dst = append(dst, byte(i))
		dst = append(dst, t.quant[i][:]...)
	}
	// SOF0: 8-bit, 3 components, Y 2×2, Cb and Cr 1×1.
	dst = append(dst, 0xff, 0xc0, 0, 17, 8, byte(h>>8), byte(h), byte(w>>8), byte(w), 3,
		1, 0x22, 0, 2, 0x11, 1, 3, 0x11, 1)
	// DHT
	l := 2
	for _, s := range theHuffmanSpec {
		l += 1 + 16 + len(s.value)
	}
	dst = append(dst, 0xff, 0xc4, byte(l>>8), byte(l))
	for i, s := range theHuffmanSpec {
		dst = append(dst, "\x00\x10\x01\x11"[i])
		dst = append(dst, s.count[:]...)
		dst = append(dst, s.value...)
	}
	// DRI
	dst = append(dst, 0xff, 0xdd, 0, 4, byte(restart>>8), byte(restart))
	// SOS
	return append(dst, 0xff, 0xda, 0x00, 0x0c, 0x03, 0x01, 0x00, 0x02, 0x11, 0x03, 0x11, 0x00, 0x3f, 0x00)
}
