package api

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"testing/fstest"

	"cubicle/backend/agent/tools"
	"cubicle/backend/auth"
	"cubicle/backend/doctor"
	"cubicle/backend/hostaccess"
	"cubicle/backend/profile"
	"cubicle/backend/security"
	"cubicle/backend/store"
	"cubicle/backend/vm/vmtest"
	"cubicle/internal/testenv"
)

const testPassword = "correct horse battery staple"

// fixture is a real handler over a real store in a temp dir.
type fixture struct {
	t     *testing.T
	srv   *Server
	auth  *auth.Service
	store *store.Store
	admin string // admin session token
	user  string // non-admin session token

	vmEngine *vmtest.Engine // the fake engine of newVMFixture
}

// fixtureLoginLimits are the login limits of the fixtures a test makes (zero: the defaults).
// Only a test that does not run in parallel may set it, and must set it back.
var fixtureLoginLimits auth.LoginLimits

// newFixture builds the fixture; opts adjust the server's Config before it is made.
func newFixture(t *testing.T, opts ...func(*Config)) *fixture {
	t.Helper()
	st, err := store.Open(filepath.Join(t.TempDir(), "cubicle.db"), store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	log := slog.New(slog.NewTextHandler(testenv.Writer(t), nil))
	as, err := auth.New(auth.Config{Accounts: st, Key: []byte(strings.Repeat("k", 32)), Logger: log, Limits: fixtureLoginLimits})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := as.EnsureAdmin(auth.Bootstrap{Username: "admin", Password: testPassword}); err != nil {
		t.Fatal(err)
	}
	hash, err := auth.HashPassword(testPassword)
	if err != nil {
		t.Fatal(err)
	}
	if err := st.CreateAccount(store.Account{ID: "user1", Username: "bob", PasswordHash: hash, Role: store.RoleMember}); err != nil {
		t.Fatal(err)
	}
	host := hostaccess.New(st)
	sec, err := security.New(security.Config{Store: st, DataDir: t.TempDir(), Logger: log, LocalTools: tools.Names})
	if err != nil {
		t.Fatal(err)
	}
	cfg := Config{
		Auth: as, Accounts: st, HostAccess: host, Security: sec,
		Profiles: profile.New(st, log).WithHostAccess(host, hostaccess.LocalNode), Logger: log, Version: "test",
		AllowedHosts:   []string{"127.0.0.1", "localhost"},
		TrustedOrigins: []string{"wails://wails"},
		Doctor: func(ctx context.Context) doctor.Report {
			return doctor.Report{Checks: []doctor.Check{{Name: "x", Status: doctor.OK}}}
		},
		Assets:      fstest.MapFS{"index.html": {Data: []byte("<html>ui</html>")}, "assets/app.js": {Data: []byte("js")}},
		AssetsBuilt: true,
	}
	for _, o := range opts {
		o(&cfg)
	}
	srv, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	f := &fixture{t: t, srv: srv, auth: as, store: st}
	f.admin = f.login("admin", testPassword)
	f.user = f.login("bob", testPassword)
	return f
}

func (f *fixture) login(user, pw string) string {
	f.t.Helper()
	rec := f.do(req{method: "POST", path: "/api/auth/login", body: `{"username":"` + user + `","password":"` + pw + `"}`})
	if rec.Code != 200 {
		f.t.Fatalf("login %s: %d %s", user, rec.Code, rec.Body)
	}
	for _, c := range rec.Result().Cookies() {
		if c.Name == SessionCookie {
			if !c.HttpOnly || c.SameSite != http.SameSiteStrictMode {
				f.t.Fatalf("session cookie not HttpOnly+SameSite=Strict: %+v", c)
			}
			return c.Value
		}
	}
	f.t.Fatal("no session cookie")
	return ""
}

type req struct {
	method, path, body string
	host               string            // default 127.0.0.1:8765
	cookie             string            // session token sent as cookie
	bearer             string            // session token sent as bearer
	header             map[string]string // extra headers
}

func (f *fixture) do(r req) *httptest.ResponseRecorder {
	var body io.Reader
	if r.body != "" {
		body = strings.NewReader(r.body)
	}
	hr := httptest.NewRequest(r.method, r.path, body)
	hr.Host = "127.0.0.1:8765"
	if r.host != "" {
		hr.Host = r.host
	}
	if r.body != "" {
		hr.Header.Set("Content-Type", "application/json")
	}
	if r.cookie != "" {
		hr.AddCookie(&http.Cookie{Name: SessionCookie, Value: r.cookie})
	}
	if r.bearer != "" {
		hr.Header.Set("Authorization", "Bearer "+r.bearer)
	}
	for k, v := range r.header {
		hr.Header.Set(k, v)
	}
	rec := httptest.NewRecorder()
	f.srv.Handler().ServeHTTP(rec, hr)
	return rec
}

func decodeBody[T any](t *testing.T, rec *httptest.ResponseRecorder) T {
	t.Helper()
	var v T
	if err := json.Unmarshal(rec.Body.Bytes(), &v); err != nil {
		t.Fatalf("decode %q: %v", rec.Body, err)
	}
	return v
}

func TestGuardAndAuth(t *testing.T) {
	f := newFixture(t)
	tests := []struct {
		name string
		req  req
		want int
	}{
		{"health needs no login", req{method: "GET", path: "/api/health"}, 200},
		{"api without cookie", req{method: "GET", path: "/api/app/agents"}, 401},
		{"api with garbage cookie", req{method: "GET", path: "/api/app/agents", cookie: "v1.x.y"}, 401},
		{"api with cookie", req{method: "GET", path: "/api/app/agents", cookie: f.admin}, 200},
		{"api with bearer", req{method: "GET", path: "/api/app/agents", bearer: f.admin}, 200},
		{"localhost host", req{method: "GET", path: "/api/health", host: "localhost:8765"}, 200},
		{"foreign host (DNS rebinding)", req{method: "GET", path: "/api/health", host: "evil.example:8765"}, 403},
		{"foreign host on UI", req{method: "GET", path: "/", host: "evil.example"}, 403},
		{"empty host", req{method: "GET", path: "/api/health", host: " "}, 403},
		{"same-origin POST", req{method: "POST", path: "/api/app/agents", body: `{"name":"a"}`, cookie: f.admin, header: map[string]string{"Origin": "http://127.0.0.1:8765"}}, 201},
		{"cross-origin POST", req{method: "POST", path: "/api/app/agents", body: `{"name":"a"}`, cookie: f.admin, header: map[string]string{"Origin": "http://evil.example"}}, 403},
		{"cross-origin POST, other port", req{method: "POST", path: "/api/app/agents", body: `{"name":"a"}`, cookie: f.admin, header: map[string]string{"Origin": "http://127.0.0.1:9999"}}, 403},
		{"cross-site without origin", req{method: "DELETE", path: "/api/app/agents/x", cookie: f.admin, header: map[string]string{"Sec-Fetch-Site": "cross-site"}}, 403},
		{"trusted desktop origin", req{method: "POST", path: "/api/app/agents", body: `{"name":"a"}`, bearer: f.admin, header: map[string]string{"Origin": "wails://wails"}}, 201},
		{"form post refused", req{method: "POST", path: "/api/app/agents", body: "name=a", cookie: f.admin, header: map[string]string{"Content-Type": "application/x-www-form-urlencoded"}}, 415},
		{"cross-origin websocket upgrade", req{method: "GET", path: "/api/app/agents", cookie: f.admin, header: map[string]string{"Origin": "http://evil.example", "Upgrade": "websocket", "Connection": "Upgrade"}}, 403},
		{"cross-origin GET refused", req{method: "GET", path: "/api/health", header: map[string]string{"Origin": "http://evil.example"}}, 403},
		{"same-origin GET", req{method: "GET", path: "/api/app/agents", cookie: f.admin, header: map[string]string{"Origin": "http://127.0.0.1:8765"}}, 200},
		{"admin route as admin", req{method: "GET", path: "/api/app/admin/doctor", cookie: f.admin}, 200},
		{"admin route as user", req{method: "GET", path: "/api/app/admin/doctor", cookie: f.user}, 403},
		{"admin route logged out", req{method: "GET", path: "/api/app/admin/doctor"}, 401},
		{"unknown api route", req{method: "GET", path: "/api/nope", cookie: f.admin}, 404},
		{"ui index", req{method: "GET", path: "/"}, 200},
		{"ui deep link falls back to index", req{method: "GET", path: "/agents/x"}, 200},
		{"ui asset", req{method: "GET", path: "/assets/app.js"}, 200},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rec := f.do(tt.req)
			if rec.Code != tt.want {
				t.Fatalf("%s %s: status %d, want %d; body %s", tt.req.method, tt.req.path, rec.Code, tt.want, rec.Body)
			}
			if rec.Code >= 400 && strings.HasPrefix(tt.req.path, "/api/") {
				e := decodeBody[errorBody](t, rec)
				if e.Error == "" || e.Code == "" {
					t.Fatalf("error body lacks message or code: %s", rec.Body)
				}
			}
		})
	}
}

