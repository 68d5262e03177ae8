package api

import (
	"context"
	"log/slog"
	"net/http"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"cubicle/backend/link"
	"cubicle/backend/vm"
	"cubicle/backend/vm/vmtest"
	"cubicle/internal/testenv"
)

// newVMFixture is the API fixture with a real vm.Manager over the fixture's store and a fake
// engine, image builder and driver (the manager's logic is real; real-engine paths are covered
// in backend/vm).
func newVMFixture(t *testing.T) (*fixture, *vm.Manager) {
	t.Helper()
	f := newFixture(t)
	eng := vmtest.NewEngine()
	m, err := vm.New(vm.Config{
		Store: f.store, Engine: eng, Images: &vmtest.Builder{}, DataDir: filepath.Join(t.TempDir(), "data"),
		Link:  link.Config{Choice: link.Choose(link.SocketMode, link.Engine{}), Socket: eng.SocketTransport()},
		Clock: vmtest.NewClock(), Logger: slog.New(slog.NewTextHandler(testenv.Writer(t), nil)), ReadyTimeout: time.Second,
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	cfg := f.srv.cfg
	cfg.VMs = m
	if f.srv, err = New(cfg); err != nil {
		t.Fatal(err)
	}
	f.vmEngine = eng
	return f, m
}

func (f *fixture) newAgent(token, name string) string {
	f.t.Helper()
	rec := f.do(req{method: "POST", path: "/api/app/agents", cookie: token, body: `{"name":"` + name + `"}`})
	if rec.Code != http.StatusCreated {
		f.t.Fatalf("create agent: %d %s", rec.Code, rec.Body)
	}
	return decodeBody[agentJSON](f.t, rec).ID
}

func TestLocalVMAdminRoutes(t *testing.T) {
	f, _ := newVMFixture(t)
	const base = "/api/app/admin/local-vm"
	for _, tc := range []struct {
		name   string
		r      req
		status int
		has    string // in the body
	}{
		{"status needs admin", req{method: "GET", path: base, cookie: f.user}, 403, "forbidden"},
		{"status needs login", req{method: "GET", path: base}, 401, ""},
		{"prepare needs admin", req{method: "POST", path: base + "/prepare", cookie: f.user, body: `{}`}, 403, ""},
		{"policy needs admin", req{method: "PUT", path: base + "/policy", cookie: f.user, body: `{"isolation":"shared","maxInstances":2}`}, 403, ""},
		{"idle needs admin", req{method: "PUT", path: base + "/idle-policy", cookie: f.user, body: `{"requestId":"x","idleStopMinutes":1}`}, 403, ""},
		{"status", req{method: "GET", path: base, cookie: f.admin}, 200, `"found":true`},
		{"status shows defaults", req{method: "GET", path: base, cookie: f.admin}, 200, `"policy":{"isolation":"per-agent","maxInstances":2,"idleStopMinutes":5,"pauseAfterMinutes":0}`},
		{"prepare unknown key", req{method: "POST", path: base + "/prepare", cookie: f.admin, body: `{"imageKey":"windows"}`}, 400, "invalid"},
		{"prepare default key", req{method: "POST", path: base + "/prepare?wait=1", cookie: f.admin}, 200, `"imageKey":"standard"`},
		{"prepare cursor starts", req{method: "POST", path: base + "/prepare", cookie: f.admin, body: `{"imageKey":"cursor"}`}, 202, `"imageKey":"cursor"`},
		{"policy too many", req{method: "PUT", path: base + "/policy", cookie: f.admin, body: `{"isolation":"shared","maxInstances":5}`}, 400, "maxInstances"},
		{"policy zero", req{method: "PUT", path: base + "/policy", cookie: f.admin, body: `{"isolation":"shared","maxInstances":0}`}, 400, ""},
		{"policy bad isolation", req{method: "PUT", path: base + "/policy", cookie: f.admin, body: `{"isolation":"all","maxInstances":2}`}, 400, ""},
		{"policy missing fields", req{method: "PUT", path: base + "/policy", cookie: f.admin, body: `{"isolation":"shared"}`}, 400, ""},
		{"policy ok", req{method: "PUT", path: base + "/policy", cookie: f.admin, body: `{"isolation":"shared","maxInstances":3}`}, 200, `"maxInstances":3`},
		{"idle out of range", req{method: "PUT", path: base + "/idle-policy", cookie: f.admin, body: `{"requestId":"r1","idleStopMinutes":10081}`}, 400, "10080"},
		{"idle negative", req{method: "PUT", path: base + "/idle-policy", cookie: f.admin, body: `{"requestId":"r1","idleStopMinutes":-1}`}, 400, ""},
		{"idle no request id", req{method: "PUT", path: base + "/idle-policy", cookie: f.admin, body: `{"idleStopMinutes":10}`}, 400, "requestId"},
		{"idle ok", req{method: "PUT", path: base + "/idle-policy", cookie: f.admin, body: `{"requestId":"r1","idleStopMinutes":10}`}, 200, `"idleStopMinutes":10`},
		{"idle replay is idempotent", req{method: "PUT", path: base + "/idle-policy", cookie: f.admin, body: `{"requestId":"r1","idleStopMinutes":30}`}, 200, `"idleStopMinutes":10`},
		{"idle never", req{method: "PUT", path: base + "/idle-policy", cookie: f.admin, body: `{"requestId":"r2","idleStopMinutes":0}`}, 200, `"idleStopMinutes":0`},
		{"status after", req{method: "GET", path: base, cookie: f.admin}, 200, `"ref":"localhost/cubicle-desktop:standard-abc"`},
		{"sources need admin", req{method: "PUT", path: base + "/image-sources", cookie: f.user, body: `{"cursor":{"image":"","digest":""}}`}, 403, ""},
		{"sources bad digest", req{method: "PUT", path: base + "/image-sources", cookie: f.admin, body: `{"cursor":{"digest":"sha256:xyz"}}`}, 400, "cursor.digest"},
		{"sources bad image", req{method: "PUT", path: base + "/image-sources", cookie: f.admin, body: `{"standard":{"image":"Debian Bookworm"}}`}, 400, "standard.image"},
		{"sources misspelt field", req{method: "PUT", path: base + "/image-sources", cookie: f.admin, body: `{"cursor":{"digests":"sha256:aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"}}`}, 400, "unknown field"},
		{"sources empty", req{method: "PUT", path: base + "/image-sources", cookie: f.admin, body: `{}`}, 400, "invalid"},
		{"sources unchanged by refusals", req{method: "GET", path: base, cookie: f.admin}, 200, `"cursor":{"image":"public.ecr.aws/k0i0n2g5/cursorenvironments/universal:sand-box-latest"`},
		{"sources ok", req{method: "PUT", path: base + "/image-sources", cookie: f.admin, body: `{"cursor":{"image":"mirror.example:5000/universal","digest":"sha256:aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"}}`}, 200, `"imageFrom":"settings"`},
		{"status shows sources", req{method: "GET", path: base, cookie: f.admin}, 200, `"cursor":{"image":"mirror.example:5000/universal","digest":"sha256:aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rec := f.do(tc.r)
			if rec.Code != tc.status || !strings.Contains(rec.Body.String(), tc.has) {
				t.Errorf("%s %s: %d %s; want %d with %q", tc.r.method, tc.r.path, rec.Code, rec.Body, tc.status, tc.has)
			}
		})
	}
}

func TestLocalVMAgentRoutes(t *testing.T) {
	f, m := newVMFixture(t)
	mine := f.newAgent(f.user, "Bot1")
	second := f.newAgent(f.user, "Bot2")
	admins := f.newAgent(f.admin, "AdminBot")
	path := func(id, rest string) string { return "/api/app/agents/" + id + "/local-vm" + rest }

	rec := f.do(req{method: "POST", path: path(mine, "/create"), cookie: f.user})
	if rec.Code != 409 || !strings.Contains(rec.Body.String(), "prepare") {
		t.Fatalf("create before prepare: %d %s", rec.Code, rec.Body)
	}
	if rec := f.do(req{method: "POST", path: "/api/app/admin/local-vm/prepare?wait=1", cookie: f.admin, body: `{"imageKey":"standard"}`}); rec.Code != 200 {
		t.Fatalf("prepare: %d %s", rec.Code, rec.Body)
	}
	if rec := f.do(req{method: "PUT", path: "/api/app/admin/local-vm/policy", cookie: f.admin, body: `{"isolation":"per-agent","maxInstances":1}`}); rec.Code != 200 {
		t.Fatalf("policy: %d %s", rec.Code, rec.Body)
	}

	for _, tc := range []struct {
		name   string
		r      req
		status int
		has    string
	}{
		{"view", req{method: "GET", path: path(mine, ""), cookie: f.user}, 200, `"state":"absent"`},
		{"view needs login", req{method: "GET", path: path(mine, "")}, 401, ""},
		{"another account's agent", req{method: "GET", path: path(admins, ""), cookie: f.user}, 404, ""},
		{"another account's agent action", req{method: "POST", path: path(admins, "/create"), cookie: f.user}, 404, ""},
		{"another account's agent image", req{method: "PUT", path: path(admins, "/image"), cookie: f.user, body: `{"imageKey":"standard"}`}, 404, ""},
		{"unknown action", req{method: "POST", path: path(mine, "/reboot"), cookie: f.user}, 400, "create, start, stop, recreate, remove, pause, resume"},
		{"image not prepared", req{method: "PUT", path: path(mine, "/image"), cookie: f.user, body: `{"imageKey":"cursor"}`}, 400, "not prepared"},
		{"image id refused", req{method: "PUT", path: path(mine, "/image"), cookie: f.user, body: `{"imageKey":"sha256:0123"}`}, 400, ""},
		{"image empty", req{method: "PUT", path: path(mine, "/image"), cookie: f.user, body: `{}`}, 400, ""},
		{"image ok", req{method: "PUT", path: path(mine, "/image"), cookie: f.user, body: `{"imageKey":"standard"}`}, 200, `"imageKey":"standard"`},
		{"create", req{method: "POST", path: path(mine, "/create"), cookie: f.user}, 200, `"state":"running"`},
		{"capacity", req{method: "POST", path: path(second, "/create"), cookie: f.user}, 409, "Bot1"},
		{"stop", req{method: "POST", path: path(mine, "/stop"), cookie: f.user}, 200, `"state":"stopped"`},
		{"start", req{method: "POST", path: path(mine, "/start"), cookie: f.user}, 200, `"state":"running"`},
		{"recreate", req{method: "POST", path: path(mine, "/recreate"), cookie: f.user}, 200, `"state":"running"`},
		{"idle countdown", req{method: "GET", path: path(mine, ""), cookie: f.user}, 200, `"idleStopInSeconds":300`},
		{"remove", req{method: "POST", path: path(mine, "/remove"), cookie: f.user}, 200, `"state":"absent"`},
		{"admin sees it", req{method: "GET", path: "/api/app/admin/local-vm", cookie: f.admin}, 200, "the desktop of agent Bot1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rec := f.do(tc.r)
			if rec.Code != tc.status || !strings.Contains(rec.Body.String(), tc.has) {
				t.Errorf("%s %s: %d %s; want %d with %q", tc.r.method, tc.r.path, rec.Code, rec.Body, tc.status, tc.has)
			}
		})
	}

	t.Run("busy desktop refuses, naming who", func(t *testing.T) {
		v := decodeBody[vm.AgentView](t, f.do(req{method: "POST", path: path(mine, "/create"), cookie: f.user}))
		m.MarkBusy(v.Desktop.ID, "bob (control)")
		rec := f.do(req{method: "POST", path: path(mine, "/stop"), cookie: f.user})
		if rec.Code != 409 || !strings.Contains(rec.Body.String(), "bob (control)") {
			t.Errorf("stop while controlled: %d %s", rec.Code, rec.Body)
		}
		rec = f.do(req{method: "PUT", path: "/api/app/admin/local-vm/policy", cookie: f.admin, body: `{"isolation":"shared","maxInstances":1}`})
		if rec.Code != 409 || !strings.Contains(rec.Body.String(), "bob (control)") {
			t.Errorf("switch while controlled: %d %s", rec.Code, rec.Body)
		}
		m.MarkIdle(v.Desktop.ID)
	})
}

func TestLocalVMUnavailable(t *testing.T) {
	f := newFixture(t) // no manager configured
	for _, r := range []req{
		{method: "GET", path: "/api/app/admin/local-vm", cookie: f.admin},
		{method: "GET", path: "/api/app/agents/x/local-vm", cookie: f.user},
	} {
		if rec := f.do(r); rec.Code != 503 || !strings.Contains(rec.Body.String(), "Local VM") {
			t.Errorf("%s %s: %d %s; want 503", r.method, r.path, rec.Code, rec.Body)
		}
	}
}

func TestComputerSelectionRefusedWhileBusy(t *testing.T) {
	f, m := newVMFixture(t)
	id := f.newAgent(f.admin, "Ada")
	if rec := f.do(req{method: "POST", path: "/api/app/admin/local-vm/prepare?wait=1", cookie: f.admin}); rec.Code != 200 {
		t.Fatalf("prepare: %d %s", rec.Code, rec.Body)
	}
	if rec := f.do(req{method: "POST", path: "/api/app/agents/" + id + "/local-vm/create", cookie: f.admin}); rec.Code != 200 {
		t.Fatalf("create: %d %s", rec.Code, rec.Body)
	}
	v, err := m.Agent(context.Background(), decodeBody[struct{ User userJSON }](t, f.do(req{method: "GET", path: "/api/auth/me", cookie: f.admin})).User.ID, id)
	if err != nil {
		t.Fatal(err)
	}
	m.MarkBusy(v.Desktop.ID, "agent Ada's task")
	rec := f.do(req{method: "PUT", path: "/api/app/agents/" + id + "/computer-selection", cookie: f.admin, body: `{"computer":"none"}`})
	if rec.Code != 409 || !strings.Contains(rec.Body.String(), "agent Ada's task") {
		t.Fatalf("change during a task: %d %s", rec.Code, rec.Body)
	}
	if a, _ := f.store.Agent(id); a.Computer != "vm" {
		t.Fatalf("selection changed to %q", a.Computer)
	}
	m.MarkIdle(v.Desktop.ID)
	if rec := f.do(req{method: "PUT", path: "/api/app/agents/" + id + "/computer-selection", cookie: f.admin, body: `{"computer":"none"}`}); rec.Code != 200 {
		t.Fatalf("change when idle: %d %s", rec.Code, rec.Body)
	}
}

// TestAdminInstanceRoute: the admin instance action reaches another account's desktop by id;
// members are refused, and bad ids or actions change nothing.
func TestAdminInstanceRoute(t *testing.T) {
	f, _ := newVMFixture(t)
	bobs := f.newAgent(f.user, "BobBot")
	if rec := f.do(req{method: "POST", path: "/api/app/admin/local-vm/prepare?wait=1", cookie: f.admin}); rec.Code != 200 {
		t.Fatalf("prepare: %d %s", rec.Code, rec.Body)
	}
	desk := decodeBody[vm.AgentView](t, f.do(req{method: "POST", path: "/api/app/agents/" + bobs + "/local-vm/create", cookie: f.user})).Desktop
	base := "/api/app/admin/local-vm/instances/"
	for _, tc := range []struct {
		name   string
		r      req
		status int
		has    string
		state  string // the desktop's state afterwards
	}{
		{"member refused", req{method: "POST", path: base + desk.ID + "/stop", cookie: f.user}, 403, "forbidden", "running"},
		{"no login", req{method: "POST", path: base + desk.ID + "/stop"}, 401, "", "running"},
		{"unknown desktop", req{method: "POST", path: base + "vm-0000/stop", cookie: f.admin}, 404, "no desktop", "running"},
		{"unknown action", req{method: "POST", path: base + desk.ID + "/start", cookie: f.admin}, 400, "stop or remove", "running"},
		{"bad body", req{method: "POST", path: base + desk.ID + "/stop", cookie: f.admin, body: `{"force":"yes"}`}, 400, "invalid", "running"},
		{"cross-site", req{method: "POST", path: base + desk.ID + "/stop", cookie: f.admin, header: map[string]string{"Origin": "http://evil.example"}}, 403, "", "running"},
		{"stop another account's desktop", req{method: "POST", path: base + desk.ID + "/stop", cookie: f.admin}, 200, `"state":"stopped"`, "stopped"},
		{"remove it", req{method: "POST", path: base + desk.ID + "/remove", cookie: f.admin, body: `{"force":false}`}, 200, `"state":"absent"`, "absent"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rec := f.do(tc.r)
			if rec.Code != tc.status || !strings.Contains(rec.Body.String(), tc.has) {
				t.Fatalf("%s %s: %d %s; want %d with %q", tc.r.method, tc.r.path, rec.Code, rec.Body, tc.status, tc.has)
			}
			if in, err := f.store.VMInstance(desk.ID); err != nil || in.State != tc.state {
				t.Fatalf("desktop afterwards: %+v %v; want %s", in.State, err, tc.state)
			}
		})
	}
}

// TestAgentDeleteRoute: deleting an agent removes its desktop and keeps its work files unless
// the person asked to delete them; the preview shows their sizes.
func TestAgentDeleteRoute(t *testing.T) {
	f, _ := newVMFixture(t)
	keep := f.newAgent(f.user, "Keeper")
	drop := f.newAgent(f.user, "Dropper")
	running := f.newAgent(f.user, "Runner")
	if rec := f.do(req{method: "POST", path: "/api/app/admin/local-vm/prepare?wait=1", cookie: f.admin}); rec.Code != 200 {
		t.Fatalf("prepare: %d %s", rec.Code, rec.Body)
	}
	if rec := f.do(req{method: "PUT", path: "/api/app/admin/local-vm/policy", cookie: f.admin, body: `{"isolation":"per-agent","maxInstances":3}`}); rec.Code != 200 {
		t.Fatalf("policy: %d %s", rec.Code, rec.Body)
	}
	desk := map[string]vm.InstanceView{}
	for _, id := range []string{keep, drop, running} {
		rec := f.do(req{method: "POST", path: "/api/app/agents/" + id + "/local-vm/create", cookie: f.user})
		if rec.Code != 200 {
			t.Fatalf("create: %d %s", rec.Code, rec.Body)
		}
		desk[id] = decodeBody[vm.AgentView](t, rec).Desktop
	}
	pre := decodeBody[deletionJSON](t, f.do(req{method: "GET", path: "/api/app/agents/" + drop + "/deletion", cookie: f.user}))
	if len(pre.Volumes) != 2 || pre.SizeBytes != 2*vmtest.VolumeSize || len(pre.Desktops) != 1 || pre.Desktops[0].State != "running" {
		t.Fatalf("preview %+v", pre)
	}
	records := func() []string {
		st, err := f.srv.cfg.VMs.Status(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, in := range st.Instances {
			out = append(out, in.ID)
		}
		return out
	}
	// Default: the desktop goes, the data stays.
	if rec := f.do(req{method: "DELETE", path: "/api/app/agents/" + keep, cookie: f.user}); rec.Code != 204 {
		t.Fatalf("delete: %d %s", rec.Code, rec.Body)
	}
	// With the data.
	if rec := f.do(req{method: "DELETE", path: "/api/app/agents/" + drop, cookie: f.user, body: `{"removeDesktop":true,"deleteData":true}`}); rec.Code != 204 {
		t.Fatalf("delete with data: %d %s", rec.Code, rec.Body)
	}
	// Keeping the desktop running: it stays, orphaned.
	if rec := f.do(req{method: "DELETE", path: "/api/app/agents/" + running, cookie: f.user, body: `{"removeDesktop":false}`}); rec.Code != 204 {
		t.Fatalf("delete keeping the desktop: %d %s", rec.Code, rec.Body)
	}
	ids := records()
	if slices.Contains(ids, desk[keep].ID) || slices.Contains(ids, desk[drop].ID) || !slices.Contains(ids, desk[running].ID) {
		t.Fatalf("desktop records afterwards: %v", ids)
	}
	st, _ := f.srv.cfg.VMs.Status(context.Background())
	for _, in := range st.Instances {
		if in.ID == desk[running].ID && (!in.Orphaned || in.State != "running") {
			t.Fatalf("the kept desktop: %+v", in)
		}
	}
	vols := f.vmEngine.VolumeNames()
	for _, v := range []string{desk[keep].Workspace, desk[keep].BrowserVolume, desk[running].Workspace} {
		if !slices.Contains(vols, v) {
			t.Errorf("volume %s was deleted without being asked to", v)
		}
	}
	for _, v := range []string{desk[drop].Workspace, desk[drop].BrowserVolume} {
		if slices.Contains(vols, v) {
			t.Errorf("volume %s is still there after a delete with data", v)
		}
	}
}

// An administrator deletes an agent's retained workspace and browser profile explicitly
// (issue 15, item 12: they outlived the agent forever); in use it is refused, members cannot.
func TestDeleteDesktopData(t *testing.T) {
	f, m := newVMFixture(t)
	agent := f.newAgent(f.user, "Kept")
	if rec := f.do(req{method: "POST", path: "/api/app/admin/local-vm/prepare?wait=1", cookie: f.admin, body: `{"imageKey":"standard"}`}); rec.Code != 200 {
		t.Fatalf("prepare: %d %s", rec.Code, rec.Body)
	}
	v := decodeBody[vm.AgentView](t, f.do(req{method: "POST", path: "/api/app/agents/" + agent + "/local-vm/create", cookie: f.user}))
	id := v.Desktop.ID
	path := "/api/app/admin/local-vm/instances/" + id + "/data"
	if rec := f.do(req{method: "DELETE", path: path, cookie: f.user}); rec.Code != 403 {
		t.Fatalf("member: %d", rec.Code)
	}
	m.MarkBusy(id, "bob (control)")
	if rec := f.do(req{method: "DELETE", path: path, cookie: f.admin}); rec.Code != 409 || !strings.Contains(rec.Body.String(), "bob (control)") {
		t.Fatalf("in use: %d %s", rec.Code, rec.Body)
	}
	m.MarkIdle(id)
	// The agent is deleted; its desktop's data stays until the administrator deletes it.
	// (Its desktop is kept: {"removeDesktop": false}; removing it would forget the record.)
	if rec := f.do(req{method: "DELETE", path: "/api/app/agents/" + agent, cookie: f.user, body: `{"removeDesktop":false}`}); rec.Code != 204 {
		t.Fatalf("delete agent: %d", rec.Code)
	}
	if _, err := f.store.VMInstance(id); err != nil {
		t.Fatalf("the record went with the agent: %v", err)
	}
	if rec := f.do(req{method: "DELETE", path: path, cookie: f.admin}); rec.Code != 204 {
		t.Fatalf("delete data: %d %s", rec.Code, rec.Body)
	}
	if _, err := f.store.VMInstance(id); err == nil {
		t.Fatal("the record is left")
	}
	if rec := f.do(req{method: "DELETE", path: path, cookie: f.admin}); rec.Code != 404 {
		t.Fatalf("twice: %d", rec.Code)
	}
}

// TestLocalVMPauseRoutes: POST …/local-vm/pause freezes the agent's running desktop (the
// engine's container is paused, the view says "paused"), …/resume and …/start thaw it; a
// desktop that does not run, or is in use, is refused with 409 saying what to do.
func TestLocalVMPauseRoutes(t *testing.T) {
	f, m := newVMFixture(t)
	mine := f.newAgent(f.user, "Bot1")
	admins := f.newAgent(f.admin, "AdminBot")
	path := func(id, rest string) string { return "/api/app/agents/" + id + "/local-vm" + rest }
	if rec := f.do(req{method: "POST", path: "/api/app/admin/local-vm/prepare?wait=1", cookie: f.admin}); rec.Code != 200 {
		t.Fatalf("prepare: %d %s", rec.Code, rec.Body)
	}
	enginePaused := func() bool {
		t.Helper()
		ag, err := f.store.Agent(mine)
		if err != nil {
			t.Fatal(err)
		}
		v, err := m.Agent(context.Background(), ag.AccountID, mine)
		if err != nil || v.Desktop.Container == "" {
			return false
		}
		st, err := f.vmEngine.InspectContainer(context.Background(), v.Desktop.Container)
		return err == nil && st.Paused
	}
	for _, tc := range []struct {
		name   string
		r      req
		status int
		has    string
		paused bool // the engine's container afterwards
	}{
		{"pause needs login", req{method: "POST", path: path(mine, "/pause")}, 401, "", false},
		{"another account's agent", req{method: "POST", path: path(admins, "/pause"), cookie: f.user}, 404, "not found", false},
		{"cross-site", req{method: "POST", path: path(mine, "/pause"), cookie: f.user, header: map[string]string{"Origin": "http://evil.example"}}, 403, "", false},
		{"pause without a desktop", req{method: "POST", path: path(mine, "/pause"), cookie: f.user}, 409, "only a running desktop can be paused; start it first", false},
		{"resume without a desktop", req{method: "POST", path: path(mine, "/resume"), cookie: f.user}, 409, "start it instead", false},
		{"create", req{method: "POST", path: path(mine, "/create"), cookie: f.user}, 200, `"state":"running"`, false},
		{"pause", req{method: "POST", path: path(mine, "/pause"), cookie: f.user}, 200, `"state":"paused"`, true},
		{"pause again is no change", req{method: "POST", path: path(mine, "/pause"), cookie: f.user}, 200, `"state":"paused"`, true},
		{"view says paused", req{method: "GET", path: path(mine, ""), cookie: f.user}, 200, `"state":"paused"`, true},
		{"resume", req{method: "POST", path: path(mine, "/resume"), cookie: f.user}, 200, `"state":"running"`, false},
		{"resume a running desktop is no change", req{method: "POST", path: path(mine, "/resume"), cookie: f.user}, 200, `"state":"running"`, false},
		{"pause before start", req{method: "POST", path: path(mine, "/pause"), cookie: f.user}, 200, `"state":"paused"`, true},
		{"start resumes it", req{method: "POST", path: path(mine, "/start"), cookie: f.user}, 200, `"state":"running"`, false},
		{"stop", req{method: "POST", path: path(mine, "/stop"), cookie: f.user}, 200, `"state":"stopped"`, false},
		{"pause a stopped desktop", req{method: "POST", path: path(mine, "/pause"), cookie: f.user}, 409, "is stopped, not running: only a running desktop can be paused; start it first", false},
		{"resume a stopped desktop", req{method: "POST", path: path(mine, "/resume"), cookie: f.user}, 409, "is stopped, not paused: start it instead", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rec := f.do(tc.r)
			if rec.Code != tc.status || !strings.Contains(rec.Body.String(), tc.has) {
				t.Fatalf("%s %s: %d %s; want %d with %q", tc.r.method, tc.r.path, rec.Code, rec.Body, tc.status, tc.has)
			}
			if got := enginePaused(); got != tc.paused {
				t.Fatalf("the engine's container paused: %v, want %v", got, tc.paused)
			}
		})
	}

	t.Run("a desktop in use is not paused", func(t *testing.T) {
		v := decodeBody[vm.AgentView](t, f.do(req{method: "POST", path: path(mine, "/start"), cookie: f.user}))
		m.MarkBusy(v.Desktop.ID, "bob (control)")
		defer m.MarkIdle(v.Desktop.ID)
		rec := f.do(req{method: "POST", path: path(mine, "/pause"), cookie: f.user})
		if rec.Code != 409 || !strings.Contains(rec.Body.String(), "bob (control)") || enginePaused() {
			t.Fatalf("pause while controlled: %d %s (engine paused %v)", rec.Code, rec.Body, enginePaused())
		}
	})

	t.Run("idle policy", func(t *testing.T) {
		const p = "/api/app/admin/local-vm/idle-policy"
		for _, tc := range []struct {
			name, body string
			status     int
			has        string
		}{
			{"pause after the stop", `{"requestId":"p1","idleStopMinutes":10,"pauseAfterMinutes":10}`, 400, "must be less than idleStopMinutes"},
			{"pause negative", `{"requestId":"p2","idleStopMinutes":10,"pauseAfterMinutes":-1}`, 400, "pauseAfterMinutes -1"},
			{"pause not a number", `{"requestId":"p3","idleStopMinutes":10,"pauseAfterMinutes":"soon"}`, 400, ""},
			{"pause then stop", `{"requestId":"p4","idleStopMinutes":30,"pauseAfterMinutes":3}`, 200, `"idleStopMinutes":30,"pauseAfterMinutes":3`},
			{"old clients keep the pause", `{"requestId":"p5","idleStopMinutes":20}`, 200, `"idleStopMinutes":20,"pauseAfterMinutes":3`},
			{"pause with never stop", `{"requestId":"p6","idleStopMinutes":0,"pauseAfterMinutes":5}`, 200, `"idleStopMinutes":0,"pauseAfterMinutes":5`},
			{"never pause", `{"requestId":"p7","idleStopMinutes":5,"pauseAfterMinutes":0}`, 200, `"idleStopMinutes":5,"pauseAfterMinutes":0`},
		} {
			rec := f.do(req{method: "PUT", path: p, cookie: f.admin, body: tc.body})
			if rec.Code != tc.status || !strings.Contains(rec.Body.String(), tc.has) {
				t.Errorf("%s: %d %s; want %d with %q", tc.name, rec.Code, rec.Body, tc.status, tc.has)
			}
		}
	})
}
