package backend

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"cubicle/backend/auth"
	"cubicle/backend/control"
	"cubicle/backend/engine"
	"cubicle/backend/engine/enginetest"
	"cubicle/backend/events"
	"cubicle/backend/fault"
	"cubicle/backend/housekeeping"
	"cubicle/backend/screen/screentest"
	"cubicle/backend/store"
	"cubicle/backend/vm"
	"cubicle/images"
	"cubicle/internal/testenv"
)

// These tests run the whole backend on the real engine with the real standard desktop image:
// the event bus follows real desktops, an administrator stops and removes desktops of every
// kind, deleting an agent with and without its data, and housekeeping on real leftovers.

// realEnv is a backend on the real engine behind its real HTTP handler.
type realEnv struct {
	t         *testing.T
	b         *Backend
	ts        *httptest.Server
	token     string   // the admin's session
	account   string   // the admin's account
	forgotten []string // instance ids whose records may be gone while objects remain
}

func newRealEnv(t *testing.T) *realEnv {
	t.Helper()
	b, _, _ := startOnRealDesktop(t, slog.LevelWarn)
	ts := httptest.NewServer(b.API.Handler())
	t.Cleanup(ts.Close)
	p, err := b.LocalSession()
	if err != nil {
		t.Fatal(err)
	}
	e := &realEnv{t: t, b: b, ts: ts, token: p.Token, account: p.AccountID}
	t.Cleanup(e.removeEverything)
	return e
}

// removeEverything removes the containers and volumes of this backend's desktops (the product
// keeps volumes by design; a test leaves nothing behind).
func (e *realEnv) removeEverything() {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	eng := e.b.engine
	if eng == nil {
		return
	}
	var ids []string
	if ins, err := e.b.Store.VMInstances("local"); err == nil {
		for _, in := range ins {
			ids = append(ids, in.ID)
		}
	}
	ids = append(ids, e.forgotten...)
	for _, id := range ids {
		if cs, err := eng.Client.ListContainers(ctx, map[string]string{engine.LabelInstance: id}); err == nil {
			for _, c := range cs {
				eng.Client.RemoveContainer(ctx, c.ID, true)
			}
		}
		if vs, err := eng.Client.Volumes(ctx, map[string]string{engine.LabelInstance: id}); err == nil {
			for _, v := range vs {
				eng.Client.RemoveVolume(ctx, v.Name)
			}
		}
	}
}