func TestCORSPreflight(t *testing.T) {
	f := newFixture(t)
	rec := f.do(req{method: "OPTIONS", path: "/api/app/agents", header: map[string]string{"Origin": "wails://wails", "Access-Control-Request-Method": "POST"}})
	if rec.Code != 204 || rec.Header().Get("Access-Control-Allow-Origin") != "wails://wails" {
		t.Fatalf("trusted preflight: %d %v", rec.Code, rec.Header())
	}
	rec = f.do(req{method: "OPTIONS", path: "/api/app/agents", header: map[string]string{"Origin": "http://evil.example", "Access-Control-Request-Method": "POST"}})
	if rec.Header().Get("Access-Control-Allow-Origin") != "" {
		t.Fatalf("untrusted origin got CORS headers: %v", rec.Header())
	}
}

func TestLoginLogout(t *testing.T) {
	f := newFixture(t)
	for _, tc := range []struct{ name, body string }{
		{"wrong password", `{"username":"admin","password":"nope-nope"}`},
		{"unknown user", `{"username":"mallory","password":"nope-nope"}`},
	} {
		rec := f.do(req{method: "POST", path: "/api/auth/login", body: tc.body})
		if rec.Code != 401 || len(rec.Result().Cookies()) != 0 {
			t.Fatalf("%s: %d cookies=%v", tc.name, rec.Code, rec.Result().Cookies())
		}
	}
	if rec := f.do(req{method: "POST", path: "/api/auth/login", body: `{"username":"admin"}`}); rec.Code != 400 {
		t.Fatalf("missing password: %d", rec.Code)
	}
	if rec := f.do(req{method: "POST", path: "/api/auth/login", body: `{`}); rec.Code != 400 {
		t.Fatalf("bad json: %d", rec.Code)
	}
	me := f.do(req{method: "GET", path: "/api/auth/me", cookie: f.admin})
	if u := decodeBody[struct{ User userJSON }](t, me).User; u.Username != "admin" || u.Role != "admin" {
		t.Fatalf("me = %+v", u)
	}
	// Case-insensitive usernames log in.
	f.login("ADMIN", testPassword)
	if rec := f.do(req{method: "POST", path: "/api/auth/logout", cookie: f.admin}); rec.Code != 204 {
		t.Fatalf("logout: %d", rec.Code)
	}
	if rec := f.do(req{method: "GET", path: "/api/auth/me", cookie: f.admin}); rec.Code != 401 {
		t.Fatalf("token still valid after logout: %d", rec.Code)
	}
}

