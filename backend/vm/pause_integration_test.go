package vm_test

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"cubicle/backend/guest"
	"cubicle/backend/vm"
)

// TestRealPauseResume pauses a real desktop: a process started in it survives the pause
// (the same PID runs after the resume), the engine reports the container paused while the
// record says "paused" and no driver link is handed out, and after Resume the driver answers
// and takes a screenshot. A manager restart adopts a paused desktop as paused; a start (what
// an agent's turn does) resumes a paused desktop.
func TestRealPauseResume(t *testing.T) {
	env := newRealEnv(t)
	seedAgents(t, env.store)
	m := env.manager(nil)
	defer func() { m.Close() }()
	env.prepare(m)
	ctx := context.Background()

	v := act(t, m, "g1", vm.ActionCreate)
	id := v.Desktop.ID
	c := dialDesktop(t, m, id)
	// A process of its own session, so that the exec's end does not take it along.
	res, err := c.Exec(ctx, guest.ExecRequest{Shell: "setsid sleep 1000 </dev/null >/dev/null 2>&1 & echo $!", Timeout: 30 * time.Second})
	if err != nil || res.ExitCode != 0 {
		t.Fatalf("start sleep: %+v, %v (stderr %s)", res, err, res.Stderr)
	}
	pid := strings.TrimSpace(string(res.Stdout))
	if _, err := strconv.Atoi(pid); err != nil {
		t.Fatalf("the sleep's pid %q", pid)
	}
	alive := func(c *guest.Client) bool {
		t.Helper()
		r, err := c.Exec(ctx, guest.ExecRequest{Shell: "cat /proc/" + pid + "/cmdline | tr '\\0' ' '", Timeout: 30 * time.Second})
		if err != nil {
			t.Fatalf("look for pid %s: %v", pid, err)
		}
		// (setsid may not have exec'd the sleep yet: its command line is then "setsid sleep 1000")
		return r.ExitCode == 0 && strings.Contains(string(r.Stdout), "sleep 1000")
	}
	for deadline := time.Now().Add(10 * time.Second); !alive(c); time.Sleep(200 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("sleep %s does not run", pid)
		}
	}

	pctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	pv, err := m.Pause(pctx, "a1", "g1")
	if err != nil {
		t.Fatalf("pause: %v", err)
	}
	if pv.Desktop.State != vm.StatePaused {
		t.Fatalf("after Pause the desktop is %s", pv.Desktop.State)
	}
	ctr, err := env.eng.InspectContainer(ctx, v.Desktop.Container)
	if err != nil || !ctr.Paused || ctr.Running {
		t.Fatalf("the engine's container after Pause: paused=%v running=%v status=%s, %v", ctr.Paused, ctr.Running, ctr.Status, err)
	}
	if _, err := m.Link(ctx, id); err == nil {
		t.Error("a paused desktop's driver link was handed out")
	}

	// A restart finds it paused and keeps it so (not crashed, not stopped).
	if err := m.Close(); err != nil {
		t.Fatal(err)
	}
	m = env.manager(nil)
	av, err := m.Agent(ctx, "a1", "g1")
	if err != nil || av.Desktop.State != vm.StatePaused || av.Desktop.LastError != "" {
		t.Fatalf("after a restart: %s %q, %v; want paused", av.Desktop.State, av.Desktop.LastError, err)
	}
	if ctr, err := env.eng.InspectContainer(ctx, v.Desktop.Container); err != nil || !ctr.Paused {
		t.Fatalf("the container after the restart: %+v, %v", ctr, err)
	}

	rv, err := m.Resume(pctx, "a1", "g1")
	if err != nil {
		t.Fatalf("resume: %v", err)
	}
	if rv.Desktop.State != vm.StateRunning {
		t.Fatalf("after Resume the desktop is %s", rv.Desktop.State)
	}
	if ctr, err := env.eng.InspectContainer(ctx, v.Desktop.Container); err != nil || !ctr.Running || ctr.Paused {
		t.Fatalf("the engine's container after Resume: %+v, %v", ctr, err)
	}
	c = dialDesktop(t, m, id)
	if !alive(c) {
		t.Fatalf("sleep %s did not survive the pause", pid)
	}
	f, err := c.Screenshot(ctx, guest.ScreenshotOptions{Format: "png"})
	if err != nil || f.Width == 0 || len(f.Data) == 0 {
		t.Fatalf("screenshot after resume: %dx%d %d bytes, %v", f.Width, f.Height, len(f.Data), err)
	}

	// A start of a paused desktop (what an agent's turn does) resumes it.
	if _, err := m.Pause(pctx, "a1", "g1"); err != nil {
		t.Fatalf("pause again: %v", err)
	}
	if v := act(t, m, "g1", vm.ActionStart); v.Desktop.State != vm.StateRunning {
		t.Fatalf("start of a paused desktop: %s", v.Desktop.State)
	}
	if !alive(dialDesktop(t, m, id)) {
		t.Fatalf("sleep %s did not survive a pause and a start", pid)
	}
	act(t, m, "g1", vm.ActionStop)
}
