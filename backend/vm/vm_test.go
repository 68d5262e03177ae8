package vm

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"cubicle/backend/engine"
	"cubicle/backend/fault"
	"cubicle/backend/link"
	"cubicle/backend/nodeapi"
	"cubicle/backend/store"
	"cubicle/backend/vm/vmtest"
	"cubicle/internal/testenv"
)

// waitFor polls cond (real time) for up to 5 s.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// fixture is a Manager over a real store (bbolt in t.TempDir()), a fake engine, builder,
// clock and activity.
type fixture struct {
	t        *testing.T
	m        *Manager
	st       *store.Store
	eng      *vmtest.Engine
	b        *vmtest.Builder
	clock    *vmtest.Clock
	activity *vmtest.Activity
	dir      string
}

func newFixture(t *testing.T, mod func(*Config)) *fixture {
	t.Helper()
	dir := t.TempDir()
	st, err := store.Open(filepath.Join(dir, "cubicle.db"), store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	f := &fixture{t: t, st: st, eng: vmtest.NewEngine(), b: &vmtest.Builder{}, clock: vmtest.NewClock(),
		activity: &vmtest.Activity{}, dir: dir}
	for _, a := range []store.Account{{ID: "acc1", Username: "alice"}, {ID: "acc2", Username: "bob"}} {
		if err := st.CreateAccount(a); err != nil {
			t.Fatal(err)
		}
	}
	for i, a := range []store.Agent{{ID: "g1", AccountID: "acc1", Name: "Bot1"}, {ID: "g2", AccountID: "acc1", Name: "Bot2"},
		{ID: "g3", AccountID: "acc1", Name: "Bot3"}, {ID: "h1", AccountID: "acc2", Name: "Helper"}} {
		a.CreatedAt = time.Unix(int64(i), 0)
		if err := st.CreateAgent(a); err != nil {
			t.Fatal(err)
		}
	}
	f.start(mod)
	t.Cleanup(func() {
		f.m.Close()
		st.Close()
	})
	return f
}

func (f *fixture) config(mod func(*Config)) Config {
	cfg := Config{Store: f.st, Engine: f.eng, Images: f.b, DataDir: f.dir,
		Link: link.Config{Choice: link.Choose(link.SocketMode, link.Engine{}), Socket: f.eng.SocketTransport(),
			Heartbeat: 20 * time.Millisecond, Timeout: 300 * time.Millisecond},
		Logger: slog.New(slog.NewTextHandler(testenv.Writer(f.t), nil)), Clock: f.clock, Activity: f.activity,
		ReadyTimeout: 500 * time.Millisecond}
	if mod != nil {
		mod(&cfg)
	}
	return cfg
}

// start (re)starts the manager on the fixture's data dir.
func (f *fixture) start(mod func(*Config)) {
	f.t.Helper()
	m, err := New(f.config(mod))
	if err != nil {
		f.t.Fatal(err)
	}
	if err := m.Start(context.Background()); err != nil {
		f.t.Fatal(err)
	}
	f.m = m
}

func (f *fixture) prepare(key string) nodeapi.Image {
	f.t.Helper()
	img, err := f.m.Prepare(context.Background(), key)
	if err != nil {
		f.t.Fatalf("Prepare(%s): %v", key, err)
	}
	return img
}

func (f *fixture) act(account, agent, action string) AgentView {
	f.t.Helper()
	v, err := f.m.Act(context.Background(), account, agent, action)
	if err != nil {
		f.t.Fatalf("%s %s: %v", action, agent, err)
	}
	return v
}

func wantClass(t *testing.T, what string, err, class error, contains ...string) {
	t.Helper()
	if class == nil {
		if err != nil {
			t.Fatalf("%s: unexpected error %v", what, err)
		}
		return
	}
	if !errors.Is(err, class) {
		t.Fatalf("%s: error %v, want class %v", what, err, class)
	}
	for _, s := range contains {
		if !strings.Contains(err.Error(), s) {
			t.Errorf("%s: error %q does not mention %q", what, err, s)
		}
	}
}

func TestPrepare(t *testing.T) {
	f := newFixture(t, nil)
	img := f.prepare("standard")
	if img.Ref != "localhost/cubicle-desktop:standard-abc" || img.DriverVersion != "fake-1" || img.ImageID == "" ||
		img.RecipeHash == "" || img.PreparedAt.IsZero() {
		t.Errorf("prepared image %+v", img)
	}
	if got, err := f.st.VMImage("local", "standard"); err != nil || got.Ref != img.Ref {
		t.Errorf("stored %+v, %v", got, err)
	}
	if n := len(f.eng.Running()); n != 0 {
		t.Errorf("%d containers still run after prepare (the probe must be removed)", n)
	}
	if !strings.Contains(strings.Join(f.eng.Calls(), ","), "create,start") || !strings.Contains(strings.Join(f.eng.Calls(), ","), "remove") {
		t.Errorf("probe not created, started and removed: %v", f.eng.Calls())
	}
	ps := f.m.PrepareStates()
	if len(ps) != 1 || ps[0].Phase != "done" || ps[0].Percent != 100 || ps[0].Running {
		t.Errorf("prepare states %+v", ps)
	}

	t.Run("unknown key", func(t *testing.T) {
		_, err := f.m.Prepare(context.Background(), "windows")
		wantClass(t, "prepare windows", err, fault.ErrInvalid)
	})
	t.Run("blank screen is refused", func(t *testing.T) {
		f := newFixture(t, nil)
		f.eng.SetBlank(true)
		_, err := f.m.Prepare(context.Background(), "standard")
		wantClass(t, "prepare with a blank screen", err, fault.ErrUnavailable, "blank")
		if _, err := f.st.VMImage("local", "standard"); !errors.Is(err, fault.ErrNotFound) {
			t.Errorf("a failed prepare recorded the image: %v", err)
		}
		if n := f.eng.Count(); n != 0 {
			t.Errorf("%d probe containers left", n)
		}
	})
	t.Run("a probe the engine made although its create failed is removed", func(t *testing.T) {
		f := newFixture(t, nil)
		f.eng.FailAfterNext("create", fault.Unavailable("create container: context canceled"))
		_, err := f.m.Prepare(context.Background(), "standard")
		wantClass(t, "prepare whose probe create failed", err, fault.ErrUnavailable, "create probe desktop")
		if n := f.eng.Count(); n != 0 {
			t.Errorf("%d probe containers left (calls %v)", n, f.eng.Calls())
		}
	})
	t.Run("builder error passes through", func(t *testing.T) {
		f := newFixture(t, nil)
		f.b.SetErr(fault.Unavailable("cannot pull public.ecr.aws/x@sha256:1: configure a mirror"))
		_, err := f.m.Prepare(context.Background(), "cursor")
		wantClass(t, "prepare cursor", err, fault.ErrUnavailable, "public.ecr.aws/x", "mirror")
		if ps := f.m.PrepareStates(); len(ps) != 1 || ps[0].Phase != "failed" || ps[0].Error == "" {
			t.Errorf("failed prepare state %+v", ps)
		}
	})
	t.Run("no engine says how to start one", func(t *testing.T) {
		f := newFixture(t, func(c *Config) { c.Engine = nil })
		_, err := f.m.Prepare(context.Background(), "standard")
		wantClass(t, "prepare without engine", err, fault.ErrUnavailable, "podman system service")
		st, err := f.m.Status(context.Background())
		wantClass(t, "status", err, nil)
		if st.Engine.Found || !strings.Contains(st.Engine.Problem, "install Podman") {
			t.Errorf("engine view %+v", st.Engine)
		}
	})
}

// TestPrepareJoins: a second prepare of the same key while one runs joins it; the running
// desktops are stopped first; a second image never replaces an existing instance's image.
func TestPrepareJoins(t *testing.T) {
	f := newFixture(t, nil)
	f.prepare("standard")
	f.act("acc1", "g1", ActionCreate)
	if got := f.eng.Running(); len(got) != 1 {
		t.Fatalf("running %v", got)
	}
	gate := make(chan struct{})
	f.b.SetGate(gate)
	calls, stopAlls := f.b.Calls(), f.activity.StopAlls()
	st1, err := f.m.StartPrepare("cursor")
	wantClass(t, "StartPrepare", err, nil)
	if !st1.Running {
		t.Errorf("state %+v", st1)
	}
	done := make(chan error, 1)
	go func() { _, err := f.m.Prepare(context.Background(), "cursor"); done <- err }()
	waitFor(t, "the builder to be called", func() bool { return f.b.Calls() > calls })
	if got := f.eng.Running(); len(got) != 0 {
		t.Errorf("desktops still run while preparing: %v", got)
	}
	if f.activity.StopAlls() != stopAlls+1 {
		t.Errorf("VM tasks not stopped before preparing (%d)", f.activity.StopAlls()-stopAlls)
	}
	_, err = f.m.Act(context.Background(), "acc1", "g1", ActionStart)
	wantClass(t, "start while preparing", err, fault.ErrConflict, "being prepared")
	close(gate)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if f.b.Calls() != calls+1 {
		t.Errorf("builder called %d times for two joined prepares, want 1", f.b.Calls()-calls)
	}
	v := f.act("acc1", "g1", ActionStart)
	if v.Desktop.ImageKey != "standard" || v.Desktop.ImageRef != "localhost/cubicle-desktop:standard-abc" {
		t.Errorf("existing desktop's image changed: %+v", v.Desktop)
	}
}

func TestLifecycle(t *testing.T) {
	f := newFixture(t, nil)
	ctx := context.Background()
	_, err := f.m.Act(ctx, "acc1", "g1", ActionCreate)
	wantClass(t, "create before any prepare", err, fault.ErrConflict, "prepare")
	f.prepare("standard")

	v := f.act("acc1", "g1", ActionCreate)
	d := v.Desktop
	if d.State != StateRunning || d.Scope != scopeAgent || d.ImageKey != "standard" || d.Container == "" {
		t.Fatalf("after create: %+v", d)
	}
	c, ok := f.eng.ByName(d.Container)
	if !ok || !c.State.Running {
		t.Fatalf("container %s not running", d.Container)
	}
	s := c.Spec
	if s.Labels[engine.LabelManaged] != "true" || s.Labels[engine.LabelInstance] != d.ID || s.Labels[LabelNode] != "local" {
		t.Errorf("labels %v", s.Labels)
	}
	if len(s.CapAdd) != 0 || s.StopTimeout != 5*time.Second || s.Limits.MemoryBytes != DefaultLimits.MemoryBytes ||
		s.Limits.PIDs != DefaultLimits.PIDs || s.Limits.NanoCPUs != DefaultLimits.NanoCPUs {
		t.Errorf("hardening: caps %v stop %s limits %+v", s.CapAdd, s.StopTimeout, s.Limits)
	}
	if len(s.Mounts) != 1 || s.Mounts[0].Target != RunDirTarget {
		t.Errorf("mounts %+v: only the run dir may be bind-mounted", s.Mounts)
	} else if fi, err := os.Stat(s.Mounts[0].Source); err != nil || fi.Mode().Perm() != 0o777 {
		t.Errorf("run dir %s: %v %v, want 0777", s.Mounts[0].Source, fi.Mode(), err)
	} else if fi, err := os.Stat(filepath.Dir(s.Mounts[0].Source)); err != nil || fi.Mode().Perm() != 0o700 {
		t.Errorf("run root: %v %v, want 0700", fi.Mode(), err)
	}
	vols := map[string]string{}
	for _, vm := range s.Volumes {
		vols[vm.Target] = vm.Name
	}
	if vols[WorkspaceTarget] != d.Workspace || vols[BrowserTarget] != d.BrowserVolume || d.Workspace == "" {
		t.Errorf("volumes %v, view %+v", vols, d)
	}
	firstID := c.State.ID

	steps := []struct {
		action    string
		state     string
		sameCtr   bool
		container bool
	}{
		{ActionCreate, StateRunning, true, true}, // idempotent
		{ActionStop, StateStopped, true, true},
		{ActionStop, StateStopped, true, true},
		{ActionStart, StateRunning, true, true},
		{ActionRecreate, StateRunning, false, true},
		{ActionRemove, StateAbsent, false, false},
		{ActionRemove, StateAbsent, false, false},
		{ActionCreate, StateRunning, false, true},
	}
	for _, st := range steps {
		v := f.act("acc1", "g1", st.action)
		if v.Desktop.State != st.state {
			t.Errorf("after %s: state %s, want %s", st.action, v.Desktop.State, st.state)
		}
		c, ok := f.eng.ByName(d.Container)
		if ok != st.container {
			t.Errorf("after %s: container exists=%v, want %v", st.action, ok, st.container)
		}
		if ok && (c.State.ID == firstID) != st.sameCtr {
			t.Errorf("after %s: container %s (first %s), same=%v wanted", st.action, c.State.ID, firstID, st.sameCtr)
		}
		if v.Desktop.Workspace != d.Workspace || v.Desktop.BrowserVolume != d.BrowserVolume {
			t.Errorf("after %s: volumes changed: %+v", st.action, v.Desktop)
		}
	}
	if len(f.eng.VolumeNames()) != 2 {
		t.Errorf("volumes %v: want exactly the workspace and browser profile, never removed", f.eng.VolumeNames())
	}
	for _, to := range f.eng.StopTimeouts() {
		if to != 5*time.Second {
			t.Errorf("stop timeout %s, want 5s", to)
		}
	}
	_, err = f.m.Act(ctx, "acc1", "g1", "reboot")
	wantClass(t, "unknown action", err, fault.ErrInvalid, "create, start, stop, recreate, remove")
	_, err = f.m.Act(ctx, "acc2", "g1", ActionCreate)
	wantClass(t, "another account's agent", err, fault.ErrNotFound)
	_, err = f.m.Act(ctx, "acc1", "nobody", ActionCreate)
	wantClass(t, "missing agent", err, fault.ErrNotFound)

	t.Run("start failure leaves a stopped record with the error", func(t *testing.T) {
		f.act("acc1", "g1", ActionStop)
		f.eng.FailNext("start", fault.Unavailable("engine hiccup"))
		_, err := f.m.Act(ctx, "acc1", "g1", ActionStart)
		wantClass(t, "start", err, fault.ErrUnavailable, "engine hiccup")
		v, _ := f.m.Agent(ctx, "acc1", "g1")
		if v.Desktop.State != StateStopped || v.Desktop.LastError == "" {
			t.Errorf("after failed start %+v", v.Desktop)
		}
		f.act("acc1", "g1", ActionStart)
	})
}

func TestImageChoice(t *testing.T) {
	f := newFixture(t, nil)
	ctx := context.Background()
	f.prepare("standard")
	_, err := f.m.SetImage(ctx, "acc1", "g1", "cursor")
	wantClass(t, "unprepared key", err, fault.ErrInvalid, "not prepared", "standard")
	_, err = f.m.SetImage(ctx, "acc1", "g1", "sha256:deadbeef")
	wantClass(t, "arbitrary image id", err, fault.ErrInvalid)
	f.prepare("cursor")
	v, err := f.m.SetImage(ctx, "acc1", "g1", "cursor")
	wantClass(t, "choose cursor", err, nil)
	if v.Desktop.ImageKey != "cursor" || len(v.Images) != 2 {
		t.Errorf("view %+v", v)
	}
	v = f.act("acc1", "g1", ActionCreate)
	if v.Desktop.ImageRef != "localhost/cubicle-desktop:cursor-abc" {
		t.Errorf("created with %s", v.Desktop.ImageRef)
	}
	// Independent desktops may use different images at the same time.
	v2 := f.act("acc1", "g2", ActionCreate)
	if v2.Desktop.ImageKey != "standard" {
		t.Errorf("g2 image %s", v2.Desktop.ImageKey)
	}
	// Changing the choice of a running desktop applies at recreate.
	v, _ = f.m.SetImage(ctx, "acc1", "g1", "standard")
	if !v.Desktop.ImagePending || v.Desktop.ImageRef != "localhost/cubicle-desktop:cursor-abc" {
		t.Errorf("after choosing standard while running: %+v", v.Desktop)
	}
	v = f.act("acc1", "g1", ActionRecreate)
	if v.Desktop.ImagePending || v.Desktop.ImageRef != "localhost/cubicle-desktop:standard-abc" {
		t.Errorf("after recreate: %+v", v.Desktop)
	}
}

func TestCapacity(t *testing.T) {
	f := newFixture(t, nil)
	ctx := context.Background()
	f.prepare("standard")
	f.act("acc1", "g1", ActionCreate)
	f.act("acc1", "g2", ActionCreate)
	_, err := f.m.Act(ctx, "acc1", "g3", ActionCreate)
	wantClass(t, "third desktop", err, fault.ErrConflict, "at most 2", "Bot1", "Bot2")
	_, err = f.m.Act(ctx, "acc2", "h1", ActionStart)
	wantClass(t, "third desktop (start)", err, fault.ErrConflict, "at most 2")
	if n := len(f.eng.Running()); n != 2 {
		t.Errorf("%d running", n)
	}
	for _, tc := range []struct {
		name string
		iso  string
		max  int
		err  error
	}{
		{"zero", IsolationPerAgent, 0, fault.ErrInvalid},
		{"five", IsolationPerAgent, 5, fault.ErrInvalid},
		{"bad isolation", "everyone", 2, fault.ErrInvalid},
		{"three", IsolationPerAgent, 3, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := f.m.SetPolicy(ctx, tc.iso, tc.max)
			wantClass(t, "SetPolicy", err, tc.err)
		})
	}
	f.act("acc1", "g3", ActionCreate)
	f.act("acc1", "g1", ActionStop)
	f.act("acc2", "h1", ActionCreate)
	st, err := f.m.Status(ctx)
	wantClass(t, "status", err, nil)
	if st.Running != 3 || len(st.Instances) != 4 || st.Policy.MaxInstances != 3 {
		t.Errorf("status running %d instances %d policy %+v", st.Running, len(st.Instances), st.Policy)
	}
}

