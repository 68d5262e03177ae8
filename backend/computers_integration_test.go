package backend

import (
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"cubicle/backend/agent"
	"cubicle/backend/guest"
	"cubicle/backend/knowledge"
	"cubicle/backend/models"
	"cubicle/backend/profile"
	"cubicle/backend/store"
	"cubicle/backend/vm"
	"cubicle/images"
	"cubicle/images/guest/x11/xvfbtest"
)

// offeredTools lists the tools of a model request (task_helper aside), sorted.
func offeredTools(t *testing.T, raw []byte) []string {
	t.Helper()
	var req struct {
		Tools []struct {
			Function struct {
				Name string `json:"name"`
			} `json:"function"`
		} `json:"tools"`
	}
	if err := json.Unmarshal(raw, &req); err != nil {
		t.Fatalf("model request: %v", err)
	}
	out := []string{}
	for _, tl := range req.Tools {
		// task_helper and recall_past_runs are offered whatever the computer; this file checks
		// the computer's own tools.
		if tl.Function.Name != "task_helper" && tl.Function.Name != knowledge.Tool {
			out = append(out, tl.Function.Name)
		}
	}
	sort.Strings(out)
	return out
}

func sorted(s ...string) []string {
	out := append([]string{}, s...)
	sort.Strings(out)
	return out
}

var vmTools = []string{"computer_click", "computer_clipboard_get", "computer_clipboard_set", "computer_double_click", "computer_drag", "computer_key", "computer_move",
	"computer_read_file", "computer_right_click", "computer_screenshot", "computer_scroll", "computer_share_file", "computer_shell",
	"computer_type", "computer_wait", "computer_write_file"}

var browserTools = []string{"browser_click", "browser_navigate", "browser_press", "browser_read", "browser_screenshot",
	"browser_scroll", "browser_tabs", "browser_type"}

// computerNotice returns the "computer" notice of a turn: it must be in AGENT_START's metadata
// (the turn's first event) and in the CUSTOM event right after it.
func computerNotice(t *testing.T, evs []agent.Event) map[string]any {
	t.Helper()
	if len(evs) < 2 || evs[0].Type != agent.AgentStart || evs[1].Type != agent.Custom || evs[1].Name != "computer" {
		t.Fatalf("the turn does not start with AGENT_START and CUSTOM computer: %+v", evs[:min(2, len(evs))])
	}
	n, ok := evs[0].Metadata["computer"].(map[string]any)
	if !ok {
		t.Fatalf("AGENT_START metadata: %+v", evs[0].Metadata)
	}
	return n
}

