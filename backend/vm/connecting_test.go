package vm

import (
	"context"
	"errors"
	"testing"
	"time"

	"cubicle/backend/fault"
	"cubicle/backend/link"
)

// TestEngineConnectingLate (issue 31 item 1): a manager whose engine connects in the
// background shows its desktops as recorded and unreachable, refuses their links, and makes
// an operation that needs the engine wait for it (503 "still connecting" past ConnectWait);
// once the engine is attached the records are reconciled as at Start — the desktop that still
// runs is adopted, not doubled — and a start that waited goes on.
func TestEngineConnectingLate(t *testing.T) {
	f := newFixture(t, nil)
	f.prepare("standard")
	run := f.act("acc1", "g1", ActionCreate).Desktop
	f.m.cfg.KeepRunningOnClose = true // as after a restart: the desktop still runs
	f.m.Close()
	containers := f.eng.Count()

	f.start(func(c *Config) {
		c.Engine, c.Images, c.Connecting, c.ConnectWait = nil, nil, true, 200*time.Millisecond
	})
	ctx := context.Background()
	v, err := f.m.Agent(ctx, "acc1", "g1")
	wantClass(t, "view while connecting", err, nil)
	if v.Desktop.State != StateRunning || v.Desktop.Health != HealthUnreachable || v.Desktop.LastError != ErrConnecting {
		t.Fatalf("desktop while the engine connects: state %s health %s (%s), want running as recorded, unreachable: connecting",
			v.Desktop.State, v.Desktop.Health, v.Desktop.LastError)
	}
	if st, _ := f.m.Status(ctx); !st.Engine.Connecting {
		t.Fatalf("engine while it connects: %+v", st.Engine)
	}
	_, err = f.m.Link(ctx, run.ID)
	wantClass(t, "link while connecting", err, fault.ErrUnavailable, ErrConnecting)
	_, err = f.m.Act(ctx, "acc1", "g2", ActionStart)
	wantClass(t, "start past the wait", err, fault.ErrUnavailable, ErrConnecting)
	if ins, _ := f.st.VMInstances("local"); len(ins) != 1 {
		t.Fatalf("%d records after a refused start, want 1", len(ins))
	}

	// A start that comes while the engine connects goes on once it is there.
	f.m.cfg.ConnectWait = 10 * time.Second
	started := make(chan error, 1)
	go func() { _, err := f.m.Act(ctx, "acc1", "g2", ActionStart); started <- err }()
	time.Sleep(50 * time.Millisecond)
	if err := f.m.AttachEngine(ctx, EngineSetup{Engine: f.eng, Images: f.b,
		Link: link.Choose(link.SocketMode, link.Engine{})}); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-started:
		wantClass(t, "start that waited for the engine", err, nil)
	case <-time.After(10 * time.Second):
		t.Fatal("the start that waited did not go on once the engine was attached")
	}
	if v, _ := f.m.Agent(ctx, "acc1", "g1"); v.Desktop.State != StateRunning || v.Desktop.Container != run.Container {
		t.Fatalf("the running desktop after the engine came: %+v, want adopted", v.Desktop)
	}
	if n := f.eng.Count(); n != containers+1 {
		t.Fatalf("%d containers, want %d (the one adopted, one started)", n, containers+1)
	}
	if err := f.m.AttachEngine(ctx, EngineSetup{Engine: f.eng}); err == nil {
		t.Fatal("a second AttachEngine was accepted")
	}

	// An engine that cannot be connected: the waiting ends with its reason.
	f.m.Close()
	f.start(func(c *Config) { c.Engine, c.Images, c.Connecting = nil, nil, true })
	failed := make(chan error, 1)
	go func() { _, err := f.m.Act(ctx, "acc1", "g3", ActionStart); failed <- err }()
	time.Sleep(50 * time.Millisecond)
	f.m.EngineFailed("no container engine found: install Podman")
	select {
	case err := <-failed:
		wantClass(t, "start when the engine failed", err, fault.ErrUnavailable, "install Podman")
		if errors.Is(err, context.DeadlineExceeded) {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the start that waited did not end when the engine failed")
	}
}