func TestLoginRateLimit(t *testing.T) {
	f := newFixture(t)
	codes := map[int]int{}
	for range 12 {
		rec := f.do(req{method: "POST", path: "/api/auth/login", body: `{"username":"admin","password":"wrong-wrong"}`})
		codes[rec.Code]++
	}
	// Three wrong guesses from one client, then it waits (auth.LoginLimits: the wait doubles).
	if codes[401] != 3 || codes[429] != 9 {
		t.Fatalf("codes = %v, want 3×401 then 429", codes)
	}
	if rec := f.do(req{method: "POST", path: "/api/auth/login", body: `{"username":"admin","password":"` + testPassword + `"}`}); rec.Code != 429 {
		t.Fatalf("limited client could still log in: %d", rec.Code)
	}
}

func TestAgentsCRUDAndScope(t *testing.T) {
	f := newFixture(t)
	rec := f.do(req{method: "POST", path: "/api/app/agents", body: `{"name":"  Researcher "}`, cookie: f.admin})
	if rec.Code != 201 {
		t.Fatalf("create: %d %s", rec.Code, rec.Body)
	}
	a := decodeBody[agentJSON](t, rec)
	if a.Name != "Researcher" || a.Computer != "vm" || a.AllowHostEnvironment || len(a.ID) != 32 {
		t.Fatalf("created %+v", a)
	}
	for _, bad := range []string{`{"name":""}`, `{"name":"` + strings.Repeat("x", 65) + `"}`, `{"name":"a\u0007b"}`, `{}`} {
		if rec := f.do(req{method: "POST", path: "/api/app/agents", body: bad, cookie: f.admin}); rec.Code != 400 {
			t.Fatalf("create %s: %d", bad, rec.Code)
		}
	}
	if rec := f.do(req{method: "PATCH", path: "/api/app/agents/" + a.ID, body: `{"name":"Writer"}`, cookie: f.admin}); rec.Code != 200 || decodeBody[agentJSON](t, rec).Name != "Writer" {
		t.Fatalf("rename: %d %s", rec.Code, rec.Body)
	}
	if rec := f.do(req{method: "PATCH", path: "/api/app/agents/" + a.ID, body: `{}`, cookie: f.admin}); rec.Code != 400 {
		t.Fatalf("rename without name: %d", rec.Code)
	}
	// Another account sees nothing of it.
	for _, r := range []req{
		{method: "GET", path: "/api/app/agents/" + a.ID, cookie: f.user},
		{method: "PATCH", path: "/api/app/agents/" + a.ID, body: `{"name":"x"}`, cookie: f.user},
		{method: "DELETE", path: "/api/app/agents/" + a.ID, cookie: f.user},
		{method: "PUT", path: "/api/app/agents/" + a.ID + "/computer-selection", body: `{"computer":"none"}`, cookie: f.user},
	} {
		if rec := f.do(r); rec.Code != 404 {
			t.Fatalf("%s by other account: %d", r.method, rec.Code)
		}
	}
	if list := decodeBody[struct{ Agents []agentJSON }](t, f.do(req{method: "GET", path: "/api/app/agents", cookie: f.user})); len(list.Agents) != 0 {
		t.Fatalf("other account lists %v", list.Agents)
	}
	if got, _ := f.store.Agent(a.ID); got.Name != "Writer" {
		t.Fatalf("other account changed the agent: %+v", got)
	}
	if rec := f.do(req{method: "DELETE", path: "/api/app/agents/" + a.ID, cookie: f.admin}); rec.Code != 204 {
		t.Fatalf("delete: %d", rec.Code)
	}
	if rec := f.do(req{method: "GET", path: "/api/app/agents/" + a.ID, cookie: f.admin}); rec.Code != 404 {
		t.Fatalf("get after delete: %d", rec.Code)
	}
}