// TestComputerTypesOnRealEngine drives the real runtime with a scripted model for every
// computer type, on the real engine with the real standard image: each turn asks for every
// tool family, and the test checks exactly which tools the model was offered and which calls
// were refused; the browser computer fills a form on a page served on its own loopback; auto
// picks the Local VM or the browser by capacity; lazy and eager binding; a stopped turn and a
// revoked computer stop the old desktop even with "Never auto-stop".
func TestComputerTypesOnRealEngine(t *testing.T) {
	b, _, ctx := startOnRealDesktop(t, slog.LevelWarn)
	eng := b.engine.Client
	defer func() {
		b.Close()
		cctx, ccancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer ccancel()
		ins, _ := b.Store.VMInstances(b.VMs.NodeID())
		for _, in := range ins {
			eng.RemoveContainer(cctx, in.ContainerName, true)
			if v, ok := eng.(interface {
				RemoveVolume(ctx context.Context, name string) error
			}); ok {
				for _, vol := range []string{in.WorkspaceVol, in.ProfileVol} {
					if vol != "" {
						v.RemoveVolume(cctx, vol)
					}
				}
			}
		}
	}()
	// The host's screen: a real X display (with Xinerama, which kbinani/screenshot needs).
	display := xvfbtest.StartWith(t, 78, 800, 600, "+xinerama")
	t.Setenv("DISPLAY", display)
	t.Setenv("XDG_SESSION_TYPE", "x11")
	if _, err := b.computers.SetHostScreenControl(ctx, "host-on", true); err != nil {
		t.Fatal(err)
	}
	if _, err := b.VMs.SetPolicy(ctx, "per-agent", 4); err != nil {
		t.Fatal(err)
	}
	admin, err := b.Auth.Admin()
	if err != nil {
		t.Fatal(err)
	}
	model := &scriptedModel{}
	var hook atomic.Pointer[func()] // runs before each model request
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if h := hook.Load(); h != nil {
			(*h)()
		}
		model.ServeHTTP(w, r)
	}))
	defer srv.Close()
	if _, err := b.Models.Set(models.Update{BaseURL: srv.URL + "/v1", Model: "scripted", AllowPrivate: &allowLoopback}); err != nil {
		t.Fatal(err)
	}
	mk := func(name, computer string, allowHost bool) store.Agent {
		a, err := b.Profiles.Create(admin.ID, name)
		if err != nil {
			t.Fatal(err)
		}
		a, err = b.Store.UpdateAgent(a.ID, func(a *store.Agent) error {
			a.Computer, a.AllowHostEnvironment = computer, allowHost
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		return a
	}
	seen := func() int {
		model.mu.Lock()
		defer model.mu.Unlock()
		return len(model.seen)
	}
	request := func(i int) []byte {
		model.mu.Lock()
		defer model.mu.Unlock()
		return model.seen[i]
	}

	// probe runs one turn asking for every tool family and returns what was offered, the
	// state and text of each call, and the events.
	probe := func(a store.Agent, session string) ([]string, map[string][2]string, []agent.Event) {
		t.Helper()
		first := seen()
		model.push(
			callStep("vm", "computer_screenshot", map[string]any{}),
			callStep("hs", "host_shell", map[string]any{"command": "echo host-ok"}),
			callStep("br", "browser_tabs", map[string]any{}),
			callStep("hd", "host_screenshot", map[string]any{}),
			textStep("done"),
		)
		evs := turn(t, b, admin.ID, a.ID, session, "use every tool")
		return offeredTools(t, request(first)), results(evs), evs
	}
	drain := func() {
		model.mu.Lock()
		model.steps = nil
		model.mu.Unlock()
	}
	expect := func(name string, res map[string][2]string, want map[string]string) {
		t.Helper()
		for id, st := range want {
			if res[id][0] != st {
				t.Errorf("%s: call %s = %s (%q), want %s", name, id, res[id][0], res[id][1], st)
			}
		}
	}

	t.Run("none", func(t *testing.T) {
		a := mk("Nobody", "none", true)
		offered, res, evs := probe(a, "none-1")
		if len(offered) != 0 {
			t.Fatalf("offered %v", offered)
		}
		expect("none", res, map[string]string{"vm": agent.StateDenied, "hs": agent.StateDenied, "br": agent.StateDenied, "hd": agent.StateDenied})
		if !strings.Contains(res["vm"][1], "No computer") {
			t.Errorf("refusal: %q", res["vm"][1])
		}
		if n := computerNotice(t, evs); n["computer"] != "none" {
			t.Errorf("notice %v", n)
		}
	})

	t.Run("cloud", func(t *testing.T) {
		a := mk("Cloudy", "cloud", false)
		offered, res, evs := probe(a, "cloud-1")
		if len(offered) != 0 {
			t.Fatalf("offered %v", offered)
		}
		expect("cloud", res, map[string]string{"vm": agent.StateDenied, "hs": agent.StateDenied, "br": agent.StateDenied, "hd": agent.StateDenied})
		if !strings.Contains(res["vm"][1], "no cloud execution node") {
			t.Errorf("refusal: %q", res["vm"][1])
		}
		if n := computerNotice(t, evs); n["unavailable"] != true {
			t.Errorf("notice %v", n)
		}
		if v, _ := b.VMs.Agent(ctx, admin.ID, a.ID); v.Desktop.State != "absent" {
			t.Errorf("a cloud agent got a Local VM: %s", v.Desktop.State)
		}
	})

	t.Run("host", func(t *testing.T) {
		a := mk("Hosty", "host", false)
		offered, res, _ := probe(a, "host-1")
		want := sorted("host_shell", "host_read_file", "host_write_file", "host_share_file", "host_screenshot", "host_click", "host_type", "host_key", "host_scroll")
		if !slices.Equal(offered, want) {
			t.Fatalf("offered %v, want %v", offered, want)
		}
		expect("host", res, map[string]string{"vm": agent.StateDenied, "hs": agent.StateSuccess, "br": agent.StateDenied})
		if _, ok := res["hd"]; ok {
			t.Fatalf("host_screenshot ran without a person's confirmation: %v", res["hd"])
		}
		// The guard asked about host_screenshot; the person confirms, and it captures the real display.
		evs := turn(t, b, admin.ID, a.ID, "host-1", "yes")
		r := results(evs)
		if r["hd"][0] != agent.StateSuccess || !strings.Contains(r["hd"][1], "800x600") {
			t.Fatalf("confirmed host_screenshot: %v", r["hd"])
		}
		drain()
		// Without "Host screen control" the host desktop tools go, the command tools stay.
		if _, err := b.computers.SetHostScreenControl(ctx, "host-off", false); err != nil {
			t.Fatal(err)
		}
		offered, res, _ = probe(a, "host-2")
		if !slices.Equal(offered, sorted("host_shell", "host_read_file", "host_write_file", "host_share_file")) {
			t.Fatalf("offered without screen control: %v", offered)
		}
		expect("host without screen control", res, map[string]string{"hs": agent.StateSuccess, "hd": agent.StateDenied})
		if !strings.Contains(res["hd"][1], "Host screen control") {
			t.Errorf("refusal: %q", res["hd"][1])
		}
		drain()
		if _, err := b.computers.SetHostScreenControl(ctx, "host-on-2", true); err != nil {
			t.Fatal(err)
		}
	})

	t.Run("vm with the host environment", func(t *testing.T) {
		a := mk("Vicky", "vm", true)
		offered, res, evs := probe(a, "vm-1")
		want := sorted(append(append([]string{}, vmTools...), "host_shell", "host_read_file", "host_write_file", "host_share_file", "computer_copy_file")...)
		if !slices.Equal(offered, want) {
			t.Fatalf("offered %v, want %v", offered, want)
		}
		expect("vm", res, map[string]string{"vm": agent.StateSuccess, "hs": agent.StateSuccess, "br": agent.StateDenied, "hd": agent.StateDenied})
		if n := computerNotice(t, evs); n["computer"] != "vm" {
			t.Errorf("notice %v", n)
		}
	})

	t.Run("browser", func(t *testing.T) {
		a := mk("Browsy", "browser", true)
		offered, res, _ := probe(a, "br-1")
		if !slices.Equal(offered, browserTools) {
			t.Fatalf("offered %v", offered)
		}
		expect("browser", res, map[string]string{"vm": agent.StateDenied, "hs": agent.StateDenied, "br": agent.StateSuccess, "hd": agent.StateDenied})
		if !strings.Contains(res["vm"][1], "no desktop or shell") {
			t.Errorf("refusal: %q", res["vm"][1])
		}
		if v, _ := b.VMs.Agent(ctx, admin.ID, a.ID); v.Desktop.State != "absent" {
			t.Errorf("a browser agent got a desktop: %s", v.Desktop.State)
		}
		// A page served on the browser container's own loopback: a form whose answer comes
		// from the server.
		bv, err := b.VMs.Browser(admin.ID, a.ID)
		if err != nil || bv.State != "running" {
			t.Fatalf("browser instance: %+v %v", bv, err)
		}
		gc, err := b.VMs.Link(ctx, bv.ID) // the browser's shared driver link (the manager owns it)
		if err != nil {
			t.Fatal(err)
		}
		server := `import http.server, urllib.parse
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        u = urllib.parse.urlparse(self.path)
        if u.path == "/hello":
            name = urllib.parse.parse_qs(u.query).get("name", ["?"])[0]
            body = "<html><body><p id=answer>Hello, %s! (from the server)</p></body></html>" % name
        else:
            body = "<html><head><title>Form</title></head><body><form action=/hello><input id=name name=name><button type=submit>Send</button></form></body></html>"
        self.send_response(200); self.send_header("Content-Type", "text/html"); self.end_headers()
        self.wfile.write(body.encode())
http.server.HTTPServer(("127.0.0.1", 8765), H).serve_forever()
`
		if err := gc.WriteFile(ctx, "/tmp/form.py", []byte(server), 0o644); err != nil {
			t.Fatal(err)
		}
		if r, err := gc.Exec(ctx, guest.ExecRequest{Shell: "setsid nohup python3 /tmp/form.py >/dev/null 2>&1 & sleep 0.5", Timeout: 10 * time.Second}); err != nil || r.ExitCode != 0 {
			t.Fatalf("start the page's server: %+v %v", r, err)
		}
		model.push(
			callStep("n1", "browser_navigate", map[string]any{"url": "http://127.0.0.1:8765/"}),
			callStep("t1", "browser_type", map[string]any{"selector": "#name", "text": "Ada Lovelace", "submit": true}),
			callStep("r1", "browser_read", map[string]any{"selector": "#answer"}),
			callStep("s1", "browser_screenshot", map[string]any{}),
			callStep("x1", "browser_navigate", map[string]any{"url": "file:///etc/passwd"}),
			textStep("done"),
		)
		r := results(turn(t, b, admin.ID, a.ID, "br-2", "fill the form"))
		if r["n1"][0] != agent.StateSuccess || !strings.Contains(r["n1"][1], "Form") {
			t.Fatalf("navigate: %v", r["n1"])
		}
		if r["t1"][0] != agent.StateSuccess {
			t.Fatalf("type: %v", r["t1"])
		}
		if r["r1"][0] != agent.StateSuccess || !strings.Contains(r["r1"][1], "Hello, Ada Lovelace! (from the server)") {
			t.Fatalf("read the result: %v", r["r1"])
		}
		if r["s1"][0] != agent.StateSuccess {
			t.Fatalf("screenshot: %v", r["s1"])
		}
		if r["x1"][0] != agent.StateError || !strings.Contains(r["x1"][1], "not an http or https URL") {
			t.Fatalf("file URL: %v", r["x1"])
		}
	})

	t.Run("auto", func(t *testing.T) {
		a := mk("Otto", "auto", true)
		offered, res, evs := probe(a, "auto-1")
		if !slices.Equal(offered, sorted(vmTools...)) {
			t.Fatalf("auto with a free slot offered %v", offered)
		}
		expect("auto", res, map[string]string{"vm": agent.StateSuccess, "hs": agent.StateDenied, "br": agent.StateDenied, "hd": agent.StateDenied})
		if n := computerNotice(t, evs); n["selected"] != "auto" || n["computer"] != "vm" {
			t.Errorf("notice %v", n)
		}
		// Every desktop slot in use: auto falls back to the browser (never the host).
		ins, _ := b.Store.VMInstances(b.VMs.NodeID())
		running := 0
		for _, in := range ins {
			if in.State == "running" && in.Scope != "browser" {
				running++
			}
		}
		if _, err := b.VMs.SetPolicy(ctx, "per-agent", running); err != nil {
			t.Fatal(err)
		}
		a2 := mk("Otto2", "auto", true)
		offered, res, evs = probe(a2, "auto-2")
		if !slices.Equal(offered, browserTools) {
			t.Fatalf("auto with every slot in use offered %v", offered)
		}
		expect("auto full", res, map[string]string{"vm": agent.StateDenied, "br": agent.StateSuccess, "hs": agent.StateDenied})
		if n := computerNotice(t, evs); n["computer"] != "browser" || !strings.Contains(n["reason"].(string), "slots are in use") {
			t.Errorf("notice %v", n)
		}
		if _, err := b.VMs.SetPolicy(ctx, "per-agent", 4); err != nil {
			t.Fatal(err)
		}
	})

	t.Run("lazy and eager binding", func(t *testing.T) {
		lazy := mk("Lazy", "vm", false)
		model.push(textStep("nothing to do"))
		turn(t, b, admin.ID, lazy.ID, "lazy-1", "hi")
		if v, _ := b.VMs.Agent(ctx, admin.ID, lazy.ID); v.Desktop.State != "absent" {
			t.Fatalf("a lazy agent's desktop after a turn without tools: %s", v.Desktop.State)
		}
		eager := mk("Eager", "vm", false)
		if _, err := b.Profiles.SetLazyInit(admin.ID, eager.ID, false); err != nil {
			t.Fatal(err)
		}
		var atModel string
		var mu sync.Mutex
		look := func() {
			if v, err := b.VMs.Agent(ctx, admin.ID, eager.ID); err == nil {
				mu.Lock()
				atModel = v.Desktop.State
				mu.Unlock()
			}
		}
		hook.Store(&look)
		model.push(textStep("nothing to do"))
		turn(t, b, admin.ID, eager.ID, "eager-1", "hi")
		hook.Store(nil)
		mu.Lock()
		defer mu.Unlock()
		if atModel != "running" {
			t.Fatalf("an eager agent's desktop at the first model call: %q", atModel)
		}
	})

	t.Run("stop and revoke fence the old desktop with Never auto-stop", func(t *testing.T) {
		if _, err := b.VMs.SetIdlePolicy(ctx, "never-auto-stop", 0, nil); err != nil {
			t.Fatal(err)
		}
		a := mk("Fenced", "vm", false)
		model.push(callStep("sl", "computer_shell", map[string]any{"command": "sleep 60"}), textStep("done"))
		var evs []agent.Event
		tctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
		defer cancel()
		err := b.Chat.Run(tctx, agent.Turn{SessionID: "fence-1", UserID: admin.ID, AgentID: a.ID, AgentName: "Fenced", Input: "sleep"},
			func(e agent.Event) {
				evs = append(evs, e)
				if e.Type == agent.ToolResultStart && e.ToolCallID == "sl" {
					go func() {
						// Mid-task: once the desktop runs the sleep (its start takes seconds
						// on a loaded host).
						for i := 0; i < 600; i++ {
							if v, err := b.VMs.Agent(ctx, admin.ID, a.ID); err == nil && v.Desktop.State == "running" {
								break
							}
							time.Sleep(100 * time.Millisecond)
						}
						time.Sleep(time.Second)
						b.Chat.Stop(admin.ID, "fence-1")
					}()
				}
			})
		if err != nil {
			t.Fatal(err)
		}
		if r := results(evs); r["sl"][0] != agent.StateInterrupted {
			t.Fatalf("stopped call: %v", r["sl"])
		}
		drain()
		if v, _ := b.VMs.Agent(ctx, admin.ID, a.ID); v.Desktop.State != "stopped" {
			t.Fatalf("after a stop mid-task the desktop is %s, want stopped (%+v)", v.Desktop.State, v.Desktop)
		}
		// Started again by the next turn; then its computer authorisation is revoked.
		model.push(callStep("v2", "computer_screenshot", map[string]any{}), textStep("done"))
		if r := results(turn(t, b, admin.ID, a.ID, "fence-2", "look")); r["v2"][0] != agent.StateSuccess {
			t.Fatalf("screenshot after the fence: %v", r["v2"])
		}
		before, after, err := b.Profiles.SelectComputerFrom(admin.ID, a.ID, profile.Selection{Computer: "none"})
		if err != nil {
			t.Fatal(err)
		}
		b.computers.Changed(ctx, before, after)
		if v, _ := b.VMs.Agent(ctx, admin.ID, a.ID); v.Desktop.State != "stopped" {
			t.Fatalf("after its computer was revoked the desktop is %s, want stopped", v.Desktop.State)
		}
	})
}

// TestComputerTypesAutoWithoutPreparedImage runs an agent on "auto" on the real engine over a
// fresh data directory whose node has no prepared image: the turn chooses Browser only (never
// the host, although the agent allows the host environment), offers exactly the browser tools,
// runs a browser call and refuses a desktop and a host call. Once an admin prepares the
// standard image (reused by content hash), the next turn chooses the Local VM.
func TestComputerTypesAutoWithoutPreparedImage(t *testing.T) {
	b, dir, ctx := startOnRealEngine(t, slog.LevelWarn)
	// Browser only runs Chromium from the standard image present in the engine (prepared or
	// not, see vm/browser.go): make sure it is there, as a build outside this node's records
	// (reused by content hash), so the node itself still has no prepared image.
	ib, err := images.New(images.Config{Engine: b.engine.Client, Logger: b.log, WorkDir: filepath.Join(dir, "images-outside"),
		Pins: vm.PinSource(b.Store, b.VMs.NodeID(), os.Getenv)})
	if err != nil {
		t.Fatal(err)
	}
	ectx, ecancel := context.WithTimeout(ctx, 30*time.Minute)
	defer ecancel()
	if _, err := ib.Ensure(ectx, images.Standard, nil); err != nil {
		t.Fatalf("the standard image: %v", err)
	}
	st, err := b.VMs.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, im := range st.Images {
		if im.Prepared {
			t.Fatalf("a fresh node has a prepared image: %+v", im)
		}
	}

	admin, err := b.Auth.Admin()
	if err != nil {
		t.Fatal(err)
	}
	model := &scriptedModel{}
	srv := httptest.NewServer(model)
	defer srv.Close()
	if _, err := b.Models.Set(models.Update{BaseURL: srv.URL + "/v1", Model: "scripted", AllowPrivate: &allowLoopback}); err != nil {
		t.Fatal(err)
	}
	a, err := b.Profiles.Create(admin.ID, "Auto")
	if err != nil {
		t.Fatal(err)
	}
	if a, err = b.Store.UpdateAgent(a.ID, func(a *store.Agent) error {
		a.Computer, a.AllowHostEnvironment = "auto", true
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	probe := func(session string) ([]string, map[string][2]string, []agent.Event) {
		t.Helper()
		model.mu.Lock()
		first := len(model.seen)
		model.mu.Unlock()
		model.push(
			callStep("vm", "computer_screenshot", map[string]any{}),
			callStep("hs", "host_shell", map[string]any{"command": "echo host-ok"}),
			callStep("br", "browser_tabs", map[string]any{}),
			textStep("done"),
		)
		evs := turn(t, b, admin.ID, a.ID, session, "use every tool")
		model.mu.Lock()
		raw := model.seen[first]
		model.mu.Unlock()
		return offeredTools(t, raw), results(evs), evs
	}

	offered, res, evs := probe("unprepared-1")
	if n := computerNotice(t, evs); n["selected"] != "auto" || n["computer"] != "browser" ||
		!strings.Contains(n["reason"].(string), "no Local VM image is prepared") {
		t.Errorf("notice without a prepared image: %v", n)
	}
	if !slices.Equal(offered, browserTools) {
		t.Fatalf("auto without a prepared image offered %v, want %v", offered, browserTools)
	}
	for id, want := range map[string]string{"vm": agent.StateDenied, "hs": agent.StateDenied, "br": agent.StateSuccess} {
		if res[id][0] != want {
			t.Errorf("call %s = %s (%q), want %s", id, res[id][0], res[id][1], want)
		}
	}
	if !strings.Contains(res["vm"][1], "no desktop or shell") {
		t.Errorf("desktop refusal: %q", res["vm"][1])
	}
	if v, _ := b.VMs.Agent(ctx, admin.ID, a.ID); v.Desktop.State != "absent" {
		t.Errorf("auto without a prepared image made a desktop: %s", v.Desktop.State)
	}
	if bv, err := b.VMs.Browser(admin.ID, a.ID); err != nil || bv.State != "running" {
		t.Errorf("the browser: %+v %v", bv, err)
	}

	// An admin prepares the standard image: the next turn chooses the Local VM.
	pctx, pcancel := context.WithTimeout(ctx, 30*time.Minute)
	defer pcancel()
	if _, err := b.VMs.Prepare(pctx, "standard"); err != nil {
		t.Fatalf("prepare: %v", err)
	}
	offered, res, evs = probe("unprepared-2")
	if n := computerNotice(t, evs); n["selected"] != "auto" || n["computer"] != "vm" {
		t.Errorf("notice after preparing: %v", n)
	}
	if !slices.Equal(offered, sorted(vmTools...)) {
		t.Fatalf("auto after preparing offered %v", offered)
	}
	for id, want := range map[string]string{"vm": agent.StateSuccess, "hs": agent.StateDenied, "br": agent.StateDenied} {
		if res[id][0] != want {
			t.Errorf("after preparing: call %s = %s (%q), want %s", id, res[id][0], res[id][1], want)
		}
	}
}
