package backend

import (
	"context"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"cubicle/backend/agent"
	"cubicle/backend/auth"
	"cubicle/backend/hostaccess"
	"cubicle/backend/profile"
	"cubicle/backend/store"
)

// TestWiring starts the whole backend (no container engine) on loopback and talks to it:
// login, agents, a chat turn in operator mode, the Local VM status and the screen channel's
// status of a desktop that does not exist yet; then shuts it down.
func TestWiring(t *testing.T) {
	b, err := New(Config{DataDir: t.TempDir(), Engine: "none", AllowedHosts: []string{"127.0.0.1"},
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
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
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- b.Serve(ctx, ln) }()
	sess, err := b.LocalSession()
	if err != nil {
		t.Fatal(err)
	}
	base := "http://" + ln.Addr().String()
	call := func(method, path, body string) (int, string) {
		t.Helper()
		req, _ := http.NewRequest(method, base+path, strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+sess.Token)
		if body != "" {
			req.Header.Set("Content-Type", "application/json")
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		raw, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(raw)
	}
	code, body := call("POST", "/api/app/agents", `{"name":"Ada"}`)
	if code != 201 {
		t.Fatalf("create agent: %d %s", code, body)
	}
	id := body[strings.Index(body, `"id":"`)+6:]
	id = id[:strings.IndexByte(id, '"')]
	if code, body := call("POST", "/api/app/chat", `{"sessionId":"s1","userId":"`+sess.AccountID+`","agentId":"`+id+`","input":"/help"}`); code != 200 || !strings.Contains(body, "AGENT_END") || !strings.Contains(body, "/screenshot") {
		t.Fatalf("operator chat: %d %s", code, body)
	}
	// A desktop tool without an engine fails as a tool result, not as a crash.
	if code, body := call("POST", "/api/app/chat", `{"sessionId":"s1","userId":"`+sess.AccountID+`","agentId":"`+id+`","input":"/shell ls"}`); code != 200 || !strings.Contains(body, `"state":"error"`) {
		t.Fatalf("tool without engine: %d %s", code, body)
	}
	if code, body := call("GET", "/api/app/admin/local-vm", ""); code != 200 || !strings.Contains(body, "turned off") {
		t.Fatalf("local vm status: %d %s", code, body)
	}
	if code, body := call("GET", "/api/app/agents/"+id+"/computer", ""); code != 200 {
		t.Fatalf("computer status: %d %s", code, body)
	}
	if code, body := call("GET", "/api/app/chat/sessions/s1/history", ""); code != 200 || !strings.Contains(body, `"computer_shell"`) {
		t.Fatalf("history: %d %s", code, body)
	}
	cancel()
	select {
	case <-served:
	case <-time.After(10 * time.Second):
		t.Fatal("server did not stop")
	}
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
}

// Host tools need an administrator's grant on the node (issue 15, item 2): an agent whose
// record says "Allow host environment" (ticked before grants existed) gets no host tools
// until the grant, and none again after it is withdrawn (the toolbox offers and runs host
// tools only when the turn's plan offers them).
func TestHostToolsNeedTheGrant(t *testing.T) {
	b, err := New(Config{DataDir: t.TempDir(), Engine: "none", AllowedHosts: []string{"127.0.0.1"},
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	root, err := b.Auth.Admin()
	if err != nil {
		t.Fatal(err)
	}
	admin, err := b.Auth.Issue(root)
	if err != nil {
		t.Fatal(err)
	}
	member, err := b.Auth.CreateAccount(admin, auth.NewAccount{Username: "mia", Password: "Long-pass-of-the-member-1"})
	if err != nil {
		t.Fatal(err)
	}
	ag, err := b.Profiles.Create(member.ID, "M")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.Store.UpdateAgent(ag.ID, func(a *store.Agent) error { a.AllowHostEnvironment = true; return nil }); err != nil {
		t.Fatal(err)
	}
	turn := agent.TurnInfo{UserID: member.ID, AgentID: ag.ID, SessionID: "s"}
	hostTools := func() bool {
		env, err := b.computers.Environment(context.Background(), turn)
		if err != nil {
			t.Fatal(err)
		}
		return env.Plan.Host && env.Plan.Offers("host_shell")
	}
	if hostTools() {
		t.Fatal("host tools without a grant")
	}
	if err := b.HostAccess.Grant(root.ID, member.ID, hostaccess.LocalNode, hostaccess.Access{HostTools: true}); err != nil {
		t.Fatal(err)
	}
	if !hostTools() {
		t.Fatal("no host tools with the grant")
	}
	// The host computer: host tools with the grant, host desktop tools only with their own grant.
	if _, err := b.Store.UpdateAgent(ag.ID, func(a *store.Agent) error { a.Computer = "host"; return nil }); err != nil {
		t.Fatal(err)
	}
	env, err := b.computers.Environment(context.Background(), turn)
	if err != nil || !env.Plan.Host || env.Plan.HostDesktop || !strings.Contains(env.Plan.HostDesktopProblem, "not granted") {
		t.Fatalf("host computer with host tools only: %+v %v", env.Plan, err)
	}
	if err := b.HostAccess.Grant(root.ID, member.ID, hostaccess.LocalNode, hostaccess.Access{}); err != nil {
		t.Fatal(err)
	}
	if hostTools() {
		t.Fatal("host tools after the grant was withdrawn")
	}
	// An administrator holds host access by role.
	adminAgent, err := b.Profiles.SelectComputer(root.ID, must(b.Profiles.Create(root.ID, "A")).ID, profile.Selection{Computer: "vm", AllowHostEnvironment: true})
	if err != nil || !adminAgent.AllowHostEnvironment {
		t.Fatalf("admin ticks the box: %+v %v", adminAgent, err)
	}
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}
