package screen

import (
	"context"
	"errors"
	"log/slog"
	"testing"
	"time"

	"cubicle/backend/fault"
	"cubicle/backend/guest"
)

// oldDriver is a desktop driver from before region streams: it refuses every region call.
type oldDriver struct{}

func (oldDriver) NextUpdate(context.Context, guest.UpdateArgs) (guest.Update, error) {
	return guest.Update{}, fault.Invalid("desktop driver: next_update: unknown operation")
}
func (oldDriver) Keyframe(context.Context, guest.KeyframeArgs) (guest.Update, error) {
	return guest.Update{}, fault.Invalid("desktop driver: keyframe: unknown operation")
}
func (oldDriver) EndUpdates(context.Context, uint64) error { return nil }
func (oldDriver) NextPointer(context.Context, guest.PointerArgs) (guest.PointerState, []byte, error) {
	return guest.PointerState{}, nil, fault.Invalid("desktop driver: next_pointer: unknown operation")
}

// TestViewerOfAnEndedHub: a hub whose stream ended before its first viewer was added (an
// older driver refuses the first ask for region updates at once, and under load that comes
// before the add) ends that viewer at once with the hub's error, so the viewer falls back to
// frames instead of waiting for ever (CI saw TestComputerV2OlderDriver wait 5 s for a frame).
// The same for a frame hub whose source fails at once.
func TestViewerOfAnEndedHub(t *testing.T) {
	type viewer struct {
		done  <-chan struct{}
		err   func() error
		close func() error
	}
	for _, c := range []struct {
		name  string
		start func(hs *Hubs) (ended func() bool, add func() viewer)
		want  error
	}{
		{"regions, a driver without region streams", func(hs *Hubs) (func() bool, func() viewer) {
			h := hs.startRegionsLocked("desk", oldDriver{})
			return h.ended, func() viewer { v := h.add(); return viewer{v.Done(), v.Err, v.Close} }
		}, ErrNoRegions},
		{"frames, a source that fails", func(hs *Hubs) (func() bool, func() viewer) {
			h := hs.startLocked("desk", brokenSource{})
			return h.ended, func() viewer { v := h.add(); return viewer{v.Done(), v.Err, v.Close} }
		}, fault.ErrUnavailable},
	} {
		t.Run(c.name, func(t *testing.T) {
			hs := New(Config{Logger: slog.New(slog.DiscardHandler)})
			defer hs.Close()
			hs.mu.Lock()
			ended, add := c.start(hs)
			hs.mu.Unlock()
			waitEnded(t, ended)
			v := add() // what Watch and WatchRegions do when the hub ends between their look and the add
			defer v.close()
			wantEnded(t, v.done, v.err, c.want)
		})
	}
}

// waitEnded waits until ended says the hub ended.
func waitEnded(t *testing.T, ended func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !ended() {
		if time.Now().After(deadline) {
			t.Fatal("the hub did not end")
		}
		time.Sleep(time.Millisecond)
	}
}

// wantEnded checks that a viewer has ended (done) with want's class of error.
func wantEnded(t *testing.T, done <-chan struct{}, errOf func() error, want error) {
	t.Helper()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("a viewer added to an ended hub never ended")
	}
	if err := errOf(); !errors.Is(err, want) {
		t.Fatalf("viewer ended with %v, want %v", err, want)
	}
}

// brokenSource is a desktop whose frame stream cannot start.
type brokenSource struct{}

func (brokenSource) Frames(context.Context, guest.StreamOptions) (guest.FrameStream, error) {
	return nil, fault.Unavailable("desktop driver: the link is gone")
}
