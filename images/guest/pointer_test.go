//go:build linux

package main

import (
	"bytes"
	"context"
	"image"
	"image/png"
	"testing"
	"time"

	"cubicle/backend/guest"
	"cubicle/images/guest/x11/xvfbtest"
)

// TestPointer: the pointer's position and image come as their own small answers — at once
// for a move the driver made, with the image (PNG) only when the host lacks it — and agent
// screenshots show the pointer unless asked not to.
func TestPointer(t *testing.T) {
	h := startDriver(t, 152, 320, 240)
	xvfbtest.NewWindow(t, h.display, 0, 0, 320, 240, 0xffffff)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	hl, err := h.client.Health(ctx)
	if err != nil || !hl.Cursor {
		t.Fatalf("health %+v %v: want XFIXES cursor tracking on Xvfb", hl, err)
	}

	p0, img, err := h.client.NextPointer(ctx, guest.PointerArgs{})
	if err != nil {
		t.Fatal(err)
	}
	if p0.Serial == 0 || p0.Shape == nil || len(img) == 0 {
		t.Fatalf("first pointer state %+v with %d bytes: want the cursor image", p0, len(img))
	}
	cur, err := png.Decode(bytes.NewReader(img))
	if err != nil {
		t.Fatalf("cursor image: %v", err)
	}
	if cur.Bounds().Dx() != p0.Shape.Width || cur.Bounds().Dy() != p0.Shape.Height || p0.Shape.Width == 0 {
		t.Fatalf("cursor image %v, shape says %+v", cur.Bounds(), *p0.Shape)
	}

	// A move answers a waiting request, without the image (the host has it).
	type answer struct {
		p   guest.PointerState
		img []byte
		err error
	}
	got := make(chan answer, 1)
	go func() {
		p, img, err := h.client.NextPointer(ctx, guest.PointerArgs{After: p0.Gen, Shape: p0.Serial, Poll: time.Second})
		got <- answer{p, img, err}
	}()
	time.Sleep(50 * time.Millisecond)
	if err := h.client.Input(ctx, guest.Input{Action: "move", X: 101, Y: 77}); err != nil {
		t.Fatal(err)
	}
	a := <-got
	if a.err != nil || a.p.X != 101 || a.p.Y != 77 || a.p.Gen <= p0.Gen || a.p.Shape != nil || len(a.img) != 0 {
		t.Fatalf("after a move: %+v (%d image bytes) %v; want 101,77 without an image", a.p, len(a.img), a.err)
	}

	// Screenshots: with the pointer by default, without on request; the difference lies
	// around the pointer.
	with, err := h.client.Screenshot(ctx, guest.ScreenshotOptions{Format: "png"})
	if err != nil {
		t.Fatal(err)
	}
	without, err := h.client.Screenshot(ctx, guest.ScreenshotOptions{Format: "png", NoPointer: true})
	if err != nil {
		t.Fatal(err)
	}
	wi, _ := png.Decode(bytes.NewReader(with.Data))
	wo, _ := png.Decode(bytes.NewReader(without.Data))
	var changed image.Rectangle
	for y := 0; y < 240; y++ {
		for x := 0; x < 320; x++ {
			r1, g1, b1, _ := wi.At(x, y).RGBA()
			r2, g2, b2, _ := wo.At(x, y).RGBA()
			if r1 != r2 || g1 != g2 || b1 != b2 {
				changed = changed.Union(image.Rect(x, y, x+1, y+1))
			}
		}
	}
	hot := image.Pt(101, 77)
	area := image.Rect(hot.X-p0.Shape.HotX, hot.Y-p0.Shape.HotY, hot.X-p0.Shape.HotX+p0.Shape.Width, hot.Y-p0.Shape.HotY+p0.Shape.Height)
	if changed.Empty() || !changed.In(area) {
		t.Fatalf("the pointer changed %v of the screenshot, want a non-empty part of %v", changed, area)
	}
	// The pointer moving changes the screenshot, not the screen's generation.
	if err := h.client.Input(ctx, guest.Input{Action: "move", X: 200, Y: 150}); err != nil {
		t.Fatal(err)
	}
	moved, err := h.client.Screenshot(ctx, guest.ScreenshotOptions{Format: "png"})
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Equal(moved.Data, with.Data) {
		t.Errorf("screenshot after moving the pointer is the cached one from before the move")
	}
}
