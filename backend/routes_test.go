package backend

import (
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"testing"

	"cubicle/backend/auth"
	"cubicle/backend/store"
)

// routesEnv is the whole backend (no container engine) behind its real handler, with an admin
// and a member account, each with an agent.
type routesEnv struct {
	t                 *testing.T
	b                 *Backend
	admin, member     string // session tokens
	adminID, memberID string
	adminAgent        string
	memberAgent       string
}

// LoginAdminAndMember logs in b's local admin and a new member ("mia", password "member
// password 1", id "member1"), and returns their session tokens and account ids (the external
// tests' attack table uses it too).
func LoginAdminAndMember(t *testing.T, b *Backend) (admin, adminID, member, memberID string) {
	t.Helper()
	adm, err := b.LocalSession()
	if err != nil {
		t.Fatal(err)
	}
	hash, err := auth.HashPassword("member password 1")
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Store.CreateAccount(store.Account{ID: "member1", Username: "mia", PasswordHash: hash, Role: store.RoleMember}); err != nil {
		t.Fatal(err)
	}
	p, err := b.Auth.Login("mia", "member password 1", "test")
	if err != nil {
		t.Fatal(err)
	}
	return adm.Token, adm.AccountID, p.Token, p.AccountID
}

func newRoutesEnv(t *testing.T) *routesEnv {
	t.Helper()
	b, err := New(Config{DataDir: t.TempDir(), Engine: "none", AllowedHosts: []string{"127.0.0.1"},
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	if err := b.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	if err := b.WaitEngine(t.Context()); err != nil {
		t.Fatal(err)
	}
	e := &routesEnv{t: t, b: b}
	e.admin, e.adminID, e.member, e.memberID = LoginAdminAndMember(t, b)
	e.adminAgent = e.agent(e.admin, "Ada")
	e.memberAgent = e.agent(e.member, "Max")
	return e
}

func (e *routesEnv) call(token, method, path, body string) (int, string) {
	e.t.Helper()
	r := httptest.NewRequest(method, path, strings.NewReader(body))
	r.Host = "127.0.0.1"
	if token != "" {
		r.Header.Set("Authorization", "Bearer "+token)
	}
	if method != "GET" {
		r.Header.Set("Content-Type", "application/json")
	}
	rec := httptest.NewRecorder()
	e.b.API.Handler().ServeHTTP(rec, r)
	return rec.Code, rec.Body.String()
}

func (e *routesEnv) agent(token, name string) string {
	e.t.Helper()
	code, body := e.call(token, "POST", "/api/app/agents", `{"name":"`+name+`"}`)
	if code != 201 {
		e.t.Fatalf("create agent: %d %s", code, body)
	}
	var a struct{ ID string }
	json.Unmarshal([]byte(body), &a)
	return a.ID
}

// state is everything the routes under test may change, to check that a refusal changed nothing.
func (e *routesEnv) state() any {
	e.t.Helper()
	agents, err := e.b.Store.Agents("")
	if err != nil {
		e.t.Fatal(err)
	}
	ns, err := e.b.Store.NodeSettings("local")
	if err != nil {
		e.t.Fatal(err)
	}
	return []any{agents, ns}
}

// TestComputerSettingsRoutes is the table of the computer settings routes of issue 13 against
// the real handler and the real backend: the owner may, another account gets 404 (ids do not
// leak), members are refused the admin host setting, and bad input answers 400 — and every
// refusal changes nothing.
func TestComputerSettingsRoutes(t *testing.T) {
	e := newRoutesEnv(t)
	mine := "/api/app/agents/" + e.memberAgent
	theirs := "/api/app/agents/" + e.adminAgent
	cases := []struct {
		name, who, method, path, body string
		status                        int
		has                           string // in the answer
		changes                       bool   // the call is allowed to change state
	}{
		// PUT workdir
		{"workdir: owner", "member", "PUT", mine + "/workdir", `{"workdir":"projects/site"}`, 200, `"workdir":"projects/site"`, true},
		{"workdir: absolute", "member", "PUT", mine + "/workdir", `{"workdir":"/srv/data"}`, 200, `"workdir":"/srv/data"`, true},
		{"workdir: default", "member", "PUT", mine + "/workdir", `{"workdir":"."}`, 200, `"rebuilt":false`, true},
		{"workdir: another account's agent", "member", "PUT", theirs + "/workdir", `{"workdir":"x"}`, 404, "not_found", false},
		{"workdir: admin on a member's agent", "admin", "PUT", mine + "/workdir", `{"workdir":"x"}`, 404, "not_found", false},
		{"workdir: no such agent", "member", "PUT", "/api/app/agents/nope/workdir", `{"workdir":"x"}`, 404, "", false},
		{"workdir: missing field", "member", "PUT", mine + "/workdir", `{}`, 400, "workdir", false},
		{"workdir: escapes with ..", "member", "PUT", mine + "/workdir", `{"workdir":"../etc"}`, 400, "invalid", false},
		{"workdir: control character", "member", "PUT", mine + "/workdir", `{"workdir":"a\u0007b"}`, 400, "invalid", false},
		{"workdir: not JSON", "member", "PUT", mine + "/workdir", `workdir=x`, 400, "invalid", false},
		{"workdir: wrong type", "member", "PUT", mine + "/workdir", `{"workdir":7}`, 400, "invalid", false},
		{"workdir: no login", "", "PUT", mine + "/workdir", `{"workdir":"x"}`, 401, "", false},
		// PUT lazy-init
		{"lazy-init: owner, eager", "member", "PUT", mine + "/lazy-init", `{"lazyInit":false}`, 200, `"lazyInit":false`, true},
		{"lazy-init: owner, lazy", "member", "PUT", mine + "/lazy-init", `{"lazyInit":true}`, 200, `"lazyInit":true`, true},
		{"lazy-init: another account's agent", "admin", "PUT", mine + "/lazy-init", `{"lazyInit":false}`, 404, "not_found", false},
		{"lazy-init: missing field", "member", "PUT", mine + "/lazy-init", `{"lazy":false}`, 400, "lazyInit", false},
		{"lazy-init: wrong type", "member", "PUT", mine + "/lazy-init", `{"lazyInit":"no"}`, 400, "invalid", false},
		{"lazy-init: empty body", "member", "PUT", mine + "/lazy-init", ``, 400, "invalid", false},
		// GET computer-plan
		{"plan: owner", "member", "GET", mine + "/computer-plan", "", 200, `"agentId":"` + e.memberAgent + `"`, false},
		{"plan: says the computer", "member", "GET", mine + "/computer-plan", "", 200, `"computer":"vm"`, false},
		{"plan: another account's agent", "admin", "GET", mine + "/computer-plan", "", 404, "not_found", false},
		{"plan: no login", "", "GET", mine + "/computer-plan", "", 401, "", false},
		// GET/PUT admin host
		{"host: admin reads", "admin", "GET", "/api/app/admin/host", "", 200, `"screenControl":false`, false},
		{"host: member may not read", "member", "GET", "/api/app/admin/host", "", 403, "forbidden", false},
		{"host: member may not change", "member", "PUT", "/api/app/admin/host", `{"screenControl":true,"requestId":"m1"}`, 403, "forbidden", false},
		{"host: missing field", "admin", "PUT", "/api/app/admin/host", `{"requestId":"a0"}`, 400, "screenControl", false},
		{"host: wrong type", "admin", "PUT", "/api/app/admin/host", `{"screenControl":"on","requestId":"a0"}`, 400, "invalid", false},
		{"host: not JSON", "admin", "PUT", "/api/app/admin/host", `on`, 400, "invalid", false},
		{"host: admin turns it on", "admin", "PUT", "/api/app/admin/host", `{"screenControl":true,"requestId":"a1"}`, 200, `"screenControl":true`, true},
		{"host: a repeated request id changes nothing", "admin", "PUT", "/api/app/admin/host", `{"screenControl":false,"requestId":"a1"}`, 200, `"screenControl":true`, false},
		{"host: admin turns it off", "admin", "PUT", "/api/app/admin/host", `{"screenControl":false,"requestId":"a2"}`, 200, `"screenControl":false`, true},
	}
	tokens := map[string]string{"admin": e.admin, "member": e.member, "": ""}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			before := e.state()
			code, body := e.call(tokens[c.who], c.method, c.path, c.body)
			if code != c.status || !strings.Contains(body, c.has) {
				t.Fatalf("%s %s as %q: %d %s; want %d with %q", c.method, c.path, c.who, code, body, c.status, c.has)
			}
			if !c.changes && !reflect.DeepEqual(before, e.state()) {
				t.Fatalf("the call changed the stored state:\nbefore %+v\nafter  %+v", before, e.state())
			}
		})
	}
	// What the owner saved is what the agent now has.
	a, err := e.b.Store.Agent(e.memberAgent)
	if err != nil || a.WorkDir != "." || a.LazyInit != nil {
		t.Fatalf("saved agent %+v, %v", a, err)
	}
}

