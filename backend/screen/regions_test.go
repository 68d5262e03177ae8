package screen_test

import (
	"context"
	"testing"
	"time"

	"cubicle/backend/screen"
	"cubicle/backend/screen/screentest"
)

// Display :89 belongs to the region hub's test.

// takeUntil takes batches from v until cond holds for one (or fails after timeout).
func takeUntil(t *testing.T, v *screen.RegionViewer, timeout time.Duration, cond func(screen.Batch) bool) screen.Batch {
	t.Helper()
	deadline := time.After(timeout)
	for {
		if b, ok := v.Take(); ok && cond(b) {
			return b
		}
		select {
		case <-v.Ready():
		case <-v.Done():
			t.Fatalf("viewer ended: %v", v.Err())
		case <-deadline:
			t.Fatalf("no matching batch within %v", timeout)
		}
	}
}

// TestRegionHub: viewers of one desktop share one region stream; a viewer at a lower
// quality level adds that quality to the updates (one encoding per level, shared); a viewer
// that takes nothing while the screen changes a lot does not hold the others up and, once
// too far behind, starts over from a keyframe instead of queueing without end.
func TestRegionHub(t *testing.T) {
	d := screentest.Start(t, 89, 640, 400)
	p := screentest.NewPainter(t, d)
	obs := &observer{}
	hubs := screen.New(screen.Config{Observer: obs, Logger: testLogger(t)})
	defer hubs.Close()

	fast, err := hubs.WatchRegions("d1", d.Client)
	if err != nil {
		t.Fatal(err)
	}
	var key, pointer bool
	takeUntil(t, fast, 5*time.Second, func(b screen.Batch) bool {
		if len(b.Updates) > 0 && !key {
			key = true
			if !b.Updates[0].Key || !obs.seen("d1", b.Updates[0].FrameID) {
				t.Fatalf("first update key=%v observed=%v", b.Updates[0].Key, obs.seen("d1", b.Updates[0].FrameID))
			}
		}
		pointer = pointer || (b.Cursor != nil && b.Pointer != nil)
		return key && pointer
	})

	low, err := hubs.WatchRegions("d1", d.Client)
	if err != nil {
		t.Fatal(err)
	}
	low.SetLevel(2)
	k := takeUntil(t, low, 5*time.Second, func(b screen.Batch) bool { return len(b.Updates) > 0 })
	if u := k.Updates[0]; u.Key && len(u.Qualities) == 1 && u.Qualities[0] == screen.Levels[0].Quality {
		// The joining keyframe was asked before SetLevel ran (the hub's keyframe goroutine won
		// the race on a busy machine): one asked now is at the viewer's level.
		t.Logf("the joining keyframe came at the best level, before SetLevel: asking again")
		low.Refresh()
		k = takeUntil(t, low, 5*time.Second, func(b screen.Batch) bool { return len(b.Updates) > 0 && b.Updates[0].Key })
	}
	if !k.Updates[0].Key || len(k.Updates[0].Qualities) != 1 || k.Updates[0].Qualities[0] != screen.Levels[2].Quality {
		t.Fatalf("joining viewer's first update: key %v qualities %v, want a keyframe at q%d", k.Updates[0].Key,
			k.Updates[0].Qualities, screen.Levels[2].Quality)
	}
	p.Noise(0, 0, 300, 300)
	b := takeUntil(t, fast, 5*time.Second, func(b screen.Batch) bool {
		for _, u := range b.Updates {
			if len(u.Qualities) == 2 {
				return true
			}
		}
		return false
	})
	_ = b
	if hubs.RegionViewers("d1") != 2 {
		t.Errorf("%d region viewers, want 2", hubs.RegionViewers("d1"))
	}

	stalled, err := hubs.WatchRegions("d1", d.Client)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Second)
	defer cancel()
	done := make(chan struct{})
	go func() { defer close(done); p.AnimateNoise(ctx, 15*time.Millisecond) }()
	got := 0
	for ctx.Err() == nil && stalled.Restarts() == 0 {
		select {
		case <-fast.Ready():
			if b, ok := fast.Take(); ok {
				got += len(b.Updates)
			}
		case <-ctx.Done():
		}
		low.Take()
	}
	cancel()
	<-done
	if stalled.Restarts() == 0 {
		n, bytes := stalled.Pending()
		t.Fatalf("the stalled viewer never started over (pending %d updates, %d bytes)", n, bytes)
	}
	if n, bytes := stalled.Pending(); n > 100 || bytes > 8<<20 {
		t.Errorf("stalled viewer holds %d updates, %d bytes", n, bytes)
	}
	if got < 20 {
		t.Errorf("the fast viewer got %d updates while the other stalled", got)
	}
	// Once it reads again it starts from a keyframe.
	b = takeUntil(t, stalled, 5*time.Second, func(b screen.Batch) bool { return len(b.Updates) > 0 })
	if !b.Updates[0].Key {
		t.Errorf("after starting over the first update is not a keyframe")
	}
	for _, v := range []*screen.RegionViewer{fast, low, stalled} {
		v.Close()
	}
	waitFor(t, "the hub to stop", func() bool { return !hubs.Streaming("d1") })
}
