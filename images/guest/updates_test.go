//go:build linux

package main

import (
	"bytes"
	"context"
	"errors"
	"image"
	"image/color"
	"image/png"
	"math/rand"
	"testing"
	"time"

	"cubicle/backend/fault"
	"cubicle/backend/guest"
	"cubicle/images/guest/wire"
	"cubicle/images/guest/x11/xvfbtest"
)

// Displays :150–:154 belong to the region stream and pointer tests.

// photo is a w×h image of noise over a gradient: thousands of colours, what JPEG is for.
func photo(w, h int, seed int64) *image.RGBA {
	r := rand.New(rand.NewSource(seed))
	img := image.NewRGBA(image.Rect(0, 0, w, h))
	for y := 0; y < h; y++ {
		for x := 0; x < w; x++ {
			n := r.Intn(40)
			img.Set(x, y, color.RGBA{uint8(x*255/w/2 + n), uint8(y*255/h/2 + n), uint8((x+y)%200 + n/2), 255})
		}
	}
	return img
}

// text is a w×h two-colour pattern with the shapes of text lines: what a paletted PNG is for.
func text(w, h int, seed int64) *image.RGBA {
	r := rand.New(rand.NewSource(seed))
	img := image.NewRGBA(image.Rect(0, 0, w, h))
	ink, paper := color.RGBA{20, 20, 20, 255}, color.RGBA{250, 250, 245, 255}
	for y := 0; y < h; y++ {
		for x := 0; x < w; x++ {
			c := paper
			if y%16 < 11 && x%7 < 5 && r.Intn(3) == 0 {
				c = ink
			}
			img.Set(x, y, c)
		}
	}
	return img
}

// stream reads updates of one region stream and applies them to canvases (one per quality).
type streamReader struct {
	t        *testing.T
	c        *guest.Client
	id       uint64
	qs       []int
	scales   []int
	canvases []*guest.Canvas
	last     guest.Update
}

func newStreamReader(t *testing.T, c *guest.Client, id uint64, qs ...int) *streamReader {
	sr := &streamReader{t: t, c: c, id: id, qs: qs}
	for i := range max(len(qs), 1) {
		sr.canvases = append(sr.canvases, &guest.Canvas{Part: i})
	}
	return sr
}

// next reads and applies the next update.
func (sr *streamReader) next() guest.Update {
	sr.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	u, err := sr.c.NextUpdate(ctx, guest.UpdateArgs{Stream: sr.id, After: sr.last.Seq, Qualities: sr.qs, Scales: sr.scales})
	if err != nil {
		sr.t.Fatalf("next_update after %d: %v", sr.last.Seq, err)
	}
	for _, cv := range sr.canvases {
		if err := cv.Apply(u); err != nil {
			sr.t.Fatalf("apply: %v", err)
		}
	}
	sr.last = u
	return u
}

// untilLossless reads updates until one leaves the host's copy exact (none when the last
// one did).
func (sr *streamReader) untilLossless() []guest.Update {
	sr.t.Helper()
	var us []guest.Update
	if sr.last.Lossless {
		return nil
	}
	for i := 0; i < 20; i++ {
		u := sr.next()
		us = append(us, u)
		if u.Lossless {
			return us
		}
	}
	sr.t.Fatalf("no lossless update after 20 updates")
	return nil
}

// exact takes a lossless screenshot without the pointer and fails unless every canvas shows
// exactly that.
func (sr *streamReader) exact(what string) {
	sr.t.Helper()
	f, err := sr.c.Screenshot(context.Background(), guest.ScreenshotOptions{Format: "png", NoPointer: true})
	if err != nil {
		sr.t.Fatal(err)
	}
	want, err := png.Decode(bytes.NewReader(f.Data))
	if err != nil {
		sr.t.Fatal(err)
	}
	for i, cv := range sr.canvases {
		if n, at := differ(cv.Img, want); n > 0 {
			sr.t.Fatalf("%s: canvas %d (quality part %d) differs from the screen in %d pixels (first at %v)", what, i, cv.Part, n, at)
		}
	}
}

