package runner_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"cubicle/backend/agent"
	"cubicle/backend/auth"
	"cubicle/backend/hostaccess"
	"cubicle/backend/models"
	"cubicle/backend/nodes"
	"cubicle/backend/store"
	"cubicle/internal/testenv"
	"cubicle/runner/wire"
)

// scripted is an OpenAI-compatible model server answering each request with the next step;
// an exhausted script answers "done".
type scripted struct {
	mu    sync.Mutex
	steps []string
	seen  [][]byte
}

func (m *scripted) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	raw, _ := io.ReadAll(r.Body)
	m.mu.Lock()
	m.seen = append(m.seen, raw)
	step := textStep("done")
	if len(m.steps) > 0 {
		step, m.steps = m.steps[0], m.steps[1:]
	}
	m.mu.Unlock()
	w.Header().Set("Content-Type", "text/event-stream")
	io.WriteString(w, step)
}

// script replaces what is left of the script (a stopped turn leaves steps behind).
func (m *scripted) script(steps ...string) {
	m.mu.Lock()
	m.steps = steps
	m.mu.Unlock()
}

// offered is the tool names of the latest request the model got.
func (m *scripted) offered() []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	var req struct {
		Tools []struct {
			Function struct{ Name string } `json:"function"`
		} `json:"tools"`
	}
	if len(m.seen) > 0 {
		json.Unmarshal(m.seen[len(m.seen)-1], &req)
	}
	var out []string
	for _, t := range req.Tools {
		out = append(out, t.Function.Name)
	}
	return out
}

func callStep(id, name string, args map[string]any) string {
	a, _ := json.Marshal(args)
	s, _ := json.Marshal(string(a))
	return `data: {"choices":[{"delta":{"tool_calls":[{"index":0,"id":"` + id + `","type":"function","function":{"name":"` + name + `","arguments":` + string(s) + `}}]}}]}` + "\n\n" +
		`data: {"choices":[{"delta":{},"finish_reason":"tool_calls"}]}` + "\n\ndata: [DONE]\n\n"
}

func textStep(text string) string {
	s, _ := json.Marshal(text)
	return `data: {"choices":[{"delta":{"content":` + string(s) + `}}]}` + "\n\n" +
		`data: {"choices":[{"delta":{},"finish_reason":"stop"}]}` + "\n\ndata: [DONE]\n\n"
}

// useModel points the server's model at a scripted model server on loopback.
func (s *server) useModel(t *testing.T) *scripted {
	t.Helper()
	m := &scripted{}
	srv := httptest.NewServer(m)
	t.Cleanup(srv.Close)
	allow := true
	if _, err := s.b.Models.Set(models.Update{BaseURL: srv.URL + "/v1", Model: "scripted", AllowPrivate: &allow}); err != nil {
		t.Fatal(err)
	}
	return m
}

// call runs one chat turn in which the model calls tool once; it returns the call's end
// state and text. ctx may stop the turn.
func (s *server) call(ctx context.Context, t *testing.T, m *scripted, account, agentID, session, tool string, args map[string]any) (string, string) {
	t.Helper()
	m.script(callStep("c1", tool, args), textStep("done"))
	ctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	var mu sync.Mutex
	var state, text string
	var all []string
	err := s.b.Chat.Run(ctx, agent.Turn{SessionID: session, UserID: account, AgentID: agentID, AgentName: "Ada", Input: "use " + tool},
		func(e agent.Event) {
			mu.Lock()
			defer mu.Unlock()
			all = append(all, string(e.Type)+":"+e.Delta+e.State)
			switch e.Type {
			case agent.ToolResultTextDelta:
				text += e.Delta
			case agent.ToolResultEnd:
				state = e.State
			}
		})
	if err != nil && ctx.Err() == nil {
		t.Fatalf("turn with %s: %v", tool, err)
	}
	mu.Lock()
	defer mu.Unlock()
	if state == "" {
		t.Logf("turn with %s ended without the call's result: %v", tool, all)
	}
	return state, text
}

// setComputer sets an agent's computer directly in the store (the selection route's own
// checks are tested elsewhere).
func (s *server) setComputer(t *testing.T, agentID, kind string, allowHost bool) {
	t.Helper()
	if _, err := s.b.Store.UpdateAgent(agentID, func(a *store.Agent) error {
		a.Computer, a.AllowHostEnvironment = kind, allowHost
		return nil
	}); err != nil {
		t.Fatal(err)
	}
}

func needRoot(t *testing.T) {
	t.Helper()
	testenv.Root(t, "network namespaces")
	if testing.Short() {
		t.Skip("real processes; run without -short")
	}
}

// alive reports whether process pid exists and is not a zombie.
func alive(pid int) bool {
	raw, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	f := strings.Fields(string(raw[strings.LastIndexByte(string(raw), ')')+1:]))
	return len(f) > 0 && f[0] != "Z"
}