func TestBusyRefusals(t *testing.T) {
	f := newFixture(t, nil)
	ctx := context.Background()
	f.prepare("standard")
	v := f.act("acc1", "g1", ActionCreate)
	id := v.Desktop.ID
	f.m.MarkBusy(id, "alice (control)")
	for _, a := range []string{ActionStop, ActionRecreate, ActionRemove} {
		_, err := f.m.Act(ctx, "acc1", "g1", a)
		wantClass(t, a+" while controlled", err, fault.ErrConflict, "alice (control)")
	}
	_, err := f.m.SetImage(ctx, "acc1", "g1", "standard")
	wantClass(t, "image change while controlled", err, fault.ErrConflict, "alice")
	if v := f.act("acc1", "g1", ActionStart); v.Desktop.BusyBy != "alice (control)" {
		t.Errorf("busyBy %q", v.Desktop.BusyBy)
	}
	f.m.MarkIdle(id)
	f.act("acc1", "g1", ActionStop)

	// The Activity hook (control / agent packages) is asked too.
	f.act("acc1", "g1", ActionStart)
	f.activity.SetBusy(id, "agent Bot1's task")
	_, err = f.m.Act(ctx, "acc1", "g1", ActionRemove)
	wantClass(t, "remove during a task", err, fault.ErrConflict, "agent Bot1's task")
}

