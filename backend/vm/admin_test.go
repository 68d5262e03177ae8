package vm

import (
	"context"
	"slices"
	"testing"

	"cubicle/backend/fault"
	"cubicle/backend/vm/vmtest"
)

func (c *changes) of(id string) []InstanceChange {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []InstanceChange
	for _, ch := range c.got {
		if ch.InstanceID == id {
			out = append(out, ch)
		}
	}
	return out
}

func (c *changes) last(id string) InstanceChange {
	all := c.of(id)
	if len(all) == 0 {
		return InstanceChange{}
	}
	return all[len(all)-1]
}

// TestAdminActReachesEveryDesktop: an administrator stops and removes any desktop of the node
// by id — another account's shared desktop, an agent's own one, a task desktop, an orphaned
// one — and every refusal changes nothing.
func TestAdminActReachesEveryDesktop(t *testing.T) {
	var seen changes
	f := newFixture(t, func(c *Config) { c.OnChange = seen.add; c.Limits = Limits{} })
	ctx := context.Background()
	f.prepare("standard")
	if _, err := f.m.SetPolicy(ctx, IsolationPerAgent, 4); err != nil {
		t.Fatal(err)
	}
	own := f.act("acc1", "g1", ActionCreate).Desktop    // alice's agent's own desktop
	orphan := f.act("acc1", "g2", ActionCreate).Desktop // its agent will be deleted
	task, err := f.m.CreateTask(ctx, TaskSpec{AccountID: "acc1", AgentID: "g1", TaskID: "t1", Helper: "scout"})
	wantClass(t, "create task", err, nil)
	if _, err := f.m.SetPolicy(ctx, IsolationShared, 4); err != nil {
		t.Fatal(err)
	}
	shared := f.act("acc2", "h1", ActionCreate).Desktop // bob's shared desktop
	if shared.Scope != scopeShared || shared.Owner != "bob" || len(shared.Agents) != 0 {
		// h1's computer is "" (none): a shared desktop lists the account's VM agents only.
		t.Fatalf("shared desktop view %+v", shared)
	}
	if err := f.st.DeleteAgent("g2"); err != nil {
		t.Fatal(err)
	}
	st, _ := f.m.Status(ctx)
	views := map[string]InstanceView{}
	for _, v := range st.Instances {
		views[v.ID] = v
	}
	if v := views[orphan.ID]; !v.Orphaned || v.State != StateRunning {
		t.Fatalf("orphaned desktop %+v", v)
	}
	if v := views[own.ID]; v.Orphaned || v.Owner != "alice" || len(v.Agents) != 1 || v.Agents[0].Name != "Bot1" || v.NodeID != "local" {
		t.Fatalf("own desktop %+v", v)
	}

	// Refusals first: nothing may change.
	calls := len(f.eng.Calls())
	for _, tc := range []struct {
		name, id, action string
		class            error
	}{
		{"unknown desktop", "vm-nope", ActionStop, fault.ErrNotFound},
		{"unknown action", own.ID, "start", fault.ErrInvalid},
		{"recreate is not an admin action", own.ID, ActionRecreate, fault.ErrInvalid},
		{"empty action", own.ID, "", fault.ErrInvalid},
	} {
		_, err := f.m.AdminAct(ctx, tc.id, tc.action, false)
		wantClass(t, tc.name, err, tc.class)
	}
	f.activity.SetBusy(own.ID, "agent Bot1's task")
	_, err = f.m.AdminAct(ctx, own.ID, ActionStop, false)
	wantClass(t, "busy without force", err, fault.ErrConflict, "agent Bot1's task", "anyway")
	if got := len(f.eng.Calls()); got != calls {
		t.Fatalf("a refused action reached the engine: %v", f.eng.Calls()[calls:])
	}
	if in, _ := f.st.VMInstance(own.ID); in.State != StateRunning {
		t.Fatalf("refused stop changed the state to %s", in.State)
	}

	// Forced: the task is revoked first, then the desktop stops; record and volumes stay.
	v, err := f.m.AdminAct(ctx, own.ID, ActionStop, true)
	wantClass(t, "forced stop", err, nil)
	if v.State != StateStopped || !slices.Contains(f.activity.Revoked(), own.ID) {
		t.Fatalf("forced stop: %+v, revoked %v", v, f.activity.Revoked())
	}
	if last := seen.last(own.ID); last.State != StateStopped || last.Previous != StateStopping || last.AccountID != "acc1" || last.AgentID != "g1" {
		t.Fatalf("OnChange for the stop: %+v", last)
	}

	// Another account's shared desktop: stop, then remove (record and volumes kept).
	v, err = f.m.AdminAct(ctx, shared.ID, ActionStop, false)
	wantClass(t, "stop shared", err, nil)
	if v.State != StateStopped {
		t.Fatalf("shared after stop: %+v", v)
	}
	v, err = f.m.AdminAct(ctx, shared.ID, ActionRemove, false)
	wantClass(t, "remove shared", err, nil)
	if v.State != StateAbsent || v.Removed {
		t.Fatalf("shared after remove: %+v", v)
	}
	if _, err := f.st.VMInstance(shared.ID); err != nil {
		t.Fatalf("the shared desktop's record is gone: %v", err)
	}
	if _, ok := f.eng.ByName(shared.Container); ok {
		t.Fatal("the shared desktop's container is still there")
	}
	if vols := f.eng.VolumeNames(); !slices.Contains(vols, shared.Workspace) || !slices.Contains(vols, shared.BrowserVolume) {
		t.Fatalf("the shared desktop's volumes are gone: %v", vols)
	}

	// The task desktop: removed, record and all (its task fails at its next action).
	v, err = f.m.AdminAct(ctx, task, ActionStop, false)
	wantClass(t, "stop task desktop", err, nil)
	if !v.Removed || !v.Task {
		t.Fatalf("task desktop answer %+v", v)
	}
	if _, err := f.st.VMInstance(task); !isNotFound(err) {
		t.Fatalf("task record: %v", err)
	}
	if last := seen.last(task); !last.Removed {
		t.Fatalf("OnChange for the task desktop: %+v", last)
	}

	// The orphaned desktop: removing it forgets its record; its volumes stay (leftovers).
	v, err = f.m.AdminAct(ctx, orphan.ID, ActionRemove, false)
	wantClass(t, "remove orphan", err, nil)
	if !v.Removed || !v.Orphaned {
		t.Fatalf("orphan answer %+v", v)
	}
	if _, err := f.st.VMInstance(orphan.ID); !isNotFound(err) {
		t.Fatalf("orphan record: %v", err)
	}
	if vols := f.eng.VolumeNames(); !slices.Contains(vols, orphan.Workspace) {
		t.Fatalf("the orphan's work files were deleted: %v", vols)
	}
	if last := seen.last(orphan.ID); !last.Removed || last.State != StateAbsent {
		t.Fatalf("OnChange for the orphan: %+v", last)
	}
	if got := f.eng.Running(); len(got) != 0 {
		t.Fatalf("still running: %v", got)
	}
}

