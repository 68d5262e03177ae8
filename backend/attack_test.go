package backend_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"
	"time"

	"cubicle/backend"
	"cubicle/backend/api"
	"cubicle/backend/store"
	"cubicle/runner/wire"
)

// attackEnv is the whole backend of `cubicle serve --engine none` (real store in a temp dir,
// real auth, real nodes and runners) behind its real handler on a real loopback listener,
// with an admin and a member, an agent and a conversation each, a runner (and its token) and
// a revoked session.
type attackEnv struct {
	t   *testing.T
	b   *backend.Backend
	url string

	admin, member, revoked, runnerToken string
	adminID, memberID, runnerID         string
	adminAgent, memberAgent             string
	adminChat                           string
	adminGroup                          string // a group chat of the admin's agents Ada and Bea
}

func newAttackEnv(t *testing.T) *attackEnv {
	t.Helper()
	b, err := backend.New(backend.Config{DataDir: t.TempDir(), Engine: "none",
		AllowedHosts: []string{"127.0.0.1", "localhost"}, TrustedOrigins: []string{"wails://wails"},
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	if err := b.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(b.API.Handler())
	t.Cleanup(ts.Close)
	e := &attackEnv{t: t, b: b, url: ts.URL}
	e.admin, e.adminID, e.member, e.memberID = backend.LoginAdminAndMember(t, b)
	// A session of the member that logged out: its token must be worth nothing.
	gone, err := b.Auth.Login("mia", "member password 1", "test")
	if err != nil {
		t.Fatal(err)
	}
	e.revoked = gone.Token
	if code, body := e.send(t, attack{method: "POST", path: "/api/auth/logout", token: e.revoked}); code != http.StatusNoContent {
		t.Fatalf("logout: %d %s", code, body)
	}
	e.adminAgent = e.newAgent(e.admin, "Ada")
	e.memberAgent = e.newAgent(e.member, "Max")
	code, body := e.send(t, attack{method: "POST", path: "/api/app/admin/runners", token: e.admin, body: `{"name":"r1"}`})
	if code != http.StatusCreated {
		t.Fatalf("create runner: %d %s", code, body)
	}
	var r struct{ ID, Token string }
	if err := json.Unmarshal([]byte(body), &r); err != nil || r.Token == "" || r.ID == "" {
		t.Fatalf("create runner: %s (%v)", body, err)
	}
	e.runnerID, e.runnerToken = r.ID, r.Token
	e.adminChat = "chat-admin-1"
	now := time.Now().UTC()
	if err := b.Store.PutChatSession(store.ChatSession{UserID: e.adminID, SessionID: e.adminChat, AgentID: e.adminAgent,
		Title: "secret plans", CreatedAt: now, UpdatedAt: now}); err != nil {
		t.Fatal(err)
	}
	bea := e.newAgent(e.admin, "Bea")
	code, body = e.send(t, attack{method: "POST", path: "/api/app/chats", token: e.admin,
		body: `{"title":"secret group","agentIds":["` + e.adminAgent + `","` + bea + `"]}`})
	var g struct{ ID string }
	if err := json.Unmarshal([]byte(body), &g); code != http.StatusCreated || err != nil || g.ID == "" {
		t.Fatalf("create group chat: %d %s", code, body)
	}
	e.adminGroup = g.ID
	return e
}

func (e *attackEnv) newAgent(token, name string) string {
	e.t.Helper()
	code, body := e.send(e.t, attack{method: "POST", path: "/api/app/agents", token: token, body: `{"name":"` + name + `"}`})
	if code != http.StatusCreated {
		e.t.Fatalf("create agent: %d %s", code, body)
	}
	var a struct{ ID string }
	if err := json.Unmarshal([]byte(body), &a); err != nil || a.ID == "" {
		e.t.Fatalf("create agent: %s", body)
	}
	return a.ID
}

// attack is one request. By default it is sent as the API's own page would send it: to the
// server's own address, the token as a bearer, a body as application/json.
type attack struct {
	method, path string
	token        string // bearer token
	cookie       string // session cookie
	body         string
	bigBody      int64 // send this many bytes of '{' instead of body (declared length)
	chunked      int64 // send this many bytes of '{' without a declared length
	host         string
	header       map[string]string
	stream       bool // the answer is an event stream: read its start only
}

// repeatReader yields n bytes of b without holding them.
type repeatReader struct {
	b byte
	n int64
}

func (r *repeatReader) Read(p []byte) (int, error) {
	if r.n <= 0 {
		return 0, io.EOF
	}
	if int64(len(p)) > r.n {
		p = p[:r.n]
	}
	for i := range p {
		p[i] = r.b
	}
	r.n -= int64(len(p))
	return len(p), nil
}

var client = &http.Client{
	Timeout:       60 * time.Second,
	CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
}

func (e *attackEnv) send(t *testing.T, a attack) (int, string) {
	t.Helper()
	var body io.Reader
	switch {
	case a.bigBody > 0:
		body = &repeatReader{b: '{', n: a.bigBody}
	case a.chunked > 0:
		body = io.MultiReader(&repeatReader{b: '{', n: a.chunked}) // no length: sent chunked
	case a.body != "":
		body = strings.NewReader(a.body)
	}
	ctx := t.Context()
	if a.stream {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
	}
	req, err := http.NewRequestWithContext(ctx, a.method, e.url+a.path, body)
	if err != nil {
		t.Fatalf("%s %s: %v", a.method, a.path, err)
	}
	if a.bigBody > 0 {
		req.ContentLength = a.bigBody
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if a.token != "" {
		req.Header.Set("Authorization", "Bearer "+a.token)
	}
	if a.cookie != "" {
		req.AddCookie(&http.Cookie{Name: "cubicle_session", Value: a.cookie})
	}
	if a.host != "" {
		req.Host = a.host
	}
	for k, v := range a.header {
		if v == "" {
			req.Header.Del(k)
		} else {
			req.Header.Set(k, v)
		}
	}
	resp, err := client.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", a.method, a.path, err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	return resp.StatusCode, string(raw)
}

// state is everything in the store an API call could change, and whether each session still
// works: a refused call must leave all of it as it was.
func (e *attackEnv) state(t *testing.T) string {
	t.Helper()
	st := e.b.Store
	var parts []any
	add := func(name string, v any, err error) {
		if err != nil { // e.g. no model configured yet: the error is part of the state
			v = "error: " + err.Error()
		}
		parts = append(parts, name, v)
	}
	accounts, err := st.Accounts()
	add("accounts", accounts, err)
	for _, a := range accounts {
		v, err := st.Agents(a.ID)
		add("agents of "+a.ID, v, err)
		c, err := st.ChatSessions(a.ID)
		add("chats of "+a.ID, c, err)
		gc, err := st.GroupChats(a.ID)
		add("group chats of "+a.ID, gc, err)
		for _, x := range gc {
			ge, err := st.GroupEntries(a.ID, x.ID, 0)
			add("group chat entries of "+x.ID, ge, err)
		}
		g, err := st.HostGrants(a.ID)
		add("grants of "+a.ID, g, err)
	}
	v1, err := st.AllAllowRules()
	add("allow rules", v1, err)
	v2, err := st.SecuritySettings()
	add("security", v2, err)
	v3, err := st.ModelSettings()
	add("model", v3, err)
	v4, err := st.NodeSettings("local")
	add("node settings", v4, err)
	v5, ok, err := st.RunnerChannels()
	add("runner channels", []any{v5, ok}, err)
	v6, err := st.Runners()
	for i := range v6 {
		v6[i].LastSeen = time.Time{} // a runner's heartbeat is not the API's doing
	}
	add("runners", v6, err)
	v7, err := st.VMInstances("local")
	add("instances", v7, err)
	for _, tok := range []string{e.admin, e.member} {
		_, err := e.b.Auth.Authenticate(tok)
		parts = append(parts, "session valid", err == nil)
	}
	raw, err := json.Marshal(parts)
	if err != nil {
		t.Fatal(err)
	}
	return string(raw)
}

// route is one registered route and the values its path takes.
type route struct {
	method, pattern string
}

func (r route) String() string { return r.method + " " + r.pattern }

var wildcard = regexp.MustCompile(`\{[^}]+\}`)

// fill makes a path of the route's pattern: each {id} becomes id (the agent, the conversation,
// the user, the runner — whatever the route names), {action} "start", {rule} "r1".
func (r route) fill(id string) string {
	return wildcard.ReplaceAllStringFunc(r.pattern, func(w string) string {
		switch w {
		case "{action}":
			return "start"
		case "{rule}":
			return "r1"
		}
		return id
	})
}

func (r route) admin() bool    { return strings.HasPrefix(r.pattern, "/api/app/admin/") }
func (r route) agent() bool    { return strings.HasPrefix(r.pattern, "/api/app/agents/{id}") }
func (r route) chat() bool     { return strings.HasPrefix(r.pattern, "/api/app/chat/sessions/{id}") }
func (r route) group() bool    { return strings.HasPrefix(r.pattern, "/api/app/chats/{id}") }
func (r route) hasID() bool    { return strings.Contains(r.pattern, "{id}") }
func (r route) mutating() bool { return r.method != "GET" && r.method != "HEAD" }
func (r route) upgrade() bool {
	return r.pattern == wire.ConnectPath || strings.HasSuffix(r.pattern, "/computer")
}
func (r route) isOpen() bool     { return openRoutes[r.String()] != "" }
func (r route) runnerOnly() bool { return r.String() == "GET "+wire.ConnectPath }

// openRoutes are the routes that answer without a user session, and why. Every other route
// must answer 401 to a caller without one: a new route that forgets its login fails here.
var openRoutes = map[string]string{
	"GET /api/health":          "the liveness probe",
	"POST /api/auth/login":     "logging in",
	"GET " + wire.DownloadPath: "runners download the binary with their runner token (or an admin session)",
	"GET /api/runner/binaries": "runners list the binaries with their runner token (or an admin session)",
	"GET " + wire.ConnectPath:  "runners dial in with their runner token",
}

// adminReaches are the agent routes an administrator may use on any account's agent, and why.
var adminReaches = map[string]string{
	"GET /api/app/agents/{id}/model":                 "admins approve and set agents' model endpoints",
	"PUT /api/app/agents/{id}/model":                 "admins approve and set agents' model endpoints",
	"POST /api/app/agents/{id}/model/test":           "admins test the model endpoints they approve",
	"GET /api/app/agents/{id}/model/models":          "admins list the models of the endpoints they approve",
	"GET /api/app/agents/{id}/allow-rules":           "allow rules are an admin setting (Settings → Security)",
	"DELETE /api/app/agents/{id}/allow-rules/{rule}": "allow rules are an admin setting (Settings → Security)",
	"GET /api/app/agents/{id}/mcp-servers":           "admins configure MCP servers and which agents use them (Settings → Tools)",
	"PUT /api/app/agents/{id}/mcp-servers":           "admins configure MCP servers and which agents use them (Settings → Tools)",
}

// routesOf reads the routes from the server's router; catch-alls (no method) are skipped.
func routesOf(t *testing.T, e *attackEnv) []route {
	var out []route
	for _, p := range e.b.API.Routes() {
		method, path, ok := strings.Cut(p, " ")
		if !ok {
			continue
		}
		out = append(out, route{method: method, pattern: path})
	}
	if len(out) < 60 {
		t.Fatalf("the router lists %d routes; the table expects the whole API (60+)", len(out))
	}
	return out
}

// ownID is the id a route's {id} takes when the caller is entitled to it.
func (e *attackEnv) ownID(r route, asAdmin bool) string {
	switch {
	case r.agent() && asAdmin:
		return e.adminAgent
	case r.agent():
		return e.memberAgent
	case r.chat():
		return e.adminChat
	case r.group():
		return e.adminGroup
	case strings.HasPrefix(r.pattern, "/api/app/admin/users/"):
		return e.memberID
	case strings.HasPrefix(r.pattern, "/api/app/admin/runners/"):
		return e.runnerID
	}
	return "x1"
}

// check sends a, wants one of the statuses, never a 500, never a file of the host in the
// answer, and — unless mayChange — the stored state unchanged (reads included).
func (e *attackEnv) check(t *testing.T, what string, a attack, mayChange bool, want ...int) {
	t.Helper()
	var before string
	if !mayChange {
		before = e.state(t)
	}
	code, body := e.send(t, a)
	if code >= 500 && code != http.StatusServiceUnavailable {
		t.Errorf("%s: %s %s answered %d %s", what, a.method, a.path, code, trim(body))
	}
	if strings.Contains(body, "root:x:0:0") || strings.Contains(body, "PRIVATE KEY") {
		t.Errorf("%s: %s %s answered a host file: %s", what, a.method, a.path, trim(body))
	}
	if len(want) > 0 && !contains(want, code) {
		t.Errorf("%s: %s %s answered %d %s; want one of %v", what, a.method, a.path, code, trim(body), want)
	}
	if code >= 400 && !strings.Contains(body, `"error":`) && a.method != "HEAD" && strings.HasPrefix(a.path, "/api/") {
		t.Errorf("%s: %s %s answered %d without an error message: %s", what, a.method, a.path, code, trim(body))
	}
	if !mayChange {
		if after := e.state(t); after != before {
			t.Errorf("%s: %s %s (%d) changed the stored state:\nbefore %s\nafter  %s", what, a.method, a.path, code, before, after)
		}
	}
}

func contains(list []int, v int) bool {
	for _, x := range list {
		if x == v {
			return true
		}
	}
	return false
}

func trim(s string) string {
	if len(s) > 300 {
		return s[:300] + "…"
	}
	return s
}

// TestAttackTable attacks every route of the router the way an independent reviewer does:
// without a session, with a garbage, revoked or runner token, as a member on admin routes and
// on another account's agents and conversations, from a foreign Host or Origin (also as a
// websocket upgrade), cross-site, with odd ids, and with bodies that are too large, malformed,
// of the wrong type or not JSON. Each refusal answers 4xx with a message and changes nothing.
func TestAttackTable(t *testing.T) {
	e := newAttackEnv(t)
	routes := routesOf(t, e)
	for _, r := range routes {
		t.Run(r.String(), func(t *testing.T) {
			own := e.ownID(r, true)
			if !r.isOpen() {
				path := r.fill(own)
				for who, tok := range map[string]string{
					"no session": "", "garbage token": "v1.garbage.token", "revoked session": e.revoked,
					"runner token as a session": e.runnerToken,
				} {
					e.check(t, who, attack{method: r.method, path: path, token: tok, body: bodyFor(r)}, false, 401)
					if tok != "" {
						e.check(t, who+" (cookie)", attack{method: r.method, path: path, cookie: tok, body: bodyFor(r)}, false, 401)
					}
				}
				if r.upgrade() {
					e.check(t, "no session, websocket upgrade", attack{method: r.method, path: path,
						header: map[string]string{"Upgrade": "websocket", "Connection": "Upgrade", "Sec-WebSocket-Version": "13", "Sec-WebSocket-Key": "dGhlIHNhbXBsZSBub25jZQ=="}}, false, 401)
					e.check(t, "runner token in the query of an upgrade", attack{method: r.method, path: path + "?access_token=" + e.runnerToken,
						header: map[string]string{"Upgrade": "websocket", "Connection": "Upgrade", "Sec-WebSocket-Version": "13", "Sec-WebSocket-Key": "dGhlIHNhbXBsZSBub25jZQ=="}}, false, 401)
				}
			}
			if r.runnerOnly() {
				e.check(t, "no token on the runner's channel", attack{method: r.method, path: r.pattern,
					header: map[string]string{"Upgrade": "websocket", "Connection": "Upgrade", "Sec-WebSocket-Version": "13", "Sec-WebSocket-Key": "dGhlIHNhbXBsZSBub25jZQ=="}}, false, 401)
				e.check(t, "a user session on the runner's channel", attack{method: r.method, path: r.pattern, token: e.admin,
					header: map[string]string{"Upgrade": "websocket", "Connection": "Upgrade", "Sec-WebSocket-Version": "13", "Sec-WebSocket-Key": "dGhlIHNhbXBsZSBub25jZQ=="}}, false, 401, 403)
			}
			if r.admin() || strings.HasPrefix(r.pattern, "/api/runner/download") || strings.HasPrefix(r.pattern, "/api/runner/binaries") {
				e.check(t, "member on an admin route", attack{method: r.method, path: r.fill(e.ownID(r, true)), token: e.member, body: bodyFor(r)}, false, 403)
			}
			if r.agent() {
				// Another account's agent does not exist for the caller: the answer is the one
				// for an id that names no agent (no oracle), a refusal, and changes nothing.
				e.foreign(t, "member on another account's agent", r, e.member, e.adminAgent)
				if adminReaches[r.String()] == "" {
					e.foreign(t, "admin on a member's agent", r, e.admin, e.memberAgent)
				}
			}
			if r.chat() {
				e.check(t, "member on another account's conversation", attack{method: r.method, path: r.fill(e.adminChat), token: e.member, body: bodyFor(r)}, false, 404)
			}
			if r.group() {
				e.check(t, "member on another account's group chat", attack{method: r.method, path: r.fill(e.adminGroup), token: e.member, body: bodyFor(r)}, false, 404)
			}
			// From elsewhere: a foreign host name (DNS rebinding) or a page of another origin,
			// with the admin's valid session — refused before any route runs.
			path := r.fill(own)
			e.check(t, "foreign Host", attack{method: r.method, path: path, token: e.admin, body: bodyFor(r), host: "evil.example"}, false, 403)
			e.check(t, "foreign Host with our port", attack{method: r.method, path: path, token: e.admin, body: bodyFor(r), host: "evil.example:" + port(e.url)}, false, 403)
			for _, origin := range []string{"http://evil.example", "null", "http://127.0.0.1:1", "http://127.0.0.1:" + port(e.url) + ".evil.example", "http://127.0.0.1:" + port(e.url) + "@evil.example"} {
				e.check(t, "foreign Origin "+origin, attack{method: r.method, path: path, cookie: e.admin, body: bodyFor(r), header: map[string]string{"Origin": origin}}, false, 403)
				if r.method == "GET" {
					e.check(t, "foreign Origin upgrade "+origin, attack{method: r.method, path: path, cookie: e.admin, header: map[string]string{"Origin": origin,
						"Upgrade": "websocket", "Connection": "Upgrade", "Sec-WebSocket-Version": "13", "Sec-WebSocket-Key": "dGhlIHNhbXBsZSBub25jZQ=="}}, false, 403)
				}
			}
			if r.upgrade() {
				e.check(t, "cross-site upgrade without Origin", attack{method: r.method, path: path, cookie: e.admin, header: map[string]string{"Sec-Fetch-Site": "cross-site",
					"Upgrade": "websocket", "Connection": "Upgrade", "Sec-WebSocket-Version": "13", "Sec-WebSocket-Key": "dGhlIHNhbXBsZSBub25jZQ=="}}, false, 403)
			}
			if r.mutating() {
				e.check(t, "cross-site without Origin", attack{method: r.method, path: path, cookie: e.admin, body: bodyFor(r), header: map[string]string{"Sec-Fetch-Site": "cross-site"}}, false, 403)
				for _, ct := range []string{"text/plain", "application/x-www-form-urlencoded", "multipart/form-data; boundary=x", "application/jsonx", ""} {
					e.check(t, "Content-Type "+ct, attack{method: r.method, path: path, token: e.admin, body: `{"name":"x"}`, header: map[string]string{"Content-Type": ct}}, false, 415)
				}
				e.attackBodies(t, r)
			}
			if r.hasID() {
				e.attackIDs(t, r)
			}
		})
	}
}

// foreign sends r as tok's caller on another account's agent id and on an id that names no
// agent: both refused (404, or 400 for a body the route refuses before it looks the agent up),
// with the same status, and nothing changed.
func (e *attackEnv) foreign(t *testing.T, what string, r route, tok, id string) {
	t.Helper()
	before := e.state(t)
	code, body := e.send(t, attack{method: r.method, path: r.fill(id), token: tok, body: validBody(r)})
	ghost, gbody := e.send(t, attack{method: r.method, path: r.fill("0123456789abcdef0123456789abcdef"), token: tok, body: validBody(r)})
	if code != http.StatusNotFound && code != http.StatusBadRequest {
		t.Errorf("%s: %s %s answered %d %s; want 404", what, r.method, r.fill(id), code, trim(body))
	}
	if code != ghost {
		t.Errorf("%s: %s answered %d (%s) for another account's agent but %d (%s) for no agent: an existence oracle",
			what, r, code, trim(body), ghost, trim(gbody))
	}
	if validBody(r) != bodyFor(r) && code != http.StatusNotFound {
		t.Errorf("%s: %s with a valid body answered %d %s; want 404", what, r, code, trim(body))
	}
	if after := e.state(t); after != before {
		t.Errorf("%s: %s changed the stored state:\nbefore %s\nafter  %s", what, r, before, after)
	}
}

// validBodies are bodies the agent routes accept, so that the ownership check is what refuses.
var validBodies = map[string]string{
	"PATCH /api/app/agents/{id}":                  `{"name":"Renamed"}`,
	"PUT /api/app/agents/{id}/computer-selection": `{"computer":"none"}`,
	"PUT /api/app/agents/{id}/workdir":            `{"workdir":"."}`,
	"PUT /api/app/agents/{id}/lazy-init":          `{"lazyInit":true}`,
	"PUT /api/app/agents/{id}/local-vm/image":     `{"imageKey":"standard"}`,
	"PUT /api/app/agents/{id}/model":              `{"model":"m1","baseUrl":"http://127.0.0.1:9/v1"}`,
	"PUT /api/app/agents/{id}/node":               `{"node":"local"}`,
	"PUT /api/app/agents/{id}/mcp-servers":        `{"ids":[]}`,
	"DELETE /api/app/agents/{id}":                 `{"removeDesktop":true,"deleteData":false}`,
}

func validBody(r route) string {
	if b, ok := validBodies[r.String()]; ok {
		return b
	}
	return bodyFor(r)
}

// bodyFor is a well-formed body for a state-changing route (what the attacks around it vary).
func bodyFor(r route) string {
	if r.mutating() {
		return `{"name":"x"}`
	}
	return ""
}

func port(u string) string { return u[strings.LastIndex(u, ":")+1:] }

// maxBodyPlus is one byte over the API's body limit (1 MiB).
const maxBodyPlus = 1<<20 + 1

// twentyMB are the routes that get a 20 MB body.
var twentyMB = map[string]bool{
	"POST /api/auth/login": true, "POST /api/auth/logout": true, "POST /api/app/agents": true, "PUT /api/app/admin/users/{id}": true,
}

// attackBodies sends bad bodies to a state-changing route as a caller entitled to it.
func (e *attackEnv) attackBodies(t *testing.T, r route) {
	tok := e.admin
	if r.agent() {
		tok = e.member
	}
	path := r.fill(e.ownID(r, tok == e.admin))
	// A 20 MB body on a few routes (reading and dropping it costs time under -race); on the
	// others a body just over the limit takes the same path.
	// (A route with a larger limit of its own gets a body just over that.)
	big, chunked := int64(maxBodyPlus), int64(2<<20)
	if limit := api.BodyLimit(path); limit > maxBodyPlus-1 {
		big, chunked = limit+1, limit+1<<20
	}
	if twentyMB[r.String()] {
		big = 20 << 20
	}
	deep := strings.Repeat(`{"a":`, 20000) + "1" + strings.Repeat("}", 20000)
	for _, c := range []struct {
		name string
		a    attack
		want []int
	}{
		{"oversized body", attack{bigBody: big}, []int{413}},
		{"2 MiB chunked body", attack{chunked: chunked}, []int{413}},
		{"truncated JSON", attack{body: `{"name":`}, []int{400}},
		{"trailing data", attack{body: `{"name":"x"} {"name":"y"}`}, []int{400}},
		{"trailing garbage", attack{body: `{"name":"x"}garbage`}, []int{400}},
		{"duplicate keys", attack{body: `{"name":"x","name":"y"}`}, []int{400}},
		{"duplicate nested keys", attack{body: `{"a":{"role":"member","role":"admin"}}`}, []int{400}},
		{"deeply nested", attack{body: deep}, []int{400}},
		{"array", attack{body: `[{"name":"x"}]`}, []int{400}},
		{"string", attack{body: `"x"`}, []int{400}},
		{"number", attack{body: `7`}, []int{400}},
		{"null", attack{body: `null`}, []int{400}},
		{"invalid UTF-8 outside strings", attack{body: "{\xff\xfe}"}, []int{400}},
	} {
		c.a.method, c.a.path, c.a.token = r.method, path, tok
		e.check(t, c.name, c.a, false, c.want...)
	}
}

// attackIDs sends odd ids to a route as the caller entitled to the route: never a 500, never a
// host file, nothing changed.
func (e *attackEnv) attackIDs(t *testing.T, r route) {
	tok := e.admin
	if r.agent() {
		tok = e.member
	}
	for _, id := range []string{
		"..%2f..%2f..%2f..%2fetc%2fpasswd", "%2e%2e", "..%5c..%5cwindows", "a%00b", "%00",
		strings.Repeat("a", 5000), "%E2%98%83%F0%9F%92%A9", "%ff%fe", "%20", "x%0d%0aSet-Cookie:%20a=b",
		"%27%20OR%201=1%20--", "%7B%7D", "nope",
	} {
		path := strings.ReplaceAll(r.fill("ID"), "ID", id) // only {id}; {action} and {rule} keep theirs
		e.check(t, fmt.Sprintf("odd id %.40q", id), attack{method: r.method, path: path, token: tok, body: bodyFor(r)}, false,
			301, 307, 308, 400, 403, 404, 405, 409, 503)
	}
}

// TestAttackTableSeesEveryRoute: the table's route list is the router's, so a route added
// without a login fails TestAttackTable; here, the list holds the routes the table's special
// cases name (a renamed route must not silently drop out of them).
func TestAttackTableSeesEveryRoute(t *testing.T) {
	e := newAttackEnv(t)
	have := map[string]bool{}
	for _, r := range routesOf(t, e) {
		have[r.String()] = true
	}
	for open := range openRoutes {
		if !have[open] {
			t.Errorf("open route %q is not registered any more: update openRoutes", open)
		}
	}
	for _, want := range []string{"GET /api/app/events", "GET /api/app/agents/{id}/computer", "POST /api/auth/logout",
		"GET /api/app/chat/sessions/{id}/history", "DELETE /api/app/admin/users/{id}"} {
		if !have[want] {
			t.Errorf("route %q is missing from the router's list", want)
		}
	}
}

// TestAttackExtras: what the route table does not vary — ids carried in bodies, tokens in the
// query string, other methods, the UI's file paths and the event stream's resume header.
func TestAttackExtras(t *testing.T) {
	e := newAttackEnv(t)
	for _, c := range []struct {
		name string
		a    attack
		want []int
	}{
		// Ids in the body name the caller's own things only.
		{"chat as another account", attack{method: "POST", path: "/api/app/chat", token: e.member,
			body: `{"sessionId":"s1","userId":"` + e.adminID + `","input":"hi"}`}, []int{403}},
		{"chat as another account, by name", attack{method: "POST", path: "/api/app/chat", token: e.member,
			body: `{"sessionId":"s1","userId":"admin","input":"hi"}`}, []int{403}},
		{"chat with another account's agent", attack{method: "POST", path: "/api/app/chat", token: e.member,
			body: `{"sessionId":"s1","userId":"` + e.memberID + `","agentId":"` + e.adminAgent + `","input":"hi"}`}, []int{404}},
		{"chat with a traversing session id", attack{method: "POST", path: "/api/app/chat", token: e.member,
			body: `{"sessionId":"../` + e.adminChat + `","userId":"` + e.memberID + `","input":"hi"}`}, []int{400}},
		{"message to another account's group chat", attack{method: "POST", path: "/api/app/chat", token: e.member,
			body: `{"chatId":"` + e.adminGroup + `","message":"hi"}`}, []int{404}},
		{"group chat of another account's agents", attack{method: "POST", path: "/api/app/chats", token: e.member,
			body: `{"agentIds":["` + e.memberAgent + `","` + e.adminAgent + `"]}`}, []int{404}},
		{"agent with a chosen id", attack{method: "POST", path: "/api/app/agents", token: e.member,
			body: `{"name":"x","id":"` + e.adminAgent + `","accountId":"` + e.memberID + `"}`}, []int{201}},
		// A session token in the query string counts only on a websocket upgrade (browsers
		// cannot set headers there); anywhere else it would end up in logs and histories.
		{"token in the query of a plain GET", attack{method: "GET", path: "/api/app/agents?access_token=" + e.admin}, []int{401}},
		{"token in the query of the computer route without upgrade", attack{method: "GET",
			path: "/api/app/agents/" + e.adminAgent + "/computer?access_token=" + e.admin}, []int{401}},
		{"token in the query of the event stream", attack{method: "GET", path: "/api/app/events?access_token=" + e.admin}, []int{401}},
		// Other methods.
		{"HEAD needs a login too", attack{method: "HEAD", path: "/api/app/agents"}, []int{401}},
		{"TRACE", attack{method: "TRACE", path: "/api/app/agents", token: e.admin}, []int{404, 405}},
		{"PROPFIND", attack{method: "PROPFIND", path: "/api/app/agents", token: e.admin}, []int{404, 405}},
		{"POST on the UI", attack{method: "POST", path: "/index.html", token: e.admin, body: `{}`}, []int{404, 405}},
		{"unknown API route", attack{method: "GET", path: "/api/app/nope", token: e.admin}, []int{404}},
		{"bearer in lower case is no bearer", attack{method: "GET", path: "/api/app/agents", header: map[string]string{"Authorization": "bearer " + e.admin}}, []int{401}},
		{"basic auth is no session", attack{method: "GET", path: "/api/app/agents", header: map[string]string{"Authorization": "Basic YWRtaW46eA=="}}, []int{401}},
		// Huge and odd credentials are refused with a message, not a crash.
		{"login with a 900 KB password", attack{method: "POST", path: "/api/auth/login",
			body: `{"username":"mia","password":"` + strings.Repeat("p", 900<<10) + `"}`}, []int{400, 401}},
		{"login with a NUL in the name", attack{method: "POST", path: "/api/auth/login",
			body: `{"username":"mia\u0000","password":"member password 1"}`}, []int{400, 401}},
		{"new user with a 900 KB password", attack{method: "POST", path: "/api/app/admin/users", token: e.admin,
			body: `{"username":"huge","password":"` + strings.Repeat("p", 900<<10) + `","role":"member"}`}, []int{400}},
		{"new user with a control character in the name", attack{method: "POST", path: "/api/app/admin/users", token: e.admin,
			body: `{"username":"a\u0007b","password":"a long enough password 1","role":"member"}`}, []int{400}},
		{"new user with an unknown role", attack{method: "POST", path: "/api/app/admin/users", token: e.admin,
			body: `{"username":"roley","password":"a long enough password 1","role":"root"}`}, []int{400}},
		{"password change to 900 KB", attack{method: "PUT", path: "/api/auth/password", token: e.member,
			body: `{"currentPassword":"member password 1","newPassword":"` + strings.Repeat("p", 900<<10) + `"}`}, []int{400}},
		{"odd node in a query", attack{method: "GET", path: "/api/app/admin/local-vm?node=..%2f..%2f%00" + strings.Repeat("n", 3000), token: e.admin}, []int{400, 404, 503}},
		// The event stream's resume point is the client's to send: odd values are harmless.
		{"event stream, odd Last-Event-ID", attack{method: "GET", path: "/api/app/events", token: e.member,
			header: map[string]string{"Last-Event-ID": "../../etc/passwd" + strings.Repeat("9", 5000), "Accept": "text/event-stream"}, stream: true}, []int{200, 400}},
	} {
		t.Run(c.name, func(t *testing.T) {
			e.check(t, c.name, c.a, c.want[0] == 201, c.want...)
		})
	}
	// The agent made with a chosen id got its own id, and the admin's agent is untouched.
	a, err := e.b.Store.Agent(e.adminAgent)
	if err != nil || a.AccountID != e.adminID || a.Name != "Ada" {
		t.Fatalf("the admin's agent after a member's create with its id: %+v, %v", a, err)
	}
	// The UI serves its own files only.
	for _, p := range []string{"/..%2f..%2f..%2f..%2fetc%2fpasswd", "/assets/..%2f..%2f..%2fetc%2fpasswd", "/%2e%2e/%2e%2e/etc/passwd",
		"/..\\..\\etc\\passwd", "/index.html%00.js", "/" + strings.Repeat("a/", 2000), "/%ff%fe", "/assets/%00"} {
		e.check(t, "UI path "+trim(p), attack{method: "GET", path: p}, false, 200, 301, 307, 308, 400, 404)
	}
}
