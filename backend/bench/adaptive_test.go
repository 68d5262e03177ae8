package bench

import (
	"context"
	"image"
	"image/color"
	"log/slog"
	"math"
	"math/rand"
	"slices"
	"testing"
	"time"

	"cubicle/backend/screen/screentest"
	"cubicle/images/guest/x11/xvfbtest"
	"cubicle/internal/testenv"
)

// Display :162 belongs to this test.

// TestAdaptiveQuality runs the real driver, screen hub and computer channel while the whole
// screen keeps changing like a video, with two version 2 viewers: one on loopback, one behind
// an emulated 3 Mbit/s, 40 ms link. The slow viewer is moved to a lower quality level and still
// sees a picture every few frames, without slowing the fast one, which stays at the best
// level and gets nearly every update; when the link recovers, the slow viewer climbs back.
func TestAdaptiveQuality(t *testing.T) {
	const w, h = 640, 400
	d := screentest.Start(t, 162, w, h)
	win := xvfbtest.NewWindow(t, d.Display, 0, 0, w, h, 0)
	var frames []*image.RGBA
	for f := 0; f < 3; f++ {
		img := image.NewRGBA(image.Rect(0, 0, w, h))
		rng := rand.New(rand.NewSource(int64(f)))
		for y := 0; y < h; y++ {
			for x := 0; x < w; x++ {
				v := math.Sin(float64(x)/25+float64(f)) + math.Sin(float64(y)/19+float64(f)*2) + math.Sin(float64(x+y)/37)
				img.SetRGBA(x, y, color.RGBA{uint8(128 + 40*v + float64(rng.Intn(16))), uint8(128 + 40*math.Sin(v*2)), uint8(128 + 40*math.Cos(v)), 255})
			}
		}
		frames = append(frames, img)
	}
	r := &runner{cfg: Config{Quick: true}, log: testenv.Logger(t, slog.LevelWarn), runRoot: t.TempDir()}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	ls, err := r.startLive(ctx, &desktop{name: "adaptive", client: d.Client}, d.Client, "live.db")
	if err != nil {
		t.Fatal(err)
	}
	defer ls.close()
	link, err := newSlowLink(ls.addr, 3e6, 20*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	defer link.close()
	actx, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { // the video
		defer close(done)
		for i := 0; actx.Err() == nil; i++ {
			win.Put(t, 0, 0, frames[i%3])
			time.Sleep(30 * time.Millisecond)
		}
	}()
	defer func() { stop(); <-done }()

	fast, err := dialLive(ctx, ls, dialOptions{v2: true})
	if err != nil {
		t.Fatal(err)
	}
	defer fast.close()
	slow, err := dialLive(ctx, ls, dialOptions{v2: true, via: link.addr()})
	if err != nil {
		t.Fatal(err)
	}
	defer slow.close()
	count := func(c *wsClient) (n, bytes int) {
		for {
			select {
			case f := <-c.frames:
				n++
				bytes += f.size
			default:
				return n, bytes
			}
		}
	}
	desk := "bench-adaptive"
	sleepCtx(ctx, 6*time.Second) // flow control settles
	count(fast)
	count(slow)
	_, pub0 := ls.hubs.RegionLevels(desk)
	sleepCtx(ctx, 5*time.Second)
	nf, _ := count(fast)
	ns, bs := count(slow)
	levels, pub1 := ls.hubs.RegionLevels(desk)
	slices.Sort(levels)
	published := int(pub1 - pub0)
	t.Logf("5 s: %d updates published; fast viewer %d messages, slow viewer %d (%d KB/s); levels %v", published, nf, ns, bs/5/1024, levels)
	if len(levels) != 2 || levels[0] != 0 || levels[1] == 0 {
		t.Errorf("levels %v: want the fast viewer at 0 and the slow one lower", levels)
	}
	if float64(nf) < 0.85*float64(published) {
		t.Errorf("the fast viewer got %d of %d updates: the slow one held it up", nf, published)
	}
	// At its lower level the slow viewer's pictures may fit its link (then it gets as many as
	// the fast one, smaller); what must hold is that it still gets pictures, within its link.
	if ns < 5 {
		t.Errorf("the slow viewer got %d messages in 5 s (the fast one %d): want fewer or smaller, newer pictures, not none", ns, nf)
	}
	if rate := float64(bs) / 5; rate > 1.2*link.bytesPerSecond() {
		t.Errorf("the slow viewer read %.0f B/s through a %.0f B/s link", rate, link.bytesPerSecond())
	}

	// The link recovers: the slow viewer climbs back to the best level.
	link.setRate(1e9)
	deadline := time.Now().Add(60 * time.Second)
	for {
		levels, _ = ls.hubs.RegionLevels(desk)
		if slices.Max(levels) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("levels %v a minute after the link recovered: want all back at 0", levels)
		}
		count(slow)
		count(fast)
		sleepCtx(ctx, 200*time.Millisecond)
	}
}
