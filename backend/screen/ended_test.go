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

// TestRegionViewerOfAnEndedHub: a hub whose stream ended before its first viewer was added
// (an older driver refuses the first ask at once; under load that comes before the add) ends
// that viewer at once with the hub's error, so the viewer falls back to frames instead of
// waiting for ever (CI saw TestComputerV2OlderDriver wait 5 s for a frame).
func TestRegionViewerOfAnEndedHub(t *testing.T) {
	hs := New(Config{Logger: slog.New(slog.DiscardHandler)})
	defer hs.Close()
	hs.mu.Lock()
	h := hs.startRegionsLocked("desk", oldDriver{})
	hs.mu.Unlock()
	deadline := time.Now().Add(10 * time.Second)
	for !h.ended() {
		if time.Now().After(deadline) {
			t.Fatal("the hub of a driver without region streams did not end")
		}
		time.Sleep(time.Millisecond)
	}
	v := h.add() // what WatchRegions does when the hub ends between its check and the add
	select {
	case <-v.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("a viewer added to an ended hub never ended")
	}
	if err := v.Err(); !errors.Is(err, ErrNoRegions) {
		t.Fatalf("viewer ended with %v, want ErrNoRegions", err)
	}
	v.Close()
}

// brokenSource is a desktop whose frame stream cannot start.
type brokenSource struct{}

func (brokenSource) Frames(context.Context, guest.StreamOptions) (guest.FrameStream, error) {
	return nil, fault.Unavailable("desktop driver: the link is gone")
}

// TestFrameViewerOfAnEndedHub: the same for version 1 frames.
func TestFrameViewerOfAnEndedHub(t *testing.T) {
	hs := New(Config{Logger: slog.New(slog.DiscardHandler)})
	defer hs.Close()
	hs.mu.Lock()
	h := hs.startLocked("desk", brokenSource{})
	hs.mu.Unlock()
	deadline := time.Now().Add(10 * time.Second)
	for !h.ended() {
		if time.Now().After(deadline) {
			t.Fatal("the hub of a broken source did not end")
		}
		time.Sleep(time.Millisecond)
	}
	v := h.add()
	select {
	case <-v.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("a viewer added to an ended hub never ended")
	}
	if err := v.Err(); !errors.Is(err, fault.ErrUnavailable) {
		t.Fatalf("viewer ended with %v, want the source's unavailable error", err)
	}
	v.Close()
}