func TestAdminActRefusesComposeDesktops(t *testing.T) {
	f := newFixture(t, func(c *Config) { c.Compose = []ComposeDesktop{{Name: "one"}} })
	f.eng.Add("compose-one", map[string]string{LabelCompose: "one"}, true)
	f.m.Close()
	f.start(func(c *Config) { c.Compose = []ComposeDesktop{{Name: "one"}} })
	_, err := f.m.AdminAct(context.Background(), composeID("one"), ActionStop, true)
	wantClass(t, "stop a fixed desktop", err, fault.ErrConflict, "Compose")
	if got := f.eng.Running(); len(got) != 1 {
		t.Fatalf("running %v", got)
	}
}

// TestForgetAgent: deleting an agent removes its own desktop and browser and forgets them, and
// deletes their volumes only when asked to; refusals change nothing.
func TestForgetAgent(t *testing.T) {
	f := newFixture(t, nil)
	ctx := context.Background()
	f.prepare("standard")
	keep := f.act("acc1", "g1", ActionCreate).Desktop
	drop := f.act("acc1", "g2", ActionCreate).Desktop

	quick, err := f.m.AgentData(ctx, "acc1", "g2", false)
	wantClass(t, "agent data without sizes", err, nil)
	if len(quick.Volumes) != 2 || quick.SizeBytes != -1 || quick.Volumes[0].SizeBytes != -1 {
		t.Fatalf("agent data without sizes %+v", quick)
	}
	d, err := f.m.AgentData(ctx, "acc1", "g2", true)
	wantClass(t, "agent data", err, nil)
	if len(d.Desktops) != 1 || d.Desktops[0].ID != drop.ID || len(d.Volumes) != 2 || d.SizeBytes != 2*vmtest.VolumeSize {
		t.Fatalf("agent data %+v", d)
	}
	for _, v := range d.Volumes {
		if v.SizeBytes != vmtest.VolumeSize || v.InstanceID != drop.ID {
			t.Fatalf("volume %+v", v)
		}
	}
	_, err = f.m.AgentData(ctx, "acc2", "g2", true)
	wantClass(t, "another account's agent", err, fault.ErrNotFound)

	calls := len(f.eng.Calls())
	wantClass(t, "data without the desktop", f.m.ForgetAgent(ctx, "acc1", "g2", false, true), fault.ErrInvalid)
	f.activity.SetBusy(drop.ID, "alice (control)")
	wantClass(t, "busy", f.m.ForgetAgent(ctx, "acc1", "g2", true, true), fault.ErrConflict, "alice (control)")
	f.activity.SetBusy(drop.ID, "")
	wantClass(t, "keep the desktop", f.m.ForgetAgent(ctx, "acc1", "g2", false, false), nil)
	if got := len(f.eng.Calls()); got != calls {
		t.Fatalf("refusals reached the engine: %v", f.eng.Calls()[calls:])
	}

	// Without the data: container gone, record forgotten, volumes kept.
	wantClass(t, "remove, keep data", f.m.ForgetAgent(ctx, "acc1", "g1", true, false), nil)
	if _, ok := f.eng.ByName(keep.Container); ok {
		t.Fatal("g1's container is still there")
	}
	if _, err := f.st.VMInstance(keep.ID); !isNotFound(err) {
		t.Fatalf("g1's record: %v", err)
	}
	if vols := f.eng.VolumeNames(); !slices.Contains(vols, keep.Workspace) || !slices.Contains(vols, keep.BrowserVolume) {
		t.Fatalf("g1's data was deleted: %v", vols)
	}
	// With the data: the volumes go too.
	wantClass(t, "remove with data", f.m.ForgetAgent(ctx, "acc1", "g2", true, true), nil)
	if vols := f.eng.VolumeNames(); slices.Contains(vols, drop.Workspace) || slices.Contains(vols, drop.BrowserVolume) {
		t.Fatalf("g2's data is still there: %v", vols)
	}
	if got := f.eng.Running(); len(got) != 0 {
		t.Fatalf("running %v", got)
	}
	// An agent that never had a desktop: nothing to do.
	wantClass(t, "no desktop", f.m.ForgetAgent(ctx, "acc1", "g3", true, true), nil)
}