func TestIsolation(t *testing.T) {
	f := newFixture(t, nil)
	ctx := context.Background()
	f.prepare("standard")
	_, err := f.m.SetPolicy(ctx, IsolationShared, 2)
	wantClass(t, "switch to shared", err, nil)
	a := f.act("acc1", "g1", ActionCreate)
	b, err := f.m.Agent(ctx, "acc1", "g2")
	wantClass(t, "agent g2", err, nil)
	if a.Desktop.ID != b.Desktop.ID || a.Desktop.Scope != scopeShared || b.Desktop.State != StateRunning {
		t.Errorf("agents of one account do not share: %+v / %+v", a.Desktop, b.Desktop)
	}
	c, _ := f.m.Agent(ctx, "acc2", "h1")
	if c.Desktop.ID == a.Desktop.ID {
		t.Error("sharing crosses accounts")
	}
	f2 := newFixture(t, func(c *Config) { c.NodeID = "node2" })
	f2.m.st = f.st // same store, another node
	if x, _ := f2.m.Agent(ctx, "acc1", "g1"); x.Desktop.ID == a.Desktop.ID {
		t.Error("sharing crosses nodes")
	}

	// Switching is refused while a desktop is protected, naming who blocks it.
	f.m.MarkBusy(a.Desktop.ID, "agent Bot2's task")
	_, err = f.m.SetPolicy(ctx, IsolationPerAgent, 2)
	wantClass(t, "switch while a task runs", err, fault.ErrConflict, "Bot2")
	// Changing only the count is allowed meanwhile.
	_, err = f.m.SetPolicy(ctx, IsolationShared, 3)
	wantClass(t, "count change while busy", err, nil)
	f.m.MarkIdle(a.Desktop.ID)
	_, err = f.m.SetPolicy(ctx, IsolationPerAgent, 2)
	wantClass(t, "switch when idle", err, nil)
	// The idle shared desktop keeps running (retained); agents now get their own.
	g1, _ := f.m.Agent(ctx, "acc1", "g1")
	if g1.Desktop.ID == a.Desktop.ID || g1.Desktop.Scope != scopeAgent || g1.Isolation != IsolationPerAgent {
		t.Errorf("after switch: %+v", g1)
	}
	if got := f.eng.Running(); len(got) != 1 {
		t.Errorf("the shared desktop should be retained running: %v", got)
	}
}

