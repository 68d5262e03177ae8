package vm

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"cubicle/backend/engine"
	"cubicle/backend/fault"
	"cubicle/backend/store"
)

// TestTaskDesktops: a helper's task desktop is a new container of the agent's image with no
// volume, counts against capacity, is idempotent per task, never touches the agent's own
// desktop or volumes, and is removed by RemoveTask, by Close and (after a crash) by Start.
func TestTaskDesktops(t *testing.T) {
	f := newFixture(t, nil)
	ctx := context.Background()
	img := f.prepare("standard")
	own := f.act("acc1", "g1", ActionCreate)
	vols := f.eng.VolumeNames()
	spec := TaskSpec{AccountID: "acc1", AgentID: "g1", SessionID: "s1", TaskID: "task-a", Helper: "researcher"}

	id, err := f.m.CreateTask(ctx, spec)
	wantClass(t, "create task", err, nil)
	again, err := f.m.CreateTask(ctx, spec)
	wantClass(t, "create task again", err, nil)
	if again != id || id != TaskInstanceID("local", "task-a") {
		t.Fatalf("ids %s %s", id, again)
	}
	ctrs, _ := f.eng.ListContainers(ctx, map[string]string{LabelTask: "task-a"})
	if len(ctrs) != 1 || !ctrs[0].Running {
		t.Fatalf("task containers %+v", ctrs)
	}
	c, _ := f.eng.ByName(ctrs[0].Name)
	if c.Spec.Image != img.Ref || len(c.Spec.Volumes) != 0 || len(c.Spec.Mounts) != 1 || c.Spec.Mounts[0].Target != RunDirTarget {
		t.Fatalf("task container spec %+v", c.Spec)
	}
	for k, v := range map[string]string{LabelRole: RoleTask, LabelAccount: "acc1", LabelAgent: "g1", LabelSession: "s1",
		engine.LabelInstance: id, LabelNode: "local"} {
		if c.Spec.Labels[k] != v {
			t.Errorf("label %s = %q, want %q", k, c.Spec.Labels[k], v)
		}
	}
	// It is listed, marked as a task desktop, and counts against capacity (default 2).
	st, _ := f.m.Status(ctx)
	var tv *InstanceView
	for i := range st.Instances {
		if st.Instances[i].ID == id {
			tv = &st.Instances[i]
		}
	}
	if tv == nil || !tv.Task || tv.Fixed || tv.Description != "the task desktop of helper researcher (agent Bot1)" || st.Running != 2 {
		t.Fatalf("status: running %d, task %+v", st.Running, tv)
	}
	_, err = f.m.CreateTask(ctx, TaskSpec{AccountID: "acc1", AgentID: "g1", TaskID: "task-b", Helper: "second"})
	wantClass(t, "full node", err, fault.ErrConflict, "no desktop free", "2 of 2 running", "the desktop of agent Bot1", "task desktop of helper researcher")
	_, err = f.m.Act(ctx, "acc1", "g2", ActionCreate)
	wantClass(t, "full node (agent desktop)", err, fault.ErrConflict, "at most 2", "task desktop")
	// Other accounts' agents cannot borrow the task machinery.
	_, err = f.m.CreateTask(ctx, TaskSpec{AccountID: "acc2", AgentID: "g1", TaskID: "x"})
	wantClass(t, "foreign agent", err, fault.ErrNotFound)

	// Removing it removes container, record and run directory; the agent's desktop and its
	// volumes are untouched.
	wantClass(t, "remove task", f.m.RemoveTask(ctx, "task-a"), nil)
	if ctrs, _ := f.eng.ListContainers(ctx, map[string]string{LabelTask: "task-a"}); len(ctrs) != 0 {
		t.Fatalf("task container left: %+v", ctrs)
	}
	if _, err := f.st.VMInstance(id); !errors.Is(err, fault.ErrNotFound) {
		t.Fatalf("task record left: %v", err)
	}
	if _, err := os.Stat(filepath.Join(f.dir, "run", id)); !os.IsNotExist(err) {
		t.Fatalf("run directory left: %v", err)
	}
	if v, _ := f.m.Agent(ctx, "acc1", "g1"); v.Desktop.State != StateRunning || v.Desktop.Container != own.Desktop.Container {
		t.Fatalf("the agent's desktop changed: %+v", v.Desktop)
	}
	if got := f.eng.VolumeNames(); !slices.Equal(got, vols) {
		t.Fatalf("volumes changed: %v → %v", vols, got)
	}
	wantClass(t, "remove again", f.m.RemoveTask(ctx, "task-a"), nil)

	// A desktop that fails to come up is removed before the error returns.
	f.eng.FailNext("start", errors.New("boom"))
	_, err = f.m.CreateTask(ctx, TaskSpec{AccountID: "acc1", AgentID: "g1", TaskID: "task-c", Helper: "broken"})
	if err == nil {
		t.Fatal("start failure not reported")
	}
	if ctrs, _ := f.eng.ListContainers(ctx, map[string]string{LabelTask: "task-c"}); len(ctrs) != 0 {
		t.Fatalf("failed task container left: %+v", ctrs)
	}
	if _, err := f.st.VMInstance(TaskInstanceID("local", "task-c")); !errors.Is(err, fault.ErrNotFound) {
		t.Fatalf("failed task record left: %v", err)
	}

	// Close removes task desktops even when desktops are kept running.
	if _, err := f.m.CreateTask(ctx, TaskSpec{AccountID: "acc1", AgentID: "g1", TaskID: "task-d", Helper: "d"}); err != nil {
		t.Fatal(err)
	}
	f.m.cfg.KeepRunningOnClose = true
	f.m.Close()
	if ctrs, _ := f.eng.ListContainers(ctx, map[string]string{LabelRole: RoleTask}); len(ctrs) != 0 {
		t.Fatalf("task desktops left after Close: %+v", ctrs)
	}
	if !slices.Contains(f.eng.Running(), own.Desktop.Container) {
		t.Fatal("the agent's desktop was stopped although KeepRunningOnClose")
	}

	// A crash left a task desktop (record + container + run dir), one whose record was lost
	// (run dir only), and another data dir's task desktop: the first two are removed at the
	// next start, the third is left alone; the persistent desktop is adopted as before.
	leftID := TaskInstanceID("local", "task-e")
	now := time.Now().UTC()
	f.st.PutVMInstance(store.VMInstance{ID: leftID, NodeID: "local", AccountID: "acc1", AgentID: "g1", Scope: scopeTask,
		Name: "e", ContainerName: "cubicle-" + leftID, State: StateRunning, CreatedAt: now, UpdatedAt: now})
	taskLabels := func(id string) map[string]string {
		return map[string]string{engine.LabelManaged: "true", LabelNode: "local", LabelRole: RoleTask, engine.LabelInstance: id}
	}
	f.eng.Add("cubicle-"+leftID, taskLabels(leftID), true)
	lostID := TaskInstanceID("local", "task-f")
	os.MkdirAll(filepath.Join(f.dir, "run", lostID), 0o777)
	f.eng.Add("cubicle-"+lostID, taskLabels(lostID), true)
	otherID := TaskInstanceID("local", "someone-elses")
	f.eng.Add("cubicle-"+otherID, taskLabels(otherID), true)
	f.start(nil)
	for _, n := range []string{"cubicle-" + leftID, "cubicle-" + lostID} {
		if _, ok := f.eng.ByName(n); ok {
			t.Errorf("leftover %s not removed at start-up", n)
		}
	}
	if _, ok := f.eng.ByName("cubicle-" + otherID); !ok {
		t.Error("another data dir's task desktop was removed")
	}
	if _, err := f.st.VMInstance(leftID); !errors.Is(err, fault.ErrNotFound) {
		t.Errorf("leftover task record: %v", err)
	}
	if v, _ := f.m.Agent(ctx, "acc1", "g1"); v.Desktop.State != StateRunning {
		t.Errorf("persistent desktop after restart: %s", v.Desktop.State)
	}
	// Agents' actions never reach a task desktop: they resolve to the agent's own.
	if _, err := f.m.CreateTask(ctx, TaskSpec{AccountID: "acc1", AgentID: "g1", TaskID: "task-g", Helper: "g"}); err != nil {
		t.Fatal(err)
	}
	v := f.act("acc1", "g1", ActionStop)
	if v.Desktop.ID == TaskInstanceID("local", "task-g") {
		t.Fatal("an agent action resolved to a task desktop")
	}
	if ctrs, _ := f.eng.ListContainers(ctx, map[string]string{LabelTask: "task-g"}); len(ctrs) != 1 || !ctrs[0].Running {
		t.Fatalf("stopping the agent's desktop touched the task desktop: %+v", ctrs)
	}
	wantClass(t, "remove task-g", f.m.RemoveTask(ctx, "task-g"), nil)
}

// TestTaskDesktopCompose: Compose nodes have fixed desktops only.
func TestTaskDesktopCompose(t *testing.T) {
	f := newFixture(t, func(c *Config) { c.Compose = []ComposeDesktop{{Name: "one"}} })
	_, err := f.m.CreateTask(context.Background(), TaskSpec{AccountID: "acc1", AgentID: "g1", TaskID: "t"})
	wantClass(t, "compose", err, fault.ErrConflict, "fixed desktops")
}