// differ counts the pixels where a and b differ.
func differ(a *image.RGBA, b image.Image) (int, image.Point) {
	n, first := 0, image.Point{-1, -1}
	bb := b.Bounds()
	if a == nil || a.Rect.Size() != bb.Size() {
		return 1 << 30, first
	}
	for y := 0; y < bb.Dy(); y++ {
		for x := 0; x < bb.Dx(); x++ {
			r1, g1, b1, _ := a.At(x, y).RGBA()
			r2, g2, b2, _ := b.At(bb.Min.X+x, bb.Min.Y+y).RGBA()
			if r1>>8 != r2>>8 || g1>>8 != g2>>8 || b1>>8 != b2>>8 {
				if n == 0 {
					first = image.Point{x, y}
				}
				n++
			}
		}
	}
	return n, first
}

func encodings(u guest.Update) map[string]int {
	m := map[string]int{}
	for _, r := range u.Regions {
		m[r.Enc]++
	}
	return m
}

// TestRegionStream draws what desktops show — flat fills, text, photos, scrolling — and
// checks that the stream sends each the intended way and that a viewer applying the updates
// ends with exactly the screen, at every quality.
func TestRegionStream(t *testing.T) {
	h := startDriver(t, 150, 640, 400)
	win := xvfbtest.NewWindow(t, h.display, 0, 0, 640, 400, 0x336699)
	sr := newStreamReader(t, h.client, 7, 75, 30, 40)
	sr.scales = []int{1, 1, 2} // the third part at half resolution

	key := sr.next()
	if !key.Key || key.Width != 640 || key.Height != 400 {
		t.Fatalf("first update: key=%v %dx%d, want a 640x400 keyframe", key.Key, key.Width, key.Height)
	}
	sr.untilLossless()
	sr.exact("after the keyframe")

	// A flat change: one fill.
	win.Fill(t, 10, 10, 50, 30, 0xff0000)
	u := sr.next()
	if e := encodings(u); e[wire.EncFill] == 0 || e[wire.EncJPEG] > 0 || e[wire.EncPNG] > 0 {
		t.Errorf("a filled rectangle was sent as %v, want fills only", e)
	}
	sr.exact("after a fill")

	// Text: lossless at once (a paletted PNG), no refresh needed.
	win.Put(t, 100, 60, text(300, 64, 1))
	u = sr.next()
	if e := encodings(u); e[wire.EncPNG] == 0 || e[wire.EncJPEG] > 0 {
		t.Errorf("text was sent as %v, want PNG", e)
	}
	if !u.Lossless {
		t.Errorf("after text the stream says the host is not exact")
	}
	sr.exact("after text")

	// A photo: JPEG at both qualities, then a lossless refresh once it stays.
	win.Put(t, 300, 150, photo(256, 192, 2))
	u = sr.next()
	var jpeg *guest.Region
	for i, r := range u.Regions {
		if r.Enc == wire.EncJPEG {
			jpeg = &u.Regions[i]
		}
	}
	if jpeg == nil {
		t.Fatalf("a photo was sent as %v, want JPEG", encodings(u))
	}
	if len(jpeg.Parts) != 3 || len(u.Qualities) != 3 || jpeg.Parts[0].Len <= jpeg.Parts[1].Len {
		t.Errorf("JPEG parts %+v for qualities %v: want one per quality, q75 larger than q30", jpeg.Parts, u.Qualities)
	}
	if p := jpeg.Parts[2]; p.W != (jpeg.W+1)/2 || p.H != (jpeg.H+1)/2 || p.Len >= jpeg.Parts[1].Len ||
		jpeg.Parts[0].W != 0 || len(u.Scales) != 3 || u.Scales[2] != 2 {
		t.Errorf("half resolution part %+v of a %dx%d region (scales %v): want half the size, smaller than q30", p, jpeg.W, jpeg.H, u.Scales)
	}
	if u.Lossless {
		t.Errorf("after a JPEG the stream says the host is exact")
	}
	us := sr.untilLossless()
	if r := us[len(us)-1]; !r.Refresh || encodings(r)[wire.EncJPEG] > 0 {
		t.Errorf("the lossless update is refresh=%v with %v, want a refresh without JPEG", r.Refresh, encodings(r))
	}
	sr.exact("after the photo's refresh")

	// Scrolling: text moves up 23 pixels, a new strip comes in at the bottom.
	win.Put(t, 0, 80, text(640, 300, 3))
	sr.next()
	sr.untilLossless()
	win.Copy(t, 0, 103, 640, 277, 0, 80)
	win.Put(t, 0, 357, text(640, 23, 4))
	us = append([]guest.Update{sr.next()}, sr.untilLossless()...)
	var cp *guest.Region
	for i, r := range us[0].Regions {
		if r.Enc == wire.EncCopy {
			cp = &us[0].Regions[i]
		}
	}
	if cp == nil {
		t.Fatalf("a scroll was sent as %v, want a copy", encodings(us[0]))
	}
	if cp.SrcY-cp.Y != 23 || cp.H < 200 || cp.W < 600 {
		t.Errorf("copy %+v: want a shift of 23 rows covering most of the text", *cp)
	}
	total := 0
	for _, u := range us {
		total += len(u.Data)
	}
	if total > 40<<10 {
		t.Errorf("the scroll cost %d bytes; a copy and a 23-row strip should be far less", total)
	}
	sr.exact("after scrolling")

	// Nothing changes: no update until something does (the refresh has nothing to do).
	ctx, cancel := context.WithTimeout(context.Background(), 600*time.Millisecond)
	_, err := h.client.NextUpdate(ctx, guest.UpdateArgs{Stream: 7, After: sr.last.Seq, Qualities: sr.qs})
	cancel()
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("next_update on a still screen answered (%v), want it to wait", err)
	}
}

