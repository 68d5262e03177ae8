package enginetest

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"cubicle/backend/engine"
	"cubicle/backend/fault"
)

// testEvents subscribes to the engine's container events with this run's labels and drives a
// container through create, start, pause, unpause, stop (of a paused container), start, kill
// and remove: each step must arrive as an event with the container's id, name and labels,
// paused must be a state of its own, and a container of another label set must not be seen.
func (s *suite) testEvents(t *testing.T) {
	ctx := testContext(t, 3*time.Minute)
	mark := map[string]string{"org.example.events": s.run}
	stream, err := s.e.Events(ctx, s.withLabels(mark))
	if err != nil {
		t.Fatalf("Events: %v", err)
	}
	defer stream.Close()
	events := make(chan engine.Event, 256)
	streamErr := make(chan error, 1)
	go func() { // owned: ends when the stream is closed (deferred above)
		for {
			ev, err := stream.Next()
			if err != nil {
				streamErr <- err
				close(events)
				return
			}
			events <- ev
		}
	}()

	spec := engine.ContainerSpec{
		Name:        s.name("events"),
		Image:       s.image,
		Labels:      s.withLabels(mark),
		Command:     []string{"/bin/sh", "-c", "exec sleep 3600"},
		NetworkMode: "none",
		StopTimeout: time.Second,
		Limits:      engine.Limits{NoFile: 1 << 40, NProc: 1 << 40},
	}
	// Another container of this run without the mark: its events must be filtered out.
	other := spec
	other.Name, other.Labels = s.name("events-other"), s.labels
	oc, err := s.e.CreateContainer(ctx, other)
	if err != nil {
		t.Fatalf("CreateContainer(other): %v", err)
	}
	c, err := s.e.CreateContainer(ctx, spec)
	if err != nil {
		t.Fatalf("CreateContainer: %v", err)
	}
	var seen []string
	// expect waits for an event of the marked container with action want; events of other
	// actions in between are recorded (engines add init, cleanup, kill, …).
	expect := func(want string) {
		t.Helper()
		deadline := time.After(30 * time.Second)
		for {
			select {
			case ev, ok := <-events:
				if !ok {
					t.Fatalf("event stream ended waiting for %q: %v (seen %v)", want, <-streamErr, seen)
				}
				if ev.ContainerID == oc.ID {
					t.Fatalf("event %q of a container without the filtered label: %+v", ev.Action, ev)
				}
				if ev.ContainerID != c.ID {
					continue
				}
				seen = append(seen, ev.Action)
				if ev.Name != spec.Name || ev.Labels["org.example.events"] != s.run || ev.Labels[engine.LabelManaged] != "true" || ev.Time.IsZero() {
					t.Fatalf("event %+v lacks the container's name, labels or time", ev)
				}
				if ev.Action == want {
					return
				}
			case <-deadline:
				t.Fatalf("no %q event within 30 s (seen %v)", want, seen)
			}
		}
	}
	expect(engine.ActionCreate)
	if err := s.e.StartContainer(ctx, c.ID); err != nil {
		t.Fatalf("StartContainer: %v", err)
	}
	expect(engine.ActionStart)
	if err := s.e.StartContainer(ctx, oc.ID); err != nil {
		t.Fatalf("StartContainer(other): %v", err)
	}

	if s.cluster != nil {
		s.eventsWithoutPause(ctx, t, c.ID, expect)
	} else {
		s.eventsWithPause(ctx, t, c.ID, expect)
	}
	st, err := s.e.InspectContainer(ctx, c.ID)
	if err != nil || st.Running || st.Paused {
		t.Fatalf("stopped container: %+v, %v", st, err)
	}

	if err := s.e.StartContainer(ctx, c.ID); err != nil {
		t.Fatalf("StartContainer again: %v", err)
	}
	expect(engine.ActionStart)
	if err := s.e.RemoveContainer(ctx, c.ID, true); err != nil {
		t.Fatalf("RemoveContainer(running, force): %v", err)
	}
	expect(engine.ActionRemove)
	want := []string{engine.ActionCreate, engine.ActionStart, engine.ActionPause, engine.ActionUnpause, engine.ActionDie, engine.ActionRemove}
	if s.cluster != nil {
		want = slices.DeleteFunc(want, func(a string) bool { return a == engine.ActionPause || a == engine.ActionUnpause })
	}
	for _, a := range want {
		if !slices.Contains(seen, a) {
			t.Errorf("no %q event (seen %v)", a, seen)
		}
	}
	if err := s.e.RemoveContainer(ctx, oc.ID, true); err != nil {
		t.Errorf("RemoveContainer(other): %v", err)
	}
	s.eventsEnd(ctx, t, stream, streamErr)
}

