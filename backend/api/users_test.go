package api

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"testing"
	"time"

	"cubicle/backend/computer"
	"cubicle/backend/store"
)

const memberPassword = "Member-pass-77-ok"

// The Users page's API (issue 15, item 1): an admin creates, lists, changes, disables and
// deletes accounts; members get 403; bad input changes nothing.
func TestUsersRoutes(t *testing.T) {
	f := newFixture(t)
	rec := f.do(req{method: "POST", path: "/api/app/admin/users", cookie: f.admin, body: `{"username":"carol","password":"` + memberPassword + `","role":"member"}`})
	if rec.Code != 201 {
		t.Fatalf("create: %d %s", rec.Code, rec.Body)
	}
	carol := decodeBody[accountJSON](t, rec)
	if carol.Username != "carol" || carol.Role != "member" || carol.Disabled || !carol.PasswordChosen || strings.Contains(rec.Body.String(), "passwordHash") {
		t.Fatalf("created %s", rec.Body)
	}
	before, _ := f.store.Accounts()
	for _, tc := range []struct {
		name string
		r    req
		code int
	}{
		{"weak password", req{method: "POST", path: "/api/app/admin/users", body: `{"username":"dan","password":"password1"}`}, 400},
		{"taken name", req{method: "POST", path: "/api/app/admin/users", body: `{"username":"CAROL","password":"` + memberPassword + `"}`}, 409},
		{"unknown role", req{method: "POST", path: "/api/app/admin/users", body: `{"username":"dan","password":"` + memberPassword + `","role":"owner"}`}, 400},
		{"empty change", req{method: "PUT", path: "/api/app/admin/users/" + carol.ID, body: `{}`}, 400},
		{"weak new password", req{method: "PUT", path: "/api/app/admin/users/" + carol.ID, body: `{"password":"short"}`}, 400},
		{"unknown account", req{method: "PUT", path: "/api/app/admin/users/nope", body: `{"disabled":true}`}, 404},
		{"disable yourself", req{method: "PUT", path: "/api/app/admin/users/" + f.adminID(), body: `{"disabled":true}`}, 409},
		{"delete yourself", req{method: "DELETE", path: "/api/app/admin/users/" + f.adminID()}, 409},
	} {
		tc.r.cookie = f.admin
		if rec := f.do(tc.r); rec.Code != tc.code {
			t.Errorf("%s: %d %s, want %d", tc.name, rec.Code, rec.Body, tc.code)
		}
	}
	if after, _ := f.store.Accounts(); len(after) != len(before) {
		t.Fatalf("refused requests changed the accounts: %d → %d", len(before), len(after))
	}
	// Members see none of it.
	for _, r := range []req{
		{method: "GET", path: "/api/app/admin/users"},
		{method: "POST", path: "/api/app/admin/users", body: `{"username":"eve","password":"` + memberPassword + `"}`},
		{method: "PUT", path: "/api/app/admin/users/" + carol.ID, body: `{"role":"admin"}`},
		{method: "PUT", path: "/api/app/admin/users/user1", body: `{"role":"admin"}`},
		{method: "DELETE", path: "/api/app/admin/users/" + carol.ID},
		{method: "PUT", path: "/api/app/admin/users/user1/host-access", body: `{"hostTools":true}`},
	} {
		r.cookie = f.user
		if rec := f.do(r); rec.Code != 403 {
			t.Errorf("member %s %s: %d", r.method, r.path, rec.Code)
		}
	}
	if a, _ := f.store.Account("user1"); a.Role != store.RoleMember {
		t.Fatalf("a member promoted itself: %+v", a)
	}
	list := decodeBody[struct{ Users []accountJSON }](t, f.do(req{method: "GET", path: "/api/app/admin/users", cookie: f.admin}))
	if len(list.Users) != 3 {
		t.Fatalf("users %+v", list.Users)
	}
	// An account with agents is deleted only with them.
	f.do(req{method: "POST", path: "/api/app/agents", cookie: f.login("carol", memberPassword), body: `{"name":"C1"}`})
	if rec := f.do(req{method: "DELETE", path: "/api/app/admin/users/" + carol.ID, cookie: f.admin}); rec.Code != 409 || !strings.Contains(rec.Body.String(), "1 agent") {
		t.Fatalf("delete with agents: %d %s", rec.Code, rec.Body)
	}
	if rec := f.do(req{method: "DELETE", path: "/api/app/admin/users/" + carol.ID + "?deleteAgents=1", cookie: f.admin}); rec.Code != 204 {
		t.Fatalf("delete: %d %s", rec.Code, rec.Body)
	}
	if agents, _ := f.store.Agents(carol.ID); len(agents) != 0 {
		t.Fatalf("agents left: %+v", agents)
	}
}

