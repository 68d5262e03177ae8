package screen_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"cubicle/backend/guest"
	"cubicle/backend/screen"
	"cubicle/backend/screen/screentest"
)

// Display :90 belongs to TestRefreshOnlyForBestLevel.

// argsSource is a region source that records what each next_update asks: the first update
// is a keyframe, then one comes per ask while the screen changes; while it stands still
// (setStill) an ask waits until it is cancelled or the screen changes again.
type argsSource struct {
	mu      sync.Mutex
	asks    []guest.UpdateArgs
	seq     uint64
	changed chan struct{} // nil: the screen changes; else closed when it changes again
}

func (s *argsSource) setStill(still bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case still && s.changed == nil:
		s.changed = make(chan struct{})
	case !still && s.changed != nil:
		close(s.changed)
		s.changed = nil
	}
}

func (s *argsSource) NextUpdate(ctx context.Context, a guest.UpdateArgs) (guest.Update, error) {
	if err := ctx.Err(); err != nil {
		return guest.Update{}, err
	}
	s.mu.Lock()
	s.asks = append(s.asks, a)
	changed := s.changed
	s.mu.Unlock()
	if changed != nil {
		select {
		case <-ctx.Done():
			return guest.Update{}, ctx.Err()
		case <-changed:
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.seq++
	return guest.Update{Seq: s.seq, FrameID: s.seq, Width: 64, Height: 64, Key: s.seq == 1}, nil
}

func (s *argsSource) Keyframe(ctx context.Context, a guest.KeyframeArgs) (guest.Update, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return guest.Update{Seq: s.seq, FrameID: s.seq, Width: 64, Height: 64, Key: true}, nil
}

func (s *argsSource) EndUpdates(context.Context, uint64) error { return nil }

func (s *argsSource) NextPointer(ctx context.Context, _ guest.PointerArgs) (guest.PointerState, []byte, error) {
	<-ctx.Done()
	return guest.PointerState{}, nil, ctx.Err()
}

// last returns the newest ask and how many there were.
func (s *argsSource) last() (guest.UpdateArgs, int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.asks) == 0 {
		return guest.UpdateArgs{}, 0
	}
	return s.asks[len(s.asks)-1], len(s.asks)
}

// TestRefreshAskedOnlyForBestLevel (issue 31 item 4): the region stream asked the driver for
// lossless refreshes whatever its viewers' levels, although a viewer whose link is behind
// drops them; on a busy machine a refresh of a whole screen took the driver most of a second,
// and the live view behind a slow link stalled. The hub asks for refreshes only while a
// viewer is at the best level, and when one comes back to it while the screen stands still,
// the waiting ask is made again with refreshes (or what stopped changing would stay blurred).
func TestRefreshAskedOnlyForBestLevel(t *testing.T) {
	src := &argsSource{}
	hubs := screen.New(screen.Config{Logger: testLogger(t), MaxFPS: 60})
	defer hubs.Close()
	v, err := hubs.WatchRegions("d1", src)
	if err != nil {
		t.Fatal(err)
	}
	defer v.Close()
	asked := func(what string, cond func(a guest.UpdateArgs, n int) bool) {
		t.Helper()
		deadline := time.Now().Add(5 * time.Second)
		for {
			a, n := src.last()
			if cond(a, n) {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: the last of %d asks was %+v", what, n, a)
			}
			v.Take()
			time.Sleep(5 * time.Millisecond)
		}
	}
	asked("a viewer at the best level", func(a guest.UpdateArgs, n int) bool { return n >= 3 && a.Refresh == 0 })
	v.SetLevel(2)
	asked("its only viewer behind", func(a guest.UpdateArgs, _ int) bool { return a.Refresh < 0 })
	src.setStill(true)
	_, n := src.last()
	asked("the screen standing still", func(a guest.UpdateArgs, m int) bool { return m > n && a.Refresh < 0 })
	_, n = src.last()
	time.Sleep(100 * time.Millisecond)
	if _, m := src.last(); m != n {
		t.Fatalf("asks went on while the screen stood still: %d, then %d", n, m)
	}
	v.SetLevel(0)
	asked("the viewer back at the best level", func(a guest.UpdateArgs, m int) bool { return m > n && a.Refresh == 0 })

	// At the best level, a viewer whose link was held back lately refuses them too.
	src.setStill(false)
	v.SetRefresh(false)
	asked("its only viewer refusing refreshes", func(a guest.UpdateArgs, _ int) bool { return a.Refresh < 0 })
	src.setStill(true)
	_, n = src.last()
	asked("the screen standing still", func(a guest.UpdateArgs, m int) bool { return m > n && a.Refresh < 0 })
	_, n = src.last()
	v.SetRefresh(true)
	asked("the viewer taking them again", func(a guest.UpdateArgs, m int) bool { return m > n && a.Refresh == 0 })
}

// TestRefreshOnlyForBestLevel: the same with the real driver on Xvfb. A viewer behind its
// link gets no lossless refresh of a photo that stopped changing (the driver makes none);
// back at the best level it gets one, although the screen no longer changes.
func TestRefreshOnlyForBestLevel(t *testing.T) {
	d := screentest.Start(t, 90, 640, 400)
	p := screentest.NewPainter(t, d)
	hubs := screen.New(screen.Config{Logger: testLogger(t)})
	defer hubs.Close()
	v, err := hubs.WatchRegions("d1", d.Client)
	if err != nil {
		t.Fatal(err)
	}
	defer v.Close()
	takeUntil(t, v, 10*time.Second, func(b screen.Batch) bool { return len(b.Updates) > 0 && b.Updates[0].Key })
	v.SetLevel(1)
	p.Noise(0, 0, 300, 300) // a photo: encoded lossily
	takeUntil(t, v, 10*time.Second, func(b screen.Batch) bool { return len(b.Updates) > 0 })
	// Refreshes come 250 ms after a part stopped changing: wait well past that.
	quiet := time.After(1500 * time.Millisecond)
	for waiting := true; waiting; {
		select {
		case <-v.Ready():
			if b, ok := v.Take(); ok {
				for _, u := range b.Updates {
					if u.Refresh {
						t.Fatalf("a lossless refresh (%d bytes) reached a viewer behind its link", len(u.Data))
					}
				}
			}
		case <-quiet:
			waiting = false
		}
	}
	v.SetLevel(0)
	takeUntil(t, v, 10*time.Second, func(b screen.Batch) bool {
		for _, u := range b.Updates {
			if u.Refresh {
				return true
			}
		}
		return false
	})
}
