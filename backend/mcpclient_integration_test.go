package backend

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"image"
	"image/color"
	"image/png"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"cubicle/backend/agent"
	"cubicle/backend/auth"
	"cubicle/backend/mcpclient"
	"cubicle/backend/models"
	"cubicle/backend/store"
	"cubicle/internal/testenv"
)

// mcpTestServer is a real MCP server (the official Go SDK, streamable HTTP) with tools that
// echo, return an image, take a path or a command, and hang; it wants a bearer token.
type mcpTestServer struct {
	srv    *mcp.Server
	http   *httptest.Server
	png    []byte
	calls  chan string // tool names as they are called
	unhang chan struct{}
}

func newMCPTestServer(t *testing.T, token string) *mcpTestServer {
	t.Helper()
	m := &mcpTestServer{calls: make(chan string, 64), unhang: make(chan struct{})}
	img := image.NewRGBA(image.Rect(0, 0, 24, 16))
	for i := range img.Pix {
		img.Pix[i] = byte(i * 7)
	}
	img.Set(3, 3, color.RGBA{255, 0, 0, 255})
	var buf bytes.Buffer
	png.Encode(&buf, img)
	m.png = buf.Bytes()
	m.srv = mcp.NewServer(&mcp.Implementation{Name: "test-tools", Version: "1"}, nil)
	type textIn struct {
		Text string `json:"text"`
	}
	type pathIn struct {
		Path string `json:"path"`
	}
	type cmdIn struct {
		Command string `json:"command"`
	}
	mcp.AddTool(m.srv, &mcp.Tool{Name: "echo", Description: "Echo the text."}, func(ctx context.Context, _ *mcp.CallToolRequest, in textIn) (*mcp.CallToolResult, any, error) {
		m.calls <- "echo"
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "echo: " + in.Text}}}, nil, nil
	})
	mcp.AddTool(m.srv, &mcp.Tool{Name: "shot", Description: "A picture."}, func(ctx context.Context, _ *mcp.CallToolRequest, _ struct{}) (*mcp.CallToolResult, any, error) {
		m.calls <- "shot"
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "a picture"}, &mcp.ImageContent{MIMEType: "image/png", Data: m.png},
			&mcp.EmbeddedResource{Resource: &mcp.ResourceContents{URI: "file:///notes.txt", MIMEType: "text/plain", Text: "resource text"}}}}, nil, nil
	})
	mcp.AddTool(m.srv, &mcp.Tool{Name: "rm", Description: "Remove a file."}, func(ctx context.Context, _ *mcp.CallToolRequest, in pathIn) (*mcp.CallToolResult, any, error) {
		m.calls <- "rm"
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "removed " + in.Path}}}, nil, nil
	})
	mcp.AddTool(m.srv, &mcp.Tool{Name: "run", Description: "Run a command."}, func(ctx context.Context, _ *mcp.CallToolRequest, in cmdIn) (*mcp.CallToolResult, any, error) {
		m.calls <- "run"
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "ran " + in.Command}}}, nil, nil
	})
	mcp.AddTool(m.srv, &mcp.Tool{Name: "hang", Description: "Never answers."}, func(ctx context.Context, _ *mcp.CallToolRequest, _ struct{}) (*mcp.CallToolResult, any, error) {
		m.calls <- "hang"
		select { // ignores cancellation: only the client's deadline ends the wait
		case <-m.unhang:
		}
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "late"}}}, nil, nil
	})
	h := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return m.srv }, nil)
	m.http = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer "+token {
			http.Error(w, "bad token", http.StatusUnauthorized)
			return
		}
		h.ServeHTTP(w, r)
	}))
	t.Cleanup(func() {
		close(m.unhang)
		m.http.CloseClientConnections()
		m.http.Close()
	})
	return m
}