func TestIdleStop(t *testing.T) {
	f := newFixture(t, nil)
	ctx := context.Background()
	f.prepare("standard")
	v := f.act("acc1", "g1", ActionCreate)
	id := v.Desktop.ID
	if v.Desktop.IdleStopInSeconds == nil || *v.Desktop.IdleStopInSeconds != 300 {
		t.Fatalf("idle countdown %v, want 300 s (default 5 min)", v.Desktop.IdleStopInSeconds)
	}
	state := func() string {
		in, _ := f.st.VMInstance(id)
		return in.State
	}
	f.clock.Advance(4 * time.Minute)
	// Viewing does not reset the timer.
	av, _ := f.m.Agent(ctx, "acc1", "g1")
	if av.Desktop.IdleStopInSeconds == nil || *av.Desktop.IdleStopInSeconds != 60 {
		t.Errorf("countdown after 4 min %v", av.Desktop.IdleStopInSeconds)
	}
	f.m.Status(ctx)
	f.clock.Advance(time.Minute)
	waitFor(t, "idle stop after 5 min", func() bool { return state() == StateStopped })

	// A task holds the desktop: no timer; its end starts a full new one.
	f.act("acc1", "g1", ActionStart)
	f.m.MarkBusy(id, "agent Bot1's task")
	av, _ = f.m.Agent(ctx, "acc1", "g1")
	if av.Desktop.IdleStopInSeconds != nil {
		t.Errorf("countdown while busy: %v", *av.Desktop.IdleStopInSeconds)
	}
	f.clock.Advance(time.Hour)
	time.Sleep(20 * time.Millisecond)
	if state() != StateRunning {
		t.Fatalf("stopped while busy: %s", state())
	}
	f.m.MarkIdle(id)
	f.clock.Advance(4*time.Minute + 59*time.Second)
	time.Sleep(20 * time.Millisecond)
	if state() != StateRunning {
		t.Fatalf("stopped before 5 idle minutes: %s", state())
	}
	f.clock.Advance(time.Second)
	waitFor(t, "idle stop after hand-back", func() bool { return state() == StateStopped })

	// Policy changes: out of range refused, requestId idempotent, 0 = never.
	for _, tc := range []struct {
		name string
		req  string
		min  int
		err  error
		want int
	}{
		{"negative", "r0", -1, fault.ErrInvalid, 5},
		{"too long", "r0", 10081, fault.ErrInvalid, 5},
		{"no request id", "", 10, fault.ErrInvalid, 5},
		{"one minute", "r1", 1, nil, 1},
		{"replayed request id", "r1", 60, nil, 1},
		{"never", "r2", 0, nil, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ns, err := f.m.SetIdlePolicy(ctx, tc.req, tc.min, nil)
			wantClass(t, "SetIdlePolicy", err, tc.err)
			cur, _ := f.st.NodeSettings("local")
			if cur.IdleStopMinutes != tc.want || (err == nil && ns.IdleStopMinutes != tc.want) {
				t.Errorf("idleStopMinutes %d (returned %d), want %d", cur.IdleStopMinutes, ns.IdleStopMinutes, tc.want)
			}
		})
	}
	f.act("acc1", "g1", ActionStart)
	f.clock.Advance(30 * 24 * time.Hour)
	time.Sleep(20 * time.Millisecond)
	if state() != StateRunning {
		t.Fatalf("'never' stopped the desktop")
	}
	// "Never" disables only the timer: a manual stop still stops.
	f.act("acc1", "g1", ActionStop)
	// Switching back to a minute applies to a desktop that has been idle all along.
	f.act("acc1", "g1", ActionStart)
	f.clock.Advance(2 * time.Minute)
	if _, err := f.m.SetIdlePolicy(ctx, "r3", 1, nil); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "idle stop after the policy shortened", func() bool { return state() == StateStopped })
}

