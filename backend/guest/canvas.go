package guest

import (
	"bytes"
	"fmt"
	"image"
	"image/draw"
	"image/jpeg"
	"image/png"
)

// Canvas rebuilds the screen from a region stream's updates, as a viewer does: it is the
// reference decoder the tests hold the driver and the browser's decoder to. Part picks which
// quality's JPEG part to use (0 = the first). The zero value is empty; the first update
// applied must be a keyframe.
type Canvas struct {
	Img     *image.RGBA
	Seq     uint64
	FrameID uint64
	Part    int
}

// Apply applies u: a keyframe replaces everything (and resizes), any other update must be
// the successor of the last one applied.
func (c *Canvas) Apply(u Update) error {
	if !u.Key {
		if c.Img == nil {
			return fmt.Errorf("canvas: update %d before any keyframe", u.Seq)
		}
		if u.Seq != c.Seq+1 {
			return fmt.Errorf("canvas: update %d does not follow %d", u.Seq, c.Seq)
		}
	}
	if c.Img == nil || c.Img.Rect.Dx() != u.Width || c.Img.Rect.Dy() != u.Height {
		c.Img = image.NewRGBA(image.Rect(0, 0, u.Width, u.Height))
	}
	for i, r := range u.Regions {
		if err := c.region(u, r); err != nil {
			return fmt.Errorf("canvas: update %d region %d (%s %dx%d at %d,%d): %w", u.Seq, i, r.Enc, r.W, r.H, r.X, r.Y, err)
		}
	}
	c.Seq, c.FrameID = u.Seq, u.FrameID
	return nil
}

func (c *Canvas) region(u Update, r Region) error {
	dst := image.Rect(r.X, r.Y, r.X+r.W, r.Y+r.H)
	if r.W <= 0 || r.H <= 0 || !dst.In(c.Img.Rect) {
		return fmt.Errorf("rectangle outside the %dx%d screen", u.Width, u.Height)
	}
	switch r.Enc {
	case EncFill:
		col := image.NewUniform(rgb(r.Color))
		draw.Draw(c.Img, dst, col, image.Point{}, draw.Src)
		return nil
	case EncCopy:
		src := image.Rect(r.SrcX, r.SrcY, r.SrcX+r.W, r.SrcY+r.H)
		if !src.In(c.Img.Rect) {
			return fmt.Errorf("copy source outside the screen")
		}
		// Through a copy: source and destination overlap.
		tmp := image.NewRGBA(src)
		draw.Draw(tmp, src, c.Img, src.Min, draw.Src)
		draw.Draw(c.Img, dst, tmp, src.Min, draw.Src)
		return nil
	case EncJPEG, EncPNG:
		if len(r.Parts) == 0 {
			return fmt.Errorf("no data")
		}
		p := r.Parts[min(c.Part, len(r.Parts)-1)]
		data := u.Data[p.Off : p.Off+p.Len]
		var img image.Image
		var err error
		if r.Enc == EncJPEG {
			img, err = jpeg.Decode(bytes.NewReader(data))
		} else {
			img, err = png.Decode(bytes.NewReader(data))
		}
		if err != nil {
			return err
		}
		ib := img.Bounds()
		if p.W != 0 && r.Enc == EncJPEG {
			// A scaled part: stretch it over the region (nearest neighbour is enough for a
			// reference; such parts are refreshed losslessly like any JPEG).
			if ib.Dx() != p.W || ib.Dy() != p.H {
				return fmt.Errorf("scaled image is %v, part says %dx%d", ib.Size(), p.W, p.H)
			}
			for y := 0; y < r.H; y++ {
				for x := 0; x < r.W; x++ {
					c.Img.Set(r.X+x, r.Y+y, img.At(ib.Min.X+x*p.W/r.W, ib.Min.Y+y*p.H/r.H))
				}
			}
			return nil
		}
		if ib.Dx() != r.W || ib.Dy() != r.H {
			return fmt.Errorf("image is %v, want %dx%d", ib.Size(), r.W, r.H)
		}
		draw.Draw(c.Img, dst, img, ib.Min, draw.Src)
		return nil
	}
	return fmt.Errorf("unknown encoding %q", r.Enc)
}

func rgb(c uint32) colorRGB { return colorRGB(c) }

// colorRGB is a 0xRRGGBB colour.
type colorRGB uint32

func (c colorRGB) RGBA() (r, g, b, a uint32) {
	r, g, b = uint32(c>>16&0xff), uint32(c>>8&0xff), uint32(c&0xff)
	return r | r<<8, g | g<<8, b | b<<8, 0xffff
}