func (f *fixture) adminID() string {
	a, err := f.auth.Admin()
	if err != nil {
		f.t.Fatal(err)
	}
	return a.ID
}

// Members see only their own agents and never the settings: every admin route answers 403 and
// every route of another account's agent 404 (issue 15, item 1).
func TestMembersSeeOnlyTheirOwn(t *testing.T) {
	f := newFixture(t)
	withModels(t, f)
	withChat(t, f)
	spy := &computersSpy{}
	f.srv.cfg.Computers = spy
	theirs := decodeBody[agentJSON](t, f.do(req{method: "POST", path: "/api/app/agents", cookie: f.admin, body: `{"name":"AdminBot"}`}))
	me := decodeBody[struct{ User userJSON }](t, f.do(req{method: "GET", path: "/api/auth/me", cookie: f.user})).User
	admin := []req{
		{method: "GET", path: "/api/app/admin/doctor"},
		{method: "GET", path: "/api/app/admin/local-vm"},
		{method: "POST", path: "/api/app/admin/local-vm/prepare", body: `{}`},
		{method: "PUT", path: "/api/app/admin/local-vm/policy", body: `{"isolation":"shared","maxInstances":1}`},
		{method: "PUT", path: "/api/app/admin/local-vm/idle-policy", body: `{"idleStopMinutes":0}`},
		{method: "GET", path: "/api/app/admin/model"},
		{method: "PUT", path: "/api/app/admin/model", body: `{"baseUrl":"https://evil.example/v1","model":"m"}`},
		{method: "GET", path: "/api/app/admin/users"},
		{method: "GET", path: "/api/app/admin/security"},
		{method: "PUT", path: "/api/app/admin/security", body: `{"guardLevel":"OFF"}`},
		{method: "GET", path: "/api/app/admin/security/allow-rules"},
		{method: "POST", path: "/api/app/admin/security/allow-rules", body: `{"tool":"*"}`},
		{method: "DELETE", path: "/api/app/admin/security/allow-rules/x"},
		{method: "GET", path: "/api/app/admin/security/confirmations"},
		{method: "GET", path: "/api/app/admin/host"},
		{method: "PUT", path: "/api/app/admin/host", body: `{"hostScreenControl":true}`},
		{method: "DELETE", path: "/api/app/admin/local-vm/instances/x/data"},
		{method: "PUT", path: "/api/app/admin/local-vm/image-sources", body: `{"cursor":{"image":"","digest":""}}`},
		{method: "PUT", path: "/api/app/admin/users/user1/host-access", body: `{"hostTools":true}`},
	}
	for _, r := range admin {
		r.cookie = f.user
		if rec := f.do(r); rec.Code != 403 {
			t.Errorf("member %s %s: %d %s", r.method, r.path, rec.Code, rec.Body)
		}
	}
	a := "/api/app/agents/" + theirs.ID
	others := []req{
		{method: "GET", path: a},
		{method: "PATCH", path: a, body: `{"name":"x"}`},
		{method: "DELETE", path: a},
		{method: "PUT", path: a + "/computer-selection", body: `{"computer":"none"}`},
		{method: "GET", path: a + "/computer"},
		{method: "GET", path: a + "/model"},
		{method: "PUT", path: a + "/model", body: `{"model":"x"}`},
		{method: "GET", path: a + "/allow-rules"},
		{method: "DELETE", path: a + "/allow-rules/x"},
		{method: "PUT", path: a + "/workdir", body: `{"workDir":"/tmp"}`},
		{method: "PUT", path: a + "/lazy-init", body: `{"lazyInit":true}`},
		{method: "GET", path: a + "/computer-plan"},
		{method: "POST", path: "/api/app/chat", body: `{"sessionId":"s","userId":"` + me.ID + `","agentId":"` + theirs.ID + `","input":"hi"}`},
	}
	for _, r := range others {
		r.cookie = f.user
		if rec := f.do(r); rec.Code != 404 {
			t.Errorf("member on another's agent %s %s: %d %s", r.method, r.path, rec.Code, rec.Body)
		}
	}
	if spy.calls != 0 {
		t.Fatalf("another account's agent reached the computers service %d times", spy.calls)
	}
	if cur, _ := f.store.Agent(theirs.ID); cur.Name != "AdminBot" || cur.Computer != "vm" || cur.WorkDir != "" || cur.LazyInit != nil {
		t.Fatalf("the member changed another's agent: %+v", cur)
	}
	if v := f.srv.cfg.Security.View(); v.GuardLevel != "" {
		t.Fatalf("a member changed the guard level: %+v", v)
	}
}

