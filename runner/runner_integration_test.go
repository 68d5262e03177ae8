package runner_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"cubicle/backend"
	"cubicle/backend/agent"
	"cubicle/backend/auth"
	"cubicle/backend/cli"
	"cubicle/backend/engine/podman"
	"cubicle/backend/fault"
	"cubicle/backend/nodes"
	"cubicle/backend/screen/screentest"
	"cubicle/backend/vm"
	"cubicle/internal/testenv"
)

// envChild makes the test binary run the command line given as its arguments: a real
// `cubicle runner` process the tests can kill -9.
const envChild = "CUBICLE_RUNNER_TEST_CHILD"

func TestMain(m *testing.M) {
	if os.Getenv(envChild) == "1" {
		os.Exit(cli.Main(os.Args[1:], cli.DesktopShell{}))
	}
	os.Exit(m.Run())
}

const (
	adminUser = "boss"
	adminPass = "pass-word-1"
)

// server is a real Backend serving its API on a real listener, without a container engine of
// its own: every desktop of these tests runs on a runner.
type server struct {
	b    *backend.Backend
	url  string
	http *http.Client
}

func startServer(t *testing.T, listen string) *server { return startServerWith(t, listen, nil) }

// startServerWith is startServer with edit applied to the backend's configuration.
func startServerWith(t *testing.T, listen string, edit func(*backend.Config)) *server {
	t.Helper()
	dir := t.TempDir()
	log := testenv.Logger(t, slog.LevelWarn)
	host, _, _ := net.SplitHostPort(listen)
	cfg := backend.Config{DataDir: filepath.Join(dir, "server"), Engine: "none", Logger: log,
		AllowedHosts: []string{"127.0.0.1", host}, Version: cli.Version,
		Admin: auth.Bootstrap{Username: adminUser, Password: adminPass}}
	if edit != nil {
		edit(&cfg)
	}
	b, err := backend.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	if err := b.Start(ctx); err != nil {
		t.Fatal(err)
	}
	if err := b.WaitEngine(ctx); err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", listen)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		b.Serve(ctx, ln)
	}()
	t.Cleanup(func() {
		cancel()
		<-done
		b.Close()
	})
	jar, _ := cookiejar.New(nil)
	s := &server{b: b, url: "http://" + ln.Addr().String(), http: &http.Client{Jar: jar, Timeout: 40 * time.Minute}}
	s.do(t, "POST", "/api/auth/login", map[string]string{"username": adminUser, "password": adminPass}, http.StatusOK, nil)
	return s
}

// do sends a JSON request and decodes the answer into out; the status must be want.
func (s *server) do(t *testing.T, method, path string, body any, want int, out any) string {
	t.Helper()
	var rd io.Reader
	if body != nil {
		raw, _ := json.Marshal(body)
		rd = bytes.NewReader(raw)
	}
	req, _ := http.NewRequest(method, s.url+path, rd)
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := s.http.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != want {
		t.Fatalf("%s %s: HTTP %d, want %d: %s", method, path, resp.StatusCode, want, raw)
	}
	if out != nil {
		if err := json.Unmarshal(raw, out); err != nil {
			t.Fatalf("%s %s: %v in %s", method, path, err, raw)
		}
	}
	return string(raw)
}

// runnerView is the runner's entry of GET /api/app/admin/runners.
func (s *server) runnerView(t *testing.T, id string) nodes.View {
	t.Helper()
	var list struct{ Runners []nodes.View }
	s.do(t, "GET", "/api/app/admin/runners", nil, http.StatusOK, &list)
	for _, r := range list.Runners {
		if r.ID == id {
			return r
		}
	}
	t.Fatalf("runner %s not listed", id)
	return nodes.View{}
}

