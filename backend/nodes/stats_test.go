package nodes_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"cubicle/backend/fault"
	"cubicle/runner"
	"cubicle/runner/wire"
)

// TestStatsOverTheLink: a runner advertises stats-v1 and answers op stats over its link — here
// a runner without an engine, whose refusal keeps its class across the link (the sampler is
// quiet about it). A runner that does not advertise the capability is left out of
// ConnectedWith and refused before anything is sent, naming the runner and what it lacks; a
// disconnected one is unavailable.
func TestStatsOverTheLink(t *testing.T) {
	x := newHub(t)
	with, err := x.h.Create("new box", false, x.srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	without, err := x.h.Create("old box", false, x.srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	startRunner(t, x.srv.URL, with.Token)
	old, err := runner.New(runner.Config{Server: x.srv.URL, Token: without.Token, DataDir: t.TempDir(), Engine: "none",
		Version: "9.8.0", MaxBackoff: 200 * time.Millisecond, DropCapabilities: []string{wire.CapStats}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	oldDone := make(chan struct{})
	go func() {
		defer close(oldDone)
		old.Run(ctx)
	}()
	t.Cleanup(func() {
		cancel()
		<-oldDone
		old.Close()
	})
	waitFor(t, "both runners to connect", func() bool { return x.h.Connected(with.ID) && x.h.Connected(without.ID) })

	if got := x.h.ConnectedWith(wire.CapStats); !slices.Equal(got, []string{with.ID}) {
		t.Fatalf("ConnectedWith(stats-v1) = %v, want [%s]", got, with.ID)
	}
	if got := x.h.ConnectedWith(wire.CapGuestRelay); len(got) != 2 || !slices.IsSorted(got) {
		t.Fatalf("ConnectedWith(guest-relay-v1) = %v, want both, sorted", got)
	}

	rw, err := x.h.Node(with.ID)
	if err != nil {
		t.Fatal(err)
	}
	// The runner has no engine: its manager's refusal comes back as it is.
	_, err = rw.Stats(context.Background())
	if !errors.Is(err, fault.ErrUnavailable) || !strings.Contains(err.Error(), "engine") {
		t.Fatalf("stats of a runner without an engine: %v", err)
	}

	ro, err := x.h.Node(without.ID)
	if err != nil {
		t.Fatal(err)
	}
	_, err = ro.Stats(context.Background())
	if !errors.Is(err, fault.ErrUnavailable) || !strings.Contains(err.Error(), "old box") || !strings.Contains(err.Error(), wire.CapStats) ||
		!strings.Contains(err.Error(), "9.8.0") {
		t.Fatalf("stats of a runner without %s: %v", wire.CapStats, err)
	}

	// A deadline is honoured (the call ends with the context, not the runner).
	dctx, dcancel := context.WithTimeout(context.Background(), time.Nanosecond)
	defer dcancel()
	<-dctx.Done()
	if _, err := rw.Stats(dctx); err == nil {
		t.Fatal("stats with an ended context succeeded")
	}

	cancel()
	<-oldDone
	waitFor(t, "the old runner to be gone", func() bool { return !x.h.Connected(without.ID) })
	if _, err := ro.Stats(context.Background()); !errors.Is(err, fault.ErrUnavailable) || !strings.Contains(err.Error(), "disconnected") {
		t.Fatalf("stats of a disconnected runner: %v", err)
	}
	if got := x.h.ConnectedWith(wire.CapGuestRelay); !slices.Equal(got, []string{with.ID}) {
		t.Fatalf("ConnectedWith after the old runner left = %v", got)
	}
}