func TestStatsOfRunningDesktops(t *testing.T) {
	f := newFixture(t, nil)
	ctx := context.Background()
	f.prepare("standard")
	a := f.act("acc1", "g1", ActionCreate).Desktop
	b := f.act("acc1", "g2", ActionCreate).Desktop
	f.act("acc1", "g2", ActionStop)
	st, err := f.m.Stats(ctx)
	wantClass(t, "stats", err, nil)
	if len(st) != 1 || st[0].InstanceID != a.ID || st[0].CPUPercent != 12.5 || st[0].MemoryBytes != 100<<20 {
		t.Fatalf("stats %+v (stopped %s must not be listed)", st, b.ID)
	}
}

func isNotFound(err error) bool { return fault.Class(err) == fault.ErrNotFound }

// TestStopThatStoppedIsAStop: an engine that reports a stop as failed although the container
// stopped (Podman's 500 when the killed processes are reaped later than it waits, as on a
// loaded machine) stopped the desktop — the administrator's stop, the agent's own stop and a
// removal succeed; a stop that really failed (the container runs) is still an error, and the
// desktop is recorded as what the engine says.
func TestStopThatStoppedIsAStop(t *testing.T) {
	f := newFixture(t, func(c *Config) { c.Limits = Limits{} })
	ctx := context.Background()
	f.prepare("standard")
	complaint := fault.Unavailable("stop container: given PIDs did not die within timeout")

	desk := f.act("acc1", "g1", ActionCreate).Desktop
	f.eng.FailAfterNext("stop", complaint)
	v, err := f.m.AdminAct(ctx, desk.ID, ActionStop, false)
	wantClass(t, "admin stop that stopped", err, nil)
	if v.State != StateStopped || v.LastError != "" || slices.Contains(f.eng.Running(), desk.Container) {
		t.Fatalf("after an admin stop the engine complained about but did: %+v (running %v)", v, f.eng.Running())
	}

	f.act("acc1", "g1", ActionStart)
	f.eng.FailAfterNext("stop", complaint)
	if v := f.act("acc1", "g1", ActionStop).Desktop; v.State != StateStopped {
		t.Fatalf("the agent's own stop: %+v", v)
	}

	f.act("acc1", "g1", ActionStart)
	f.eng.FailAfterNext("stop", complaint)
	if v := f.act("acc1", "g1", ActionRemove).Desktop; v.State != StateAbsent {
		t.Fatalf("a removal whose stop the engine complained about but did: %+v", v)
	}

	// A stop that did not happen is still a failure, and the desktop still runs.
	f.act("acc1", "g1", ActionCreate)
	f.eng.FailNext("stop", complaint)
	_, err = f.m.AdminAct(ctx, desk.ID, ActionStop, false)
	wantClass(t, "a stop that failed", err, fault.ErrUnavailable, "did not die")
	st, _ := f.m.Status(ctx)
	for _, in := range st.Instances {
		if in.ID == desk.ID && in.State != StateRunning {
			t.Fatalf("after a failed stop the desktop is %q, want running (what the engine says)", in.State)
		}
	}
}
