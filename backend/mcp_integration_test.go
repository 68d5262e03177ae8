package backend

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"cubicle/backend/agent"
	"cubicle/backend/auth"
	"cubicle/backend/control"
	"cubicle/backend/events"
	"cubicle/backend/mcpclient"
	"cubicle/backend/mcpserver/calls"
	"cubicle/backend/store"
)

// bearerRT adds a bearer token to every request of the MCP client.
type bearerRT struct{ tok string }

func (b bearerRT) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+b.tok)
	return http.DefaultTransport.RoundTrip(r)
}

// apiJSON calls the HTTP API with a session token and decodes the answer into out.
func apiJSON(t *testing.T, srv *httptest.Server, session, method, path string, body, out any) int {
	t.Helper()
	var rd *bytes.Reader
	if body != nil {
		raw, _ := json.Marshal(body)
		rd = bytes.NewReader(raw)
	} else {
		rd = bytes.NewReader(nil)
	}
	req, _ := http.NewRequest(method, srv.URL+path, rd)
	req.Header.Set("Authorization", "Bearer "+session)
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	if out != nil {
		json.NewDecoder(res.Body).Decode(out)
	}
	return res.StatusCode
}

// makeToken makes an API token through the HTTP API and returns its id and secret.
func makeToken(t *testing.T, srv *httptest.Server, session string, body map[string]any) (string, string) {
	t.Helper()
	var out struct {
		Token  struct{ ID string } `json:"token"`
		Secret string              `json:"secret"`
	}
	if code := apiJSON(t, srv, session, "POST", "/api/app/account/tokens", body, &out); code != http.StatusCreated || out.Secret == "" {
		t.Fatalf("create token: %d %+v", code, out)
	}
	return out.Token.ID, out.Secret
}

func mcpConnect(t *testing.T, ctx context.Context, srv *httptest.Server, secret string) (*mcp.ClientSession, error) {
	c := mcp.NewClient(&mcp.Implementation{Name: "test", Version: "1"}, nil)
	return c.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: srv.URL + "/mcp", HTTPClient: &http.Client{Transport: bearerRT{secret}}}, nil)
}

func callText(r *mcp.CallToolResult) string { return mcpclient.ResultText(r) }

func callImage(r *mcp.CallToolResult) []byte {
	for _, c := range r.Content {
		if im, ok := c.(*mcp.ImageContent); ok {
			return im.Data
		}
	}
	return nil
}