// waitStatus waits until runner id has status want.
func (s *server) waitStatus(t *testing.T, id, want string, limit time.Duration) nodes.View {
	t.Helper()
	deadline := time.Now().Add(limit)
	for {
		v := s.runnerView(t, id)
		if v.Status == want {
			return v
		}
		if time.Now().After(deadline) {
			t.Fatalf("runner %s is %s after %v, want %s", id, v.Status, limit, want)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// proc is a real `cubicle runner` process.
type proc struct {
	cmd  *exec.Cmd
	out  *syncBuffer
	done chan struct{}
	err  error
}

func startRunner(t *testing.T, wrap []string, args ...string) *proc {
	t.Helper()
	return startRunnerEnv(t, wrap, nil, args...)
}

// startRunnerEnv is startRunner with extra environment variables (KEY=VALUE).
func startRunnerEnv(t *testing.T, wrap, env []string, args ...string) *proc {
	t.Helper()
	argv := append(append([]string{}, wrap...), os.Args[0])
	argv = append(argv, append([]string{"runner"}, args...)...)
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env = append(append(os.Environ(), envChild+"=1", "CUBICLE_RUNNER_TOKEN="), env...)
	p := &proc{cmd: cmd, out: &syncBuffer{}, done: make(chan struct{})}
	cmd.Stdout, cmd.Stderr = p.out, p.out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		p.err = cmd.Wait()
		close(p.done)
	}()
	t.Cleanup(func() {
		select {
		case <-p.done:
		default:
			cmd.Process.Signal(syscall.SIGTERM)
			select {
			case <-p.done:
			case <-time.After(90 * time.Second):
				cmd.Process.Kill()
				<-p.done
			}
		}
		if t.Failed() {
			t.Logf("runner output:\n%s", p.out.String())
		}
	})
	return p
}

// exitCode waits for the process to end (within limit) and returns its exit code.
func (p *proc) exitCode(t *testing.T, limit time.Duration) int {
	t.Helper()
	select {
	case <-p.done:
	case <-time.After(limit):
		t.Fatalf("runner still runs after %v:\n%s", limit, p.out.String())
	}
	var ee *exec.ExitError
	if errors.As(p.err, &ee) {
		return ee.ExitCode()
	}
	return 0
}

// needEngine skips (or fails under CUBICLE_REQUIRE_ALL) without root and the Podman service.
func needEngine(t *testing.T) {
	t.Helper()
	testenv.RootPodman(t)
	if testing.Short() {
		t.Skip("real desktop test; run without -short")
	}
}

// removeNodeObjects removes the containers and volumes labelled with node (each test's
// runners have fresh random ids).
func removeNodeObjects(t *testing.T, node string) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	eng, err := podman.Connect(ctx, "unix:///run/podman/podman.sock", podman.Options{})
	if err != nil {
		t.Logf("cleanup: %v", err)
		return
	}
	defer eng.Close()
	sel := map[string]string{vm.LabelNode: node}
	cs, _ := eng.ListContainers(ctx, sel)
	for _, c := range cs {
		if err := eng.RemoveContainer(ctx, c.ID, true); err != nil && !errors.Is(err, fault.ErrNotFound) {
			t.Logf("cleanup: %v", err)
		}
	}
	vs, _ := eng.ListVolumes(ctx, sel)
	for _, v := range vs {
		if err := eng.RemoveVolume(ctx, v); err != nil && !errors.Is(err, fault.ErrNotFound) {
			t.Logf("cleanup: %v", err)
		}
	}
}

// shell runs "/shell cmd" as an operator-mode chat turn and returns the tool's end state and
// text. The turn must end within limit.
func (s *server) shell(t *testing.T, account, agentID, session, cmd string, limit time.Duration) (string, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	defer cancel()
	var evs []agent.Event
	err := s.b.Chat.Run(ctx, agent.Turn{SessionID: session, UserID: account, AgentID: agentID, AgentName: "Ada", Input: "/shell " + cmd},
		func(e agent.Event) { evs = append(evs, e) })
	if ctx.Err() != nil {
		t.Fatalf("/shell %s still ran after %v (a hang): %v", cmd, limit, err)
	}
	if err != nil {
		t.Fatalf("/shell %s: %v", cmd, err)
	}
	text := ""
	for _, e := range evs {
		switch e.Type {
		case agent.ToolResultTextDelta:
			text += e.Delta
		case agent.ToolResultEnd:
			return e.State, text
		}
	}
	var msgs []string
	for _, e := range evs {
		if e.Delta != "" {
			msgs = append(msgs, e.Delta)
		}
	}
	return "", strings.Join(msgs, "")
}

// TestRunnerEndToEnd: a real `cubicle runner` process connects to a real server, an agent is
// placed on it, its desktop is created on the runner's engine and driven through the chat
// over the relay; kill -9 fails closed and a restart reconciles; revoke cuts it off.
func TestRunnerEndToEnd(t *testing.T) {
	needEngine(t)
	s := startServer(t, "127.0.0.1:0")
	admin, err := s.b.Auth.Admin()
	if err != nil {
		t.Fatal(err)
	}

	// Register: the token is shown once, with a command a person copies.
	var created nodes.Created
	s.do(t, "POST", "/api/app/admin/runners", map[string]any{"name": "box one"}, http.StatusCreated, &created)
	if !strings.Contains(created.RunCommand, "--token "+created.Token) || !strings.Contains(created.RunCommand, "--server "+s.url) ||
		!strings.Contains(created.RunCommand, "--name 'box one'") || !strings.HasSuffix(created.JoinCommand, "./"+created.RunCommand) {
		t.Fatalf("joinCommand %q", created.JoinCommand)
	}
	t.Cleanup(func() { removeNodeObjects(t, created.ID) })
	if raw := s.do(t, "GET", "/api/app/admin/runners", nil, http.StatusOK, nil); strings.Contains(raw, created.Token[len(created.ID)+1:]) {
		t.Fatal("the runner list shows the token's secret")
	}
	s.do(t, "POST", "/api/app/admin/runners", map[string]any{"name": ""}, http.StatusBadRequest, nil)
	if v := s.runnerView(t, created.ID); v.Status != nodes.StatusDisconnected {
		t.Fatalf("new runner is %s", v.Status)
	}

	// A wrong secret is refused and the process ends with the "forbidden" exit code.
	bad := startRunner(t, nil, "--server", s.url, "--token", created.ID+".not-the-secret", "--data-dir", filepath.Join(t.TempDir(), "bad"), "--engine", "none")
	if code := bad.exitCode(t, time.Minute); code != 5 || !strings.Contains(bad.out.String(), "refused") {
		t.Fatalf("runner with a wrong token: exit %d:\n%s", code, bad.out.String())
	}

	runDir := filepath.Join(t.TempDir(), "runner")
	args := []string{"--server", s.url, "--token", created.Token, "--data-dir", runDir, "--engine", "podman"}
	r := startRunner(t, nil, args...)
	v := s.waitStatus(t, created.ID, nodes.StatusConnected, 2*time.Minute)
	if v.OS == "" || v.Engine != "podman" || !strings.Contains(strings.Join(v.Capabilities, ","), "guest-relay-v1") {
		t.Fatalf("connected runner %+v", v)
	}

	// The node's image, prepared on the runner through the node picker's API.
	s.do(t, "POST", "/api/app/admin/local-vm/prepare?wait=1&node="+created.ID, map[string]string{"imageKey": "standard"}, http.StatusOK, nil)

	// An agent placed on the runner.
	var ag struct{ ID string }
	s.do(t, "POST", "/api/app/agents", map[string]string{"name": "Ada"}, http.StatusCreated, &ag)
	s.do(t, "PUT", "/api/app/agents/"+ag.ID+"/node", map[string]string{"nodeId": "r-nope"}, http.StatusNotFound, nil)
	s.do(t, "PUT", "/api/app/agents/"+ag.ID+"/node", map[string]string{"nodeId": created.ID}, http.StatusOK, nil)

	// Its desktop is created on the runner's engine, labelled with the runner's node.
	var av vm.AgentView
	s.do(t, "POST", "/api/app/agents/"+ag.ID+"/local-vm/create", nil, http.StatusOK, &av)
	if av.Desktop.State != vm.StateRunning {
		t.Fatalf("desktop after create: %+v", av.Desktop)
	}
	desk := av.Desktop.ID
	var nodeStatus vm.Status
	s.do(t, "GET", "/api/app/admin/local-vm?node="+created.ID, nil, http.StatusOK, &nodeStatus)
	if nodeStatus.NodeID != created.ID || nodeStatus.Running != 1 {
		t.Fatalf("runner's status: node %s, %d running", nodeStatus.NodeID, nodeStatus.Running)
	}
	checkLabel(t, av.Desktop.Container, created.ID)
	if v := s.runnerView(t, created.ID); v.Desktops.Running != 1 {
		t.Fatalf("runner desktops %+v", v.Desktops)
	}

	// Moving a running agent is refused.
	s.do(t, "PUT", "/api/app/agents/"+ag.ID+"/node", map[string]string{"nodeId": "local"}, http.StatusConflict, nil)

	// Operator-mode /shell through the chat runs in the runner's desktop, over the relay.
	state, text := s.shell(t, admin.ID, ag.ID, "s1", "echo hello-from-$((40+2)) && cat /etc/hostname", 2*time.Minute)
	if state != agent.StateSuccess || !strings.Contains(text, "hello-from-42") {
		t.Fatalf("/shell on the runner: %s %q", state, text)
	}

	// The computer panel's view of it: running with a driver link through the runner.
	d, err := s.b.AgentDesktop(context.Background(), admin.ID, ag.ID)
	if err != nil || d.State != "running" || d.Client == nil {
		t.Fatalf("panel desktop: %+v, %v", d, err)
	}

	// Live frames through the server, take over and type: a terminal is opened in the
	// runner's desktop and a person types a command into it over the computer channel.
	state, text = s.shell(t, admin.ID, ag.ID, "s1", "setsid xfce4-terminal --title=relay --geometry=100x30+40+40 -x bash -c 'touch ~/ready; exec bash' >/dev/null 2>&1 < /dev/null & "+
		"for i in $(seq 150); do test -e ~/ready && break; sleep 0.2; done; sleep 2; ls ~/ready", 2*time.Minute)
	if state != agent.StateSuccess {
		t.Fatalf("open a terminal: %s %q", state, text)
	}
	c := s.channel(t, ag.ID)
	c.Status(30*time.Second, func(st map[string]any) bool { return st["streaming"] == true })
	m, ok := c.FrameAfter(0, time.Minute)
	if !ok || m.Frame.Width != 1280 || m.Frame.Height != 800 {
		t.Fatalf("no live frame from the runner's desktop: %+v", m.Frame)
	}
	var lease map[string]any
	input := func(extra map[string]any) map[string]any {
		msg := map[string]any{"type": "input", "token": lease["token"], "version": lease["version"], "frameId": c.Frame()}
		for k, v := range extra {
			msg[k] = v
		}
		return c.Call(msg)
	}
	// The terminal's window may not have the focus yet when the first keys arrive (the
	// window manager's business, not the relay's): a few attempts, each one complete.
	for attempt := 1; ; attempt++ {
		if lease = c.Call(map[string]any{"type": "take_over"}); lease["type"] != "lease" {
			t.Fatalf("take over: %v", lease)
		}
		for _, in := range []map[string]any{{"action": "click", "x": 300, "y": 200},
			{"action": "type", "text": "echo typed-over-the-$((1+1))-relays > ~/typed.txt"}, {"action": "key", "keys": "Return"}} {
			if r := input(in); r["type"] != "ok" {
				t.Fatalf("input %v: %v", in, r)
			}
			c.FrameAfter(c.Frame(), time.Second) // let the screen show it
		}
		if r := c.Call(map[string]any{"type": "hand_back", "token": lease["token"]}); r["type"] != "ok" {
			t.Fatalf("hand back: %v", r)
		}
		state, text = s.shell(t, admin.ID, ag.ID, "s1", "for i in $(seq 25); do test -s ~/typed.txt && break; sleep 0.2; done; cat ~/typed.txt", 2*time.Minute)
		if state == agent.StateSuccess && strings.Contains(text, "typed-over-the-2-relays") {
			t.Logf("typed over the relay (attempt %d)", attempt)
			break
		}
		if attempt == 3 {
			t.Fatalf("what the person typed did not arrive in 3 attempts: %s %q", state, text)
		}
	}

	// A person takes control; kill -9 of the runner ends the lease and refuses calls.
	lease = c.Call(map[string]any{"type": "take_over"})
	if lease["type"] != "lease" {
		t.Fatalf("take over: %v", lease)
	}
	r.cmd.Process.Kill()
	r.exitCode(t, time.Minute)
	s.waitStatus(t, created.ID, nodes.StatusDisconnected, time.Minute)
	waitFor(t, time.Minute, "the control lease to end", func() bool { _, held := s.b.Control.Holder(desk); return !held })
	state, text = s.shell(t, admin.ID, ag.ID, "s2", "echo must-not-run", time.Minute)
	if state == agent.StateSuccess || !strings.Contains(text, "disconnected") {
		t.Fatalf("/shell with the runner gone: %s %q", state, text)
	}
	d, err = s.b.AgentDesktop(context.Background(), admin.ID, ag.ID)
	if err != nil || d.State != "unreachable" || d.Client != nil {
		t.Fatalf("panel desktop with the runner gone: %+v, %v", d, err)
	}
	// Its panel reads the desktop as unreachable, saying why (not a failed read); actions are refused.
	var gone vm.AgentView
	s.do(t, "GET", "/api/app/agents/"+ag.ID+"/local-vm", nil, http.StatusOK, &gone)
	if gone.Desktop.State != vm.StateUnreachable || !strings.Contains(gone.Desktop.LastError, "disconnected") {
		t.Fatalf("the Local VM of an agent whose runner is gone: %+v", gone)
	}
	var refused map[string]any
	s.do(t, "POST", "/api/app/agents/"+ag.ID+"/local-vm/start", nil, http.StatusServiceUnavailable, &refused)
	// The old lease types nothing: refused, never queued for later.
	if r := input(map[string]any{"action": "type", "text": "echo stale > ~/stale.txt"}); r["type"] != "error" {
		t.Fatalf("input with the lease of a disconnected runner: %v", r)
	}
	input(map[string]any{"action": "key", "keys": "Return"})

	// The runner comes back with its data: the desktop is found again (reconcile), its
	// files kept.
	r = startRunner(t, nil, args...)
	s.waitStatus(t, created.ID, nodes.StatusConnected, 2*time.Minute)
	state, text = s.shell(t, admin.ID, ag.ID, "s3", "sleep 1; cat ~/typed.txt; ls ~/stale.txt 2>&1; echo back-again", 3*time.Minute)
	if state != agent.StateSuccess || !strings.Contains(text, "back-again") || !strings.Contains(text, "typed-over-the-2-relays") ||
		!strings.Contains(text, "No such file") {
		t.Fatalf("/shell after the runner came back: %s %q", state, text)
	}

	// Revoke: the link drops at once, the process is refused and ends, calls are refused.
	s.do(t, "DELETE", "/api/app/admin/runners/"+created.ID, nil, http.StatusOK, nil)
	if code := r.exitCode(t, 3*time.Minute); code != 5 {
		t.Fatalf("revoked runner exit %d:\n%s", code, r.out.String())
	}
	if v := s.runnerView(t, created.ID); v.Status != nodes.StatusRevoked {
		t.Fatalf("revoked runner is %s", v.Status)
	}
	state, text = s.shell(t, admin.ID, ag.ID, "s4", "echo must-not-run", time.Minute)
	if state == agent.StateSuccess || !strings.Contains(text, "revoked") {
		t.Fatalf("/shell on a revoked runner: %s %q", state, text)
	}
	again := startRunner(t, nil, args...)
	if code := again.exitCode(t, time.Minute); code != 5 {
		t.Fatalf("revoked token: exit %d:\n%s", code, again.out.String())
	}
}

// channel opens the agent's computer channel with the admin's session.
func (s *server) channel(t *testing.T, agentID string) *screentest.Client {
	t.Helper()
	u, _ := url.Parse(s.url)
	var cookies []string
	for _, c := range s.http.Jar.Cookies(u) {
		cookies = append(cookies, c.Name+"="+c.Value)
	}
	c, resp, err := screentest.Dial(t, "ws://"+u.Host+"/api/app/agents/"+agentID+"/computer", http.Header{"Cookie": {strings.Join(cookies, "; ")}}, true)
	if err != nil {
		code := 0
		if resp != nil {
			code = resp.StatusCode
		}
		t.Fatalf("computer channel: %v (HTTP %d)", err, code)
	}
	return c
}

// checkLabel checks that container name carries node's label.
func checkLabel(t *testing.T, name, node string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	eng, err := podman.Connect(ctx, "unix:///run/podman/podman.sock", podman.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer eng.Close()
	cs, err := eng.ListContainers(ctx, map[string]string{vm.LabelNode: node})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range cs {
		if c.Name == name || strings.TrimPrefix(c.Name, "/") == name {
			return
		}
	}
	t.Fatalf("container %s is not labelled %s=%s (found %v)", name, vm.LabelNode, node, cs)
}

func waitFor(t *testing.T, limit time.Duration, what string, ok func() bool) {
	t.Helper()
	deadline := time.Now().Add(limit)
	for !ok() {
		if time.Now().After(deadline) {
			t.Fatalf("waited %v for %s", limit, what)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// syncBuffer is a bytes.Buffer safe for a process's output and the test.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
