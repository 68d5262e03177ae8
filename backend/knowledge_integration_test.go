package backend

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"

	"cubicle/backend/agent"
	"cubicle/backend/auth"
	"cubicle/backend/knowledge"
	"cubicle/backend/models"
	"cubicle/backend/store"
	"cubicle/internal/testenv"
)

// knowledgeEnv is the whole backend of `cubicle serve --engine none` on a real loopback
// listener over a data directory that survives restarts, with an admin and a member.
type knowledgeEnv struct {
	t                    *testing.T
	dir                  string
	b                    *Backend
	base                 string
	cancel               context.CancelFunc
	adminID, memberID    string
	adminTok, memberTok  string
	adminAgent, memberAg string
}

func (e *knowledgeEnv) start() {
	t := e.t
	log := testenv.Logger(t, slog.LevelWarn)
	b, err := New(Config{DataDir: e.dir, Engine: "none", AllowedHosts: []string{"127.0.0.1"}, Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	if err := b.Start(ctx); err != nil {
		cancel()
		b.Close()
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go b.Serve(ctx, ln)
	e.b, e.base, e.cancel = b, "http://"+ln.Addr().String(), cancel
}

func (e *knowledgeEnv) stop() {
	if e.b != nil {
		e.cancel()
		e.b.Close()
		e.b = nil
	}
}

func (e *knowledgeEnv) call(token, method, path, body string) (int, string) {
	e.t.Helper()
	req, _ := http.NewRequest(method, e.base+path, strings.NewReader(body))
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		e.t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(raw)
}

// chat runs one turn through POST /api/app/chat and returns its events.
func (e *knowledgeEnv) chat(token, userID, agentID, session, input string) []agent.Event {
	e.t.Helper()
	body, _ := json.Marshal(map[string]string{"sessionId": session, "userId": userID, "agentId": agentID, "input": input})
	code, out := e.call(token, "POST", "/api/app/chat", string(body))
	if code != http.StatusOK {
		e.t.Fatalf("chat %q: %d %s", input, code, out)
	}
	var evs []agent.Event
	if err := json.Unmarshal([]byte(out), &evs); err != nil {
		e.t.Fatalf("chat %q: %v in %s", input, err, out)
	}
	return evs
}

func (e *knowledgeEnv) search(token, q string) knowledge.Result {
	e.t.Helper()
	code, out := e.call(token, "GET", "/api/app/knowledge/search?q="+url.QueryEscape(q), "")
	if code != http.StatusOK {
		e.t.Fatalf("search %q: %d %s", q, code, out)
	}
	var res knowledge.Result
	if err := json.Unmarshal([]byte(out), &res); err != nil {
		e.t.Fatal(err)
	}
	return res
}

// TestRecallPastRunsThroughRealTurns drives real chat turns of the whole backend (no
// container engine: the agents have no computer, their tools are a real MCP server's; only
// the model is scripted): each finished turn is indexed for its account, a later turn's
// recall_past_runs call returns the right one first for a paraphrase and never another
// account's, the index survives a restart, and the routes check who asks (search scoped to
// the caller, clear and the embeddings setting for administrators, bad queries 400).
func TestRecallPastRunsThroughRealTurns(t *testing.T) {
	e := &knowledgeEnv{t: t, dir: t.TempDir()}
	e.start()
	t.Cleanup(e.stop)
	b := e.b
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
	e.adminID, e.memberID, e.adminTok, e.memberTok = admin.AccountID, member.ID, adminSess.Token, memberSess.Token
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
	ada, bo := newAgent(e.adminID, "Ada"), newAgent(e.memberID, "Bo")
	e.adminAgent, e.memberAg = ada.ID, bo.ID

	model := &scriptedModel{}
	msrv := httptest.NewServer(model)
	defer msrv.Close()
	if _, err := b.Models.Set(models.Update{BaseURL: msrv.URL + "/v1", Model: "scripted", AllowPrivate: &allowLoopback}); err != nil {
		t.Fatal(err)
	}
	// The agents' tools: a real MCP server, open to everyone.
	const secret = "s3cret-token-knowledge"
	ms := newMCPTestServer(t, secret)
	body, _ := json.Marshal(map[string]any{"name": "t", "transport": "http", "url": ms.http.URL, "allowPrivate": true,
		"headers": map[string]string{"Authorization": "Bearer " + secret}, "policy": map[string]any{"default": "allow"}})
	code, out := e.call(e.adminTok, "POST", "/api/app/admin/mcp-servers", string(body))
	if code != http.StatusCreated {
		t.Fatalf("POST server: %d %s", code, out)
	}
	var srv struct{ ID string }
	json.Unmarshal([]byte(out), &srv)
	for _, c := range []struct{ tok, agent string }{{e.adminTok, ada.ID}, {e.memberTok, bo.ID}} {
		if code, out := e.call(c.tok, "PUT", "/api/app/agents/"+c.agent+"/mcp-servers", `{"ids":["`+srv.ID+`"]}`); code != 200 {
			t.Fatalf("enable the server: %d %s", code, out)
		}
	}

	// Turns on distinct tasks, by two accounts.
	const zipTask = "Compress the holiday photos into a zip archive"
	model.push(
		callStep("z1", "mcp_t_run", map[string]any{"command": "zip -r photos.zip holiday/"}),
		callStep("z2", "mcp_t_echo", map[string]any{"text": "photos.zip is ready"}),
		textStep("Compressed the holiday photos into photos.zip (42 MB)."))
	res := results(e.chat(e.adminTok, e.adminID, ada.ID, "s-zip", zipTask))
	if res["z1"][0] != agent.StateSuccess || res["z2"][0] != agent.StateSuccess {
		t.Fatalf("the zip turn's tools: %+v", res)
	}
	model.push(callStep("w1", "mcp_t_echo", map[string]any{"text": "18°C and sunny"}), textStep("Lisbon: 18°C, sunny."))
	e.chat(e.adminTok, e.adminID, ada.ID, "s-weather", "What is the weather forecast in Lisbon tomorrow?")
	model.push(callStep("b1", "mcp_t_run", map[string]any{"command": "zip -r mine.zip pics/"}), textStep("Zipped Bea's pictures into mine.zip."))
	e.chat(e.memberTok, e.memberID, bo.ID, "s-bea", "Compress my holiday pictures into a zip file")

	// A later turn recalls: the paraphrase finds the zip run first, and none of Bea's runs.
	model.push(callStep("r1", "recall_past_runs", map[string]any{"query": "zip up the vacation photos"}), textStep("Found how it was done."))
	evs := e.chat(e.adminTok, e.adminID, ada.ID, "s-later", "Do the photo thing again like last time")
	recall := results(evs)["r1"]
	if recall[0] != agent.StateSuccess {
		t.Fatalf("recall_past_runs: %+v", recall)
	}
	text := recall[1]
	_, first, _ := strings.Cut(text, "\n1. ")
	first, _, _ = strings.Cut(first, "\n2. ")
	if !strings.Contains(first, "request: "+zipTask) {
		t.Fatalf("the zip run is not first:\n%s", text)
	}
	for _, want := range []string{"[success]", "by Ada", "mcp_t_run → mcp_t_echo", "photos.zip (42 MB)", "#/agents/" + ada.ID, "session s-zip", "keyword search (BM25)"} {
		if !strings.Contains(text, want) {
			t.Errorf("recall lacks %q:\n%s", want, text)
		}
	}
	if strings.Contains(text, "Bea") || strings.Contains(text, "mine.zip") {
		t.Fatalf("recall returned another account's run:\n%s", text)
	}
	if !strings.Contains(model.request(model.requests()-2), `"recall_past_runs"`) {
		t.Fatalf("the model was not offered recall_past_runs")
	}

	// The chat's "ask past runs": scoped to the caller.
	if r := e.search(e.adminTok, "zip the vacation photos"); len(r.Hits) == 0 || r.Hits[0].Request != zipTask || r.Mode != knowledge.ModeKeyword {
		t.Fatalf("admin's search: %+v", r)
	} else {
		for _, h := range r.Hits {
			if h.SessionID == "s-bea" {
				t.Fatalf("admin's search returned the member's run: %+v", h)
			}
		}
	}
	if r := e.search(e.memberTok, "zip the vacation photos"); len(r.Hits) != 1 || r.Hits[0].SessionID != "s-bea" || r.Hits[0].AgentID != bo.ID {
		t.Fatalf("member's search: %+v", r)
	}
	if code, out := e.call(e.adminTok, "GET", "/api/app/knowledge", ""); code != 200 || !strings.Contains(out, `"runs":3`) || !strings.Contains(out, `"mode":"keyword"`) {
		t.Fatalf("stats: %d %s", code, out)
	}

	// Bad input: 400 with a message; no session: 401; a member clearing: 403.
	for _, bad := range []struct{ path, want string }{
		{"/api/app/knowledge/search", "query is empty"},
		{"/api/app/knowledge/search?q=%20%20", "query is empty"},
		{"/api/app/knowledge/search?q=" + strings.Repeat("a", knowledge.MaxQuery+1), "too long"},
		{"/api/app/knowledge/search?q=zip&limit=abc", "limit must be"},
		{"/api/app/knowledge/search?q=zip&limit=0", "limit must be"},
		{"/api/app/knowledge/search?q=zip&limit=21", "limit must be"},
	} {
		if code, out := e.call(e.memberTok, "GET", bad.path, ""); code != 400 || !strings.Contains(out, bad.want) {
			t.Errorf("GET %.60s: %d %s, want 400 saying %q", bad.path, code, out, bad.want)
		}
	}
	if code, _ := e.call("", "GET", "/api/app/knowledge/search?q=zip", ""); code != 401 {
		t.Errorf("search without a session: %d", code)
	}
	for _, r := range []struct{ method, path, body string }{
		{"DELETE", "/api/app/admin/knowledge?account=" + e.memberID, ""},
		{"DELETE", "/api/app/admin/knowledge", ""},
		{"GET", "/api/app/admin/knowledge/embeddings", ""},
		{"PUT", "/api/app/admin/knowledge/embeddings", `{"baseUrl":"https://api.example.com/v1","model":"m"}`},
	} {
		if code, out := e.call(e.memberTok, r.method, r.path, r.body); code != 403 {
			t.Errorf("member %s %s: %d %s", r.method, r.path, code, out)
		}
	}
	if code, out := e.call(e.adminTok, "PUT", "/api/app/admin/knowledge/embeddings", `{"baseUrl":"ftp://x","model":"m"}`); code != 400 || !strings.Contains(out, "http(s) URL") {
		t.Errorf("bad embeddings URL: %d %s", code, out)
	}
	if code, out := e.call(e.adminTok, "PUT", "/api/app/admin/knowledge/embeddings", `{"baseUrl":"https://api.example.com/v1","model":"text-embedding-3-small","apiKey":"sk-hidden-1"}`); code != 200 ||
		strings.Contains(out, "sk-hidden-1") || !strings.Contains(out, `"hasApiKey":true`) {
		t.Errorf("set embeddings: %d %s", code, out)
	}
	if code, out := e.call(e.adminTok, "PUT", "/api/app/admin/knowledge/embeddings", `{"baseUrl":""}`); code != 200 || !strings.Contains(out, `"configured":false`) {
		t.Errorf("turn embeddings off: %d %s", code, out)
	}
	if code, out := e.call(e.adminTok, "DELETE", "/api/app/admin/knowledge?account=nobody", ""); code != 404 {
		t.Errorf("clear an unknown account: %d %s", code, out)
	}
	if code, out := e.call(e.adminTok, "DELETE", "/api/app/admin/knowledge?account=", ""); code != 400 {
		t.Errorf("clear with an empty account: %d %s", code, out)
	}
	if r := e.search(e.memberTok, "zip"); len(r.Hits) != 1 {
		t.Fatalf("refused requests changed the member's runs: %+v", r)
	}

	// The index survives a restart.
	e.stop()
	e.start()
	if r := e.search(e.adminTok, "zip the vacation photos"); len(r.Hits) == 0 || r.Hits[0].Request != zipTask {
		t.Fatalf("after a restart: %+v", r)
	}
	// Clearing one account leaves the others'.
	if code, out := e.call(e.adminTok, "DELETE", "/api/app/admin/knowledge?account="+e.memberID, ""); code != 200 || !strings.Contains(out, `"removed":1`) {
		t.Fatalf("clear the member's runs: %d %s", code, out)
	}
	if r := e.search(e.memberTok, "zip"); len(r.Hits) != 0 {
		t.Fatalf("the member's runs survived the clear: %+v", r)
	}
	if r := e.search(e.adminTok, "zip"); len(r.Hits) == 0 {
		t.Fatalf("clearing the member's runs cleared the admin's")
	}
	if code, out := e.call(e.adminTok, "DELETE", "/api/app/admin/knowledge", ""); code != 200 || !strings.Contains(out, `"removed":3`) {
		t.Fatalf("clear every account: %d %s", code, out)
	}
	if r := e.search(e.adminTok, "zip"); len(r.Hits) != 0 {
		t.Fatalf("runs survived clearing every account: %+v", r)
	}
}