// TestRegionStreamKeyframes: a viewer joining mid-stream starts from a keyframe of what the
// others have and follows the same updates to the same exact screen; a host out of step
// (a lost update) gets a keyframe; bad requests are refused.
func TestRegionStreamKeyframes(t *testing.T) {
	h := startDriver(t, 151, 320, 240)
	win := xvfbtest.NewWindow(t, h.display, 0, 0, 320, 240, 0x202020)
	first := newStreamReader(t, h.client, 1, 60)
	first.next()
	win.Put(t, 20, 20, photo(200, 150, 5))
	first.next()
	first.untilLossless() // exact for the first viewer

	ctx := context.Background()
	k, err := h.client.Keyframe(ctx, guest.KeyframeArgs{Stream: 1, Qualities: []int{60}})
	if err != nil {
		t.Fatal(err)
	}
	if !k.Key || k.Seq != first.last.Seq {
		t.Fatalf("keyframe seq %d key %v, want the stream's seq %d", k.Seq, k.Key, first.last.Seq)
	}
	joiner := &guest.Canvas{}
	if err := joiner.Apply(k); err != nil {
		t.Fatal(err)
	}
	// The keyframe sent the photo as JPEG: the stream refreshes it losslessly for everyone,
	// though the screen does not change.
	for !first.last.Lossless || first.last.Seq == k.Seq {
		u := first.next()
		if err := joiner.Apply(u); err != nil {
			t.Fatal(err)
		}
	}
	first.canvases = append(first.canvases, joiner)
	first.exact("joined viewer")

	// Out of step: After is not the newest seq.
	u, err := h.client.NextUpdate(ctx, guest.UpdateArgs{Stream: 1, After: first.last.Seq - 1})
	if err != nil || !u.Key {
		t.Fatalf("next_update out of step: key=%v err=%v, want a keyframe", u.Key, err)
	}

	if _, err := h.client.Keyframe(ctx, guest.KeyframeArgs{Stream: 99}); !errors.Is(err, fault.ErrNotFound) {
		t.Errorf("keyframe of an unknown stream: %v, want not found", err)
	}
	for _, a := range []guest.UpdateArgs{{Stream: 0}, {Stream: 2, Qualities: []int{0}}, {Stream: 2, Qualities: []int{1, 2, 3, 4, 5}},
		{Stream: 2, Qualities: []int{50}, Scales: []int{3}}, {Stream: 2, Qualities: []int{50, 60}, Scales: []int{1}}} {
		if _, err := h.client.NextUpdate(ctx, a); !errors.Is(err, fault.ErrInvalid) {
			t.Errorf("next_update %+v: %v, want invalid", a, err)
		}
	}
	if err := h.client.EndUpdates(ctx, 1); err != nil {
		t.Fatal(err)
	}
	if _, err := h.client.Keyframe(ctx, guest.KeyframeArgs{Stream: 1}); !errors.Is(err, fault.ErrNotFound) {
		t.Errorf("keyframe of an ended stream: %v, want not found", err)
	}
}
