package screentest

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"image"
	"image/color"
	"image/draw"
	"image/jpeg"
	"image/png"
	"net/http"
	"testing"
)

// Subprotocol is the websocket subprotocol of version 2 of the computer channel.
const Subprotocol = "cubicle.computer.v2"

// DialV2 opens the channel at u speaking version 2 (regions, pointer messages): Msg.Update
// is set for every update message. It fails the test when the server does not agree to
// version 2.
func DialV2(t testing.TB, u string, h http.Header) *Client {
	t.Helper()
	if h == nil {
		h = http.Header{}
	}
	h = h.Clone()
	h.Set("Sec-WebSocket-Protocol", Subprotocol)
	c, resp, err := Dial(t, u, h, true)
	if err != nil {
		t.Fatalf("dial %s: %v", u, err)
	}
	if got := resp.Header.Get("Sec-WebSocket-Protocol"); got != Subprotocol {
		t.Fatalf("the server answered subprotocol %q, want %q", got, Subprotocol)
	}
	return c
}

// Update is a version 2 update message, parsed.
type Update struct {
	FrameID       uint64
	Width, Height int
	Key           bool
	Lossless      bool
	Refresh       bool
	Regions       []WireRegion
	Size          int // bytes of the message
}

// WireRegion is one region of an update message.
type WireRegion struct {
	X, Y, W, H int
	Enc        byte // 1 JPEG, 2 PNG, 3 fill, 4 copy
	Data       []byte
}

// ParseUpdate parses a version 2 update message (docs/computer-protocol.md).
func ParseUpdate(data []byte) (*Update, error) {
	if len(data) < 32 || string(data[:4]) != "CBFR" || data[4] != 2 || data[6] != 1 {
		return nil, fmt.Errorf("not a version 2 update: % x", data[:min(len(data), 8)])
	}
	hl := int(data[5])
	if hl < 32 || hl > len(data) {
		return nil, fmt.Errorf("bad header length %d", hl)
	}
	u := &Update{FrameID: binary.BigEndian.Uint64(data[8:]), Width: int(binary.BigEndian.Uint32(data[16:])),
		Height: int(binary.BigEndian.Uint32(data[20:])), Key: data[7]&1 != 0, Lossless: data[7]&2 != 0, Refresh: data[7]&4 != 0,
		Size: len(data)}
	n := int(binary.BigEndian.Uint32(data[24:]))
	p := data[hl:]
	for i := 0; i < n; i++ {
		if len(p) < 16 {
			return nil, fmt.Errorf("region %d: short header", i)
		}
		r := WireRegion{X: int(binary.BigEndian.Uint16(p[0:])), Y: int(binary.BigEndian.Uint16(p[2:])),
			W: int(binary.BigEndian.Uint16(p[4:])), H: int(binary.BigEndian.Uint16(p[6:])), Enc: p[8]}
		l := int(binary.BigEndian.Uint32(p[12:]))
		if len(p) < 16+l {
			return nil, fmt.Errorf("region %d: %d bytes of data, %d left", i, l, len(p)-16)
		}
		r.Data = p[16 : 16+l]
		p = p[16+l:]
		u.Regions = append(u.Regions, r)
	}
	if len(p) != 0 {
		return nil, fmt.Errorf("%d bytes after the last region", len(p))
	}
	return u, nil
}

// Canvas rebuilds the screen from update messages, as the browser does.
type Canvas struct {
	Img *image.RGBA
}

// Apply applies u to the canvas.
func (c *Canvas) Apply(u *Update) error {
	if c.Img == nil || c.Img.Rect.Dx() != u.Width || c.Img.Rect.Dy() != u.Height {
		if !u.Key {
			return fmt.Errorf("an update that is not a keyframe on a canvas without a screen")
		}
		c.Img = image.NewRGBA(image.Rect(0, 0, u.Width, u.Height))
	}
	for i, r := range u.Regions {
		dst := image.Rect(r.X, r.Y, r.X+r.W, r.Y+r.H)
		if !dst.In(c.Img.Rect) || dst.Empty() {
			return fmt.Errorf("region %d %v outside the screen", i, dst)
		}
		switch r.Enc {
		case 1, 2:
			var img image.Image
			var err error
			if r.Enc == 1 {
				img, err = jpeg.Decode(bytes.NewReader(r.Data))
			} else {
				img, err = png.Decode(bytes.NewReader(r.Data))
			}
			if err != nil {
				return fmt.Errorf("region %d: %v", i, err)
			}
			ib := img.Bounds()
			switch {
			case ib.Dx() == r.W && ib.Dy() == r.H:
				draw.Draw(c.Img, dst, img, ib.Min, draw.Src)
			case r.Enc == 1 && ib.Dx() <= r.W && ib.Dy() <= r.H: // a lower resolution, stretched
				for y := 0; y < r.H; y++ {
					for x := 0; x < r.W; x++ {
						c.Img.Set(r.X+x, r.Y+y, img.At(ib.Min.X+x*ib.Dx()/r.W, ib.Min.Y+y*ib.Dy()/r.H))
					}
				}
			default:
				return fmt.Errorf("region %d: image %v for a %dx%d region", i, ib.Size(), r.W, r.H)
			}
		case 3:
			if len(r.Data) != 4 {
				return fmt.Errorf("region %d: fill with %d bytes", i, len(r.Data))
			}
			draw.Draw(c.Img, dst, image.NewUniform(color.RGBA{r.Data[0], r.Data[1], r.Data[2], 255}), image.Point{}, draw.Src)
		case 4:
			if len(r.Data) != 4 {
				return fmt.Errorf("region %d: copy with %d bytes", i, len(r.Data))
			}
			sx, sy := int(binary.BigEndian.Uint16(r.Data)), int(binary.BigEndian.Uint16(r.Data[2:]))
			src := image.Rect(sx, sy, sx+r.W, sy+r.H)
			if !src.In(c.Img.Rect) {
				return fmt.Errorf("region %d: copy from %v outside the screen", i, src)
			}
			tmp := image.NewRGBA(src)
			draw.Draw(tmp, src, c.Img, src.Min, draw.Src)
			draw.Draw(c.Img, dst, tmp, src.Min, draw.Src)
		default:
			return fmt.Errorf("region %d: unknown encoding %d", i, r.Enc)
		}
	}
	return nil
}

// Differ counts the pixels where the canvas and img differ (colour only).
func (c *Canvas) Differ(img image.Image) int {
	b := img.Bounds()
	if c.Img == nil || c.Img.Rect.Size() != b.Size() {
		return b.Dx() * b.Dy()
	}
	n := 0
	for y := 0; y < b.Dy(); y++ {
		for x := 0; x < b.Dx(); x++ {
			r1, g1, b1, _ := c.Img.At(x, y).RGBA()
			r2, g2, b2, _ := img.At(b.Min.X+x, b.Min.Y+y).RGBA()
			if r1>>8 != r2>>8 || g1>>8 != g2>>8 || b1>>8 != b2>>8 {
				n++
			}
		}
	}
	return n
}
