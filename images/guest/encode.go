//go:build linux

package main

import (
	"encoding/binary"
	"fmt"

	"cubicle/images/guest/jpegenc"
	"cubicle/images/guest/pngenc"
	"cubicle/images/guest/wire"
)

// normalize fills in defaults and checks screenshot options.
func normalize(o wire.ScreenshotOptions) (wire.ScreenshotOptions, error) {
	switch o.Format {
	case "":
		o.Format = "jpeg"
	case "jpeg", "jpg":
		o.Format = "jpeg"
	case "png":
	default:
		return o, wire.Invalid("unknown image format %q (use jpeg or png)", o.Format)
	}
	if o.Quality == 0 {
		o.Quality = 80
	}
	if o.Quality < 1 || o.Quality > 100 {
		return o, wire.Invalid("jpeg quality %d is outside 1–100", o.Quality)
	}
	if o.MaxWidth < 0 {
		return o, wire.Invalid("max width %d is negative", o.MaxWidth)
	}
	return o, nil
}

// encoder turns captured BGRX pixels into JPEG or PNG, reusing its buffers. Not safe for
// concurrent use (the screen serialises it).
type encoder struct {
	jpeg   jpegenc.Encoder
	png    pngenc.Encoder // PNG is for pixel-exact checks: speed first (pngenc)
	scaled []byte
}

// encode appends the encoding of the w×h BGRX pixels raw (downscaled to o.MaxWidth when
// that is smaller) to dst.
func (e *encoder) encode(dst []byte, raw []byte, w, h int, o wire.ScreenshotOptions) (out []byte, ow, oh int, err error) {
	if o.MaxWidth > 0 && o.MaxWidth < w {
		var sw, sh int
		e.scaled, sw, sh = scale(e.scaled, raw, w, h, o.MaxWidth)
		raw, w, h = e.scaled, sw, sh
	}
	switch o.Format {
	case "png":
		out, err := e.png.Encode(dst, pngenc.Image{Pix: raw, Stride: 4 * w, Width: w, Height: h, BGR: true})
		if err != nil {
			return dst, 0, 0, fmt.Errorf("encode png: %w", err)
		}
		return out, w, h, nil
	default:
		out, err := e.jpeg.Encode(dst, jpegenc.Image{Pix: raw, Stride: 4 * w, Width: w, Height: h, BGR: true}, o.Quality)
		if err != nil {
			return dst, 0, 0, fmt.Errorf("encode jpeg: %w", err)
		}
		return out, w, h, nil
	}
}

// bgrxToRGBA swaps blue and red and sets alpha, a 32-bit word at a time.
func bgrxToRGBA(dst, src []byte) {
	n := min(len(dst), len(src)) / 4
	for i := 0; i < n; i++ {
		v := binary.LittleEndian.Uint32(src[4*i:])
		binary.LittleEndian.PutUint32(dst[4*i:], 0xff000000|v&0x0000ff00|(v>>16)&0xff|(v&0xff)<<16)
	}
}

// scale downsamples 32-bit pixels (any channel order) to width dw, keeping the aspect
// ratio; each target pixel averages the 2×2 source pixels around its centre — cheap, and
// without the shimmer of plain nearest-neighbour sampling.
func scale(dst, src []byte, sw, sh, dw int) ([]byte, int, int) {
	dh := max((sh*dw+sw/2)/sw, 1)
	if cap(dst) < dw*dh*4 {
		dst = make([]byte, dw*dh*4)
	}
	dst = dst[:dw*dh*4]
	xs := make([][2]int, dw)
	for x := range xs {
		sx := (2*x + 1) * sw / (2 * dw)
		xs[x] = [2]int{sx * 4, min(sx+1, sw-1) * 4}
	}
	for y := 0; y < dh; y++ {
		sy := (2*y + 1) * sh / (2 * dh)
		r0 := src[sy*sw*4:]
		r1 := src[min(sy+1, sh-1)*sw*4:]
		d := dst[y*dw*4:]
		for x, o := range xs {
			a, b := o[0], o[1]
			for c := 0; c < 4; c++ {
				d[x*4+c] = uint8((uint(r0[a+c]) + uint(r0[b+c]) + uint(r1[a+c]) + uint(r1[b+c]) + 2) / 4)
			}
		}
	}
	return dst, dw, dh
}
