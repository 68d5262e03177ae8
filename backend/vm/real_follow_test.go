package vm_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"cubicle/backend/api"
	"cubicle/backend/auth"
	"cubicle/backend/engine"
	"cubicle/backend/fault"
	"cubicle/backend/guest"
	"cubicle/backend/profile"
	"cubicle/backend/store"
	"cubicle/backend/vm"
)

// podmanCLI runs the podman command line, as a person changing a desktop behind Cubicle's
// back would.
func podmanCLI(t *testing.T, args ...string) {
	t.Helper()
	for try := 1; ; try++ {
		out, err := exec.Command("podman", args...).CombinedOutput()
		if err == nil {
			return
		}
		// The cgroup v1 freezer of this kind of host gives up ("unable to freeze") while a
		// freshly started desktop is still forking its session: try again a little later.
		if args[0] != "pause" || try == 5 || !bytes.Contains(out, []byte("unable to freeze")) {
			t.Fatalf("podman %s: %v: %s", strings.Join(args, " "), err, bytes.TrimSpace(out))
		}
		t.Logf("podman pause: %s; again", bytes.TrimSpace(out))
		time.Sleep(time.Duration(try) * 300 * time.Millisecond)
	}
}

// waitDesktop polls until agent's desktop is in state and returns how long it took. The
// promise is 2 s on an idle machine; the time is logged, not judged: on a loaded one the
// engine's events can lag well past that. The 30 s bound ends a wait that would never succeed
// (a change the manager does not follow at all).
func waitDesktop(t *testing.T, m *vm.Manager, agent, state string) time.Duration {
	t.Helper()
	start := time.Now()
	for {
		av, err := m.Agent(context.Background(), "a1", agent)
		if err != nil {
			t.Fatal(err)
		}
		if av.Desktop.State == state {
			return time.Since(start)
		}
		if time.Since(start) > 30*time.Second {
			t.Fatalf("%s's desktop is %s 30 s after the change, want %s", agent, av.Desktop.State, state)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// slots is how many desktops of m hold a capacity slot, as the admin status shows them.
func slots(t *testing.T, m *vm.Manager) []string {
	t.Helper()
	st, err := m.Status(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, in := range st.Instances {
		switch in.State {
		case vm.StateCreating, vm.StateStarting, vm.StateRunning, vm.StatePaused, vm.StateStopping:
			out = append(out, in.ID+"="+in.State)
		}
	}
	return out
}

// TestRealOutsideChanges changes a real desktop with the podman command line behind the
// manager's back — pause, unpause, stop, start, kill, rm -f — and checks that the recorded
// state, the capacity slot and the idle timer follow (within 2 s on an idle machine; the
// time is logged); a paused desktop is stopped by the manager's Stop without an engine error.
func TestRealOutsideChanges(t *testing.T) {
	env := newRealEnv(t)
	seedAgents(t, env.store)
	var changes []vm.InstanceChange
	changed := make(chan vm.InstanceChange, 100)
	m := env.manager(func(c *vm.Config) { c.OnChange = func(ch vm.InstanceChange) { changed <- ch } })
	defer m.Close()
	env.prepare(m)
	ctx := context.Background()
	if _, err := m.SetPolicy(ctx, vm.IsolationPerAgent, 1); err != nil {
		t.Fatal(err)
	}
	v := act(t, m, "g1", vm.ActionCreate)
	name := v.Desktop.Container

	full := func(when string) {
		t.Helper()
		if _, err := m.Act(ctx, "a1", "g2", vm.ActionCreate); !errors.Is(err, fault.ErrConflict) || !strings.Contains(err.Error(), "Bot1") {
			t.Errorf("%s: a second desktop at capacity 1: %v; want a conflict naming Bot1", when, err)
		}
	}
	for _, step := range []struct {
		cli   []string
		state string
		slot  bool
	}{
		{[]string{"pause", name}, vm.StatePaused, true},
		{[]string{"unpause", name}, vm.StateRunning, true},
		{[]string{"stop", "-t", "5", name}, vm.StateStopped, false},
		{[]string{"start", name}, vm.StateRunning, true},
		{[]string{"kill", name}, vm.StateStopped, false},
	} {
		podmanCLI(t, step.cli...)
		took := waitDesktop(t, m, "g1", step.state)
		t.Logf("podman %s → %s after %s", step.cli[0], step.state, took.Round(time.Millisecond))
		av, _ := m.Agent(ctx, "a1", "g1")
		if idle := av.Desktop.IdleStopInSeconds != nil; idle != step.slot {
			t.Errorf("after podman %s: idle timer running=%v", step.cli[0], idle)
		}
		if got := slots(t, m); (len(got) == 1) != step.slot {
			t.Errorf("after podman %s: slots taken %v, want slot=%v", step.cli[0], got, step.slot)
		}
		if step.slot {
			full("after podman " + step.cli[0])
		}
	}

	// Stop of a paused desktop works, without the engine's words as an error.
	act(t, m, "g1", vm.ActionStart)
	podmanCLI(t, "pause", name)
	waitDesktop(t, m, "g1", vm.StatePaused)
	if v := act(t, m, "g1", vm.ActionStop); v.Desktop.State != vm.StateStopped || v.Desktop.LastError != "" {
		t.Errorf("stop of a paused desktop: %+v", v.Desktop)
	}
	if st, err := env.eng.InspectContainer(ctx, name); err != nil || st.Running || st.Paused {
		t.Errorf("container after stop of a paused desktop: %+v, %v", st, err)
	}
	// Start of a paused desktop resumes it.
	act(t, m, "g1", vm.ActionStart)
	podmanCLI(t, "pause", name)
	waitDesktop(t, m, "g1", vm.StatePaused)
	if v := act(t, m, "g1", vm.ActionStart); v.Desktop.State != vm.StateRunning {
		t.Errorf("start of a paused desktop: %+v", v.Desktop)
	}
	c := dialDesktop(t, m, v.Desktop.ID)
	if _, err := c.Exec(ctx, execTrue); err != nil {
		t.Errorf("the resumed desktop does not answer: %v", err)
	}
	c.Close()

	// rm -f: absent, the slot is free, and another agent's desktop may start.
	podmanCLI(t, "rm", "-f", name)
	waitDesktop(t, m, "g1", vm.StateAbsent)
	if got := slots(t, m); len(got) != 0 {
		t.Errorf("after podman rm -f: slots taken %v", got)
	}
	act(t, m, "g2", vm.ActionCreate)
	close(changed)
	for ch := range changed {
		changes = append(changes, ch)
	}
	var seq []string
	for _, ch := range changes {
		if ch.InstanceID == v.Desktop.ID {
			seq = append(seq, ch.State)
		}
	}
	t.Logf("OnChange heard for g1: %v", seq)
	for _, want := range []string{vm.StatePaused, vm.StateStopped, vm.StateAbsent} {
		if !strings.Contains(strings.Join(seq, ","), want) {
			t.Errorf("OnChange never heard %s", want)
		}
	}
}

// execTrue is a trivial command for the driver.
var execTrue = guest.ExecRequest{Command: []string{"true"}, Timeout: 10 * time.Second}

// TestRealClientDisconnect drives create, start, recreate and remove through the real HTTP
// handler and cancels each request 50, 100 or 150 ms after it reached the server (a closed
// browser). Afterwards —
// once the action has finished on its own — the record must agree with the engine (no
// "stopped" record of a running container, nothing stuck in "removing"), a running desktop
// must have its idle timer, and capacity must count what really runs: with room for one
// desktop, another agent's create is refused while this one runs.
func TestRealClientDisconnect(t *testing.T) {
	env := newRealEnv(t)
	m := env.manager(nil)
	defer m.Close()
	env.prepare(m)
	ctx := context.Background()
	if _, err := m.SetPolicy(ctx, vm.IsolationPerAgent, 1); err != nil {
		t.Fatal(err)
	}
	as, err := auth.New(auth.Config{Accounts: env.store, Key: []byte(strings.Repeat("k", 32)), Logger: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := as.EnsureAdmin(auth.Bootstrap{Username: "admin", Password: "correct horse battery"}); err != nil {
		t.Fatal(err)
	}
	admin, _ := as.Admin()
	p, _ := as.Issue(admin)
	for _, id := range []string{"d1", "d2"} {
		if err := env.store.CreateAgent(store.Agent{ID: id, AccountID: admin.ID, Name: "Agent-" + id}); err != nil {
			t.Fatal(err)
		}
	}
	srv, err := api.New(api.Config{Auth: as, Accounts: env.store, Profiles: profile.New(env.store, testLogger(t)), VMs: m,
		Logger: testLogger(t), AllowedHosts: []string{"127.0.0.1"}})
	if err != nil {
		t.Fatal(err)
	}
	// started receives once a request for d1 has reached the server (the cancel is timed
	// from there: on a loaded machine a request may take longer than the delay just to
	// arrive); handled once its handler has returned: the action it asked for is then queued
	// (or refused), whatever became of the client.
	started, handled := make(chan struct{}, 1), make(chan struct{}, 1)
	h := srv.Handler()
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		d1 := strings.Contains(r.URL.Path, "/d1/")
		if d1 {
			started <- struct{}{}
		}
		h.ServeHTTP(w, r)
		if d1 {
			handled <- struct{}{}
		}
	}))
	defer ts.Close()
	post := func(ctx context.Context, agent, action string) (int, string, error) {
		req, _ := http.NewRequestWithContext(ctx, "POST", ts.URL+"/api/app/agents/"+agent+"/local-vm/"+action, nil)
		req.Header.Set("Authorization", "Bearer "+p.Token)
		res, err := ts.Client().Do(req)
		if err != nil {
			return 0, "", err
		}
		defer res.Body.Close()
		b, _ := io.ReadAll(res.Body)
		return res.StatusCode, string(b), nil
	}

	// settled waits for the handler of the cancelled request and for the action it queued to
	// finish (Wait queues behind it), then checks that d1's record comes to agree with the
	// engine (the engine's events can lag well past a second on a loaded machine: the bound
	// only ends a wait that would never succeed) and the rules above.
	settled := func(what string) {
		t.Helper()
		select {
		case <-handled:
		case <-time.After(time.Minute):
			t.Fatalf("%s: the handler never returned", what)
		}
		av, err := m.Agent(ctx, admin.ID, "d1")
		if err != nil {
			t.Fatal(err)
		}
		if err := m.Wait(ctx, av.Desktop.ID); err != nil {
			t.Fatal(err)
		}
		deadline := time.Now().Add(30 * time.Second)
		var ctrs []engine.ContainerState
		for {
			if av, err = m.Agent(ctx, admin.ID, "d1"); err != nil {
				t.Fatal(err)
			}
			ctrs, err = env.eng.ListContainers(ctx, map[string]string{engine.LabelInstance: av.Desktop.ID, vm.LabelRole: vm.RoleDesktop})
			if err != nil {
				t.Fatal(err)
			}
			engineState := vm.StateAbsent
			for _, c := range ctrs {
				switch {
				case c.Running:
					engineState = vm.StateRunning
				case engineState == vm.StateAbsent:
					engineState = vm.StateStopped
				}
			}
			if av.Desktop.State == engineState {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: after the action finished the record says %s, the engine %s (%d containers)", what,
					av.Desktop.State, engineState, len(ctrs))
			}
			time.Sleep(20 * time.Millisecond)
		}
		if len(ctrs) > 1 {
			t.Errorf("%s: %d containers for one desktop", what, len(ctrs))
		}
		t.Logf("%s: ended %s (lastError %q)", what, av.Desktop.State, av.Desktop.LastError)
		if av.Desktop.State == vm.StateRunning {
			if av.Desktop.IdleStopInSeconds == nil {
				t.Errorf("%s: a running desktop without an idle timer", what)
			}
			code, body, err := post(ctx, "d2", vm.ActionCreate)
			if err != nil || code != http.StatusConflict || !strings.Contains(body, "Agent-d1") {
				t.Errorf("%s: another desktop while d1 runs at capacity 1: %d %s %v", what, code, body, err)
			}
		}
	}

	want := map[string]string{vm.ActionCreate: vm.StateRunning, vm.ActionStart: vm.StateRunning, vm.ActionRecreate: vm.StateRunning,
		vm.ActionStop: vm.StateStopped, vm.ActionRemove: vm.StateAbsent}
	for i, action := range []string{vm.ActionCreate, vm.ActionStop, vm.ActionStart, vm.ActionRecreate, vm.ActionRemove,
		vm.ActionCreate, vm.ActionRecreate, vm.ActionRemove, vm.ActionStart, vm.ActionRecreate} {
		delay := []time.Duration{50, 100, 150}[i%3] * time.Millisecond
		cctx, cancel := context.WithCancel(ctx)
		canceller := make(chan struct{})
		go func() { // the client leaves delay after its request reached the handler
			defer close(canceller)
			select {
			case <-started:
				time.Sleep(delay)
			case <-time.After(time.Minute):
			}
			cancel()
		}()
		code, _, err := post(cctx, "d1", action)
		<-canceller
		what := fmt.Sprintf("%s cancelled after %s", action, delay)
		if err == nil {
			t.Logf("%s: answered %d before the cancel", what, code)
		}
		settled(what)
		// The action was carried out, not dropped with its caller.
		if av, _ := m.Agent(ctx, admin.ID, "d1"); av.Desktop.State != want[action] {
			t.Errorf("%s: the desktop is %s, want %s: the action was not completed", what, av.Desktop.State, want[action])
		}
	}
	// Nothing blocks a later action: the isolation switch and a final remove work.
	if _, err := m.SetPolicy(ctx, vm.IsolationShared, 1); err != nil {
		t.Errorf("isolation switch after the cancelled actions: %v", err)
	}
}

// TestRealTwoCopies copies a data directory while its manager runs a desktop: the copy gets
// an identity of its own, never adopts (nor lists, nor stops) the original's container, and
// creates desktops under names of its own; the original keeps running its desktop.
func TestRealTwoCopies(t *testing.T) {
	env := newRealEnv(t)
	seedAgents(t, env.store)
	m := env.manager(nil)
	defer m.Close()
	env.prepare(m)
	ctx := context.Background()
	v := act(t, m, "g1", vm.ActionCreate)

	// A copy of the data directory taken while Cubicle runs (a consistent one, as a backup
	// tool would take it).
	copyDir, err := os.MkdirTemp("", "cvm-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(copyDir)
	snap, err := env.store.Backup()
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(copyDir, "cubicle.db"), mustRead(t, snap.Path), 0o600); err != nil {
		t.Fatal(err)
	}
	st2, err := store.Open(filepath.Join(copyDir, "cubicle.db"), store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer st2.Close()
	id1, id2 := env.store.Identity(), st2.Identity()
	if id2.ID == id1.ID || id2.CopiedFrom != env.store.Path() || id2.Namespace == "" {
		t.Fatalf("the copy's identity %+v, the original's %+v", id2, id1)
	}
	cfg := env.config(nil)
	cfg.Store, cfg.DataDir, cfg.KeepRunningOnClose = st2, copyDir, false
	m2, err := vm.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := m2.Start(ctx); err != nil {
		t.Fatal(err)
	}
	st, err := m2.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if st.Running != 0 || len(st.Strays) != 0 {
		t.Errorf("the copy adopted or lists the original's desktop: running %d, strays %v, instances %+v", st.Running, st.Strays, st.Instances)
	}
	v2, err := m2.Act(ctx, "a1", "g1", vm.ActionCreate)
	if err != nil {
		t.Fatal(err)
	}
	if v2.Desktop.ID == v.Desktop.ID || v2.Desktop.Container == v.Desktop.Container || v2.Desktop.Workspace == v.Desktop.Workspace {
		t.Errorf("the copy's desktop shares names with the original's: %+v vs %+v", v2.Desktop, v.Desktop)
	}
	if err := m2.Close(); err != nil { // stops the copy's own desktops only
		t.Error(err)
	}
	if st, err := env.eng.InspectContainer(ctx, v.Desktop.Container); err != nil || !st.Running {
		t.Fatalf("the original's desktop after the copy's manager came and went: %+v, %v", st, err)
	}
	if st, err := m.Status(ctx); err != nil || len(st.Strays) != 0 {
		t.Errorf("the original lists the copy's containers: %v, %v", st.Strays, err)
	}
	if av, err := m.Agent(ctx, "a1", "g1"); err != nil || av.Desktop.State != vm.StateRunning {
		t.Errorf("the original's record: %+v, %v", av.Desktop, err)
	}
}

func mustRead(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
