//go:build linux

package backend

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"cubicle/backend/agent"
	"cubicle/backend/engineconn"
	"cubicle/backend/guest"
	"cubicle/backend/link"
	"cubicle/backend/store"
	"cubicle/backend/vm"
	"cubicle/images/guest/wire"
)

// These tests break a real desktop's driver link the ways issue 11 lists — the driver killed,
// the driver hung, its socket deleted, the exec session ended — and check that a chat's
// /shell never hangs, that the desktop shows it is unhealthy, and that Start (or the agent's
// next call) repairs it without losing its files. They run with whichever guest link
// CUBICLE_GUEST_LINK selects (scripts/test.sh runs them with both).

// linkDesktop is a Backend on a real desktop with an agent in operator mode (no model), its
// desktop created by a first /shell.
type linkDesktop struct {
	b       *Backend
	account string
	agent   string
	inst    store.VMInstance
}

func newLinkDesktop(t *testing.T) *linkDesktop {
	t.Helper()
	b, _, _ := startOnRealDesktop(t, slog.LevelWarn)
	admin, err := b.Auth.Admin()
	if err != nil {
		t.Fatal(err)
	}
	ag, err := b.Profiles.Create(admin.ID, "Ada")
	if err != nil {
		t.Fatal(err)
	}
	d := &linkDesktop{b: b, account: admin.ID, agent: ag.ID}
	t.Cleanup(func() { d.remove(t) })
	res := d.shell(t, "first", "echo created > created.txt && echo ok", time.Minute)
	if res[0] != agent.StateSuccess {
		t.Fatalf("first /shell: %v", res)
	}
	if d.inst, err = instanceOf(b, d.account, d.agent); err != nil {
		t.Fatal(err)
	}
	t.Logf("desktop %s over the %s link (%s)", d.inst.ID, b.VMs.GuestLink().Primary, b.VMs.GuestLink().Reason)
	return d
}

// remove stops the Backend and removes the desktop's container and volumes.
func (d *linkDesktop) remove(t *testing.T) {
	d.b.Close()
	if d.inst.ID == "" {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	eng, err := engineconn.ConnectEngine(ctx, "podman", slog.New(slog.DiscardHandler))
	if err != nil {
		t.Logf("cleanup: %v", err)
		return
	}
	defer eng.Close()
	eng.Client.RemoveContainer(ctx, d.inst.ContainerName, true)
	if v, ok := eng.Client.(interface {
		RemoveVolume(ctx context.Context, name string) error
	}); ok {
		v.RemoveVolume(ctx, d.inst.WorkspaceVol)
		v.RemoveVolume(ctx, d.inst.ProfileVol)
	}
}

// shell runs "/shell cmd" as a turn of session and returns the tool's end state and text.
// The turn must end within limit: a hang fails the test instead of hanging it.
func (d *linkDesktop) shell(t *testing.T, session, cmd string, limit time.Duration) [2]string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	defer cancel()
	var evs []agent.Event
	err := d.b.Chat.Run(ctx, agent.Turn{SessionID: session, UserID: d.account, AgentID: d.agent, AgentName: "Ada", Input: "/shell " + cmd},
		func(e agent.Event) { evs = append(evs, e) })
	if ctx.Err() != nil {
		t.Fatalf("/shell %s still ran after %v (a hang): %v", cmd, limit, err)
	}
	if err != nil {
		t.Fatalf("/shell %s: %v", cmd, err)
	}
	for _, r := range results(evs) {
		return r
	}
	t.Fatalf("/shell %s: no tool result in %d events", cmd, len(evs))
	return [2]string{}
}

// view is the desktop as the API shows it.
func (d *linkDesktop) view(t *testing.T) vm.InstanceView {
	t.Helper()
	v, err := d.b.VMs.Agent(context.Background(), d.account, d.agent)
	if err != nil {
		t.Fatal(err)
	}
	return v.Desktop
}

// driverPID is the host pid of the desktop's driver (the container's PID 1).
func (d *linkDesktop) driverPID(t *testing.T) int {
	t.Helper()
	st, err := d.b.engine.Client.InspectContainer(context.Background(), d.inst.ContainerName)
	if err != nil || st.PID <= 0 {
		t.Fatalf("inspect %s: %+v %v", d.inst.ContainerName, st, err)
	}
	return st.PID
}

// startAgain is the Start action of the API (what repairs a desktop).
func (d *linkDesktop) startAgain(t *testing.T) vm.InstanceView {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	v, err := d.b.VMs.Act(ctx, d.account, d.agent, vm.ActionStart)
	if err != nil {
		t.Fatalf("start: %v", err)
	}
	return v.Desktop
}