// readPID waits for a pid file.
func readPID(t *testing.T, path string) int {
	t.Helper()
	var pid int
	waitFor(t, 2*time.Minute, path, func() bool {
		raw, err := os.ReadFile(path)
		if err != nil {
			return false
		}
		pid, err = strconv.Atoi(strings.TrimSpace(string(raw)))
		return err == nil
	})
	return pid
}

// TestRunnerHostTools: the host tools of an agent placed on a runner run on that runner's
// host — a `cubicle runner` process in its own network namespace with its own HOME — over the
// link, through the chat with a scripted model: host_shell's output shows the runner's
// address and home, files are read and written there, the chat's stop kills the command's
// whole process group on the runner, a runner started with --no-host-tools is refused (and
// nothing runs), and a member without the admin's host grant for that node is refused until
// the grant is given.
func TestRunnerHostTools(t *testing.T) {
	needRoot(t)
	h := newHost(t)
	s := startServer(t, h.ServerAddr+":0")
	m := s.useModel(t)
	admin, err := s.b.Auth.Admin()
	if err != nil {
		t.Fatal(err)
	}
	start := func(name, home string, extra ...string) nodes.Created {
		var c nodes.Created
		s.do(t, "POST", "/api/app/admin/runners", map[string]any{"name": name}, http.StatusCreated, &c)
		if err := os.MkdirAll(home, 0o755); err != nil {
			t.Fatal(err)
		}
		args := append([]string{"--server", s.url, "--token", c.Token, "--data-dir", t.TempDir(), "--engine", "none"}, extra...)
		startRunner(t, append(h.wrap(), "env", "HOME="+home), args...)
		s.waitStatus(t, c.ID, nodes.StatusConnected, 2*time.Minute)
		return c
	}
	home := filepath.Join(t.TempDir(), "runner-home")
	r := start("far box", home)
	if v := s.runnerView(t, r.ID); !strings.Contains(strings.Join(v.Capabilities, ","), "host-computer-tools-v1") {
		t.Fatalf("the runner does not advertise host tools: %v", v.Capabilities)
	}
	var ag struct{ ID string }
	s.do(t, "POST", "/api/app/agents", map[string]string{"name": "Ada"}, http.StatusCreated, &ag)
	s.do(t, "PUT", "/api/app/agents/"+ag.ID+"/node", map[string]string{"nodeId": r.ID}, http.StatusOK, nil)
	s.setComputer(t, ag.ID, "host", false)
	ctx := context.Background()

	// host_shell runs on the runner's host: its network namespace's address, its HOME and
	// working directory, not the server's.
	state, text := s.call(ctx, t, m, admin.ID, ag.ID, "h1", "host_shell",
		map[string]any{"command": "ip -o -4 addr show; echo home=$HOME; pwd; echo $((6*7)) > answer.txt"})
	if state != agent.StateSuccess || !strings.Contains(text, h.Addr+"/30") || !strings.Contains(text, "home="+home) ||
		!strings.Contains(text, "\n"+home+"\n") {
		t.Fatalf("host_shell on the runner: %s %q", state, text)
	}
	if got := m.offered(); !strings.Contains(strings.Join(got, ","), "host_shell") || strings.Contains(strings.Join(got, ","), "host_screenshot") {
		t.Fatalf("tools offered for a host computer on a runner: %v (no host desktop tools through another machine)", got)
	}
	if raw, err := os.ReadFile(filepath.Join(home, "answer.txt")); err != nil || strings.TrimSpace(string(raw)) != "42" {
		t.Fatalf("the command's file in the runner's home: %q, %v", raw, err)
	}
	// host files, relative to the runner user's home, binary safe.
	state, text = s.call(ctx, t, m, admin.ID, ag.ID, "h1", "host_read_file", map[string]any{"path": "answer.txt"})
	if state != agent.StateSuccess || !strings.Contains(text, filepath.Join(home, "answer.txt")) || !strings.Contains(text, "42") {
		t.Fatalf("host_read_file on the runner: %s %q", state, text)
	}
	state, text = s.call(ctx, t, m, admin.ID, ag.ID, "h1", "host_write_file", map[string]any{"path": "sub/bin.dat", "base64": "AAEC/w=="})
	if raw, err := os.ReadFile(filepath.Join(home, "sub", "bin.dat")); state != agent.StateSuccess || err != nil || string(raw) != "\x00\x01\x02\xff" {
		t.Fatalf("host_write_file on the runner: %s %q; file %q, %v", state, text, raw, err)
	}
	state, text = s.call(ctx, t, m, admin.ID, ag.ID, "h1", "host_read_file", map[string]any{"path": "no/such/file"})
	if state != agent.StateError || !strings.Contains(text, "does not exist") {
		t.Fatalf("host_read_file of a missing file: %s %q", state, text)
	}
	// Output caps and the exit code come back as the local host tools give them.
	state, text = s.call(ctx, t, m, admin.ID, ag.ID, "h1", "host_shell", map[string]any{"command": "head -c 400000 /dev/zero | tr '\\0' x; exit 3"})
	if state != agent.StateError || !strings.Contains(text, "exit code 3") || !strings.Contains(text, "(output truncated)") || len(text) > 300<<10 {
		t.Fatalf("capped output: %s, %d bytes, %q…", state, len(text), text[:min(len(text), 80)])
	}
	// The guard still decides on the server: nothing is sent.
	gctx, gcancel := context.WithTimeout(ctx, time.Minute) // a guard that asks waits for a person: nobody answers
	state, text = s.call(gctx, t, m, admin.ID, ag.ID, "g1", "host_shell", map[string]any{"command": "rm -rf / --no-preserve-root; touch guarded"})
	gcancel()
	if state == agent.StateSuccess {
		t.Fatalf("a destructive command on the runner's host was not stopped: %q", text)
	}
	if _, err := os.Stat(filepath.Join(home, "guarded")); err == nil {
		t.Fatal("the guarded command ran on the runner")
	}

	// The file guard knows the runner's home: protected paths given as ~/… are below the
	// runner user's home there, however a call names them — absolute, ~, $HOME, relative to
	// the runner's working directory, after cd — and host_read_file/host_write_file too.
	checkRunnerHome(ctx, t, s, m, admin.ID, ag.ID, home)

	// The chat's stop ends the command on the runner: its whole process group is killed.
	for _, f := range []string{"shell.pid", "child.pid"} {
		os.Remove(filepath.Join(home, f))
	}
	sctx, stop := context.WithCancel(ctx)
	done := make(chan [2]string, 1)
	go func() {
		st, tx := s.call(sctx, t, m, admin.ID, ag.ID, "h2", "host_shell",
			map[string]any{"command": "echo $$ > shell.pid; sleep 287 & echo $! > child.pid; wait; echo never > never.txt", "timeout": 600})
		done <- [2]string{st, tx}
	}()
	// The pids the command writes are those of its sandbox's PID namespace: the host's are
	// found by the child's command line (and its parent, the shell).
	readPID(t, filepath.Join(home, "child.pid"))
	childPID := findProc(t, "sleep\x00287\x00")
	shellPID := parentOf(childPID)
	if !alive(shellPID) || !alive(childPID) {
		t.Fatalf("the command is not running on the runner (pids %d %d)", shellPID, childPID)
	}
	if !s.b.Chat.Stop(admin.ID, "h2") {
		t.Fatal("no turn to stop")
	}
	var res [2]string
	select {
	case res = <-done:
	case <-time.After(2 * time.Minute):
		stop()
		t.Fatal("the stopped turn did not end")
	}
	stop()
	if res[0] == agent.StateSuccess {
		t.Fatalf("a stopped command succeeded: %q", res[1])
	}
	waitFor(t, time.Minute, "the command's process group to be killed on the runner", func() bool { return !alive(shellPID) && !alive(childPID) })
	if _, err := os.Stat(filepath.Join(home, "never.txt")); err == nil {
		t.Fatal("the stopped command went on")
	}

	// A runner started with --no-host-tools does not advertise them: refused, naming the
	// runner and what it must support, and nothing runs there.
	homeOff := filepath.Join(t.TempDir(), "off-home")
	off := start("locked box", homeOff, "--no-host-tools")
	if v := s.runnerView(t, off.ID); strings.Contains(strings.Join(v.Capabilities, ","), "host-computer-tools-v1") {
		t.Fatalf("--no-host-tools still advertises host tools: %v", v.Capabilities)
	}
	var ag2 struct{ ID string }
	s.do(t, "POST", "/api/app/agents", map[string]string{"name": "Bea"}, http.StatusCreated, &ag2)
	s.do(t, "PUT", "/api/app/agents/"+ag2.ID+"/node", map[string]string{"nodeId": off.ID}, http.StatusOK, nil)
	s.setComputer(t, ag2.ID, "host", false)
	state, text = s.call(ctx, t, m, admin.ID, ag2.ID, "o1", "host_shell", map[string]any{"command": "touch must-not-exist"})
	if state != agent.StateDenied || !strings.Contains(text, `"locked box" (`+off.ID+`)`) || !strings.Contains(text, "host-computer-tools-v1") ||
		!strings.Contains(text, "--no-host-tools") {
		t.Fatalf("host_shell on a runner without host tools: %s %q", state, text)
	}
	if _, err := os.Stat(filepath.Join(homeOff, "must-not-exist")); err == nil {
		t.Fatal("a refused command ran on the runner")
	}
	// Even asked directly (past the gate), the server does not send it (the runner's own
	// refusal is TestServeHostRefusesWithoutHostTools).
	rem, err := s.b.Nodes.Node(off.ID)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := rem.HostShell(ctx, wireShell("touch must-not-exist")); err == nil || !strings.Contains(err.Error(), "host-computer-tools-v1") {
		t.Fatalf("HostShell on a runner without host tools: %v", err)
	}
	if _, err := os.Stat(filepath.Join(homeOff, "must-not-exist")); err == nil {
		t.Fatal("a refused command ran on the runner")
	}

	// A runner that cannot say its user's home (HOME unset there): paths under ~ and relative
	// ones are refused with the reason — never checked against the server's home — and the
	// host tools, which start in that home, say what is wrong; nothing runs.
	var hl nodes.Created
	s.do(t, "POST", "/api/app/admin/runners", map[string]any{"name": "homeless box"}, http.StatusCreated, &hl)
	startRunner(t, append(h.wrap(), "env", "HOME="), "--server", s.url, "--token", hl.Token, "--data-dir", t.TempDir(), "--engine", "none")
	s.waitStatus(t, hl.ID, nodes.StatusConnected, 2*time.Minute)
	var ag3 struct{ ID string }
	s.do(t, "POST", "/api/app/agents", map[string]string{"name": "Hal"}, http.StatusCreated, &ag3)
	s.do(t, "PUT", "/api/app/agents/"+ag3.ID+"/node", map[string]string{"nodeId": hl.ID}, http.StatusOK, nil)
	s.setComputer(t, ag3.ID, "host", false)
	marker := filepath.Join(t.TempDir(), "homeless-ran")
	for _, c := range []struct {
		tool string
		args map[string]any
	}{
		{"host_shell", map[string]any{"command": "cat ~/notes.txt; touch " + marker}},
		{"host_shell", map[string]any{"command": `cat "$HOME/notes.txt"; touch ` + marker}},
		{"host_read_file", map[string]any{"path": "notes.txt"}},
		{"host_write_file", map[string]any{"path": "~/notes.txt", "content": "x"}},
	} {
		state, text = s.call(ctx, t, m, admin.ID, ag3.ID, "n1", c.tool, c.args)
		if c.tool == "host_read_file" {
			t.Logf("%s %v on a runner without a home: %s %q", c.tool, c.args, state, text)
		}
		if state != agent.StateDenied || !strings.Contains(text, `"homeless box"`) || !strings.Contains(text, "not known") {
			t.Errorf("%s %v on a runner without a home: %s %q", c.tool, c.args, state, text)
		}
	}
	state, text = s.call(ctx, t, m, admin.ID, ag3.ID, "n1", "host_shell", map[string]any{"command": "touch " + marker})
	if state == agent.StateSuccess || !strings.Contains(text, "no home directory") {
		t.Errorf("host_shell on a runner without a home: %s %q", state, text)
	}
	if _, err := os.Stat(marker); err == nil {
		t.Error("a command ran on a runner without a home")
	}

	// A member's agent on the runner: no host grant for (member, runner) → refused, naming
	// the node and what the admin must allow; the grant for that node → it runs.
	acct, err := s.b.Auth.CreateAccount(auth.Principal{AccountID: admin.ID, Role: store.RoleAdmin},
		auth.NewAccount{Username: "mia", Password: "a-long-pass-word-9"})
	if err != nil {
		t.Fatal(err)
	}
	mine, err := s.b.Profiles.Create(acct.ID, "Mia's")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.b.Store.UpdateAgent(mine.ID, func(a *store.Agent) error {
		a.NodeID, a.Computer, a.AllowHostEnvironment = r.ID, "host", false
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	// A grant on another node does not count.
	if err := s.b.HostAccess.Grant(admin.ID, acct.ID, nodes.LocalID, hostaccess.Access{HostTools: true}); err != nil {
		t.Fatal(err)
	}
	state, text = s.call(ctx, t, m, acct.ID, mine.ID, "m1", "host_shell", map[string]any{"command": "touch member-was-here"})
	if state != agent.StateDenied || !strings.Contains(text, "not granted") || !strings.Contains(text, r.ID) || !strings.Contains(text, "Settings → Users") {
		t.Fatalf("host_shell without a grant on the runner: %s %q", state, text)
	}
	if _, err := os.Stat(filepath.Join(home, "member-was-here")); err == nil {
		t.Fatal("a command without a grant ran on the runner")
	}
	if err := s.b.HostAccess.Grant(admin.ID, acct.ID, r.ID, hostaccess.Access{HostTools: true}); err != nil {
		t.Fatal(err)
	}
	state, text = s.call(ctx, t, m, acct.ID, mine.ID, "m2", "host_shell", map[string]any{"command": "touch member-was-here && echo granted"})
	if state != agent.StateSuccess || !strings.Contains(text, "granted") {
		t.Fatalf("host_shell with the grant: %s %q", state, text)
	}
	if _, err := os.Stat(filepath.Join(home, "member-was-here")); err != nil {
		t.Fatalf("the granted command did not run on the runner: %v", err)
	}

	// Which cloud node a cloud computer gets: the first connected cloud runner by name with a
	// free slot, unless the agent is placed on a cloud runner; none marked → the clear error.
	plan := func(agentID string) map[string]any {
		var p struct{ Next map[string]any }
		s.do(t, "GET", "/api/app/agents/"+agentID+"/computer-plan", nil, http.StatusOK, &p)
		return p.Next
	}
	var dan struct{ ID string }
	s.do(t, "POST", "/api/app/agents", map[string]string{"name": "Dan"}, http.StatusCreated, &dan)
	s.do(t, "PUT", "/api/app/agents/"+dan.ID+"/computer-selection", map[string]any{"computer": "cloud"}, http.StatusOK, nil)
	if p := plan(dan.ID); p["unavailable"] != true || !strings.Contains(p["reason"].(string), "no cloud execution node") {
		t.Fatalf("cloud plan without cloud nodes: %v", p)
	}
	for _, id := range []string{off.ID, r.ID} {
		s.do(t, "PATCH", "/api/app/admin/runners/"+id, map[string]any{"cloud": true}, http.StatusOK, nil)
	}
	if p := plan(dan.ID); p["cloudNode"] != r.ID || p["computer"] != "cloud" || !strings.Contains(strings.Join(toStrings(p["tools"]), ","), "cloud_computer") {
		t.Fatalf("cloud plan, first cloud runner by name (%s): %v", r.ID, p)
	}
	s.do(t, "PUT", "/api/app/agents/"+dan.ID+"/node", map[string]string{"nodeId": off.ID}, http.StatusOK, nil)
	if p := plan(dan.ID); p["cloudNode"] != off.ID {
		t.Fatalf("cloud plan of an agent placed on a cloud runner (%s): %v", off.ID, p)
	}
	for _, id := range []string{off.ID, r.ID} {
		s.do(t, "PATCH", "/api/app/admin/runners/"+id, map[string]any{"cloud": false}, http.StatusOK, nil)
	}
	if p := plan(dan.ID); p["unavailable"] != true {
		t.Fatalf("cloud plan after the cloud flags were removed: %v", p)
	}

	// A cloud agent's host tools are those of its base node, checked with that node's home:
	// Dan is placed on the first runner, the cloud node is the other one.
	s.do(t, "PATCH", "/api/app/admin/runners/"+off.ID, map[string]any{"cloud": true}, http.StatusOK, nil)
	s.do(t, "PUT", "/api/app/agents/"+dan.ID+"/node", map[string]string{"nodeId": r.ID}, http.StatusOK, nil)
	s.do(t, "PUT", "/api/app/agents/"+dan.ID+"/computer-selection", map[string]any{"computer": "cloud", "allowHostEnvironment": true}, http.StatusOK, nil)
	if p := plan(dan.ID); p["cloudNode"] != off.ID {
		t.Fatalf("cloud plan of an agent placed on a plain runner with one cloud runner (%s): %v", off.ID, p)
	}
	state, text = s.call(ctx, t, m, admin.ID, dan.ID, "d1", "host_read_file", map[string]any{"path": "~/.ssh/id_rsa"})
	if state != agent.StateDenied || !strings.Contains(text, "protected location "+filepath.Join(home, ".ssh")) {
		t.Fatalf("a cloud agent's host_read_file of its base node's ~/.ssh: %s %q", state, text)
	}
	state, text = s.call(ctx, t, m, admin.ID, dan.ID, "d1", "host_read_file", map[string]any{"path": "plain.txt"})
	if state != agent.StateSuccess || !strings.Contains(text, "plain-runner-file") {
		t.Fatalf("a cloud agent's host_read_file of a plain file on its base node: %s %q", state, text)
	}
	s.do(t, "PATCH", "/api/app/admin/runners/"+off.ID, map[string]any{"cloud": false}, http.StatusOK, nil)

	// The runner's link goes down: refused, never run on the server's host instead.
	h.link(t, false)
	s.waitStatus(t, r.ID, nodes.StatusDisconnected, 2*time.Minute)
	state, text = s.call(ctx, t, m, admin.ID, ag.ID, "h3", "host_shell", map[string]any{"command": "echo $HOME > " + filepath.Join(t.TempDir(), "x")})
	if state == agent.StateSuccess || !strings.Contains(text, "not connected") {
		t.Fatalf("host_shell with the runner disconnected: %s %q", state, text)
	}
	h.link(t, true)
}

// checkRunnerHome is TestRunnerHostTools' part on the file guard with a runner's home: agent
// agentID runs its host tools on a runner whose user's home is home.
func checkRunnerHome(ctx context.Context, t *testing.T, s *server, m *scripted, account, agentID, home string) {
	t.Helper()
	s.do(t, "PUT", "/api/app/admin/security", map[string]any{"protectedPaths": []string{"~/.ssh", "~/.aws/credentials"}}, http.StatusOK, nil)
	t.Cleanup(func() {
		s.do(t, "PUT", "/api/app/admin/security", map[string]any{"protectedPaths": []string{}}, http.StatusOK, nil)
	})
	var view struct{ ProtectedPaths []string }
	s.do(t, "GET", "/api/app/admin/security", nil, http.StatusOK, &view)
	if strings.Join(view.ProtectedPaths, ",") != "~/.ssh,~/.aws/credentials" {
		t.Fatalf("protected paths as saved: %q (kept as written, for whichever host)", view.ProtectedPaths)
	}
	const secret = "RUNNER-PRIVATE-KEY-7f3a"
	for _, f := range []string{".ssh/id_rsa", ".aws/credentials"} {
		p := filepath.Join(home, f)
		if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(secret), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(home, "plain.txt"), []byte("plain-runner-file"), 0o644); err != nil {
		t.Fatal(err)
	}
	keys := filepath.Join(home, ".ssh")
	for i, c := range []struct {
		tool string
		args map[string]any
		in   string // the protected location the refusal names
	}{
		{"host_shell", map[string]any{"command": "cat " + filepath.Join(keys, "id_rsa")}, keys},
		{"host_shell", map[string]any{"command": "cat ~/.ssh/id_rsa"}, keys},
		{"host_shell", map[string]any{"command": `cat "$HOME/.ssh/id_rsa"`}, keys},
		{"host_shell", map[string]any{"command": "cat .ssh/id_rsa"}, keys},
		{"host_shell", map[string]any{"command": "cd .ssh && cat id_rsa"}, keys},
		{"host_shell", map[string]any{"command": "cd sub; cat ../.ssh/id_rsa"}, keys},
		{"host_shell", map[string]any{"command": "tar cf - . | base64"}, keys},
		{"host_shell", map[string]any{"command": "ls", "cwd": ".ssh"}, keys},
		{"host_read_file", map[string]any{"path": "~/.ssh/id_rsa"}, keys},
		{"host_read_file", map[string]any{"path": ".ssh/id_rsa"}, keys},
		{"host_read_file", map[string]any{"path": filepath.Join(keys, "id_rsa")}, keys},
		{"host_read_file", map[string]any{"path": "sub/../.aws/credentials"}, filepath.Join(home, ".aws", "credentials")},
		{"host_write_file", map[string]any{"path": "~/.ssh/authorized_keys", "content": "ssh-ed25519 AAAA attacker"}, keys},
		{"host_write_file", map[string]any{"path": filepath.Join(keys, "authorized_keys"), "content": "ssh-ed25519 AAAA attacker"}, keys},
	} {
		session := "k" + strconv.Itoa(i)
		state, text := s.call(ctx, t, m, account, agentID, session, c.tool, c.args)
		if i == 0 {
			t.Logf("%s %v on the runner: %s %q", c.tool, c.args, state, text)
		}
		if state != agent.StateDenied || !strings.Contains(text, "protected location "+c.in) || strings.Contains(text, secret) {
			t.Errorf("%s %v on the runner: %s %q; want it refused naming %s", c.tool, c.args, state, text, c.in)
		}
	}
	if _, err := os.Stat(filepath.Join(keys, "authorized_keys")); err == nil {
		t.Error("a refused write reached the runner's ~/.ssh")
	}
	// The agent's working directory on the runner is below the runner's home: relative paths
	// start there.
	s.do(t, "PUT", "/api/app/agents/"+agentID+"/workdir", map[string]string{"workdir": "sub"}, http.StatusOK, nil)
	state, text := s.call(ctx, t, m, account, agentID, "k-wd", "host_shell", map[string]any{"command": "pwd"})
	if state != agent.StateSuccess || !strings.Contains(text, filepath.Join(home, "sub")+"\n") {
		t.Errorf("pwd in the working directory sub on the runner: %s %q", state, text)
	}
	for _, c := range []struct {
		tool string
		args map[string]any
	}{
		{"host_shell", map[string]any{"command": "cat ../.ssh/id_rsa"}},
		{"host_read_file", map[string]any{"path": "../.ssh/id_rsa"}},
	} {
		state, text = s.call(ctx, t, m, account, agentID, "k-wd", c.tool, c.args)
		if state != agent.StateDenied || !strings.Contains(text, "protected location "+keys) {
			t.Errorf("%s %v from the working directory sub on the runner: %s %q", c.tool, c.args, state, text)
		}
	}
	s.do(t, "PUT", "/api/app/agents/"+agentID+"/workdir", map[string]string{"workdir": "."}, http.StatusOK, nil)
	// A plain file in the runner's home is read, by relative path and by ~.
	state, text = s.call(ctx, t, m, account, agentID, "k-plain", "host_read_file", map[string]any{"path": "plain.txt"})
	if state != agent.StateSuccess || !strings.Contains(text, "plain-runner-file") {
		t.Errorf("a plain file in the runner's home: %s %q", state, text)
	}
	state, text = s.call(ctx, t, m, account, agentID, "k-plain", "host_shell", map[string]any{"command": "cat ~/plain.txt"})
	if state != agent.StateSuccess || !strings.Contains(text, "plain-runner-file") {
		t.Errorf("cat ~/plain.txt on the runner: %s %q", state, text)
	}
	// The server's own home is an ordinary path on the runner (~/… is the runner's home
	// there): a file under it is not refused by the guard; the runner says it is missing.
	if srvHome, err := os.UserHomeDir(); err == nil && srvHome != home {
		missing := filepath.Join(srvHome, ".ssh", "cubicle-runnerhome-"+strconv.Itoa(os.Getpid()))
		state, text = s.call(ctx, t, m, account, agentID, "k-srv", "host_read_file", map[string]any{"path": missing})
		if state != agent.StateError || !strings.Contains(text, "does not exist") {
			t.Errorf("the server's home path on the runner: %s %q; want the runner's own answer (missing), not a refusal", state, text)
		}
	}
}

func wireShell(cmd string) wire.HostShellArgs {
	return wire.HostShellArgs{Command: cmd, TimeoutMS: 10_000, MaxOutput: 1 << 10}
}

// TestCloudComputerOnRunner: an administrator marks a runner as a cloud node; an agent whose
// computer is "cloud" gets its desktop there (a real desktop on the real engine) and the
// cloud_computer_* tools act on it, while "Allow host environment" gives the host tools of the
// agent's base node — another runner — and cloud_computer_copy_file between the two. Without a
// cloud node the clear error of before; leaving cloud stops the cloud desktop.
func TestCloudComputerOnRunner(t *testing.T) {
	needEngine(t)
	s := startServer(t, "127.0.0.1:0")
	m := s.useModel(t)
	admin, err := s.b.Auth.Admin()
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	add := func(name string) nodes.Created {
		var c nodes.Created
		s.do(t, "POST", "/api/app/admin/runners", map[string]any{"name": name}, http.StatusCreated, &c)
		return c
	}
	base, cloud := add("base box"), add("cloud box")
	t.Cleanup(func() { removeNodeObjects(t, cloud.ID) })
	home := filepath.Join(t.TempDir(), "base-home")
	os.MkdirAll(home, 0o755)
	startRunner(t, []string{"env", "HOME=" + home}, "--server", s.url, "--token", base.Token, "--data-dir", t.TempDir(), "--engine", "none")
	startRunner(t, nil, "--server", s.url, "--token", cloud.Token, "--data-dir", t.TempDir(), "--engine", "podman")
	s.waitStatus(t, base.ID, nodes.StatusConnected, 2*time.Minute)
	s.waitStatus(t, cloud.ID, nodes.StatusConnected, 2*time.Minute)
	s.do(t, "POST", "/api/app/admin/local-vm/prepare?wait=1&node="+cloud.ID, map[string]string{"imageKey": "standard"}, http.StatusOK, nil)

	var ag struct{ ID string }
	s.do(t, "POST", "/api/app/agents", map[string]string{"name": "Cleo"}, http.StatusCreated, &ag)
	s.do(t, "PUT", "/api/app/agents/"+ag.ID+"/node", map[string]string{"nodeId": base.ID}, http.StatusOK, nil)
	s.do(t, "PUT", "/api/app/agents/"+ag.ID+"/computer-selection", map[string]any{"computer": "cloud", "allowHostEnvironment": true}, http.StatusOK, nil)

	// No cloud node yet: the clear error, and no desktop anywhere.
	state, text := s.call(ctx, t, m, admin.ID, ag.ID, "c0", "cloud_computer_shell", map[string]any{"command": "echo must-not-run"})
	if state != agent.StateDenied || !strings.Contains(text, "no cloud execution node") || !strings.Contains(text, "Settings → Runners") {
		t.Fatalf("cloud_computer_shell without a cloud node: %s %q", state, text)
	}

	// The admin marks the runner as a cloud node (bad input changes nothing).
	s.do(t, "PATCH", "/api/app/admin/runners/"+cloud.ID, map[string]any{}, http.StatusBadRequest, nil)
	s.do(t, "PATCH", "/api/app/admin/runners/r-nope", map[string]any{"cloud": true}, http.StatusNotFound, nil)
	s.do(t, "PATCH", "/api/app/admin/runners/local", map[string]any{"cloud": true}, http.StatusBadRequest, nil)
	if v := s.runnerView(t, cloud.ID); v.Cloud {
		t.Fatal("a refused change marked the runner")
	}
	var v nodes.View
	s.do(t, "PATCH", "/api/app/admin/runners/"+cloud.ID, map[string]any{"cloud": true}, http.StatusOK, &v)
	if !v.Cloud || v.ID != cloud.ID || !s.runnerView(t, cloud.ID).Cloud {
		t.Fatalf("runner after PATCH {cloud: true}: %+v", v)
	}

	// cloud_computer_* act on the agent's desktop on the cloud node.
	state, text = s.call(ctx, t, m, admin.ID, ag.ID, "c1", "cloud_computer_shell", map[string]any{"command": "echo in-the-cloud-$((40+2)); id -un"})
	if state != agent.StateSuccess || !strings.Contains(text, "in-the-cloud-42") || !strings.Contains(text, "cua") {
		t.Fatalf("cloud_computer_shell: %s %q", state, text)
	}
	offered := strings.Join(m.offered(), ",")
	for _, want := range []string{"cloud_computer_shell", "cloud_computer_screenshot", "cloud_computer_copy_file", "host_shell"} {
		if !strings.Contains(offered, want) {
			t.Errorf("offered %s, want %s", offered, want)
		}
	}
	if strings.Contains(","+offered, ",computer_") {
		t.Errorf("a cloud turn was offered computer_* tools: %s", offered)
	}
	var st struct {
		Running   int
		Instances []struct{ AgentID, Container string }
	}
	s.do(t, "GET", "/api/app/admin/local-vm?node="+cloud.ID, nil, http.StatusOK, &st)
	if st.Running != 1 || len(st.Instances) != 1 || st.Instances[0].AgentID != ag.ID {
		t.Fatalf("the cloud node's desktops: %+v", st)
	}
	checkLabel(t, st.Instances[0].Container, cloud.ID)
	state, text = s.call(ctx, t, m, admin.ID, ag.ID, "c1", "cloud_computer_screenshot", map[string]any{})
	if state != agent.StateSuccess || !strings.Contains(text, "Screenshot 1280x800") {
		t.Fatalf("cloud_computer_screenshot: %s %q", state, text)
	}
	state, text = s.call(ctx, t, m, admin.ID, ag.ID, "c1", "computer_shell", map[string]any{"command": "echo must-not-run"})
	if state != agent.StateDenied || !strings.Contains(text, "cloud_computer_") {
		t.Fatalf("computer_shell on a cloud computer: %s %q", state, text)
	}

	// Host tools are the base node's (the other runner's host), and the copy goes from there
	// into the cloud desktop.
	state, text = s.call(ctx, t, m, admin.ID, ag.ID, "c1", "host_shell", map[string]any{"command": "echo home=$HOME; printf 'from-base-host' > note.txt"})
	if state != agent.StateSuccess || !strings.Contains(text, "home="+home) {
		t.Fatalf("host_shell of a cloud round: %s %q", state, text)
	}
	state, text = s.call(ctx, t, m, admin.ID, ag.ID, "c1", "cloud_computer_copy_file", map[string]any{"from": "host", "source": "note.txt", "target": "copied.txt"})
	if state != agent.StateSuccess {
		t.Fatalf("cloud_computer_copy_file: %s %q", state, text)
	}
	state, text = s.call(ctx, t, m, admin.ID, ag.ID, "c1", "cloud_computer_read_file", map[string]any{"path": "copied.txt"})
	if state != agent.StateSuccess || !strings.Contains(text, "from-base-host") {
		t.Fatalf("the copied file in the cloud desktop: %s %q", state, text)
	}
	state, text = s.call(ctx, t, m, admin.ID, ag.ID, "c1", "cloud_computer_copy_file", map[string]any{"from": "vm", "source": "/etc/hostname", "target": "cloud-hostname"})
	if raw, err := os.ReadFile(filepath.Join(home, "cloud-hostname")); state != agent.StateSuccess || err != nil || len(raw) == 0 {
		t.Fatalf("copy from the cloud desktop to the base host: %s %q; %q %v", state, text, raw, err)
	}

	// The panel shows the cloud desktop.
	d, err := s.b.AgentDesktop(ctx, admin.ID, ag.ID)
	if err != nil || d.State != "running" || d.Client == nil {
		t.Fatalf("panel desktop of a cloud computer: %+v, %v", d, err)
	}

	// Leaving cloud stops the cloud desktop (its authorisation is revoked).
	s.do(t, "PUT", "/api/app/agents/"+ag.ID+"/computer-selection", map[string]any{"computer": "none"}, http.StatusOK, nil)
	waitFor(t, 2*time.Minute, "the cloud desktop to stop", func() bool {
		s.do(t, "GET", "/api/app/admin/local-vm?node="+cloud.ID, nil, http.StatusOK, &st)
		return st.Running == 0
	})
}

func toStrings(v any) []string {
	var out []string
	if l, ok := v.([]any); ok {
		for _, x := range l {
			if s, ok := x.(string); ok {
				out = append(out, s)
			}
		}
	}
	return out
}

// findProc is the host pid of the process whose command line (NUL-separated) is cmdline.
func findProc(t *testing.T, cmdline string) int {
	t.Helper()
	var pid int
	waitFor(t, time.Minute, "a process "+strings.ReplaceAll(cmdline, "\x00", " "), func() bool {
		ents, _ := os.ReadDir("/proc")
		for _, e := range ents {
			n, err := strconv.Atoi(e.Name())
			if err != nil {
				continue
			}
			if raw, err := os.ReadFile("/proc/" + e.Name() + "/cmdline"); err == nil && string(raw) == cmdline {
				pid = n
				return true
			}
		}
		return false
	})
	return pid
}

// parentOf is the parent pid of pid (0 when unknown).
func parentOf(pid int) int {
	raw, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0
	}
	f := strings.Fields(string(raw[strings.LastIndexByte(string(raw), ')')+1:]))
	if len(f) < 2 {
		return 0
	}
	n, _ := strconv.Atoi(f[1])
	return n
}
