package backend

import (
	"encoding/json"
	"strings"
	"testing"

	"cubicle/backend/setup"
)

// TestSetupRoutes: the first-run routes against the real handler and backend without an
// engine (engine "none"): an administrator gets every step with what to do, a member the
// states only — with their own agents — and neither a member nor anyone logged out reaches the
// administrator's routes; a cancel with nothing running is a 409 that changes nothing.
func TestSetupRoutes(t *testing.T) {
	e := newRoutesEnv(t)
	// The member's only agent has no computer; the admin's keeps the default (vm).
	if code, body := e.call(e.member, "PUT", "/api/app/agents/"+e.memberAgent+"/computer-selection", `{"computer":"none","allowHostEnvironment":false}`); code != 200 {
		t.Fatalf("select computer: %d %s", code, body)
	}
	decode := func(body string) setup.Status {
		var st setup.Status
		if err := json.Unmarshal([]byte(body), &st); err != nil {
			t.Fatal(err)
		}
		return st
	}
	code, body := e.call(e.admin, "GET", "/api/app/admin/setup", "")
	if code != 200 {
		t.Fatalf("admin setup: %d %s", code, body)
	}
	adm := decode(body)
	if adm.Engine.State != setup.Needed || adm.Engine.Detail == "" || adm.Image.State != setup.Needed ||
		!strings.Contains(adm.Image.Detail, "engine first") || adm.Model.State != setup.Needed || adm.Agents.State != setup.Done || adm.Done {
		t.Fatalf("admin's steps: %+v", adm)
	}
	code, body = e.call(e.member, "GET", "/api/app/setup", "")
	if code != 200 {
		t.Fatalf("member setup: %d %s", code, body)
	}
	mem := decode(body)
	if mem.Agents.State != setup.Needed || !strings.Contains(mem.Agents.Detail, "Max has no computer") {
		t.Fatalf("member's agents step: %+v", mem.Agents)
	}
	for name, s := range map[string]setup.Step{"engine": mem.Engine, "image": mem.Image, "model": mem.Model} {
		if !s.Admin || s.State != setup.Needed || s.Detail != "an administrator completes this step" {
			t.Fatalf("member's %s step: %+v", name, s)
		}
	}
	for _, c := range []struct {
		token, method, path string
		want                int
	}{
		{e.member, "GET", "/api/app/admin/setup", 403},
		{e.member, "POST", "/api/app/admin/setup/image/cancel", 403},
		{"", "GET", "/api/app/setup", 401},
		{"", "GET", "/api/app/admin/setup", 401},
		{e.admin, "POST", "/api/app/admin/setup/image/cancel", 409},
	} {
		before := e.state()
		if code, body := e.call(c.token, c.method, c.path, ""); code != c.want {
			t.Errorf("%s %s: %d %s, want %d", c.method, c.path, code, body, c.want)
		}
		if after := e.state(); !equalJSON(before, after) {
			t.Errorf("%s %s changed the state", c.method, c.path)
		}
	}
}

func equalJSON(a, b any) bool {
	x, _ := json.Marshal(a)
	y, _ := json.Marshal(b)
	return string(x) == string(y)
}