// eventsWithPause pauses, resumes, pauses and stops container id: paused must be a state of
// its own, and a paused container must stop.
func (s *suite) eventsWithPause(ctx context.Context, t *testing.T, id string, expect func(string)) {
	t.Helper()
	if err := s.e.PauseContainer(ctx, id); err != nil {
		t.Fatalf("PauseContainer: %v", err)
	}
	expect(engine.ActionPause)
	st, err := s.e.InspectContainer(ctx, id)
	if err != nil || !st.Paused || st.Running || st.Status != "paused" {
		t.Fatalf("paused container: %+v, %v; want Paused, not Running, status paused", st, err)
	}
	list, err := s.e.ListContainers(ctx, s.withLabels(map[string]string{"org.example.events": s.run}))
	if err != nil || len(list) != 1 || !list[0].Paused || list[0].Running {
		t.Fatalf("ListContainers of the paused container = %+v, %v", list, err)
	}
	if err := s.e.PauseContainer(ctx, id); !errors.Is(err, fault.ErrConflict) {
		t.Errorf("PauseContainer(paused) = %v, want ErrConflict", err)
	}
	if err := s.e.UnpauseContainer(ctx, id); err != nil {
		t.Fatalf("UnpauseContainer: %v", err)
	}
	expect(engine.ActionUnpause)
	if err := s.e.UnpauseContainer(ctx, id); !errors.Is(err, fault.ErrConflict) {
		t.Errorf("UnpauseContainer(running) = %v, want ErrConflict", err)
	}

	// Stopping a paused container works (and does not wait for a frozen process).
	if err := s.e.PauseContainer(ctx, id); err != nil {
		t.Fatalf("PauseContainer: %v", err)
	}
	expect(engine.ActionPause)
	if err := s.e.StopContainer(ctx, id, time.Second); err != nil {
		t.Fatalf("StopContainer(paused): %v", err)
	}
	expect(engine.ActionDie)
	st, err = s.e.InspectContainer(ctx, id)
	if err != nil || st.Running || st.Paused {
		t.Fatalf("stopped container: %+v, %v", st, err)
	}
	if err := s.e.PauseContainer(ctx, id); !errors.Is(err, fault.ErrConflict) {
		t.Errorf("PauseContainer(stopped) = %v, want ErrConflict", err)
	}
}

// eventsWithoutPause stops container id (an engine that cannot pause refuses it).
func (s *suite) eventsWithoutPause(ctx context.Context, t *testing.T, id string, expect func(string)) {
	t.Helper()
	if err := s.e.PauseContainer(ctx, id); !errors.Is(err, fault.ErrConflict) {
		t.Errorf("PauseContainer(running) on an engine without pause = %v, want ErrConflict", err)
	}
	if err := s.e.StopContainer(ctx, id, time.Second); err != nil {
		t.Fatalf("StopContainer: %v", err)
	}
	expect(engine.ActionDie)
}

// eventsEnd checks that Close, and a cancelled context, end a subscription.
func (s *suite) eventsEnd(ctx context.Context, t *testing.T, stream *engine.EventStream, streamErr <-chan error) {
	t.Helper()
	// Close ends a blocked Next at once, with ErrEventStreamClosed.
	stream.Close()
	select {
	case err := <-streamErr:
		if !errors.Is(err, engine.ErrEventStreamClosed) {
			t.Errorf("Next after Close = %v, want ErrEventStreamClosed", err)
		}
	case <-time.After(10 * time.Second):
		t.Error("Next still blocked 10 s after Close")
	}

	// A cancelled context ends a subscription too.
	cctx, cancel := context.WithCancel(ctx)
	st2, err := s.e.Events(cctx, s.labels)
	if err != nil {
		t.Fatalf("Events: %v", err)
	}
	defer st2.Close()
	done := make(chan error, 1)
	go func() { _, err := st2.Next(); done <- err }() // owned: ends with cancel below
	cancel()
	select {
	case err := <-done:
		if err == nil {
			t.Error("Next returned an event after the context was cancelled")
		}
	case <-time.After(10 * time.Second):
		t.Error("Next still blocked 10 s after its context was cancelled")
	}
}
