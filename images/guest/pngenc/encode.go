// Package pngenc encodes screen frames as PNG faster than image/png: it reads 32-bit BGRX
// (X11 ZPixmap) pixels directly and writes 8-bit RGB (a screen has no alpha), filters every
// row with the same filter — Up, the filter fast PNG encoders such as fpng use: a screen's
// flat areas and repeated rows become runs of zeros — instead of trying all five on every row
// as image/png does, and compresses with klauspost/compress's zlib at its fastest level. The
// output is an ordinary PNG that every decoder reads; the pixels are exact.
package pngenc

import (
	"bytes"
	"encoding/binary"
	"errors"
	"hash/crc32"

	"github.com/klauspost/compress/zlib"
)

// Image is a frame of 32-bit pixels: Stride bytes per row, Width×Height pixels; BGR says
// the bytes of a pixel are blue, green, red (X11 on little-endian), otherwise red, green,
// blue. The fourth byte is ignored.
type Image struct {
	Pix           []byte
	Stride        int
	Width, Height int
	BGR           bool
}

// Encoder keeps its buffers between frames. Not safe for concurrent use.
type Encoder struct {
	// Level is the zlib level (zlib.BestSpeed when 0).
	Level int
	zw    *zlib.Writer
	zlvl  int
	idat  bytes.Buffer
	prev  []byte // the previous row, RGB
	row   []byte // the filter byte and the filtered current row
	cur   []byte // the current row, RGB
}

// pngHeader is the signature every PNG starts with.
const pngHeader = "\x89PNG\r\n\x1a\n"

// filterUp is PNG's filter type 2: each byte minus the byte above it.
const filterUp = 2

// Encode appends the PNG encoding of m to dst.
func (e *Encoder) Encode(dst []byte, m Image) ([]byte, error) {
	w, h := m.Width, m.Height
	if w <= 0 || h <= 0 || m.Stride < 4*w || len(m.Pix) < (h-1)*m.Stride+4*w {
		return dst, errors.New("pngenc: the image's size does not match its pixels")
	}
	lvl := e.Level
	if lvl == 0 {
		lvl = zlib.BestSpeed
	}
	e.idat.Reset()
	if e.zw == nil || e.zlvl != lvl {
		zw, err := zlib.NewWriterLevel(&e.idat, lvl)
		if err != nil {
			return dst, err
		}
		e.zw, e.zlvl = zw, lvl
	} else {
		e.zw.Reset(&e.idat)
	}
	n := 3 * w
	e.prev = grow(e.prev, n)
	e.cur = grow(e.cur, n)
	e.row = grow(e.row, n+1)
	clear(e.prev) // the row above the first is zeros: Up on the first row sends it as it is
	e.row[0] = filterUp
	r, b := 0, 2 // byte offsets of red and blue in a pixel
	if m.BGR {
		r, b = 2, 0
	}
	for y := 0; y < h; y++ {
		src := m.Pix[y*m.Stride : y*m.Stride+4*w]
		cur, prev, out := e.cur, e.prev, e.row[1:]
		for x, i, o := 0, 0, 0; x < w; x, i, o = x+1, i+4, o+3 {
			cr, cg, cb := src[i+r], src[i+1], src[i+b]
			cur[o], cur[o+1], cur[o+2] = cr, cg, cb
			out[o], out[o+1], out[o+2] = cr-prev[o], cg-prev[o+1], cb-prev[o+2]
		}
		if _, err := e.zw.Write(e.row); err != nil {
			return dst, err
		}
		e.prev, e.cur = cur, prev
	}
	if err := e.zw.Close(); err != nil {
		return dst, err
	}

	dst = append(dst, pngHeader...)
	var ihdr [13]byte
	binary.BigEndian.PutUint32(ihdr[0:], uint32(w))
	binary.BigEndian.PutUint32(ihdr[4:], uint32(h))
	ihdr[8], ihdr[9] = 8, 2 // 8 bits per sample, truecolour (RGB); compression, filter, interlace 0
	dst = chunk(dst, "IHDR", ihdr[:])
	dst = chunk(dst, "IDAT", e.idat.Bytes())
	dst = chunk(dst, "IEND", nil)
	return dst, nil
}

// chunk appends a PNG chunk: length, type, data, CRC-32 of type and data.
func chunk(dst []byte, typ string, data []byte) []byte {
	dst = binary.BigEndian.AppendUint32(dst, uint32(len(data)))
	start := len(dst)
	dst = append(dst, typ...)
	dst = append(dst, data...)
	return binary.BigEndian.AppendUint32(dst, crc32.ChecksumIEEE(dst[start:]))
}

// grow returns b with length n, reusing its array when it is large enough.
func grow(b []byte, n int) []byte {
	if cap(b) < n {
		return make([]byte, n)
	}
	return b[:n]
}
