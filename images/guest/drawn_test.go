//go:build linux

package main

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"cubicle/backend/fault"
	"cubicle/backend/guest"
	"cubicle/images/guest/x11/xvfbtest"
)

// TestNeverBlack: with a desktop session that has not drawn yet (the screen is Xvfb's black),
// a screenshot waits until the session draws instead of returning a black image, health says
// whether it has drawn, and a wait that runs out says the desktop is still starting.
func TestNeverBlack(t *testing.T) {
	h := startDriverWith(t, 154, 320, 240, func(c *Config) {
		c.Session = "sleep 600" // a session that never draws: the test draws for it
		c.DrawnWait = 1500 * time.Millisecond
	})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if hl, err := h.client.Health(ctx); err != nil || hl.Drawn {
		t.Fatalf("health before drawing: %+v %v, want not drawn", hl, err)
	}
	// Running out: the desktop is still starting.
	_, err := h.client.Screenshot(ctx, guest.ScreenshotOptions{Format: "png"})
	if !errors.Is(err, fault.ErrUnavailable) || !strings.Contains(err.Error(), "still starting") {
		t.Fatalf("screenshot of a black screen: %v, want unavailable: still starting", err)
	}

	type result struct {
		f   guest.Frame
		err error
		at  time.Time
	}
	got := make(chan result, 3)
	for _, shoot := range []func() (guest.Frame, error){
		func() (guest.Frame, error) { return h.client.Screenshot(ctx, guest.ScreenshotOptions{Format: "png"}) },
		func() (guest.Frame, error) {
			return h.client.WaitSettled(ctx, guest.SettleOptions{Screenshot: guest.ScreenshotOptions{Format: "png"}})
		},
		func() (guest.Frame, error) {
			st, err := h.client.Stream(ctx, guest.StreamOptions{ScreenshotOptions: guest.ScreenshotOptions{Format: "png"}})
			if err != nil {
				return guest.Frame{}, err
			}
			defer st.Close()
			return st.Next(ctx)
		},
	} {
		go func() {
			f, err := shoot()
			got <- result{f, err, time.Now()}
		}()
	}
	time.Sleep(500 * time.Millisecond)
	select {
	case r := <-got:
		t.Fatalf("a screenshot came back before anything was drawn: %d bytes, %v", len(r.f.Data), r.err)
	default:
	}
	win := xvfbtest.NewWindow(t, h.display, 0, 0, 320, 240, 0x000000)
	drawnAt := time.Now()
	win.Put(t, 0, 0, photo(320, 240, 9))
	for range 3 {
		r := <-got
		if r.err != nil {
			t.Fatal(r.err)
		}
		if r.at.Before(drawnAt) {
			t.Fatalf("a screenshot came back before the drawing")
		}
		img := decodeFrame(t, r.f)
		colours := map[uint32]bool{}
		for y := 0; y < 240; y += 3 {
			for x := 0; x < 320; x += 3 {
				cr, cg, cb, _ := img.At(x, y).RGBA()
				colours[cr>>8<<16|cg>>8<<8|cb>>8] = true
			}
		}
		if len(colours) < 100 {
			t.Errorf("screenshot has %d colours: not the drawn screen", len(colours))
		}
	}
	if hl, err := h.client.Health(ctx); err != nil || !hl.Drawn {
		t.Fatalf("health after drawing: %+v %v, want drawn", hl, err)
	}
}

// TestDrawnWaitsForTheLastPiece: a session that colours the screen (the wallpaper) and draws
// another piece (a panel) shortly after: the first screenshot shows both — the wait for drawing
// to pause is longer than the session's gap between them.
func TestDrawnWaitsForTheLastPiece(t *testing.T) {
	h := startDriverWith(t, 156, 320, 240, func(c *Config) { c.Session = "sleep 600" })
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	win := xvfbtest.NewWindow(t, h.display, 0, 0, 320, 240, 0x000000)
	type result struct {
		f   guest.Frame
		err error
	}
	got := make(chan result, 1)
	go func() {
		f, err := h.client.Screenshot(ctx, guest.ScreenshotOptions{Format: "png"})
		got <- result{f, err}
	}()
	time.Sleep(100 * time.Millisecond) // the screenshot is waiting
	win.Put(t, 0, 0, photo(320, 240, 11))
	time.Sleep(drawnQuietMin / 4)        // a quarter of the shortest wait: room for a busy machine
	win.Fill(t, 0, 0, 320, 20, 0x3366cc) // the panel
	r := <-got
	if r.err != nil {
		t.Fatal(r.err)
	}
	img := decodeFrame(t, r.f)
	for _, x := range []int{5, 160, 315} {
		if cr, cg, cb, _ := img.At(x, 10).RGBA(); cr>>8 != 0x33 || cg>>8 != 0x66 || cb>>8 != 0xcc {
			t.Fatalf("pixel (%d,10) is %02x%02x%02x, want the panel's 3366cc: the screenshot was taken before the last piece was drawn", x, cr>>8, cg>>8, cb>>8)
		}
	}
}

// TestDrawnQuiet: the pause that ends the wait for a drawn screen is a share of the time the
// session took to colour it, within bounds.
func TestDrawnQuiet(t *testing.T) {
	for _, c := range []struct{ after, want time.Duration }{
		{0, drawnQuietMin},
		{200 * time.Millisecond, drawnQuietMin},
		{400 * time.Millisecond, 160 * time.Millisecond},
		{time.Second, 400 * time.Millisecond},
		{10 * time.Second, drawnQuietMax},
	} {
		if got := drawnQuiet(c.after); got != c.want {
			t.Errorf("drawnQuiet(%s) = %s, want %s", c.after, got, c.want)
		}
	}
}

// TestDrawnPause: a screen looked at while the session draws waits a share of the session's
// time so far; one first looked at long after its last change is drawn at once, its time to
// colour taken from that change.
func TestDrawnPause(t *testing.T) {
	x := time.Date(2026, 12, 5, 4, 0, 0, 0, time.UTC) // the X server ready
	ms := func(n int) time.Duration { return time.Duration(n) * time.Millisecond }
	for _, c := range []struct {
		name                   string
		last, now              time.Duration // after x
		colourful, quiet, left time.Duration
	}{
		{"the wallpaper just drawn", ms(400), ms(405), ms(400), ms(160), ms(155)},
		{"asked during a pause", ms(400), ms(500), ms(400), ms(160), ms(60)},
		{"asked a minute later", ms(450), ms(60000), ms(450), ms(180), 0},
		{"nothing drawn since the server came", -ms(1), ms(30000), ms(30000), drawnQuietMax, 0},
		{"a slow session, asked at once", ms(2000), ms(2000), ms(2000), drawnQuietMax, drawnQuietMax},
	} {
		colourful, quiet, left := drawnPause(x, x.Add(c.last), x.Add(c.now))
		if colourful != c.colourful || quiet != c.quiet || left != c.left {
			t.Errorf("%s: drawnPause = %s, %s, %s; want %s, %s, %s", c.name, colourful, quiet, left, c.colourful, c.quiet, c.left)
		}
	}
}