// Host access is granted by an administrator, never taken by ticking a box (issue 15, item 2).
func TestHostAccessIsGranted(t *testing.T) {
	f := newFixture(t)
	mine := decodeBody[agentJSON](t, f.do(req{method: "POST", path: "/api/app/agents", cookie: f.user, body: `{"name":"Mine"}`}))
	sel := "/api/app/agents/" + mine.ID + "/computer-selection"
	for _, body := range []string{`{"computer":"vm","allowHostEnvironment":true}`, `{"computer":"cloud","allowHostEnvironment":true}`, `{"computer":"host"}`} {
		rec := f.do(req{method: "PUT", path: sel, cookie: f.user, body: body})
		if rec.Code != 403 || !strings.Contains(rec.Body.String(), "administrator") {
			t.Fatalf("member ticks %s: %d %s", body, rec.Code, rec.Body)
		}
	}
	if a, _ := f.store.Agent(mine.ID); a.AllowHostEnvironment || a.Computer != "vm" {
		t.Fatalf("a refused selection changed the agent: %+v", a)
	}
	// Without the box ticked, the member still chooses computers freely.
	if rec := f.do(req{method: "PUT", path: sel, cookie: f.user, body: `{"computer":"browser"}`}); rec.Code != 200 {
		t.Fatalf("browser: %d %s", rec.Code, rec.Body)
	}
	rec := f.do(req{method: "PUT", path: "/api/app/admin/users/user1/host-access", cookie: f.admin, body: `{"nodeId":"local","hostTools":true}`})
	if rec.Code != 200 || !strings.Contains(rec.Body.String(), `"hostAccess":{"local":{"hostTools":true,"hostDesktop":false,"placement":false}}`) {
		t.Fatalf("grant: %d %s", rec.Code, rec.Body)
	}
	if rec := f.do(req{method: "PUT", path: sel, cookie: f.user, body: `{"computer":"vm","allowHostEnvironment":true}`}); rec.Code != 200 {
		t.Fatalf("after the grant: %d %s", rec.Code, rec.Body)
	}
	if g, _ := f.store.HostGrant("user1", "local"); !g.HostTools || g.GrantedBy != f.adminID() {
		t.Fatalf("grant record %+v", g)
	}
	if rec := f.do(req{method: "PUT", path: "/api/app/admin/users/user1/host-access", cookie: f.admin, body: `{"hostTools":false}`}); rec.Code != 200 {
		t.Fatalf("withdraw: %d", rec.Code)
	}
	if g, _ := f.store.HostGrant("user1", "local"); g.HostTools {
		t.Fatalf("withdrawn grant %+v", g)
	}
}

