package vm

import (
	"context"
	"testing"
	"time"

	"cubicle/backend/fault"
)

// TestIdleNext: the idle policy's decisions — pause first, stop later; a pause that would not
// come before the stop is never made; a paused desktop is not paused again.
func TestIdleNext(t *testing.T) {
	since := time.Date(2026, 12, 2, 10, 0, 0, 0, time.UTC)
	at := func(min int) time.Time { return since.Add(time.Duration(min) * time.Minute) }
	for _, tc := range []struct {
		name        string
		now         int // minutes after since
		pause, stop int
		paused      bool
		step        idleStep
		next        time.Time
	}{
		{"nothing due: the pause comes first", 0, 2, 5, false, idleWait, at(2)},
		{"pause due", 2, 2, 5, false, idlePause, at(5)},
		{"pause long overdue", 4, 2, 5, false, idlePause, at(5)},
		{"paused: waits for the stop", 3, 2, 5, true, idleWait, at(5)},
		{"paused: stop due", 5, 2, 5, true, idleStop, time.Time{}},
		{"both overdue: the stop wins", 9, 2, 5, false, idleStop, time.Time{}},
		{"never pause", 3, 0, 5, false, idleWait, at(5)},
		{"never pause: stop due", 5, 0, 5, false, idleStop, time.Time{}},
		{"pause not before the stop: never paused", 4, 5, 5, false, idleWait, at(5)},
		{"pause after the stop: never paused", 4, 9, 5, false, idleWait, at(5)},
		{"never stop: pause due", 3, 2, 0, false, idlePause, time.Time{}},
		{"never stop, paused: nothing ever", 600, 2, 0, true, idleWait, time.Time{}},
		{"never either", 600, 0, 0, false, idleWait, time.Time{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			step, next := idleNext(since, at(tc.now), tc.pause, tc.stop, time.Minute, tc.paused)
			if step != tc.step || !next.Equal(tc.next) {
				t.Errorf("idleNext(now +%d min, pause %d, stop %d, paused %v) = %d, %v; want %d, %v",
					tc.now, tc.pause, tc.stop, tc.paused, step, next, tc.step, tc.next)
			}
		})
	}
}

// TestIdlePauseThenStop: with pauseAfterMinutes 2 and idleStopMinutes 5 an idle desktop is
// paused after 2 minutes (its container frozen by the engine) and stopped after 5; a start
// in between resumes it, and its idle period goes on (resuming is not use): it is not paused
// again and stops when it was due.
func TestIdlePauseThenStop(t *testing.T) {
	f := newFixture(t, nil)
	ctx := context.Background()
	f.prepare("standard")
	two := 2
	if _, err := f.m.SetIdlePolicy(ctx, "pause-1", 5, &two); err != nil {
		t.Fatal(err)
	}
	v := f.act("acc1", "g1", ActionCreate)
	id, name := v.Desktop.ID, v.Desktop.Container
	state := func() string {
		in, _ := f.st.VMInstance(id)
		return in.State
	}
	enginePaused := func() bool {
		c, ok := f.eng.ByName(name)
		return ok && c.State.Paused
	}
	f.clock.Advance(time.Minute + 59*time.Second)
	time.Sleep(20 * time.Millisecond)
	if state() != StateRunning || enginePaused() {
		t.Fatalf("paused before 2 idle minutes: %s", state())
	}
	f.clock.Advance(time.Second)
	waitFor(t, "idle pause after 2 min", func() bool { return state() == StatePaused && enginePaused() })
	av, _ := f.m.Agent(ctx, "acc1", "g1")
	if av.Desktop.IdleStopInSeconds == nil || *av.Desktop.IdleStopInSeconds != 180 {
		t.Errorf("a paused desktop's stop countdown %v, want 180 s", av.Desktop.IdleStopInSeconds)
	}
	f.clock.Advance(3 * time.Minute)
	waitFor(t, "idle stop after 5 min", func() bool { return state() == StateStopped })

	// A start (what a turn's binding does) resumes a paused desktop; the idle period goes on.
	f.act("acc1", "g1", ActionStart)
	f.clock.Advance(2 * time.Minute)
	waitFor(t, "idle pause again", func() bool { return state() == StatePaused })
	if v := f.act("acc1", "g1", ActionStart); v.Desktop.State != StateRunning || enginePaused() {
		t.Fatalf("start of a paused desktop: %s (engine paused %v)", v.Desktop.State, enginePaused())
	}
	f.clock.Advance(2*time.Minute + 59*time.Second)
	time.Sleep(20 * time.Millisecond)
	if state() != StateRunning {
		t.Fatalf("the resumed desktop was paused or stopped again before its idle stop was due: %s", state())
	}
	f.clock.Advance(time.Second)
	waitFor(t, "idle stop when it was due", func() bool { return state() == StateStopped })

	// A task's end starts a new idle period, with its pause.
	f.act("acc1", "g1", ActionStart)
	f.m.MarkBusy(id, "agent Bot1's task")
	f.m.MarkIdle(id)
	f.clock.Advance(2 * time.Minute)
	waitFor(t, "idle pause in the new period", func() bool { return state() == StatePaused })
	f.act("acc1", "g1", ActionStart)

	// A busy desktop is never paused.
	f.m.MarkBusy(id, "agent Bot1's task")
	f.clock.Advance(time.Hour)
	time.Sleep(20 * time.Millisecond)
	if state() != StateRunning {
		t.Fatalf("paused or stopped while busy: %s", state())
	}
	f.m.MarkIdle(id)
}