func TestRecovery(t *testing.T) {
	f := newFixture(t, nil)
	f.prepare("standard")
	if _, err := f.m.SetPolicy(context.Background(), IsolationPerAgent, 4); err != nil {
		t.Fatal(err)
	}
	f.act("acc1", "g1", ActionCreate) // stays running: adopted
	v2 := f.act("acc1", "g2", ActionCreate)
	v3 := f.act("acc2", "h1", ActionCreate)
	f.m.cfg.KeepRunningOnClose = true // as if the process died: desktops keep running
	f.m.Close()

	// While the manager is down: g2's container vanishes; h1 was mid-stop (record says
	// stopping, container still running); a stray of this store, a container of another data
	// directory and a leftover probe appear; g3 crashed mid-create after the container was
	// created but before the record learned its id.
	sid := f.st.Identity().ID
	ctr2, _ := f.eng.ByName(v2.Desktop.Container)
	f.eng.RemoveContainer(context.Background(), ctr2.State.ID, true)
	f.st.UpdateVMInstance(v3.Desktop.ID, func(in *store.VMInstance) error { in.State = StateStopping; return nil })
	stray := f.eng.Add("ours-unknown", map[string]string{engine.LabelManaged: "true", LabelNode: "local", LabelStore: sid,
		LabelRole: "desktop", engine.LabelInstance: "vm-unknown"}, true)
	f.eng.Add("someone-elses", map[string]string{engine.LabelManaged: "true", LabelNode: "local", LabelStore: "0123456789abcdef",
		LabelRole: "desktop", engine.LabelInstance: "vm-unknown2"}, true)
	os.MkdirAll(filepath.Join(f.dir, "run", "probe-dead"), 0o777)
	f.eng.Add("cubicle-probe-dead", map[string]string{engine.LabelManaged: "true", LabelNode: "local", LabelStore: sid,
		LabelRole: "probe", engine.LabelInstance: "probe-dead"}, true)
	f.eng.Add("cubicle-probe-other", map[string]string{engine.LabelManaged: "true", LabelNode: "local", LabelStore: "0123456789abcdef",
		LabelRole: "probe", engine.LabelInstance: "probe-other"}, true) // another data dir's probe
	in3, _, _ := f.m.resolve("acc1", "g3")
	in3.State, in3.ImageRef, in3.ImageKey = StateCreating, "localhost/cubicle-desktop:standard-abc", "standard"
	f.st.PutVMInstance(in3)
	f.eng.Add(in3.ContainerName, map[string]string{engine.LabelManaged: "true", LabelNode: "local", LabelRole: "desktop",
		LabelStore: sid, engine.LabelInstance: in3.ID}, false, engine.Mount{Source: filepath.Join(f.dir, "run", in3.ID), Target: RunDirTarget})

	f.start(nil)
	ctx := context.Background()
	want := map[string]string{"g1": StateRunning, "g2": StateAbsent, "g3": StateStopped}
	for agent, st := range want {
		v, err := f.m.Agent(ctx, "acc1", agent)
		wantClass(t, agent, err, nil)
		if v.Desktop.State != st {
			t.Errorf("%s after restart: %s, want %s", agent, v.Desktop.State, st)
		}
	}
	if v, _ := f.m.Agent(ctx, "acc2", "h1"); v.Desktop.State != StateStopped {
		t.Errorf("interrupted stop not completed: %s", v.Desktop.State)
	}
	if c, _ := f.eng.ByName(v3.Desktop.Container); c.State.Running {
		t.Error("h1's container still runs after the interrupted stop was completed")
	}
	if _, ok := f.eng.ByName("cubicle-probe-dead"); ok {
		t.Error("our leftover probe was not removed")
	}
	if _, ok := f.eng.ByName("cubicle-probe-other"); !ok {
		t.Error("a probe that is not ours was removed")
	}
	st, _ := f.m.Status(ctx)
	if len(st.Strays) != 1 || st.Strays[0] != "ours-unknown" {
		t.Errorf("strays %v, want only this store's unknown container", st.Strays)
	}
	for _, name := range []string{"ours-unknown", "someone-elses"} {
		if c, ok := f.eng.ByName(name); !ok || !c.State.Running {
			t.Errorf("%s was removed or stopped; strays and other stores' containers are left alone", name)
		}
	}
	_ = stray
	// Every desktop is usable again.
	for _, a := range []string{"g2", "g3"} {
		f.act("acc1", "g1", ActionStop)
		if v := f.act("acc1", a, ActionStart); v.Desktop.State != StateRunning {
			t.Errorf("%s start after recovery: %s", a, v.Desktop.State)
		}
		f.act("acc1", a, ActionStop)
	}
	// Close stops running desktops unless told to keep them.
	f.act("acc1", "g1", ActionStart)
	f.m.Close()
	if got := f.eng.Running(); len(got) != 3 { // the stray, the other store's container and its probe
		t.Errorf("after Close running %v", got)
	}
}