func (e *realEnv) call(method, path, body string) (int, string) {
	e.t.Helper()
	r, _ := http.NewRequest(method, e.ts.URL+path, strings.NewReader(body))
	r.Header.Set("Authorization", "Bearer "+e.token)
	if method != "GET" {
		r.Header.Set("Content-Type", "application/json")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	resp, err := http.DefaultClient.Do(r.WithContext(ctx))
	if err != nil {
		e.t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(raw)
}

func (e *realEnv) must(method, path, body string, status int) string {
	e.t.Helper()
	code, out := e.call(method, path, body)
	if code != status {
		e.t.Fatalf("%s %s: %d %s; want %d", method, path, code, out, status)
	}
	return out
}

func (e *realEnv) agent(name string) string {
	e.t.Helper()
	var a struct{ ID string }
	json.Unmarshal([]byte(e.must("POST", "/api/app/agents", `{"name":"`+name+`"}`, 201)), &a)
	return a.ID
}

func (e *realEnv) create(agentID string) vm.InstanceView {
	e.t.Helper()
	var v vm.AgentView
	json.Unmarshal([]byte(e.must("POST", "/api/app/agents/"+agentID+"/local-vm/create", "", 200)), &v)
	e.forgotten = append(e.forgotten, v.Desktop.ID)
	return v.Desktop
}

// waitEvent waits (time-bounded; nothing polls) for an event on sub that satisfies ok.
func waitEvent(t *testing.T, sub *events.Subscription, what string, ok func(events.Event) bool) events.Event {
	t.Helper()
	deadline := time.After(2 * time.Minute)
	for {
		select {
		case e, open := <-sub.C():
			if !open {
				t.Fatalf("the bus closed while waiting for %s", what)
			}
			if ok(e) {
				return e
			}
		case <-deadline:
			t.Fatalf("no event: %s", what)
		}
	}
}

func desktopIs(id, state string) func(events.Event) bool {
	return func(e events.Event) bool {
		d, ok := e.Data.(events.Desktop)
		return ok && d.InstanceID == id && d.State == state
	}
}

// TestPushNotPollOnRealDesktop: desktop state, stats and control changes reach a subscriber of the
// bus and the computer channel's status as they happen — the channel has no poll left, so a
// status that follows a stop made elsewhere can only have come from the bus.
func TestPushNotPollOnRealDesktop(t *testing.T) {
	e := newRealEnv(t)
	sub := e.b.Events.Subscribe(events.SubscribeOptions{Buffer: 4096})
	defer sub.Close()
	ag := e.agent("Pusher")
	desk := e.create(ag)
	waitEvent(t, sub, "the desktop running", desktopIs(desk.ID, "running"))
	// Its CPU and memory come from the sampler as node "local" (through the managed local
	// runner's link or directly, as $CUBICLE_LOCAL_NODE says), for administrators only.
	se := waitEvent(t, sub, "the desktop's stats", func(e events.Event) bool {
		s, ok := e.Data.(events.Stats)
		return ok && s.NodeID == "local" && slices.ContainsFunc(s.Instances, func(x events.InstanceStats) bool {
			return x.InstanceID == desk.ID && x.MemoryBytes > 0
		})
	})
	if se.Audience != events.AdminsOnly {
		t.Fatalf("stats audience %+v", se.Audience)
	}

	u := "ws" + strings.TrimPrefix(e.ts.URL, "http") + "/api/app/agents/" + ag + "/computer"
	c, _, err := screentest.Dial(t, u, http.Header{"Authorization": {"Bearer " + e.token}}, true)
	if err != nil {
		t.Fatal(err)
	}
	c.Status(30*time.Second, func(st map[string]any) bool { return st["state"] == "running" && st["streaming"] == true })
	if _, ok := c.FrameAfter(0, time.Minute); !ok {
		t.Fatal("no frame of the running desktop")
	}
	// Control: a take over is announced on the bus (with the desktop's owner as audience).
	l := c.Call(map[string]any{"type": "take_over"})
	if l["type"] != "lease" {
		t.Fatalf("take over: %v", l)
	}
	ev := waitEvent(t, sub, "control taken", func(e events.Event) bool {
		d, ok := e.Data.(events.Control)
		return ok && d.DesktopID == desk.ID && d.Kind == "taken"
	})
	if ev.Audience.Account != e.account || !ev.Audience.Admins {
		t.Fatalf("control event audience %+v", ev.Audience)
	}
	c.Call(map[string]any{"type": "hand_back", "token": l["token"]})
	waitEvent(t, sub, "control handed back", func(e events.Event) bool {
		d, ok := e.Data.(events.Control)
		return ok && d.DesktopID == desk.ID && d.Kind == "handed_back"
	})
	// A stop through another route: the open channel's status follows at once.
	e.must("POST", "/api/app/agents/"+ag+"/local-vm/stop", "", 200)
	waitEvent(t, sub, "the desktop stopping", desktopIs(desk.ID, "stopping"))
	waitEvent(t, sub, "the desktop stopped", desktopIs(desk.ID, "stopped"))
	st := c.Status(30*time.Second, func(st map[string]any) bool { return st["state"] == "stopped" })
	if st["streaming"] != false {
		t.Fatalf("status after the stop: %v", st)
	}
	// Started again, the desktop's screen counts frames from the start: a new lease must
	// accept input aimed at the new frames (the stop ended the old control and its count).
	e.must("POST", "/api/app/agents/"+ag+"/local-vm/start", "", 200)
	c.Status(time.Minute, func(st map[string]any) bool { return st["state"] == "running" && st["streaming"] == true })
	if _, ok := c.FrameAfter(0, time.Minute); !ok {
		t.Fatal("no frame after the restart")
	}
	l = c.Call(map[string]any{"type": "take_over"})
	if l["type"] != "lease" {
		t.Fatalf("take over after the restart: %v", l)
	}
	r := c.Call(map[string]any{"type": "input", "token": l["token"], "version": l["version"], "frameId": c.Frame(),
		"action": "move", "x": 10, "y": 10})
	if r["type"] != "ok" {
		t.Fatalf("input after a restart: %v", r)
	}
	// A stop pressed right after the hand back is answered is not refused as "in use": the
	// hand back clears the node's busy mark itself. The control loop (which also tells the
	// node) is held here, as a busy machine or a runner's link delays it.
	hold := make(chan struct{})
	gate := func(control.Change) { <-hold }
	e.b.controlGate.Store(&gate)
	released := false
	release := func() {
		if !released {
			released = true
			e.b.controlGate.Store(nil)
			close(hold)
		}
	}
	defer release()
	if r := c.Call(map[string]any{"type": "hand_back", "token": l["token"]}); r["type"] != "ok" {
		t.Fatalf("hand back: %v", r)
	}
	if code, body := e.call("POST", "/api/app/agents/"+ag+"/local-vm/stop", ""); code != 200 {
		t.Fatalf("stop right after the hand back: %d %s", code, body)
	}
	release()
	waitEvent(t, sub, "the desktop stopped after the hand back", desktopIs(desk.ID, "stopped"))
	// Node settings reach the bus too.
	e.must("PUT", "/api/app/admin/local-vm/idle-policy", `{"requestId":"push-1","idleStopMinutes":15}`, 200)
	waitEvent(t, sub, "node settings", func(e events.Event) bool {
		n, ok := e.Data.(events.Node)
		return ok && n.IdleStopMinutes == 15
	})
}

// TestLiveViewResumesPausedDesktop: a desktop paused through its route is resumed by the
// live view — the computer channel shows it running and streams its frames, and the engine's
// container runs again; pausing a stopped desktop is 409 saying to start it first.
func TestLiveViewResumesPausedDesktop(t *testing.T) {
	e := newRealEnv(t)
	ctx := context.Background()
	ag := e.agent("Sleeper")
	desk := e.create(ag)
	if out := e.must("POST", "/api/app/agents/"+ag+"/local-vm/pause", "", 200); !strings.Contains(out, `"state":"paused"`) {
		t.Fatalf("pause: %s", out)
	}
	if st, err := e.b.engine.Client.InspectContainer(ctx, desk.Container); err != nil || !st.Paused {
		t.Fatalf("the container after pause: paused=%v, %v", st.Paused, err)
	}
	u := "ws" + strings.TrimPrefix(e.ts.URL, "http") + "/api/app/agents/" + ag + "/computer"
	c, _, err := screentest.Dial(t, u, http.Header{"Authorization": {"Bearer " + e.token}}, true)
	if err != nil {
		t.Fatal(err)
	}
	c.Status(time.Minute, func(st map[string]any) bool { return st["state"] == "running" && st["streaming"] == true })
	if _, ok := c.FrameAfter(0, time.Minute); !ok {
		t.Fatal("no frame of the resumed desktop")
	}
	if st, err := e.b.engine.Client.InspectContainer(ctx, desk.Container); err != nil || !st.Running || st.Paused {
		t.Fatalf("the container after the live view: running=%v paused=%v, %v", st.Running, st.Paused, err)
	}
	e.must("POST", "/api/app/agents/"+ag+"/local-vm/stop", "", 200)
	if code, out := e.call("POST", "/api/app/agents/"+ag+"/local-vm/pause", ""); code != 409 || !strings.Contains(out, "start it first") {
		t.Fatalf("pause a stopped desktop: %d %s; want 409 saying to start it first", code, out)
	}
}

// TestAdminStopsAndRemovesEveryDesktop: on the real engine an administrator stops and removes a
// shared desktop (of another account), a helper's task desktop and an orphaned desktop (its
// agent deleted) from the Desktops table's route.
func TestAdminStopsAndRemovesEveryDesktop(t *testing.T) {
	e := newRealEnv(t)
	ctx := t.Context()
	eng := e.b.engine.Client
	e.must("PUT", "/api/app/admin/local-vm/policy", `{"isolation":"per-agent","maxInstances":4}`, 200)
	orphanAgent := e.agent("Orphan")
	orphan := e.create(orphanAgent)
	// Deleted without removing its desktop: it keeps running, orphaned.
	e.must("DELETE", "/api/app/agents/"+orphanAgent, `{"removeDesktop":false}`, 204)
	taskOwner := e.agent("Boss")
	taskID, err := e.b.VMs.CreateTask(ctx, vm.TaskSpec{AccountID: e.account, AgentID: taskOwner, TaskID: "admin-test", Helper: "scout"})
	if err != nil {
		t.Fatal(err)
	}
	e.forgotten = append(e.forgotten, taskID)
	// Another account's shared desktop.
	hash, err := auth.HashPassword("olga's password 1")
	if err != nil {
		t.Fatal(err)
	}
	if err := e.b.Store.CreateAccount(store.Account{ID: "acc-other", Username: "olga", PasswordHash: hash, Role: store.RoleMember}); err != nil {
		t.Fatal(err)
	}
	otherAgent, err := e.b.Profiles.Create("acc-other", "OlgaBot")
	if err != nil {
		t.Fatal(err)
	}
	e.must("PUT", "/api/app/admin/local-vm/policy", `{"isolation":"shared","maxInstances":4}`, 200)
	sv, err := e.b.VMs.Act(ctx, "acc-other", otherAgent.ID, vm.ActionCreate)
	if err != nil {
		t.Fatal(err)
	}
	shared := sv.Desktop
	e.forgotten = append(e.forgotten, shared.ID)
	if shared.Scope != "shared" {
		t.Fatalf("not a shared desktop: %+v", shared)
	}

	var st vm.Status
	json.Unmarshal([]byte(e.must("GET", "/api/app/admin/local-vm", "", 200)), &st)
	rows := map[string]vm.InstanceView{}
	for _, in := range st.Instances {
		rows[in.ID] = in
	}
	if r := rows[orphan.ID]; !r.Orphaned || r.State != "running" {
		t.Fatalf("orphan row %+v", r)
	}
	if r := rows[shared.ID]; r.Owner != "olga" || len(r.Agents) != 1 || r.Agents[0].Name != "OlgaBot" || r.State != "running" {
		t.Fatalf("shared row %+v", r)
	}
	if r := rows[taskID]; !r.Task || r.State != "running" {
		t.Fatalf("task row %+v", r)
	}
	running := func(id string) bool {
		cs, err := eng.ListContainers(ctx, map[string]string{engine.LabelInstance: id})
		if err != nil {
			t.Fatal(err)
		}
		return slices.ContainsFunc(cs, func(c engine.ContainerState) bool { return c.Running })
	}
	exists := func(id string) bool {
		cs, _ := eng.ListContainers(ctx, map[string]string{engine.LabelInstance: id})
		return len(cs) > 0
	}
	base := "/api/app/admin/local-vm/instances/"
	// The task desktop is in use by its (pretend) helper's task: refused, then forced.
	if err := e.b.Control.BeginTask(taskID, control.Agent{AgentID: taskOwner, AgentName: "Boss", TaskID: "helper-task"}); err != nil {
		t.Fatal(err)
	}
	if code, body := e.call("POST", base+taskID+"/stop", ""); code != 409 || !strings.Contains(body, "anyway") {
		t.Fatalf("stop of a busy task desktop: %d %s", code, body)
	}
	if !running(taskID) {
		t.Fatal("a refused stop stopped the task desktop")
	}
	e.must("POST", base+taskID+"/stop", `{"force":true}`, 200)
	if exists(taskID) {
		t.Fatal("the task desktop's container is still there")
	}
	if _, ok := e.b.Control.Holder(taskID); ok {
		t.Fatal("the task still holds the removed desktop")
	}

	for _, id := range []string{shared.ID, orphan.ID} {
		e.must("POST", base+id+"/stop", "", 200)
		if running(id) || !exists(id) {
			t.Fatalf("%s after stop: running %v, exists %v", id, running(id), exists(id))
		}
		e.must("POST", base+id+"/remove", "", 200)
		if exists(id) {
			t.Fatalf("%s: the container is still there after remove", id)
		}
	}
	if _, err := e.b.Store.VMInstance(shared.ID); err != nil {
		t.Fatalf("the shared desktop's record was dropped: %v", err)
	}
	if _, err := e.b.Store.VMInstance(orphan.ID); !errors.Is(err, fault.ErrNotFound) {
		t.Fatalf("the orphan's record stays: %v", err)
	}
	vols, _ := eng.Volumes(ctx, map[string]string{engine.LabelInstance: orphan.ID})
	if len(vols) != 2 {
		t.Fatalf("the orphan's work files must stay (as leftovers): %v", vols)
	}
	hk, err := e.b.Housekeeping.Scan(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if n := countVolumes(hk, orphan.ID); n != 2 {
		t.Fatalf("the orphan's volumes are not listed as leftovers (%d): %+v", n, hk.Volumes)
	}
}

// TestDeleteAgentWithAndWithoutData on the real engine: the preview shows the work files' size;
// a delete keeps them unless asked; with the data they are gone from the engine.
func TestDeleteAgentWithAndWithoutData(t *testing.T) {
	e := newRealEnv(t)
	ctx := t.Context()
	eng := e.b.engine.Client
	keeper, dropper := e.agent("Keeper"), e.agent("Dropper")
	kd, dd := e.create(keeper), e.create(dropper)
	// Some work in the dropper's workspace (about 3 MiB).
	me := e.account
	res := turn(t, e.b, me, dropper, "del-1", "/shell head -c 3000000 /dev/urandom > ~/workspace/blob && ls -l ~/workspace/blob")
	if r := results(res); !strings.Contains(fmt.Sprint(r), "blob") {
		t.Fatalf("shell: %v", r)
	}
	var pre struct {
		vm.AgentData
		Busy string
	}
	json.Unmarshal([]byte(e.must("GET", "/api/app/agents/"+dropper+"/deletion", "", 200)), &pre)
	if pre.SizeBytes < 3_000_000 || len(pre.Volumes) != 2 {
		t.Fatalf("preview: %+v", pre)
	}
	e.must("DELETE", "/api/app/agents/"+keeper, "", 204)
	e.must("DELETE", "/api/app/agents/"+dropper, `{"removeDesktop":true,"deleteData":true}`, 204)
	for _, c := range []struct {
		d    vm.InstanceView
		vols int
	}{{kd, 2}, {dd, 0}} {
		cs, _ := eng.ListContainers(ctx, map[string]string{engine.LabelInstance: c.d.ID})
		vs, _ := eng.Volumes(ctx, map[string]string{engine.LabelInstance: c.d.ID})
		if len(cs) != 0 || len(vs) != c.vols {
			t.Errorf("%s: containers %d, volumes %v; want none and %d volumes", c.d.ID, len(cs), vs, c.vols)
		}
	}
}

// TestHousekeepingOnRealEngine: a desktop whose data directory was deleted is a leftover (its
// container, then its volumes once only leftovers use them), an unused desktop image tag is
// listed, and Clean removes exactly what is named — volumes never unless named.
func TestHousekeepingOnRealEngine(t *testing.T) {
	e := newRealEnv(t)
	ctx := t.Context()
	eng := e.b.engine.Client

	// Another "install": its own data directory, a desktop, then the directory is deleted.
	goneDir := filepath.Join(t.TempDir(), "gone")
	other, err := New(Config{DataDir: goneDir, Engine: "podman", AllowedHosts: []string{"127.0.0.1"},
		Logger: testenv.Logger(t, slog.LevelWarn)})
	if err != nil {
		t.Fatal(err)
	}
	if err := other.Start(ctx); err != nil {
		t.Fatal(err)
	}
	if err := other.WaitEngine(ctx); err != nil {
		t.Fatal(err)
	}
	img, err := e.b.Store.VMImage("local", "standard")
	if err != nil {
		t.Fatal(err)
	}
	img.ID = ""
	if err := other.Store.PutVMImage(img); err != nil { // the same prepared image, without preparing again
		t.Fatal(err)
	}
	p, _ := other.LocalSession()
	oa, err := other.Profiles.Create(p.AccountID, "Ghost")
	if err != nil {
		t.Fatal(err)
	}
	ov, err := other.VMs.Act(ctx, p.AccountID, oa.ID, vm.ActionCreate)
	if err != nil {
		t.Fatal(err)
	}
	ghost := ov.Desktop
	e.forgotten = append(e.forgotten, ghost.ID)
	other.Close() // stops the desktop; container and volumes stay
	if err := os.RemoveAll(goneDir); err != nil {
		t.Fatal(err)
	}

	// An unused desktop image tag (a tiny image in the desktop repository).
	rootfs, err := enginetest.BusyboxRootfs()
	if err != nil {
		t.Skip("no busybox to build a tiny image:", err)
	}
	tag := images.DesktopRepository + ":housekeeping-test-" + randomHex(4)
	if _, err := eng.ImportImage(ctx, bytes.NewReader(rootfs), tag, map[string]string{engine.LabelManaged: "true"}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { eng.RemoveImage(context.Background(), tag) })

	// Our own desktop must never be listed.
	mine := e.create(e.agent("Mine"))

	rep, err := e.b.Housekeeping.Scan(ctx)
	if err != nil {
		t.Fatal(err)
	}
	gi := slices.IndexFunc(rep.Containers, func(c housekeeping.Container) bool { return c.Instance == ghost.ID })
	if gi < 0 {
		t.Fatalf("the deleted install's container is not listed: %+v", rep.Containers)
	}
	if why := rep.Containers[gi].Why; !strings.Contains(why, "no longer holds") {
		t.Fatalf("why: %q", why)
	}
	if countVolumes(rep, ghost.ID) != 2 {
		t.Fatalf("its volumes are not listed: %+v", rep.Volumes)
	}
	if !slices.ContainsFunc(rep.Images, func(i housekeeping.Image) bool { return i.Ref == tag }) {
		t.Fatalf("the unused tag is not listed: %+v", rep.Images)
	}
	for _, c := range rep.Containers {
		if c.Instance == mine.ID {
			t.Fatalf("our own desktop is listed: %+v", c)
		}
	}
	if countVolumes(rep, mine.ID) != 0 {
		t.Fatal("our own desktop's volumes are listed")
	}

	// Clean the container and the image through the admin route; the volumes are not named.
	body, _ := json.Marshal(housekeeping.Selection{Containers: []string{rep.Containers[gi].Name}, Images: []string{tag},
		Volumes: []string{mine.Workspace}}) // not a leftover: refused
	var res struct {
		Outcomes  []housekeeping.Outcome
		Leftovers housekeeping.Report
	}
	json.Unmarshal([]byte(e.must("POST", "/api/app/admin/housekeeping/clean", string(body), 200)), &res)
	for _, o := range res.Outcomes {
		want := o.Name != mine.Workspace
		if o.Removed != want {
			t.Errorf("outcome %+v", o)
		}
	}
	if cs, _ := eng.ListContainers(ctx, map[string]string{engine.LabelInstance: ghost.ID}); len(cs) != 0 {
		t.Fatal("the leftover container is still there")
	}
	if _, err := eng.InspectImage(ctx, tag); !errors.Is(err, fault.ErrNotFound) {
		t.Fatalf("the unused tag is still there: %v", err)
	}
	if vs, _ := eng.Volumes(ctx, map[string]string{engine.LabelInstance: mine.ID}); len(vs) != 2 {
		t.Fatal("a volume that is not a leftover was removed")
	}
	// The volumes were not named: still there, still listed (now no container uses them).
	if vs, _ := eng.Volumes(ctx, map[string]string{engine.LabelInstance: ghost.ID}); len(vs) != 2 {
		t.Fatalf("volumes removed without being named: %v", vs)
	}
	if countVolumes(res.Leftovers, ghost.ID) != 2 {
		t.Fatalf("the volumes are no longer listed: %+v", res.Leftovers.Volumes)
	}
	// Named: removed.
	outs, err := e.b.Housekeeping.Clean(ctx, housekeeping.Selection{Volumes: []string{ghost.Workspace, ghost.BrowserVolume}})
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range outs {
		if !o.Removed {
			t.Errorf("volume outcome %+v", o)
		}
	}
	if vs, _ := eng.Volumes(ctx, map[string]string{engine.LabelInstance: ghost.ID}); len(vs) != 0 {
		t.Fatalf("named volumes still there: %v", vs)
	}
}

func countVolumes(r housekeeping.Report, instance string) int {
	n := 0
	for _, v := range r.Volumes {
		if v.Instance == instance {
			n++
		}
	}
	return n
}

func randomHex(n int) string {
	b := make([]byte, n)
	rand.Read(b)
	return hex.EncodeToString(b)
}

// TestOpeningAnAgentStartsItsDesktop: opening an agent (POST …/opened) starts its stopped
// desktop on the real engine when its next turn would use one and a slot is free — never
// taking the slot another desktop holds, never for an agent whose computer is the browser,
// never creating a desktop the agent never had.
func TestOpeningAnAgentStartsItsDesktop(t *testing.T) {
	e := newRealEnv(t)
	ctx := context.Background()
	e.must("PUT", "/api/app/admin/local-vm/policy", `{"isolation":"per-agent","maxInstances":1}`, 200)
	opened := func(agentID string) (res struct {
		Started bool
		State   string
		Why     string
	}) {
		t.Helper()
		if err := json.Unmarshal([]byte(e.must("POST", "/api/app/agents/"+agentID+"/opened", "", 200)), &res); err != nil {
			t.Fatal(err)
		}
		return res
	}
	running := func(agentID string) bool {
		t.Helper()
		v, err := e.b.VMs.Agent(ctx, e.account, agentID)
		if err != nil {
			t.Fatal(err)
		}
		if v.Desktop.ID != "" {
			e.forgotten = append(e.forgotten, v.Desktop.ID)
		}
		if v.Desktop.State != vm.StateRunning {
			return false
		}
		st, err := e.b.engine.Client.InspectContainer(ctx, v.Desktop.Container)
		return err == nil && st.Running
	}

	first := e.agent("Early")
	if r := opened(first); r.Started || r.State != vm.StateAbsent || !strings.Contains(r.Why, "no desktop yet") || running(first) {
		t.Fatalf("opening an agent that never had a desktop: %+v; want nothing created", r)
	}
	e.create(first)
	e.must("POST", "/api/app/agents/"+first+"/local-vm/stop", "", 200)
	if r := opened(first); !r.Started || r.State != vm.StateRunning || !running(first) {
		t.Fatalf("opening an agent whose desktop is stopped: %+v; want it started and running", r)
	}
	if r := opened(first); r.Started || !strings.Contains(r.Why, "running") {
		t.Fatalf("opening it again: %+v; want nothing started (it runs)", r)
	}

	// The only slot is taken: neither an auto agent nor one set to its Local VM takes it.
	second := e.agent("Late")
	e.must("POST", "/api/app/agents/"+first+"/local-vm/stop", "", 200)
	e.create(second)
	e.must("POST", "/api/app/agents/"+second+"/local-vm/stop", "", 200)
	e.must("POST", "/api/app/agents/"+first+"/local-vm/start", "", 200)
	if r := opened(second); r.Started || running(second) {
		t.Fatalf("opening an auto agent with every slot taken: %+v; want nothing started", r)
	}
	e.must("PUT", "/api/app/agents/"+second+"/computer-selection", `{"computer":"vm"}`, 200)
	if r := opened(second); r.Started || !strings.Contains(r.Why, "slot") || running(second) {
		t.Fatalf("opening a Local VM agent with every slot taken: %+v; want nothing started, saying the slots are in use", r)
	}
	if !running(first) {
		t.Fatal("the first agent's desktop stopped when another agent was opened")
	}

	// A browser agent gets no desktop, even with a slot free.
	e.must("POST", "/api/app/agents/"+first+"/local-vm/stop", "", 200)
	e.must("PUT", "/api/app/agents/"+second+"/computer-selection", `{"computer":"browser"}`, 200)
	if r := opened(second); r.Started || !strings.Contains(r.Why, "Browser") || running(second) {
		t.Fatalf("opening a browser agent: %+v; want nothing started, saying it uses the browser", r)
	}
	// With the browser chosen again as Local VM, its stopped desktop starts when it is opened.
	e.must("PUT", "/api/app/agents/"+second+"/computer-selection", `{"computer":"vm"}`, 200)
	if r := opened(second); !r.Started || !running(second) {
		t.Fatalf("opening a Local VM agent whose desktop is stopped, a slot free: %+v; want it started", r)
	}
}

// TestStopRightAfterATurn: a Stop pressed as soon as an agent's turn on the desktop has ended
// is not refused as "in use" by that turn: the end of the turn's task clears the node's busy
// mark itself (fleet.Controls). The control loop, which also tells the node, is held for
// the task's end here, as a busy machine or a runner's link delays it.
func TestStopRightAfterATurn(t *testing.T) {
	e := newRealEnv(t)
	ag := e.agent("Quick")
	desk := e.create(ag)
	sub := e.b.Events.Subscribe(events.SubscribeOptions{})
	defer sub.Close()
	hold := make(chan struct{})
	gate := func(c control.Change) {
		if c.Kind == control.ChangeTaskEnded {
			<-hold
		}
	}
	e.b.controlGate.Store(&gate)
	released := false
	release := func() {
		if !released {
			released = true
			e.b.controlGate.Store(nil)
			close(hold)
		}
	}
	defer release()
	// The turn holds the desktop for a second: the node has marked it busy long before it ends.
	if r := results(turn(t, e.b, e.account, ag, "quick-1", "/shell sleep 1; echo done")); !strings.Contains(fmt.Sprint(r), "done") {
		t.Fatalf("the turn: %v", r)
	}
	if code, body := e.call("POST", "/api/app/agents/"+ag+"/local-vm/stop", ""); code != 200 {
		t.Fatalf("stop right after the turn: %d %s", code, body)
	}
	release()
	waitEvent(t, sub, "the desktop stopped after the turn", desktopIs(desk.ID, "stopped"))
}