// shellInFlight starts a long /shell in session and returns once it runs in the desktop; the
// channel gets its result.
func (d *linkDesktop) shellInFlight(t *testing.T, session string) <-chan [2]string {
	t.Helper()
	// The sleep's own argument marks it: "sleep 100.<n>" is found by its exact command line, which
	// neither the shell running it nor the search itself has.
	secs := fmt.Sprintf("100.%06d", time.Now().UnixNano()%1000000)
	out := make(chan [2]string, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		var evs []agent.Event
		d.b.Chat.Run(ctx, agent.Turn{SessionID: session, UserID: d.account, AgentID: d.agent, AgentName: "Ada",
			Input: "/shell sleep " + secs + "; echo done"}, func(e agent.Event) { evs = append(evs, e) })
		for _, r := range results(evs) {
			out <- r
			return
		}
		out <- [2]string{"none", ctx.Err().Error()}
	}()
	c, err := d.b.VMs.Link(context.Background(), d.inst.ID)
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(time.Minute)
	for {
		res, err := c.Exec(context.Background(), execShell("ps -eo args | grep -cx 'sleep "+strings.ReplaceAll(secs, ".", "[.]")+"' || true"))
		if err == nil && strings.TrimSpace(string(res.Stdout)) == "1" {
			return out
		}
		if time.Now().After(deadline) {
			t.Fatal("the in-flight /shell never started in the desktop")
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// wantErrorResult checks that an in-flight /shell ended with an error result within limit.
func wantErrorResult(t *testing.T, res <-chan [2]string, limit time.Duration, contains string) {
	t.Helper()
	select {
	case r := <-res:
		if r[0] != agent.StateError || !strings.Contains(r[1], contains) {
			t.Fatalf("in-flight /shell ended %q: %q, want an error saying %q", r[0], r[1], contains)
		}
		t.Logf("in-flight /shell ended: %s", r[1])
	case <-time.After(limit):
		t.Fatalf("the in-flight /shell still waits %v after its driver went away", limit)
	}
}

// wantUnhealthy checks what the API shows of a desktop whose driver cannot be reached.
func wantUnhealthy(t *testing.T, d *linkDesktop) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		v := d.view(t)
		if (v.Health == vm.HealthUnhealthy || v.State != "running") && v.LastError != "" {
			t.Logf("the API shows: state %s, health %q, lastError %q", v.State, v.Health, v.LastError)
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the API still shows the desktop as fine: %+v", v)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// wantRepaired checks that Start brought the desktop back with its files.
func wantRepaired(t *testing.T, d *linkDesktop) {
	t.Helper()
	v := d.startAgain(t)
	if v.State != "running" || v.Health != vm.HealthOK || v.LastError != "" {
		t.Fatalf("after Start: %+v", v)
	}
	inst, err := d.b.Store.VMInstance(d.inst.ID)
	if err != nil || inst.ContainerID != d.inst.ContainerID {
		t.Fatalf("Start recreated the container (%s → %s): %v", d.inst.ContainerID, inst.ContainerID, err)
	}
	res := d.shell(t, "after-repair-"+strconv.FormatInt(time.Now().UnixNano(), 36), "cat created.txt", time.Minute)
	if res[0] != agent.StateSuccess || !strings.Contains(res[1], "created") {
		t.Fatalf("after repair: %v", res)
	}
}

// wantWalled checks, when the desktop runs walled off from this machine (root, a rootful
// engine), that it still is: a repair restarts the container, which gets a new network
// namespace, so the wall must be raised again (issue 15, item 12).
func wantWalled(t *testing.T, d *linkDesktop) {
	t.Helper()
	wantHostWalled(t, d.b, d.view(t))
}

func execShell(s string) guest.ExecRequest {
	return guest.ExecRequest{Shell: s, Timeout: 30 * time.Second}
}

func TestLinkDriverKilled(t *testing.T) {
	d := newLinkDesktop(t)
	res := d.shellInFlight(t, "long")
	pid := d.driverPID(t)
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatalf("kill the driver (pid %d): %v", pid, err)
	}
	wantErrorResult(t, res, time.Minute, "desktop driver")
	wantUnhealthy(t, d)
	wantRepaired(t, d)
	wantWalled(t, d)
}

func TestLinkDriverHung(t *testing.T) {
	d := newLinkDesktop(t)
	res := d.shellInFlight(t, "long")
	pid := d.driverPID(t)
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		t.Fatalf("stop the driver (pid %d): %v", pid, err)
	}
	defer syscall.Kill(pid, syscall.SIGCONT)
	wantErrorResult(t, res, 2*time.Minute, "stopped answering")
	wantUnhealthy(t, d)
	// The next agent call repairs it (its Start restarts the stopped driver's container).
	r := d.shell(t, "next", "cat created.txt", 3*time.Minute)
	if r[0] != agent.StateSuccess || !strings.Contains(r[1], "created") {
		t.Fatalf("the next agent call after a hang: %v", r)
	}
	if v := d.view(t); v.Health != vm.HealthOK {
		t.Fatalf("after the repairing call: %+v", v)
	}
}

func TestLinkSocketDeleted(t *testing.T) {
	d := newLinkDesktop(t)
	// Delete the driver's socket inside the desktop (its file is the bind-mounted one with the
	// socket link; the relay's target with the exec link). The agent's tools may not touch
	// /run/cubicle, so the test does it over the link itself.
	c, err := d.b.VMs.Link(context.Background(), d.inst.ID)
	if err != nil {
		t.Fatal(err)
	}
	if res, err := c.Exec(context.Background(), execShell("rm /run/cubicle/guest.sock && echo removed")); err != nil || res.ExitCode != 0 {
		t.Fatalf("rm socket: %+v %v", res, err)
	}
	// A new chat session works at once (today's per-session dial hung here).
	r := d.shell(t, "new-session", "echo after-delete", time.Minute)
	if r[0] != agent.StateSuccess || !strings.Contains(r[1], "after-delete") {
		t.Fatalf("a new session after the socket was deleted: %v", r)
	}
	// The driver puts its socket back.
	res, err := c.Exec(context.Background(), execShell("for i in $(seq 100); do test -S /run/cubicle/guest.sock && break; sleep 0.1; done; ls -l /run/cubicle/guest.sock"))
	if err != nil || !strings.Contains(string(res.Stdout), "srw") {
		t.Fatalf("the socket did not come back: %q %v", res.Stdout, err)
	}
	// A fresh connection (what a restarted Cubicle makes) reaches the driver again.
	if d.b.VMs.GuestLink().Primary == link.NameSocket {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		c, err := guest.WaitReady(ctx, d.b.VMs.SocketPath(d.inst.ID))
		if err != nil {
			t.Fatalf("dial the re-created socket: %v", err)
		}
		c.Close()
	}
	if v := d.view(t); v.Health != vm.HealthOK {
		t.Fatalf("after the socket came back: %+v", v)
	}
}

func TestLinkExecSessionEnded(t *testing.T) {
	d := newLinkDesktop(t)
	if d.b.VMs.GuestLink().Primary != link.NameExec {
		t.Skip("the exec session is the exec link's; this run uses the socket link (scripts/test.sh runs both)")
	}
	before := d.driverPID(t)
	res := d.shellInFlight(t, "long")
	// End the relay (the exec session's process) from inside the desktop.
	c, err := d.b.VMs.Link(context.Background(), d.inst.ID)
	if err != nil {
		t.Fatal(err)
	}
	// Two relays serve this desktop: the server's own link (c, which runs the pkill) and the
	// managed local runner's, which carries the in-flight call. The pkill runs in a session
	// of its own: as a child of the driver's exec in c's request, it would be killed (its
	// process group) the moment it killed c's relay, before it reached a relay with a higher
	// pid — one run in four left the in-flight call's relay serving that way.
	kill, err := c.Exec(context.Background(), execShell("setsid -f pkill -f -- '"+strings.Join(wire.RelayCommand(), " ")+"'"))
	if err == nil && kill.ExitCode != 0 {
		t.Fatalf("setsid pkill: %+v", kill)
	}
	wantErrorResult(t, res, time.Minute, "desktop driver")
	wantUnhealthy(t, d)
	// The agent's next call reconnects; the driver was never restarted.
	r := d.shell(t, "next", "cat created.txt", time.Minute)
	if r[0] != agent.StateSuccess || !strings.Contains(r[1], "created") {
		t.Fatalf("the next call after the exec session ended: %v", r)
	}
	if after := d.driverPID(t); after != before {
		t.Fatalf("the driver was restarted (pid %d → %d); a new exec session was enough", before, after)
	}
}

// TestLinkManySessions runs 300 chat sessions, each a /shell true, on one desktop: they share
// its one link, so neither Cubicle's open files nor the driver's grow with them.
func TestLinkManySessions(t *testing.T) {
	d := newLinkDesktop(t)
	driverFDs := func() int {
		c, err := d.b.VMs.Link(context.Background(), d.inst.ID)
		if err != nil {
			t.Fatal(err)
		}
		res, err := c.Exec(context.Background(), execShell("ls /proc/1/fd | wc -l"))
		if err != nil {
			t.Fatal(err)
		}
		n, err := strconv.Atoi(strings.TrimSpace(string(res.Stdout)))
		if err != nil {
			t.Fatalf("driver fds: %q", res.Stdout)
		}
		return n
	}
	ownFDs := func() int {
		ents, err := os.ReadDir("/proc/self/fd")
		if err != nil {
			t.Fatal(err)
		}
		return len(ents)
	}
	d.shell(t, "warm", "true", time.Minute)
	fds0, drv0 := ownFDs(), driverFDs()
	// One after another: an agent runs one task on its desktop at a time.
	const sessions = 300
	for i := range sessions {
		if r := d.shell(t, "many-"+strconv.Itoa(i), "true", time.Minute); r[0] != agent.StateSuccess {
			t.Fatalf("session %d: %v", i, r)
		}
	}
	fds1, drv1 := ownFDs(), driverFDs()
	t.Logf("after %d sessions: cubicle %d → %d open files, driver %d → %d", sessions, fds0, fds1, drv0, drv1)
	if fds1-fds0 > 20 {
		t.Errorf("cubicle's open files grew by %d over %d sessions (one link per desktop: want a constant count)", fds1-fds0, sessions)
	}
	if drv1-drv0 > 10 {
		t.Errorf("the driver's open files grew by %d over %d sessions", drv1-drv0, sessions)
	}
}