// toolsOffered returns the MCP tool names of the model's request i.
func toolsOffered(t *testing.T, m *scriptedModel, i int) []string {
	t.Helper()
	m.mu.Lock()
	defer m.mu.Unlock()
	if i >= len(m.seen) {
		t.Fatalf("the model got %d requests, want more than %d", len(m.seen), i)
	}
	var req struct {
		Tools []struct {
			Function struct {
				Name string `json:"name"`
			} `json:"function"`
		} `json:"tools"`
	}
	json.Unmarshal(m.seen[i], &req)
	var out []string
	for _, tl := range req.Tools {
		if strings.HasPrefix(tl.Function.Name, "mcp_") {
			out = append(out, tl.Function.Name)
		}
	}
	return out
}

func (m *scriptedModel) requests() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.seen)
}

func (m *scriptedModel) request(i int) string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return string(m.seen[i])
}

func hasAll(list []string, want ...string) bool {
	for _, w := range want {
		found := false
		for _, x := range list {
			found = found || x == w
		}
		if !found {
			return false
		}
	}
	return true
}

// TestMCPClientHTTP drives the MCP client through real chat turns of the whole backend (no
// container engine; the agents have no computer): an HTTP MCP server written with the Go SDK
// is added over the API (validation, sealed headers), enabled per agent, reached under the
// model endpoints' egress rule, and its tools are listed, called and refused by the access
// policy for users and agents; an image reaches the model; ask goes through the confirmation
// and times out to deny; a hanging server is cut off at its deadline; tools/list_changed is
// followed. Only the model is scripted.
func TestMCPClientHTTP(t *testing.T) {
	t.Setenv("CUBICLE_MCP_CONFIRM_TIMEOUT", "1s")
	log := testenv.Logger(t, slog.LevelWarn)
	b, err := New(Config{DataDir: t.TempDir(), Engine: "none", AllowedHosts: []string{"127.0.0.1"}, Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	t.Cleanup(func() { b.Close() })
	if err := b.Start(ctx); err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go b.Serve(ctx, ln)
	base := "http://" + ln.Addr().String()

	adminAcc, err := b.Auth.Admin()
	if err != nil {
		t.Fatal(err)
	}
	admin := auth.Principal{AccountID: adminAcc.ID, Username: adminAcc.Username, Role: adminAcc.Role}
	member, err := b.Auth.CreateAccount(admin, auth.NewAccount{Username: "bea", Password: "Quite-long-secret-pass-91"})
	if err != nil {
		t.Fatal(err)
	}
	adminSess, err := b.LocalSession()
	if err != nil {
		t.Fatal(err)
	}
	memberSess, err := b.Auth.Issue(member)
	if err != nil {
		t.Fatal(err)
	}
	call := func(token, method, path, body string) (int, string) {
		t.Helper()
		req, _ := http.NewRequest(method, base+path, strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+token)
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		raw, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(raw)
	}
	newAgent := func(accountID, name string) store.Agent {
		a, err := b.Profiles.Create(accountID, name)
		if err != nil {
			t.Fatal(err)
		}
		if a, err = b.Store.UpdateAgent(a.ID, func(a *store.Agent) error { a.Computer = "none"; return nil }); err != nil {
			t.Fatal(err)
		}
		return a
	}
	a1, a2, m1 := newAgent(admin.AccountID, "Ada"), newAgent(admin.AccountID, "Alan"), newAgent(member.ID, "Bo")

	model := &scriptedModel{}
	msrv := httptest.NewServer(model)
	defer msrv.Close()
	allow := true
	if _, err := b.Models.Set(models.Update{BaseURL: msrv.URL + "/v1", Model: "scripted", AllowPrivate: &allow}); err != nil {
		t.Fatal(err)
	}
	const secret = "s3cret-token-0123456789"
	ms := newMCPTestServer(t, secret)

	// The admin API: bad input is a 400 that says what to fix, and changes nothing.
	for _, bad := range []struct{ body, want string }{
		{`{"name":"Bad_Name","transport":"http","url":"http://x/mcp"}`, "lower-case"},
		{`{"name":"t","transport":"carrier-pigeon"}`, "unknown transport"},
		{`{"name":"t","transport":"http","url":"ftp://x"}`, "http(s) URL"},
		{`{"name":"t","transport":"stdio"}`, "needs the command"},
		{`{"name":"t","transport":"http","url":"http://x/mcp","headers":{"X-A":"a\nb"}}`, "line break"},
		{`{"name":"t","transport":"http","url":"http://x/mcp","policy":{"default":"maybe"}}`, "allow, ask or deny"},
		{`{"name":"t","transport":"http","url":"http://x/mcp","policy":{"rules":[{"subject":"user:nobody","effect":"allow"}]}}`, `no user \"nobody\"`},
		{`{"name":"t","transport":"http","url":"http://x/mcp","policy":{"rules":[{"subject":"team:x","effect":"allow"}]}}`, "user:NAME, agent:ID or *"},
	} {
		if code, body := call(adminSess.Token, "POST", "/api/app/admin/mcp-servers", bad.body); code != 400 || !strings.Contains(body, bad.want) {
			t.Fatalf("POST %s: %d %s, want 400 saying %q", bad.body, code, body, bad.want)
		}
	}
	if code, body := call(memberSess.Token, "POST", "/api/app/admin/mcp-servers", `{"name":"t","transport":"http","url":"http://x/mcp"}`); code != 403 {
		t.Fatalf("a member adds a server: %d %s", code, body)
	}
	if c, _ := b.Store.MCPConfig(); len(c.Servers) != 0 {
		t.Fatalf("bad input saved %d servers", len(c.Servers))
	}
	body, _ := json.Marshal(map[string]any{"name": "t", "transport": "http", "url": ms.http.URL, "timeoutSeconds": 2, "allowPrivate": true,
		"headers": map[string]string{"Authorization": "Bearer " + secret}})
	code, out := call(adminSess.Token, "POST", "/api/app/admin/mcp-servers", string(body))
	if code != 201 {
		t.Fatalf("POST server: %d %s", code, out)
	}
	var srv struct {
		ID      string            `json:"id"`
		Headers map[string]string `json:"headers"`
		Policy  store.MCPPolicy   `json:"policy"`
	}
	json.Unmarshal([]byte(out), &srv)
	if strings.Contains(out, secret) || srv.Headers["Authorization"] != "••••6789" || srv.Policy.Default != "deny" {
		t.Fatalf("the answer shows the secret, or a new server is not denied by default: %s", out)
	}
	if raw, _ := json.Marshal(must(b.Store.MCPConfig())); bytes.Contains(raw, []byte(secret)) {
		t.Fatal("the header's secret is stored in clear")
	}
	if code, out := call(adminSess.Token, "GET", "/api/app/admin/mcp-servers", ""); code != 200 || strings.Contains(out, secret) || !strings.Contains(out, `"name":"t"`) {
		t.Fatalf("GET servers: %d %s", code, out)
	}
	// Per agent: the owner or an administrator, known servers only.
	if code, out := call(memberSess.Token, "PUT", "/api/app/agents/"+a1.ID+"/mcp-servers", `{"ids":["`+srv.ID+`"]}`); code != 404 {
		t.Fatalf("a member enables a server for the admin's agent: %d %s", code, out)
	}
	if code, out := call(adminSess.Token, "PUT", "/api/app/agents/"+a1.ID+"/mcp-servers", `{"ids":["nope"]}`); code != 400 || !strings.Contains(out, "no MCP server") {
		t.Fatalf("unknown server id: %d %s", code, out)
	}
	for _, a := range []store.Agent{a1, a2} {
		if code, out := call(adminSess.Token, "PUT", "/api/app/agents/"+a.ID+"/mcp-servers", `{"ids":["`+srv.ID+`"]}`); code != 200 || !strings.Contains(out, `"enabled":true`) {
			t.Fatalf("enable for %s: %d %s", a.Name, code, out)
		}
	}
	if code, out := call(memberSess.Token, "PUT", "/api/app/agents/"+m1.ID+"/mcp-servers", `{"ids":["`+srv.ID+`"]}`); code != 200 {
		t.Fatalf("the member enables the server for her own agent: %d %s", code, out)
	}

	// Closed by default: nothing is offered, a call is refused by the default effect.
	model.push(callStep("x1", "mcp_t_echo", map[string]any{"text": "hi"}), textStep("ok"))
	res := results(turn(t, b, admin.AccountID, a1.ID, "s0", "try"))
	if got := toolsOffered(t, model, 0); len(got) != 0 {
		t.Fatalf("a server that is not opened offers %v", got)
	}
	if res["x1"][0] != agent.StateDenied || !strings.Contains(res["x1"][1], "default effect (deny)") {
		t.Fatalf("a call to a closed server: %+v", res["x1"])
	}

	// The policy: the admin (user) may use the server, agent Alan may not run commands, rm asks
	// everyone, and bea may only echo.
	pol := map[string]any{"policy": map[string]any{"default": "deny", "rules": []map[string]string{
		{"subject": "user:" + admin.Username, "effect": "allow"},
		{"tool": "run", "subject": "agent:" + a2.ID, "effect": "deny"},
		{"tool": "rm", "subject": "*", "effect": "ask"},
		{"tool": "echo", "subject": "user:bea", "effect": "allow"},
	}}}
	body, _ = json.Marshal(pol)
	if code, out := call(adminSess.Token, "PUT", "/api/app/admin/mcp-servers/"+srv.ID, string(body)); code != 200 {
		t.Fatalf("PUT policy: %d %s", code, out)
	}

	// Ada (the admin's agent): listed, called, an image reaches the model, the guard still
	// judges a command's paths, rm asks.
	n := model.requests()
	model.push(
		callStep("c1", "mcp_t_echo", map[string]any{"text": "hello"}),
		callStep("c2", "mcp_t_shot", map[string]any{}),
		callStep("c3", "mcp_t_run", map[string]any{"command": "cat /run/cubicle/driver.sock"}),
		callStep("c4", "mcp_t_rm", map[string]any{"path": "notes.txt"}),
	)
	evs := turn(t, b, admin.AccountID, a1.ID, "s1", "use the tools")
	res = results(evs)
	if got := toolsOffered(t, model, n); !hasAll(got, "mcp_t_echo", "mcp_t_shot", "mcp_t_rm", "mcp_t_run", "mcp_t_hang") {
		t.Fatalf("offered %v", got)
	}
	if res["c1"][0] != agent.StateSuccess || res["c1"][1] != "echo: hello" {
		t.Fatalf("echo: %+v", res["c1"])
	}
	if res["c2"][0] != agent.StateSuccess || !strings.Contains(res["c2"][1], "resource text") {
		t.Fatalf("shot: %+v", res["c2"])
	}
	if !strings.Contains(model.request(n+2), base64.StdEncoding.EncodeToString(ms.png)) {
		t.Fatal("the image of the MCP result did not reach the model")
	}
	if res["c3"][0] != agent.StateDenied || !strings.Contains(res["c3"][1], "/run/cubicle") {
		t.Fatalf("a command on a protected path, allowed by the MCP policy: %+v", res["c3"])
	}
	var asked []agent.ToolCall
	why := ""
	for _, e := range evs {
		if e.Type == agent.RequireUserConfirm {
			asked, why = e.ToolCalls, e.Reason
		}
	}
	if len(asked) != 1 || asked[0].Name != "mcp_t_rm" {
		t.Fatalf("rm was not asked about: %+v", asked)
	}
	if !strings.Contains(why, `mcp_t_rm: MCP server "t": the access policy asks a person before tool rm runs`) {
		t.Errorf("the confirmation's reason %q does not name the server's policy (the card shows it)", why)
	}
	model.push(textStep("removed"))
	res = results(turn(t, b, admin.AccountID, a1.ID, "s1", "yes"))
	if res["c4"][0] != agent.StateSuccess || res["c4"][1] != "removed notes.txt" {
		t.Fatalf("rm after yes: %+v", res["c4"])
	}
	for _, want := range []string{"echo", "shot", "rm"} {
		select {
		case got := <-ms.calls:
			if got != want {
				t.Fatalf("the server ran %s, want %s", got, want)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("the server never ran %s", want)
		}
	}

	// An answer after the deadline is a deny.
	model.push(callStep("c5", "mcp_t_rm", map[string]any{"path": "late.txt"}))
	turn(t, b, admin.AccountID, a1.ID, "s2", "rm late")
	time.Sleep(1500 * time.Millisecond)
	model.push(textStep("ok"))
	res = results(turn(t, b, admin.AccountID, a1.ID, "s2", "yes"))
	if res["c5"][0] != agent.StateDenied || !strings.Contains(res["c5"][1], "nobody confirmed") {
		t.Fatalf("a late yes: %+v", res["c5"])
	}

	// Alan (agent rule): run is neither offered nor run.
	n = model.requests()
	model.push(callStep("d1", "mcp_t_run", map[string]any{"command": "ls"}), textStep("ok"))
	res = results(turn(t, b, admin.AccountID, a2.ID, "s3", "run"))
	if got := toolsOffered(t, model, n); hasAll(got, "mcp_t_run") || !hasAll(got, "mcp_t_echo") {
		t.Fatalf("Alan is offered %v", got)
	}
	if res["d1"][0] != agent.StateDenied || !strings.Contains(res["d1"][1], "agent:"+a2.ID) {
		t.Fatalf("Alan's run: %+v", res["d1"])
	}

	// bea (a user rule on one tool; the rule for * on rm beats the server's default too):
	// echo, and rm after asking; nothing else.
	n = model.requests()
	model.push(callStep("e1", "mcp_t_echo", map[string]any{"text": "bea"}), callStep("e2", "mcp_t_shot", map[string]any{}), textStep("ok"))
	res = results(turn(t, b, member.ID, m1.ID, "s4", "try"))
	if got := toolsOffered(t, model, n); len(got) != 2 || !hasAll(got, "mcp_t_echo", "mcp_t_rm") {
		t.Fatalf("bea is offered %v", got)
	}
	if res["e1"][0] != agent.StateSuccess || res["e2"][0] != agent.StateDenied {
		t.Fatalf("bea's calls: %+v", res)
	}

	// A server that hangs is cut off at its deadline (2 s) with a clear tool error.
	model.push(callStep("h1", "mcp_t_hang", map[string]any{}), textStep("ok"))
	began := time.Now()
	res = results(turn(t, b, admin.AccountID, a1.ID, "s5", "hang"))
	if res["h1"][0] != agent.StateError || !strings.Contains(res["h1"][1], "did not answer hang within 2s") {
		t.Fatalf("hang: %+v", res["h1"])
	}
	t.Logf("the hanging call ended after %s", time.Since(began).Round(time.Millisecond))

	// tools/list_changed: a tool the server adds is offered at the next turn.
	mcp.AddTool(ms.srv, &mcp.Tool{Name: "late", Description: "Added later."}, func(ctx context.Context, _ *mcp.CallToolRequest, _ struct{}) (*mcp.CallToolResult, any, error) {
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "late tool"}}}, nil, nil
	})
	deadline := time.Now().Add(10 * time.Second)
	for i := 0; ; i++ {
		n = model.requests()
		model.push(textStep("ok"))
		turn(t, b, admin.AccountID, a1.ID, "s6", "again")
		if hasAll(toolsOffered(t, model, n), "mcp_t_late") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the added tool was never offered: %v", toolsOffered(t, model, n))
		}
		time.Sleep(100 * time.Millisecond)
	}

	// A server the administrator turned off offers nothing; a deleted one is gone from its agents.
	if code, out := call(adminSess.Token, "PUT", "/api/app/admin/mcp-servers/"+srv.ID, `{"disabled":true}`); code != 200 {
		t.Fatalf("disable: %d %s", code, out)
	}
	n = model.requests()
	model.push(textStep("ok"))
	turn(t, b, admin.AccountID, a1.ID, "s7", "again")
	if got := toolsOffered(t, model, n); len(got) != 0 {
		t.Fatalf("a disabled server offers %v", got)
	}
	if code, out := call(adminSess.Token, "DELETE", "/api/app/admin/mcp-servers/"+srv.ID, ""); code != 204 {
		t.Fatalf("delete: %d %s", code, out)
	}
	if c, _ := b.Store.MCPConfig(); len(c.Servers) != 0 || len(c.Agents) != 0 {
		t.Fatalf("after delete: %+v", c)
	}
}