func TestComputerSelection(t *testing.T) {
	f := newFixture(t)
	a := decodeBody[agentJSON](t, f.do(req{method: "POST", path: "/api/app/agents", body: `{"name":"A"}`, cookie: f.admin}))
	path := "/api/app/agents/" + a.ID + "/computer-selection"
	steps := []struct {
		name      string
		body      string
		code      int
		computer  string
		allowHost bool
	}{
		{"vm with host", `{"computer":"vm","allowHostEnvironment":true}`, 200, "vm", true},
		{"cloud keeps host", `{"computer":"cloud","allowHostEnvironment":true}`, 200, "cloud", true},
		{"browser clears host", `{"computer":"browser","allowHostEnvironment":true}`, 200, "browser", false},
		{"back to vm does not re-check", `{"computer":"vm"}`, 200, "vm", false},
		{"vm with host again", `{"computer":"vm","allowHostEnvironment":true}`, 200, "vm", true},
		{"invalid computer changes nothing", `{"computer":"hybrid","allowHostEnvironment":false}`, 400, "vm", true},
		{"missing computer changes nothing", `{"allowHostEnvironment":false}`, 400, "vm", true},
		{"wrong type changes nothing", `{"computer":"vm","allowHostEnvironment":"yes"}`, 400, "vm", true},
		{"host clears", `{"computer":"host","allowHostEnvironment":true}`, 200, "host", false},
		{"auto clears", `{"computer":"auto","allowHostEnvironment":true}`, 200, "auto", false},
		{"none clears", `{"computer":"none","allowHostEnvironment":true}`, 200, "none", false},
	}
	for _, s := range steps {
		rec := f.do(req{method: "PUT", path: path, body: s.body, cookie: f.admin})
		if rec.Code != s.code {
			t.Fatalf("%s: status %d, want %d: %s", s.name, rec.Code, s.code, rec.Body)
		}
		got, err := f.store.Agent(a.ID)
		if err != nil {
			t.Fatal(err)
		}
		if got.Computer != s.computer || got.AllowHostEnvironment != s.allowHost {
			t.Fatalf("%s: stored %q/%v, want %q/%v", s.name, got.Computer, got.AllowHostEnvironment, s.computer, s.allowHost)
		}
	}
	if rec := f.do(req{method: "PUT", path: "/api/app/agents/nope/computer-selection", body: `{"computer":"vm"}`, cookie: f.admin}); rec.Code != 404 {
		t.Fatalf("unknown agent: %d", rec.Code)
	}
}
