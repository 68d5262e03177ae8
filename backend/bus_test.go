package backend

import (
	"io"
	"log/slog"
	"testing"
	"time"

	"cubicle/backend/control"
	"cubicle/backend/events"
	"cubicle/backend/vm"
)

// TestStopEndsControlAndFrameCount: when a running desktop stops, its control ends (late input
// of the old lease is refused) and its frame count starts again, so that after a restart — whose
// screen counts frames from the start — a new lease accepts input aimed at the new frames.
func TestStopEndsControlAndFrameCount(t *testing.T) {
	ctl := control.New(control.Config{})
	if err := ctl.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	defer ctl.Close()
	bus := events.New(events.Config{})
	defer bus.Close()
	b := &Backend{Control: ctl, Events: bus, log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	sub := bus.Subscribe(events.SubscribeOptions{Types: []events.Type{events.DesktopState}})
	defer sub.Close()

	const desk = "vm-restarted"
	const before = 1<<40 | 5000 // the old screen's frames
	const after = 1<<40 | 3     // the restarted screen's
	ctl.ObserveFrame(desk, before)
	old, err := ctl.TakeOver(desk, control.Person{AccountID: "a1", Username: "alice", AgentID: "g1"})
	if err != nil {
		t.Fatal(err)
	}
	if err := ctl.HandBack(desk, old.Token); err != nil {
		t.Fatal(err)
	}
	b.desktopChanged(vm.InstanceChange{InstanceID: desk, Scope: "agent", AccountID: "a1", AgentID: "g1", State: "stopping", Previous: "running"})
	select {
	case e := <-sub.C():
		if d := e.Data.(events.Desktop); d.InstanceID != desk || d.State != "stopping" || e.Audience != events.ForAccount("a1", true) {
			t.Fatalf("event %+v", e)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("no desktop event")
	}
	ctl.ObserveFrame(desk, after)
	l, err := ctl.TakeOver(desk, control.Person{AccountID: "a1", Username: "alice", AgentID: "g1"})
	if err != nil {
		t.Fatal(err)
	}
	if err := ctl.CheckInput(desk, control.InputAuth{AccountID: "a1", AgentID: "g1", Token: l.Token, Version: l.Version, FrameID: after}); err != nil {
		t.Fatalf("input aimed at the restarted screen: %v", err)
	}
	// A desktop that was not running (created, then stopped again) changes no control.
	v := l.Version
	b.desktopChanged(vm.InstanceChange{InstanceID: desk, State: "stopped", Previous: "stopping"})
	if h, ok := ctl.Holder(desk); !ok || h.Version != v {
		t.Fatalf("a change between stopped states ended control: %+v %v", h, ok)
	}
}