func TestCompose(t *testing.T) {
	f := newFixture(t, nil)
	ctx := context.Background()
	f.m.Close()
	f.eng.Add("web-desktop-1", map[string]string{LabelCompose: "desk-1"}, true)
	f.eng.Add("web-desktop-2", map[string]string{LabelCompose: "desk-2"}, false)
	f.start(func(c *Config) { c.Compose = []ComposeDesktop{{Name: "desk-1"}, {Name: "desk-2"}, {Name: "desk-3"}} })

	st, err := f.m.Status(ctx)
	wantClass(t, "status", err, nil)
	states := map[string]string{}
	for _, in := range st.Instances {
		states[in.Name] = in.State
		if !in.Fixed {
			t.Errorf("%s not fixed", in.ID)
		}
	}
	if !st.Compose || states["desk-1"] != StateRunning || states["desk-2"] != StateStopped || states["desk-3"] != StateMissing {
		t.Errorf("compose status %v (compose=%v)", states, st.Compose)
	}
	v, err := f.m.Agent(ctx, "acc1", "g1")
	wantClass(t, "agent", err, nil)
	if v.Desktop.Name != "desk-1" || len(v.Desktops) != 3 || v.Isolation != "compose" {
		t.Errorf("agent view %+v", v)
	}
	for _, a := range Actions() {
		_, err := f.m.Act(ctx, "acc1", "g1", a)
		wantClass(t, a+" on a compose desktop", err, fault.ErrConflict, "Compose")
	}
	_, err = f.m.Prepare(ctx, "standard")
	wantClass(t, "prepare in compose mode", err, fault.ErrConflict, "compose")
	_, err = f.m.SetPolicy(ctx, IsolationPerAgent, 4)
	wantClass(t, "count change in compose mode", err, fault.ErrConflict, "fixed desktops")
	v, err = f.m.ChooseDesktop(ctx, "acc1", "g1", "compose-desk-2")
	wantClass(t, "choose desk-2", err, nil)
	if v.Desktop.Name != "desk-2" {
		t.Errorf("chosen %+v", v.Desktop)
	}
	_, err = f.m.ChooseDesktop(ctx, "acc1", "g1", "compose-nope")
	wantClass(t, "choose missing", err, fault.ErrInvalid)
	if p := f.m.SocketPath("compose-desk-2"); p != filepath.Join(f.dir, "run", "compose-desk-2", "guest.sock") {
		t.Errorf("socket path %s", p)
	}
}