// TestMCPClientEgress: an HTTP MCP server on a loopback address is refused unless the
// administrator allowed private addresses for it (the rule of model endpoints); the older SSE
// transport works; a stdio server starts no desktop for an agent that has none.
func TestMCPClientEgress(t *testing.T) {
	log := testenv.Logger(t, slog.LevelWarn)
	b, err := New(Config{DataDir: t.TempDir(), Engine: "none", AllowedHosts: []string{"127.0.0.1"}, Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	adminAcc, _ := b.Auth.Admin()
	admin := auth.Principal{AccountID: adminAcc.ID, Username: adminAcc.Username, Role: adminAcc.Role}
	ms := newMCPTestServer(t, "tok")
	a, _ := b.Profiles.Create(admin.AccountID, "Ada")
	b.Store.UpdateAgent(a.ID, func(a *store.Agent) error { a.Computer = "none"; return nil })
	tok := "Bearer tok"
	name, tr, u := "t", "http", ms.http.URL
	s, err := b.MCPClient.Create(admin, mcpclient.Input{Name: &name, Transport: &tr, URL: &u,
		Headers: map[string]*string{"Authorization": &tok}, Policy: &store.MCPPolicy{Default: "allow"}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.MCPClient.SetAgentServers(admin, a.ID, []string{s.ID}); err != nil {
		t.Fatal(err)
	}
	ti := agent.TurnInfo{SessionID: "s", UserID: admin.AccountID, AgentID: a.ID, TurnID: "t1"}
	if got := b.MCPClient.Tools(context.Background(), ti); len(got) != 0 {
		t.Fatalf("a loopback server without allowPrivate offers %d tools", len(got))
	}
	out := agent.NewToolOutput("c1", func(agent.Event) {})
	st := b.MCPClient.Call(context.Background(), ti, agent.ToolCall{ID: "c1", Name: "mcp_t_echo", Input: map[string]any{"text": "x"}}, out)
	if st != agent.StateError || !strings.Contains(out.Blocks()[0].Text, "non-public address") {
		t.Fatalf("call to a loopback server: %s %+v", st, out.Blocks())
	}
	yes := true
	if _, err := b.MCPClient.Update(admin, s.ID, mcpclient.Input{AllowPrivate: &yes}); err != nil {
		t.Fatal(err)
	}
	if got := b.MCPClient.Tools(context.Background(), ti); len(got) != 5 {
		t.Fatalf("allowed: %d tools", len(got))
	}

	// The older HTTP+SSE transport, with the same rule.
	sse := httptest.NewServer(mcp.NewSSEHandler(func(*http.Request) *mcp.Server { return ms.srv }, nil))
	t.Cleanup(func() { sse.CloseClientConnections(); sse.Close() })
	name, tr, u = "old", "sse", sse.URL
	s2, err := b.MCPClient.Create(admin, mcpclient.Input{Name: &name, Transport: &tr, URL: &u, AllowPrivate: &yes,
		Policy: &store.MCPPolicy{Default: "allow"}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.MCPClient.SetAgentServers(admin, a.ID, []string{s.ID, s2.ID}); err != nil {
		t.Fatal(err)
	}
	if got := b.MCPClient.Tools(context.Background(), ti); len(got) != 10 {
		t.Fatalf("with the SSE server: %d tools", len(got))
	}
	out = agent.NewToolOutput("c2", func(agent.Event) {})
	st = b.MCPClient.Call(context.Background(), ti, agent.ToolCall{ID: "c2", Name: "mcp_old_echo", Input: map[string]any{"text": "over sse"}}, out)
	if st != agent.StateSuccess || out.Blocks()[0].Text != "echo: over sse" {
		t.Fatalf("call over SSE: %s %+v", st, out.Blocks())
	}

	// A stdio server is never a reason to start a desktop for an agent that has none.
	name, tr, cmd := "local", "stdio", "/bin/sh"
	s3, err := b.MCPClient.Create(admin, mcpclient.Input{Name: &name, Transport: &tr, Command: &cmd, Policy: &store.MCPPolicy{Default: "allow"}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.MCPClient.SetAgentServers(admin, a.ID, []string{s.ID, s2.ID, s3.ID}); err != nil {
		t.Fatal(err)
	}
	if got := b.MCPClient.Tools(context.Background(), ti); len(got) != 10 {
		t.Fatalf("with a stdio server and no desktop: %d tools", len(got))
	}
	out = agent.NewToolOutput("c3", func(agent.Event) {})
	st = b.MCPClient.Call(context.Background(), ti, agent.ToolCall{ID: "c3", Name: "mcp_local_x", Input: map[string]any{}}, out)
	if st != agent.StateError || !strings.Contains(out.Blocks()[0].Text, "choose Local VM") {
		t.Fatalf("a stdio server for an agent without a desktop: %s %+v", st, out.Blocks())
	}
}

// TestMCPClientStdioOnRealDesktop runs a stdio MCP server inside an agent's real desktop (the
// standard image in Podman; the desktop is started by the first use): through a chat turn its
// tools are listed and called — it runs as the desktop's user — and a call that kills it is an
// error after which the next call starts it again.
func TestMCPClientStdioOnRealDesktop(t *testing.T) {
	b, _, _ := startOnRealDesktop(t, slog.LevelWarn)
	adminAcc, err := b.Auth.Admin()
	if err != nil {
		t.Fatal(err)
	}
	admin := auth.Principal{AccountID: adminAcc.ID, Username: adminAcc.Username, Role: adminAcc.Role}
	ada, err := b.Profiles.Create(admin.AccountID, "Ada")
	if err != nil {
		t.Fatal(err)
	}
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
	name, tr, cmd, sec := "sh", mcpclient.TransportStdio, "/bin/sh", "in-the-desktop-secret"
	srv, err := b.MCPClient.Create(admin, mcpclient.Input{Name: &name, Transport: &tr, Command: &cmd, Args: []string{"-c", string(script)},
		Env: map[string]*string{"MCP_TEST_SECRET": &sec}, Policy: &store.MCPPolicy{Default: "allow"}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.MCPClient.SetAgentServers(admin, ada.ID, []string{srv.ID}); err != nil {
		t.Fatal(err)
	}
	model.push(
		callStep("s1", "mcp_sh_whoami", map[string]any{}),
		callStep("s2", "mcp_sh_die", map[string]any{}),
		callStep("s3", "mcp_sh_whoami", map[string]any{}),
		callStep("s4", "computer_shell", map[string]any{"command": "cat /tmp/cubicle-mcp/*.pid"}),
		textStep("done"),
	)
	res := results(turn(t, b, admin.AccountID, ada.ID, "s1", "use the stdio server"))
	if got := toolsOffered(t, model, 0); !hasAll(got, "mcp_sh_whoami", "mcp_sh_die") {
		t.Fatalf("offered %v", got)
	}
	if res["s1"][0] != agent.StateSuccess || !strings.Contains(res["s1"][1], "user=cua ") || !strings.Contains(res["s1"][1], "secret="+sec) {
		t.Fatalf("whoami in the desktop: %+v", res["s1"])
	}
	if res["s2"][0] != agent.StateError || !strings.Contains(res["s2"][1], "started again") {
		t.Fatalf("die: %+v", res["s2"])
	}
	if res["s3"][0] != agent.StateSuccess || res["s3"][1] == res["s1"][1] {
		t.Fatalf("after the server died: %+v (before %+v)", res["s3"], res["s1"])
	}
	pid := strings.Fields(strings.SplitN(res["s3"][1], "pid=", 2)[1])[0]
	if res["s4"][0] != agent.StateSuccess || !strings.Contains(res["s4"][1], pid) {
		t.Fatalf("the server's process in the desktop (pid %s): %+v", pid, res["s4"])
	}
	// The next turn (another context) uses the same running server.
	model.push(callStep("s5", "mcp_sh_whoami", map[string]any{}), textStep("done"))
	before := res["s3"][1]
	res = results(turn(t, b, admin.AccountID, ada.ID, "s1", "again"))
	if res["s5"][0] != agent.StateSuccess || res["s5"][1] != before {
		t.Fatalf("the next turn: %+v, want the same server as %q", res["s5"], before)
	}
}