// TestAgentDeletionRoutes: the preview and the delete of an agent are the owner's only, bad
// options change nothing, and a delete removes the agent.
func TestAgentDeletionRoutes(t *testing.T) {
	e := newRoutesEnv(t)
	mine := "/api/app/agents/" + e.memberAgent
	for _, c := range []struct {
		name, who, method, path, body string
		status                        int
		has                           string
	}{
		{"preview: owner", "member", "GET", mine + "/deletion", "", 200, `"volumes":[]`},
		{"preview: another account", "admin", "GET", mine + "/deletion", "", 404, "not_found"},
		{"preview without sizes: owner", "member", "GET", mine + "/deletion?sizes=0", "", 200, `"sizeBytes":0`},
		{"preview without sizes: another account", "admin", "GET", mine + "/deletion?sizes=0", "", 404, "not_found"},
		{"delete: another account", "admin", "DELETE", mine, "", 404, "not_found"},
		{"delete: data without the desktop", "member", "DELETE", mine, `{"removeDesktop":false,"deleteData":true}`, 400, "removeDesktop"},
		{"delete: not JSON", "member", "DELETE", mine, `yes`, 400, "invalid"},
	} {
		t.Run(c.name, func(t *testing.T) {
			before := e.state()
			code, body := e.call(map[string]string{"admin": e.admin, "member": e.member}[c.who], c.method, c.path, c.body)
			if code != c.status || !strings.Contains(body, c.has) {
				t.Fatalf("%d %s; want %d with %q", code, body, c.status, c.has)
			}
			if !reflect.DeepEqual(before, e.state()) {
				t.Fatal("a refused or read-only call changed the stored state")
			}
		})
	}
	if code, body := e.call(e.member, "DELETE", mine, `{"removeDesktop":true,"deleteData":false}`); code != http.StatusNoContent {
		t.Fatalf("delete: %d %s", code, body)
	}
	if _, err := e.b.Store.Agent(e.memberAgent); err == nil {
		t.Fatal("the agent is still there")
	}
	if code, _ := e.call(e.member, "GET", mine+"/deletion", ""); code != 404 {
		t.Fatalf("preview of a deleted agent: %d", code)
	}
}