// TestCloseLeavesNoGoroutines: Close waits for the loop, preparations and idle stops.
func TestCloseLeavesNoGoroutines(t *testing.T) {
	before := runtime.NumGoroutine()
	f := newFixture(t, nil)
	f.prepare("standard")
	f.act("acc1", "g1", ActionCreate)
	gate := make(chan struct{})
	f.b.SetGate(gate) // a preparation still running at Close is cancelled and waited for
	if _, err := f.m.StartPrepare("cursor"); err != nil {
		t.Fatal(err)
	}
	if err := f.m.Close(); err != nil {
		t.Fatal(err)
	}
	if err := f.m.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	if got := f.eng.Running(); len(got) != 0 {
		t.Errorf("Close left desktops running: %v", got)
	}
	waitFor(t, "goroutines to end", func() bool { return runtime.NumGoroutine() <= before })
	if _, err := f.m.StartPrepare("standard"); !errors.Is(err, fault.ErrUnavailable) {
		t.Errorf("prepare after Close: %v", err)
	}
}

// TestCancelPrepare: cancelling a running preparation ends it as cancelled (failed, with the
// reason), records nothing, keeps an image prepared before, and a second cancel or a cancel of
// nothing is a conflict; the key can be prepared again afterwards.
func TestCancelPrepare(t *testing.T) {
	f := newFixture(t, nil)
	_, err := f.m.CancelPrepare("standard")
	wantClass(t, "cancel with nothing running", err, fault.ErrConflict, "no preparation")
	_, err = f.m.CancelPrepare("bogus")
	wantClass(t, "cancel of an unknown key", err, fault.ErrInvalid)
	f.prepare("cursor")
	gate := make(chan struct{})
	f.b.SetGate(gate)
	calls := f.b.Calls()
	if _, err := f.m.StartPrepare("standard"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the builder to be called", func() bool { return f.b.Calls() > calls })
	st, err := f.m.CancelPrepare("standard")
	wantClass(t, "cancel", err, nil)
	if st.Running || !st.Cancelled || st.Phase != "failed" || !strings.Contains(st.Error, "cancelled by an administrator") {
		t.Fatalf("cancelled state %+v", st)
	}
	_, err = f.m.CancelPrepare("standard")
	wantClass(t, "second cancel", err, fault.ErrConflict)
	imgs, err := f.st.VMImages(f.m.node)
	if err != nil {
		t.Fatal(err)
	}
	if len(imgs) != 1 || imgs[0].Key != "cursor" {
		t.Fatalf("prepared images after a cancel: %+v", imgs)
	}
	close(gate)
	f.b.SetGate(nil)
	f.prepare("standard")
	for _, p := range f.m.PrepareStates() {
		if p.Key == "standard" && (p.Cancelled || p.Phase != "done") {
			t.Fatalf("prepared again: %+v", p)
		}
	}
}
