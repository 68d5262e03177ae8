package backend

import (
	"context"
	"encoding/json"
	"log/slog"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"cubicle/backend/agent"
	"cubicle/backend/auth"
	"cubicle/backend/engine/podman"
	"cubicle/backend/mcpclient"
	"cubicle/backend/mcpserver"
	"cubicle/backend/models"
	"cubicle/backend/nodes"
	"cubicle/backend/store"
	"cubicle/backend/vm"
	"cubicle/internal/runnertest"
	"cubicle/internal/testenv"
	"cubicle/runner"
)

// TestMCPBothWaysOnARunner: MCP both ways for an agent whose desktop is on a runner, not on
// the server's own node. A real server without an engine of its own and an in-process runner
// on the real Podman engine (as `cubicle runner --engine podman` runs, connected over HTTP and
// its yamux link); the standard image is prepared on the runner and the agent placed there.
// Client direction: an administrator's stdio MCP server (testdata/stdio-server.sh), called
// through a chat turn with the scripted model, runs inside the runner's desktop as its user
// (its pid is that desktop's, seen by computer_shell). Server direction: an API token and the
// official Go SDK client over /mcp: list_computers names the runner as the agent's node, and
// computer_screenshot and computer_shell run on the runner's desktop (the MCP server's process
// is there). The desktop's container carries the runner's node label.
func TestMCPBothWaysOnARunner(t *testing.T) {
	testenv.RootPodman(t)
	if testing.Short() {
		t.Skip("real desktop test; run without -short")
	}
	began := time.Now()
	dir := t.TempDir()
	log := testenv.Logger(t, slog.LevelWarn)
	b, err := New(Config{DataDir: filepath.Join(dir, "server"), Engine: "none", LocalNode: LocalNodeDirect,
		AllowedHosts: []string{"127.0.0.1"}, Logger: log.With("side", "server")})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	t.Cleanup(func() { b.Close() })
	if err := b.Start(ctx); err != nil {
		t.Fatal(err)
	}
	if err := b.WaitEngine(ctx); err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(b.API.Handler())
	t.Cleanup(srv.Close)

	created, err := b.Nodes.Create("mcp runner", false, srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	node := created.ID
	t.Cleanup(func() { removeLabelled(t, map[string]string{vm.LabelNode: node}) }) // a fresh random id: only this test's objects
	runnertest.Start(t, runner.Config{Server: srv.URL, Token: created.Token, DataDir: filepath.Join(dir, "runner"), Engine: "podman",
		ConnectEngine: ConnectRunnerEngine, NoHostTools: true, MaxBackoff: time.Second, Logger: log.With("side", "runner")})
	waitFor(t, "the runner to connect", time.Minute, func() bool { return b.Nodes.Connected(node) })
	vms, err := b.fleet.Node(node)
	if err != nil {
		t.Fatal(err)
	}
	if _, remote := vms.(*nodes.Remote); !remote {
		t.Fatalf("node %s is reached through %T, want the runner's link", node, vms)
	}
	pctx, pcancel := context.WithTimeout(ctx, 30*time.Minute)
	defer pcancel()
	if _, err := vms.Prepare(pctx, "standard"); err != nil {
		t.Fatalf("prepare on the runner: %v", err)
	}
	t.Logf("runner connected, image prepared: %v", time.Since(began).Round(time.Millisecond))

	adminAcc, err := b.Auth.Admin()
	if err != nil {
		t.Fatal(err)
	}
	admin := auth.Principal{AccountID: adminAcc.ID, Username: adminAcc.Username, Role: adminAcc.Role}
	ada, err := b.Profiles.Create(admin.AccountID, "Ada")
	if err != nil {
		t.Fatal(err)
	}
	if got, err := b.fleet.Place(ctx, admin.AccountID, ada.ID, node); err != nil || got != node {
		t.Fatalf("place the agent on the runner: %q, %v", got, err)
	}

	// Client direction: the stdio server runs in the runner's desktop (the first use starts it).
	model := &scriptedModel{}
	msrv := httptest.NewServer(model)
	defer msrv.Close()
	allow := true
	if _, err := b.Models.Set(models.Update{BaseURL: msrv.URL + "/v1", Model: "scripted", AllowPrivate: &allow}); err != nil {
		t.Fatal(err)
	}
	script, err := os.ReadFile("mcpclient/testdata/stdio-server.sh")
	if err != nil {
		t.Fatal(err)
	}
	name, tr, cmd, sec := "sh", mcpclient.TransportStdio, "/bin/sh", "on-the-runner-secret"
	s, err := b.MCPClient.Create(admin, mcpclient.Input{Name: &name, Transport: &tr, Command: &cmd, Args: []string{"-c", string(script)},
		Env: map[string]*string{"MCP_TEST_SECRET": &sec}, Policy: &store.MCPPolicy{Default: "allow"}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.MCPClient.SetAgentServers(admin, ada.ID, []string{s.ID}); err != nil {
		t.Fatal(err)
	}
	model.push(
		callStep("w1", "mcp_sh_whoami", map[string]any{}),
		callStep("w2", "computer_shell", map[string]any{"command": "cat /tmp/cubicle-mcp/*.pid"}),
		textStep("done"),
	)
	res := results(turn(t, b, admin.AccountID, ada.ID, "s1", "use the stdio server"))
	if got := toolsOffered(t, model, 0); !hasAll(got, "mcp_sh_whoami", "mcp_sh_die") {
		t.Fatalf("offered %v", got)
	}
	if res["w1"][0] != agent.StateSuccess || !strings.Contains(res["w1"][1], "user=cua ") || !strings.Contains(res["w1"][1], "secret="+sec) {
		t.Fatalf("whoami in the runner's desktop: %+v", res["w1"])
	}
	pid := strings.Fields(strings.SplitN(res["w1"][1], "pid=", 2)[1])[0]
	if res["w2"][0] != agent.StateSuccess || !strings.Contains(res["w2"][1], pid) {
		t.Fatalf("the server's process in the desktop (pid %s): %+v", pid, res["w2"])
	}
	t.Logf("client direction done: %v", time.Since(began).Round(time.Millisecond))

	// The desktop is the runner's: its view and its container say so.
	m, err := b.fleet.AgentNode(ada.ID)
	if err != nil || m.NodeID() != node {
		t.Fatalf("the agent's calls go to %v (%v), want the runner %s", m, err, node)
	}
	av, err := m.Agent(ctx, admin.AccountID, ada.ID)
	if err != nil || av.Desktop.NodeID != node || av.Desktop.State != vm.StateRunning {
		t.Fatalf("the agent's desktop: %+v, %v; want running on %s", av.Desktop, err, node)
	}
	eng, err := podman.Connect(ctx, "unix:///run/podman/podman.sock", podman.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer eng.Close()
	cs, err := eng.ListContainers(ctx, map[string]string{vm.LabelNode: node})
	if err != nil || len(cs) != 1 {
		t.Fatalf("containers labelled with the runner's node: %+v, %v; want the desktop alone", cs, err)
	}

	// Server direction: /mcp with an API token reaches the same desktop on the runner.
	ap, err := b.Auth.Issue(adminAcc)
	if err != nil {
		t.Fatal(err)
	}
	_, secret := makeToken(t, srv, ap.Token, map[string]any{"name": "laptop", "agents": []string{ada.ID}, "expiresInDays": 1})
	cctx, ccancel := context.WithTimeout(ctx, 5*time.Minute)
	defer ccancel()
	sess, err := mcpConnect(t, cctx, srv, secret)
	if err != nil {
		t.Fatal(err)
	}
	defer sess.Close()
	call := func(name string, args map[string]any) *mcp.CallToolResult {
		t.Helper()
		r, err := sess.CallTool(cctx, &mcp.CallToolParams{Name: name, Arguments: args})
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if r.IsError {
			t.Fatalf("%s: %s", name, callText(r))
		}
		return r
	}
	var list struct{ Computers []mcpserver.Computer }
	if err := json.Unmarshal([]byte(callText(call("list_computers", nil))), &list); err != nil {
		t.Fatal(err)
	}
	if len(list.Computers) != 1 || list.Computers[0].AgentID != ada.ID || list.Computers[0].Node != node || list.Computers[0].State != vm.StateRunning {
		t.Fatalf("list_computers: %+v; want Ada running on the runner %s", list.Computers, node)
	}
	if shot := callImage(call("computer_screenshot", map[string]any{"agent": "Ada"})); len(shot) < 1000 {
		t.Fatalf("screenshot over /mcp: %d bytes", len(shot))
	}
	out := callText(call("computer_shell", map[string]any{"agent": ada.ID, "command": "id -un; cat /tmp/cubicle-mcp/*.pid; ps -o pid= -p " + pid}))
	if !strings.Contains(out, "cua") || strings.Count(out, pid) < 2 {
		t.Fatalf("computer_shell over /mcp is not in the desktop that runs the stdio server (pid %s): %s", pid, out)
	}
	t.Logf("server direction done: %v", time.Since(began).Round(time.Millisecond))
}