// TestPauseResume: Pause and Resume of the agent's desktop, their refusals, and a paused
// desktop found at a restart adopted as paused (not as crashed), then resumed.
func TestPauseResume(t *testing.T) {
	f := newFixture(t, nil)
	ctx := context.Background()
	f.prepare("standard")
	_, err := f.m.Pause(ctx, "acc1", "g1")
	wantClass(t, "pause with no desktop", err, fault.ErrConflict, "start it first")
	v := f.act("acc1", "g1", ActionCreate)
	// The freezer gave up once (runc on a busy machine): the pause is tried again.
	f.eng.FailNext("pause", fault.Unavailable("`runc pause` failed: exit status 1"))
	v, err = f.m.Pause(ctx, "acc1", "g1")
	wantClass(t, "pause", err, nil)
	if v.Desktop.State != StatePaused {
		t.Fatalf("after Pause: %s", v.Desktop.State)
	}
	if _, err := f.m.Link(ctx, v.Desktop.ID); err == nil {
		t.Error("a paused desktop's driver link was handed out")
	}
	_, err = f.m.Pause(ctx, "acc2", "g1")
	wantClass(t, "another account's agent", err, fault.ErrNotFound)
	// It holds its slot: with room for one desktop, another cannot start, and it is ready for
	// a turn (which resumes it).
	if _, err := f.m.SetPolicy(ctx, IsolationPerAgent, 1); err != nil {
		t.Fatal(err)
	}
	_, err = f.m.Act(ctx, "acc1", "g2", ActionCreate)
	wantClass(t, "a second desktop beside a paused one", err, fault.ErrConflict, "Bot1")
	// Ready for a turn even when the limit was lowered below what runs: it keeps its slot.
	if _, err := f.m.SetPolicy(ctx, IsolationPerAgent, 2); err != nil {
		t.Fatal(err)
	}
	f.act("acc1", "g2", ActionCreate)
	if _, err := f.m.SetPolicy(ctx, IsolationPerAgent, 1); err != nil {
		t.Fatal(err)
	}
	if ok, why := f.m.VMReady(ctx, "acc1", "g1"); !ok {
		t.Errorf("a paused desktop is not ready for a turn: %s", why)
	}
	f.act("acc1", "g2", ActionStop)

	// Restart: the paused desktop is adopted as paused.
	f.m.cfg.KeepRunningOnClose = true
	f.m.Close()
	f.start(nil)
	av, err := f.m.Agent(ctx, "acc1", "g1")
	wantClass(t, "view after restart", err, nil)
	if av.Desktop.State != StatePaused || av.Desktop.LastError != "" {
		t.Fatalf("after restart: %s %q, want paused and no error", av.Desktop.State, av.Desktop.LastError)
	}
	if c, _ := f.eng.ByName(v.Desktop.Container); !c.State.Paused {
		t.Fatal("the container is no longer paused after the restart")
	}
	v, err = f.m.Resume(ctx, "acc1", "g1")
	wantClass(t, "resume", err, nil)
	if v.Desktop.State != StateRunning {
		t.Fatalf("after Resume: %s", v.Desktop.State)
	}
	if _, err := f.m.Link(ctx, v.Desktop.ID); err != nil {
		t.Errorf("the resumed desktop's driver: %v", err)
	}
	f.act("acc1", "g1", ActionStop)
	_, err = f.m.Resume(ctx, "acc1", "g1")
	wantClass(t, "resume a stopped desktop", err, fault.ErrConflict, "start it instead")
	_, err = f.m.Pause(ctx, "acc1", "g1")
	wantClass(t, "pause a stopped desktop", err, fault.ErrConflict, "is stopped", "start it first")
}
