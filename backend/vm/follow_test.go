package vm

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"cubicle/backend/fault"
	"cubicle/backend/store"
)

// These tests drive the manager's logic with the in-memory engine; real_follow_test.go runs
// the same cases against Podman.

// recState returns the recorded state of agent's desktop.
func (f *fixture) recState(account, agent string) store.VMInstance {
	f.t.Helper()
	in, _, err := f.m.resolve(account, agent)
	if err != nil {
		f.t.Fatal(err)
	}
	return in
}

// waitState polls (real time, up to 10 s: generous for a loaded machine) until agent's record
// is in state.
func (f *fixture) waitState(account, agent, state string) {
	f.t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		in := f.recState(account, agent)
		if in.State == state {
			return
		}
		if time.Now().After(deadline) {
			f.t.Fatalf("%s's desktop is %s 10 s after the change, want %s", agent, in.State, state)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// changes collects OnChange calls.
type changes struct {
	mu  sync.Mutex
	got []InstanceChange
}

func (c *changes) add(ch InstanceChange) { c.mu.Lock(); c.got = append(c.got, ch); c.mu.Unlock() }
func (c *changes) states(id string) []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []string
	for _, ch := range c.got {
		if ch.InstanceID == id {
			out = append(out, ch.State)
		}
	}
	return out
}

func TestFollowOutsideChanges(t *testing.T) {
	var seen changes
	f := newFixture(t, func(c *Config) { c.OnChange = seen.add })
	ctx := context.Background()
	f.prepare("standard")
	if _, err := f.m.SetPolicy(ctx, IsolationPerAgent, 1); err != nil {
		t.Fatal(err)
	}
	v := f.act("acc1", "g1", ActionCreate)
	name, id := v.Desktop.Container, v.Desktop.ID
	if v.Desktop.IdleStopInSeconds == nil {
		t.Fatal("no idle timer after create")
	}
	_, err := f.m.Act(ctx, "acc1", "g2", ActionCreate)
	wantClass(t, "second desktop at capacity 1", err, fault.ErrConflict, "Bot1")

	for _, tc := range []struct {
		action, state string
		slot          bool // still holds its capacity slot
	}{
		{"pause", StatePaused, true},
		{"unpause", StateRunning, true},
		{"stop", StateStopped, false},
		{"start", StateRunning, true},
		{"kill", StateStopped, false},
		{"start", StateRunning, true},
		{"remove", StateAbsent, false},
	} {
		if err := f.eng.Outside(name, tc.action, false); err != nil {
			t.Fatal(err)
		}
		f.waitState("acc1", "g1", tc.state)
		av, err := f.m.Agent(ctx, "acc1", "g1")
		wantClass(t, "view", err, nil)
		if said := strings.Contains(av.Desktop.LastError, "exited by itself"); said != (tc.state == StateStopped) {
			t.Errorf("after outside %s: lastError %q (a desktop that ended outside Cubicle says so; others say nothing)",
				tc.action, av.Desktop.LastError)
		}
		idle := av.Desktop.IdleStopInSeconds != nil
		if idle != (tc.state == StateRunning || tc.state == StatePaused) {
			t.Errorf("after outside %s: idle timer running=%v in state %s", tc.action, idle, tc.state)
		}
		st, _ := f.m.Status(ctx)
		f.m.capMu.Lock()
		taken := len(f.m.runningDesktops(""))
		f.m.capMu.Unlock()
		if (taken == 1) != tc.slot {
			t.Errorf("after outside %s: %d slots taken (status running %d), want slot=%v", tc.action, taken, st.Running, tc.slot)
		}
	}
	// With the slot free, another agent's desktop may start.
	f.act("acc1", "g2", ActionCreate)
	if got := seen.states(id); !slices.Equal(got[len(got)-7:], []string{StatePaused, StateRunning, StateStopped, StateRunning,
		StateStopped, StateRunning, StateAbsent}) {
		t.Errorf("OnChange heard %v", got)
	}
}

// TestStopPausedDesktop: a paused desktop is a state of its own; Stop stops it (never the
// engine's raw error), and Start of a paused desktop resumes it.
func TestStopPausedDesktop(t *testing.T) {
	f := newFixture(t, nil)
	f.prepare("standard")
	v := f.act("acc1", "g1", ActionCreate)
	f.eng.Outside(v.Desktop.Container, "pause", false)
	f.waitState("acc1", "g1", StatePaused)
	if v := f.act("acc1", "g1", ActionStart); v.Desktop.State != StateRunning {
		t.Errorf("start of a paused desktop: %s", v.Desktop.State)
	}
	if c, _ := f.eng.ByName(v.Desktop.Container); !c.State.Running {
		t.Error("start did not resume the paused container")
	}
	f.eng.Outside(v.Desktop.Container, "pause", false)
	f.waitState("acc1", "g1", StatePaused)
	if v := f.act("acc1", "g1", ActionStop); v.Desktop.State != StateStopped {
		t.Errorf("stop of a paused desktop: %s", v.Desktop.State)
	}
}

// TestResyncWithoutEvents: a change the event stream never reports (lost events) is found by
// the periodic comparison.
func TestResyncWithoutEvents(t *testing.T) {
	f := newFixture(t, func(c *Config) { c.ResyncInterval = 100 * time.Millisecond })
	f.prepare("standard")
	v := f.act("acc1", "g1", ActionCreate)
	if err := f.eng.Outside(v.Desktop.Container, "kill", true); err != nil {
		t.Fatal(err)
	}
	f.waitState("acc1", "g1", StateStopped)
}

// TestEventStreamReconnects: when the engine ends the stream (a restart), the manager
// subscribes again and catches up with what happened meanwhile.
func TestEventStreamReconnects(t *testing.T) {
	f := newFixture(t, nil)
	f.prepare("standard")
	v := f.act("acc1", "g1", ActionCreate)
	waitFor(t, "the subscription", func() bool { return f.eng.Subscribers() == 1 })
	f.eng.EndEvents()
	f.eng.Outside(v.Desktop.Container, "stop", true) // while nobody listens
	f.waitState("acc1", "g1", StateStopped)
	waitFor(t, "a new subscription", func() bool { return f.eng.Subscribers() == 1 })
	f.eng.Outside(v.Desktop.Container, "start", false)
	f.waitState("acc1", "g1", StateRunning)
}

// TestDetachedActions: a caller that goes away mid-action gets its context's error at once;
// the action completes (or rolls back) on its own and the record ends as the engine says,
// with the capacity slot counted while it runs and freed when it fails.
func TestDetachedActions(t *testing.T) {
	f := newFixture(t, nil)
	f.prepare("standard")
	ctx := context.Background()
	if _, err := f.m.SetPolicy(ctx, IsolationPerAgent, 1); err != nil {
		t.Fatal(err)
	}
	gate := make(chan struct{})
	f.eng.Block("start", gate)
	cctx, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	_, err := f.m.Act(cctx, "acc1", "g1", ActionCreate)
	cancel()
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("create whose caller left: %v, want the caller's context error", err)
	}
	// The create goes on without its caller (its start is held): on a loaded machine its
	// record may not say so yet the moment the caller's deadline passed (CI saw "absent").
	f.waitState("acc1", "g1", StateCreating)
	_, err = f.m.Act(ctx, "acc1", "g2", ActionCreate)
	wantClass(t, "another desktop while one is being created at capacity 1", err, fault.ErrConflict, "Bot1")
	close(gate)
	f.eng.Block("start", nil)
	f.waitState("acc1", "g1", StateRunning)
	if f.m.Status(ctx); len(f.eng.Running()) != 1 {
		t.Errorf("running %v", f.eng.Running())
	}
	av, _ := f.m.Agent(ctx, "acc1", "g1")
	if av.Desktop.IdleStopInSeconds == nil {
		t.Error("a desktop created for a caller that left has no idle timer")
	}

	// A stop whose caller left completes.
	gate = make(chan struct{})
	f.eng.Block("stop", gate)
	cctx, cancel = context.WithTimeout(ctx, 50*time.Millisecond)
	_, err = f.m.Act(cctx, "acc1", "g1", ActionStop)
	cancel()
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("stop whose caller left: %v", err)
	}
	close(gate)
	f.eng.Block("stop", nil)
	f.waitState("acc1", "g1", StateStopped)

	// A remove queued behind a create whose caller left runs after it: nothing is left.
	gate = make(chan struct{})
	f.eng.Block("start", gate)
	cctx, cancel = context.WithTimeout(ctx, 50*time.Millisecond)
	f.m.Act(cctx, "acc1", "g1", ActionRecreate)
	cancel()
	done := make(chan error, 1)
	go func() { _, err := f.m.Act(ctx, "acc1", "g1", ActionRemove); done <- err }()
	time.Sleep(50 * time.Millisecond)
	close(gate)
	f.eng.Block("start", nil)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if in := f.recState("acc1", "g1"); in.State != StateAbsent || f.eng.Count() != 0 {
		t.Errorf("after recreate then remove: %s, %d containers", in.State, f.eng.Count())
	}

	// A start that fails (the driver never answers) rolls back: stopped, error recorded,
	// slot free.
	f.eng.FailNext("start", fault.Unavailable("OCI runtime error"))
	_, err = f.m.Act(ctx, "acc1", "g1", ActionCreate)
	wantClass(t, "create with a failing start", err, fault.ErrUnavailable, "OCI runtime error")
	in := f.recState("acc1", "g1")
	if in.State != StateStopped || !strings.Contains(in.LastError, "OCI runtime error") {
		t.Errorf("after a failed start: %s %q", in.State, in.LastError)
	}
	f.act("acc1", "g2", ActionCreate) // the slot is free
}

// TestTaskCreateThenRemoveInOrder: a task desktop whose creation's caller left is removed by
// the RemoveTask that follows, however the two interleave.
func TestTaskCreateThenRemoveInOrder(t *testing.T) {
	f := newFixture(t, nil)
	f.prepare("standard")
	ctx := context.Background()
	gate := make(chan struct{})
	f.eng.Block("create", gate)
	spec := TaskSpec{AccountID: "acc1", AgentID: "g1", SessionID: "s", TaskID: "t1", Helper: "h"}
	cctx, cancel := context.WithTimeout(ctx, 30*time.Millisecond)
	_, err := f.m.CreateTask(cctx, spec)
	cancel()
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("CreateTask whose caller left: %v", err)
	}
	done := make(chan error, 1)
	go func() { done <- f.m.RemoveTask(ctx, "t1") }()
	time.Sleep(30 * time.Millisecond)
	close(gate)
	f.eng.Block("create", nil)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if n := f.eng.Count(); n != 0 {
		t.Errorf("%d containers left after the task's removal", n)
	}
	if _, err := f.st.VMInstance(TaskInstanceID("local", "t1")); !errors.Is(err, fault.ErrNotFound) {
		t.Errorf("task record left: %v", err)
	}
}