// A password change ends the account's other sessions, also through a new cookie for the
// session that changed it; disabling ends every session (issue 15, items 1 and 3).
func TestPasswordChangeAndDisablingEndSessions(t *testing.T) {
	f := newFixture(t)
	other := f.login("bob", testPassword)
	for _, tc := range []struct {
		body string
		code int
	}{
		{`{"currentPassword":"wrong-wrong-wrong","newPassword":"` + memberPassword + `"}`, 400},
		{`{"currentPassword":"` + testPassword + `","newPassword":"weak"}`, 400},
		{`{"newPassword":"` + memberPassword + `"}`, 400},
	} {
		if rec := f.do(req{method: "PUT", path: "/api/auth/password", cookie: f.user, body: tc.body}); rec.Code != tc.code {
			t.Fatalf("%s: %d %s", tc.body, rec.Code, rec.Body)
		}
	}
	rec := f.do(req{method: "PUT", path: "/api/auth/password", cookie: f.user, body: `{"currentPassword":"` + testPassword + `","newPassword":"` + memberPassword + `"}`})
	if rec.Code != 200 {
		t.Fatalf("change: %d %s", rec.Code, rec.Body)
	}
	var fresh string
	for _, c := range rec.Result().Cookies() {
		if c.Name == SessionCookie {
			fresh = c.Value
		}
	}
	for name, tok := range map[string]string{"the old cookie": f.user, "another session": other} {
		if rec := f.do(req{method: "GET", path: "/api/auth/me", cookie: tok}); rec.Code != 401 {
			t.Fatalf("%s after the password change: %d", name, rec.Code)
		}
	}
	if rec := f.do(req{method: "GET", path: "/api/auth/me", cookie: fresh}); rec.Code != 200 {
		t.Fatalf("the fresh session: %d", rec.Code)
	}
	if rec := f.do(req{method: "PUT", path: "/api/app/admin/users/user1", cookie: f.admin, body: `{"disabled":true}`}); rec.Code != 200 {
		t.Fatalf("disable: %d %s", rec.Code, rec.Body)
	}
	if rec := f.do(req{method: "GET", path: "/api/app/agents", cookie: fresh}); rec.Code != 401 {
		t.Fatalf("a disabled account's session: %d", rec.Code)
	}
	if rec := f.do(req{method: "POST", path: "/api/auth/login", body: `{"username":"bob","password":"` + memberPassword + `"}`}); rec.Code != 403 {
		t.Fatalf("a disabled account logs in: %d %s", rec.Code, rec.Body)
	}
}

// The session cookie is Secure behind TLS: the server's own, or a trusted proxy's
// X-Forwarded-Proto — never an untrusted client's claim (issue 15, item 3).
func TestSecureCookie(t *testing.T) {
	f := newFixture(t)
	f.srv.proxies = nil
	pre, _ := parsePrefix("10.9.0.0/16")
	f.srv.proxies = append(f.srv.proxies, pre)
	login := func(remote, proto string, tls bool) *http.Cookie {
		target := "http://127.0.0.1:8765/api/auth/login"
		if tls {
			target = "https://127.0.0.1:8765/api/auth/login"
		}
		hr := httptest.NewRequest("POST", target, strings.NewReader(`{"username":"admin","password":"`+testPassword+`"}`))
		hr.Host = "127.0.0.1:8765"
		hr.RemoteAddr = remote + ":5555"
		hr.Header.Set("Content-Type", "application/json")
		if proto != "" {
			hr.Header.Set("X-Forwarded-Proto", proto)
		}
		rec := httptest.NewRecorder()
		f.srv.Handler().ServeHTTP(rec, hr)
		for _, c := range rec.Result().Cookies() {
			if c.Name == SessionCookie {
				return c
			}
		}
		t.Fatalf("no cookie: %d %s", rec.Code, rec.Body)
		return nil
	}
	for _, tc := range []struct {
		name, remote, proto string
		tls, secure         bool
	}{
		{"plain http", "192.0.2.1", "", false, false},
		{"own TLS", "192.0.2.1", "", true, true},
		{"trusted proxy says https", "10.9.1.2", "https", false, true},
		{"trusted proxy says http", "10.9.1.2", "http", false, false},
		{"untrusted client claims https", "192.0.2.1", "https", false, false},
	} {
		if c := login(tc.remote, tc.proto, tc.tls); c.Secure != tc.secure {
			t.Errorf("%s: Secure=%v", tc.name, c.Secure)
		}
	}
}