// TestMCPServerOnRealDesktop drives an agent's real desktop through /mcp with the official Go
// SDK client: list, screenshot → a terminal → type → the typed command ran → screenshot
// changed → shell; the history names the token; a person's takeover refuses input; a call
// the guard asks about waits for the owner's answer (given through the chat API) or is
// denied at its deadline; a member's token never reaches the admin's agent; revoked and
// expired tokens get 401.
func TestMCPServerOnRealDesktop(t *testing.T) {
	t.Setenv("CUBICLE_MCP_CONFIRM_TIMEOUT", "20s")
	b, _, ctx := startOnRealDesktop(t, slog.LevelWarn)
	srv := httptest.NewServer(b.API.Handler())
	defer srv.Close()
	admin, err := b.Auth.Admin()
	if err != nil {
		t.Fatal(err)
	}
	ap, err := b.Auth.Issue(admin)
	if err != nil {
		t.Fatal(err)
	}
	ada, err := b.Profiles.Create(admin.ID, "Ada")
	if err != nil {
		t.Fatal(err)
	}
	other, err := b.Profiles.Create(admin.ID, "Other")
	if err != nil {
		t.Fatal(err)
	}
	tokID, secret := makeToken(t, srv, ap.Token, map[string]any{"name": "laptop", "agents": []string{ada.ID}, "expiresInDays": 30})

	cctx, cancel := context.WithTimeout(ctx, 10*time.Minute)
	defer cancel()
	cs, err := mcpConnect(t, cctx, srv, secret)
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	tools, err := cs.ListTools(cctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(tools.Tools) != 13 {
		t.Fatalf("tools: %d", len(tools.Tools))
	}
	call := func(name string, args map[string]any) *mcp.CallToolResult {
		t.Helper()
		r, err := cs.CallTool(cctx, &mcp.CallToolParams{Name: name, Arguments: args})
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		return r
	}
	list := callText(call("list_computers", nil))
	if !strings.Contains(list, ada.ID) || strings.Contains(list, other.ID) {
		t.Fatalf("list_computers shows what the token reaches only: %s", list)
	}
	r := call("computer_screenshot", map[string]any{"agent": "Ada"})
	before := callImage(r)
	if r.IsError || len(before) < 1000 {
		t.Fatalf("screenshot: %s", callText(r))
	}
	if r := call("computer_key", map[string]any{"agent": ada.ID, "keys": "ctrl+alt+t"}); r.IsError {
		t.Fatalf("key: %s", callText(r))
	}
	time.Sleep(3 * time.Second) // the terminal opens
	call("computer_click", map[string]any{"agent": "Ada", "x": 640, "y": 400})
	if r := call("computer_type", map[string]any{"agent": "Ada", "text": "echo typed-over-mcp > /tmp/mcp-typed.txt\n"}); r.IsError {
		t.Fatalf("type: %s", callText(r))
	}
	after := callImage(call("computer_screenshot", map[string]any{"agent": "Ada"}))
	if bytes.Equal(before, after) {
		t.Fatal("the screen did not change after the terminal was opened and text typed")
	}
	var out string
	for range 20 {
		out = callText(call("computer_shell", map[string]any{"agent": "Ada", "command": "cat /tmp/mcp-typed.txt"}))
		if strings.Contains(out, "typed-over-mcp") {
			break
		}
		time.Sleep(500 * time.Millisecond)
	}
	if !strings.Contains(out, "typed-over-mcp") {
		t.Fatalf("the typed command did not run in the desktop: %s", out)
	}
	if r := call("computer_write_file", map[string]any{"agent": "Ada", "path": "mcp.txt", "content": "from mcp"}); r.IsError {
		t.Fatal(callText(r))
	}
	if got := callText(call("computer_read_file", map[string]any{"agent": "Ada", "path": "mcp.txt"})); !strings.Contains(got, "from mcp") {
		t.Fatalf("read_file: %s", got)
	}
	// The token does not reach Other (same owner, not named by the token).
	if r := call("computer_screenshot", map[string]any{"agent": other.ID}); !r.IsError || !strings.Contains(callText(r), "not reachable") && !strings.Contains(callText(r), "reachable with this token") {
		t.Fatalf("a token named for Ada reached Other: %s", callText(r))
	}

	// History: every call is in the agent's timeline as "MCP: laptop".
	runs, err := b.Store.ToolRuns(admin.ID, calls.Session(tokID, ada.ID))
	if err != nil || len(runs) < 6 {
		t.Fatalf("history: %d runs, %v", len(runs), err)
	}
	for _, run := range runs {
		if run.Source != "MCP: laptop" {
			t.Fatalf("run %s source %q", run.Tool, run.Source)
		}
	}

	// A person takes over: input is refused with a message that says so; screenshots still work.
	inst, err := instanceOf(b, admin.ID, ada.ID)
	if err != nil {
		t.Fatal(err)
	}
	lease, err := b.Control.TakeOver(inst.ID, control.Person{AccountID: admin.ID, Username: admin.Username})
	if err != nil {
		t.Fatal(err)
	}
	r = call("computer_click", map[string]any{"agent": "Ada", "x": 10, "y": 10})
	if !r.IsError || !strings.Contains(strings.ToLower(callText(r)), "control") {
		t.Fatalf("input during a takeover: %v %s", r.IsError, callText(r))
	}
	if list := callText(call("list_computers", nil)); !strings.Contains(list, `"controlledBy": "`+admin.Username+`"`) {
		t.Fatalf("list_computers does not say who controls: %s", list)
	}
	if err := b.Control.HandBack(inst.ID, lease.Token); err != nil {
		t.Fatal(err)
	}
	if r := call("computer_click", map[string]any{"agent": "Ada", "x": 10, "y": 10}); r.IsError {
		t.Fatalf("input after hand-back: %s", callText(r))
	}

	// HITL: a command the guard asks about waits for the owner, who answers through the chat API.
	sub := b.Events.Subscribe(events.SubscribeOptions{Types: []events.Type{events.ConfirmRequested}})
	defer sub.Close()
	type res struct {
		r   *mcp.CallToolResult
		err error
	}
	done := make(chan res, 1)
	go func() {
		r, err := cs.CallTool(cctx, &mcp.CallToolParams{Name: "computer_shell", Arguments: map[string]any{"agent": "Ada", "command": "sudo -n true; echo confirmed-ran"}})
		done <- res{r, err}
	}()
	var asked events.Confirm
	select {
	case e := <-sub.C():
		asked = e.Data.(events.Confirm)
	case <-time.After(time.Minute):
		t.Fatal("no confirmation was asked")
	}
	if asked.State != "asked" || asked.Source != "MCP: laptop" || e2a(asked.ToolCalls) == "" {
		t.Fatalf("asked: %+v", asked)
	}
	calls := b.Chat.Waiting(admin.ID, asked.SessionID)
	if len(calls) != 1 {
		t.Fatalf("waiting calls: %+v", calls)
	}
	if code := apiJSON(t, srv, ap.Token, "POST", "/api/app/chat", map[string]any{"sessionId": asked.SessionID, "userId": admin.ID,
		"agentId": ada.ID, "confirmResults": []agent.ConfirmResult{{Confirmed: true, ToolCall: calls[0]}}}, nil); code != http.StatusOK {
		t.Fatalf("answer: %d", code)
	}
	got := <-done
	if got.err != nil || got.r.IsError || !strings.Contains(callText(got.r), "confirmed-ran") {
		t.Fatalf("confirmed call: %v %+v", got.err, got.r)
	}
	// Unanswered: denied at the deadline with a message that says so.
	began := time.Now()
	r = call("computer_shell", map[string]any{"agent": "Ada", "command": "sudo -n true; echo should-not-run"})
	if !r.IsError || strings.Contains(callText(r), "should-not-run") || !strings.Contains(callText(r), "nobody confirmed") {
		t.Fatalf("unanswered call: %s", callText(r))
	}
	if el := time.Since(began); el < 19*time.Second {
		t.Fatalf("denied after %s, before the deadline", el)
	}

	// A member's token never reaches the admin's agent, by id or by name.
	member, err := b.Auth.CreateAccount(ap, auth.NewAccount{Username: "bob", Password: "correct horse battery staple 42"})
	if err != nil {
		t.Fatal(err)
	}
	mp, err := b.Auth.Issue(member)
	if err != nil {
		t.Fatal(err)
	}
	if code := apiJSON(t, srv, mp.Token, "POST", "/api/app/account/tokens", map[string]any{"name": "x", "agents": []string{ada.ID}}, nil); code != http.StatusBadRequest {
		t.Fatalf("a member made a token naming another account's agent: %d", code)
	}
	_, msecret := makeToken(t, srv, mp.Token, map[string]any{"name": "bob's"})
	ms, err := mcpConnect(t, cctx, srv, msecret)
	if err != nil {
		t.Fatal(err)
	}
	for _, ref := range []string{ada.ID, "Ada"} {
		r, err := ms.CallTool(cctx, &mcp.CallToolParams{Name: "computer_shell", Arguments: map[string]any{"agent": ref, "command": "echo leaked"}})
		if err != nil || !r.IsError || strings.Contains(callText(r), "leaked") {
			t.Fatalf("member reached %s: %v %s", ref, err, callText(r))
		}
	}
	if l := callText(mustCall(t, cctx, ms, "list_computers")); strings.Contains(l, ada.ID) {
		t.Fatalf("member's list shows the admin's agent: %s", l)
	}
	ms.Close()
	// The member does not see or revoke the admin's token; the admin sees everyone's.
	if code := apiJSON(t, srv, mp.Token, "DELETE", "/api/app/account/tokens/"+tokID, nil, nil); code != http.StatusNotFound {
		t.Fatalf("member revoked the admin's token: %d", code)
	}
	var all struct{ Tokens []struct{ ID string } }
	apiJSON(t, srv, ap.Token, "GET", "/api/app/account/tokens?all=1", nil, &all)
	if len(all.Tokens) != 2 {
		t.Fatalf("admin's list of all tokens: %+v", all)
	}

	// The official TypeScript SDK client drives the same desktop (tests/mcp, npm ci there).
	tsClient(t, srv.URL+"/mcp", secret, "Ada")

	// Revoked: the next request of the open session and a new session get 401.
	if code := apiJSON(t, srv, ap.Token, "DELETE", "/api/app/account/tokens/"+tokID, nil, nil); code != http.StatusNoContent {
		t.Fatalf("revoke: %d", code)
	}
	if _, err := cs.CallTool(cctx, &mcp.CallToolParams{Name: "list_computers"}); err == nil {
		t.Fatal("a revoked token's session still answers")
	}
	if code := mcpStatus(t, srv, secret); code != http.StatusUnauthorized {
		t.Fatalf("revoked token: %d", code)
	}
	// Expired.
	eid, esecret := makeToken(t, srv, ap.Token, map[string]any{"name": "short", "expiresInDays": 1})
	b.Store.UpdateAPITokens(func(l []store.APIToken) ([]store.APIToken, error) {
		for i := range l {
			if l[i].ID == eid {
				l[i].ExpiresAt = time.Now().Add(-time.Minute)
			}
		}
		return l, nil
	})
	if code := mcpStatus(t, srv, esecret); code != http.StatusUnauthorized {
		t.Fatalf("expired token: %d", code)
	}
}

// tsClient runs tests/mcp/drive.mjs (the official TypeScript SDK client) against endpoint.
func tsClient(t *testing.T, endpoint, secret, agentRef string) {
	t.Helper()
	dir, err := filepath.Abs(filepath.Join("..", "tests", "mcp"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, "node_modules", "@modelcontextprotocol", "sdk")); err != nil {
		t.Fatalf("the TypeScript SDK is not installed: run `npm ci` in tests/mcp (%v)", err)
	}
	cmd := exec.Command("node", "drive.mjs")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "CUBICLE_MCP_URL="+endpoint, "CUBICLE_TOKEN="+secret, "CUBICLE_AGENT="+agentRef)
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), `"ok":true`) {
		t.Fatalf("TypeScript SDK client: %v\n%s", err, out)
	}
	t.Logf("TypeScript SDK client: %s", strings.TrimSpace(string(out)))
}

func mustCall(t *testing.T, ctx context.Context, cs *mcp.ClientSession, name string) *mcp.CallToolResult {
	t.Helper()
	r, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: name})
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func e2a(v any) string {
	raw, _ := json.Marshal(v)
	if string(raw) == "null" {
		return ""
	}
	return string(raw)
}

// mcpStatus is the HTTP status of an MCP initialize request with secret.
func mcpStatus(t *testing.T, srv *httptest.Server, secret string) int {
	t.Helper()
	req, _ := http.NewRequest("POST", srv.URL+"/mcp", strings.NewReader(`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}`))
	req.Header.Set("Authorization", "Bearer "+secret)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	return res.StatusCode
}