// Behind a trusted proxy the login limit counts the client's address from X-Forwarded-For; a
// client cannot escape it by sending its own X-Forwarded-For.
func TestLoginLimitPerClientBehindAProxy(t *testing.T) {
	f := newFixture(t)
	pre, _ := parsePrefix("10.9.0.1")
	f.srv.proxies = []netip.Prefix{pre}
	try := func(remote, xff, user string) int {
		r := req{method: "POST", path: "/api/auth/login", body: `{"username":"` + user + `","password":"wrong-wrong-wrong"}`}
		hr := httptest.NewRequest(r.method, r.path, strings.NewReader(r.body))
		hr.Host, hr.RemoteAddr = "127.0.0.1:8765", remote+":1234"
		hr.Header.Set("Content-Type", "application/json")
		if xff != "" {
			hr.Header.Set("X-Forwarded-For", xff)
		}
		rec := httptest.NewRecorder()
		f.srv.Handler().ServeHTTP(rec, hr)
		return rec.Code
	}
	// A client not behind the proxy cycles fake X-Forwarded-For values and many usernames:
	// its own address is counted.
	codes := map[int]int{}
	for i := range 25 {
		codes[try("192.0.2.7", fmt.Sprintf("203.0.113.%d", i), fmt.Sprintf("u%d", i))]++
	}
	if codes[429] == 0 {
		t.Fatalf("spoofed X-Forwarded-For escaped the limit: %v", codes)
	}
	// Through the trusted proxy, each real client has its own count.
	if c := try("10.9.0.1", "198.51.100.1, 203.0.113.99", "nobody1"); c != 401 {
		t.Fatalf("another client behind the proxy: %d", c)
	}
}

// A request body sent slowly (slowloris) is cut off; a long answer after the body was read is
// not (issue 15, item 6).
func TestBodyDeadline(t *testing.T) {
	h := bodyDeadline(300*time.Millisecond, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if _, err := io.ReadAll(r.Body); err != nil {
			http.Error(w, "slow body", http.StatusRequestTimeout)
			return
		}
		fl := w.(http.Flusher)
		for i := range 6 { // streams for about 3 body deadlines
			fmt.Fprintf(w, "part %d\n", i)
			fl.Flush()
			time.Sleep(150 * time.Millisecond)
		}
	}))
	srv := httptest.NewServer(h)
	defer srv.Close()
	// A slow body: the server gives up and the connection ends.
	c, err := net.Dial("tcp", srv.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	fmt.Fprintf(c, "POST / HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n{")
	c.SetReadDeadline(time.Now().Add(30 * time.Second))
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatalf("the server did not answer a slow body: %v", err)
	}
	if resp.StatusCode != http.StatusRequestTimeout {
		t.Fatalf("slow body: %d", resp.StatusCode)
	}
	// A quick body with a long streamed answer is not cut off.
	res, err := http.Post(srv.URL, "application/json", strings.NewReader(`{"a":1}`))
	if err != nil {
		t.Fatal(err)
	}
	out, err := io.ReadAll(res.Body)
	res.Body.Close()
	if err != nil || !strings.Contains(string(out), "part 5") {
		t.Fatalf("the streamed answer was cut: %q %v", out, err)
	}
}

// computersSpy counts what reaches the computers service (the routes' ownership checks come
// first); the agent computer routes themselves are tested with the real service in backend.
type computersSpy struct{ calls int }

func (c *computersSpy) Busy(context.Context, string, string) string       { c.calls++; return "" }
func (c *computersSpy) Changed(context.Context, store.Agent, store.Agent) { c.calls++ }
func (c *computersSpy) WorkDirChanged(context.Context, string, string) (bool, error) {
	c.calls++
	return false, nil
}
func (c *computersSpy) Plan(context.Context, store.Agent) (computer.Plan, *computer.Plan) {
	c.calls++
	return computer.Plan{}, nil
}
func (c *computersSpy) Host(context.Context) (HostView, error) { c.calls++; return HostView{}, nil }
func (c *computersSpy) SetHostScreenControl(context.Context, string, bool) (HostView, error) {
	c.calls++
	return HostView{}, nil
}
func (c *computersSpy) Anticipate(context.Context, string, string) (Anticipation, error) {
	c.calls++
	return Anticipation{}, nil
}
