package api

import (
	"reflect"
	"strings"
	"testing"

	"cubicle/backend/agent"
	"cubicle/backend/security"
)

// Settings → Security through the API (issue 15, item 10): every part can be set by an
// administrator, bad input is refused with a message and changes nothing.
func TestSecuritySettingsRoutes(t *testing.T) {
	f := newFixture(t)
	base := decodeBody[security.View](t, f.do(req{method: "GET", path: "/api/app/admin/security", cookie: f.admin}))
	if base.EffectiveLevel != "AUTO" || len(base.BuiltinProtected) != 1 || base.BuiltinVMProtected[0] != "/run/cubicle" {
		t.Fatalf("defaults %+v", base)
	}
	for _, tc := range []struct{ body, says string }{
		{`{"guardLevel":"LOUD"}`, "STRICT, SMART, AUTO or OFF"},
		{`{"deniedTools":["host_["]}`, "bad pattern"},
		{`{"protectedPaths":["relative/dir"]}`, "must be absolute"},
		{`{"protectedPaths":["~/../etc"]}`, "without .."},
		{`{"protectedPaths":["~bob/.ssh"]}`, "give other paths in full"},
		{`{"vmProtectedPaths":["etc"]}`, "must be absolute"},
		{`{"accessPolicy":{"host_shell":"maybe"}}`, "allow, ask or deny"},
		{`{"modelEndpoints":[{"baseUrl":"ftp://x"}]}`, "http(s) URL"},
		{`{"modelEndpoints":[{"baseUrl":"https://u:p@x.example/v1"}]}`, "user name"},
		{`{"desktopHostPorts":[70000]}`, "TCP port"},
		{`{"guardLevel":5}`, "not valid JSON"},
	} {
		rec := f.do(req{method: "PUT", path: "/api/app/admin/security", cookie: f.admin, body: tc.body})
		if rec.Code != 400 || !strings.Contains(rec.Body.String(), tc.says) {
			t.Errorf("%s: %d %s", tc.body, rec.Code, rec.Body)
		}
	}
	if now := f.srv.cfg.Security.View(); !reflect.DeepEqual(now, base) {
		t.Fatalf("refused input changed the settings: %+v", now)
	}
	rec := f.do(req{method: "PUT", path: "/api/app/admin/security", cookie: f.admin, body: `{"guardLevel":"smart","deniedTools":["host_shell"],
		"protectedPaths":["/srv/secrets"],"vmProtectedPaths":["/home/cua/.ssh"],"accessPolicy":{"computer_type":"ask","host_*":"deny"},
		"modelEndpoints":[{"baseUrl":"http://10.0.0.5:8000/v1","allowPrivate":true}],"desktopHostPorts":[8080,443,8080]}`})
	if rec.Code != 200 {
		t.Fatalf("save: %d %s", rec.Code, rec.Body)
	}
	v := decodeBody[security.View](t, rec)
	if v.EffectiveLevel != "SMART" || v.DeniedTools[0] != "host_shell" || v.AccessPolicy["host_*"] != "deny" || !v.ModelEndpoints[0].AllowPrivate ||
		!reflect.DeepEqual(v.DesktopHostPorts, []int{443, 8080}) || v.UpdatedBy == "" || v.UpdatedAt == nil {
		t.Fatalf("saved %+v", v)
	}
	// The settings are what decides: the access policy now asks before typing, and denies host tools.
	sec := f.srv.cfg.Security.(*security.Service)
	turn := agent.TurnInfo{UserID: "user1", AgentID: "a1"}
	if d, _ := sec.Check(turn, agent.ToolCall{Name: "computer_type", Input: map[string]any{"text": "hello"}}); d != agent.Ask {
		t.Fatalf("computer_type: %s", d)
	}
	if d, _ := sec.Check(turn, agent.ToolCall{Name: "host_read_file", Input: map[string]any{"path": "/tmp/x"}}); d != agent.Deny {
		t.Fatalf("host_read_file: %s", d)
	}
	if d, _ := sec.Check(turn, agent.ToolCall{Name: "mcp_drop_db"}); d != agent.Deny {
		t.Fatalf("an unknown tool: %s", d)
	}
	// Allow rules: added by the admin for every agent or one, listed, removed.
	if rec := f.do(req{method: "POST", path: "/api/app/admin/security/allow-rules", cookie: f.admin, body: `{"tool":"computer_shell","pattern":"("}`}); rec.Code != 400 {
		t.Fatalf("bad pattern: %d", rec.Code)
	}
	if rec := f.do(req{method: "POST", path: "/api/app/admin/security/allow-rules", cookie: f.admin, body: `{"agentId":"nope","tool":"computer_shell"}`}); rec.Code != 404 {
		t.Fatalf("unknown agent: %d", rec.Code)
	}
	rec = f.do(req{method: "POST", path: "/api/app/admin/security/allow-rules", cookie: f.admin, body: `{"tool":"computer_shell","command":"systemctl   restart nginx"}`})
	if rec.Code != 201 || !strings.Contains(rec.Body.String(), `"command":"systemctl restart nginx"`) {
		t.Fatalf("add: %d %s", rec.Code, rec.Body)
	}
	rule := decodeBody[ruleJSON](t, rec)
	if d, _ := sec.Check(turn, agent.ToolCall{Name: "computer_shell", Input: map[string]any{"command": "sudo systemctl restart nginx"}}); d != agent.Ask {
		t.Fatalf("the rule covered sudo too: %s", d)
	}
	list := decodeBody[struct{ Rules []ruleJSON }](t, f.do(req{method: "GET", path: "/api/app/admin/security/allow-rules", cookie: f.admin}))
	if len(list.Rules) != 1 || list.Rules[0].CreatedByName != "admin" {
		t.Fatalf("rules %+v", list.Rules)
	}
	if rec := f.do(req{method: "DELETE", path: "/api/app/admin/security/allow-rules/" + rule.ID, cookie: f.admin}); rec.Code != 204 {
		t.Fatalf("delete: %d", rec.Code)
	}
	if rec := f.do(req{method: "DELETE", path: "/api/app/admin/security/allow-rules/" + rule.ID, cookie: f.admin}); rec.Code != 404 {
		t.Fatalf("delete twice: %d", rec.Code)
	}
	if rec := f.do(req{method: "GET", path: "/api/app/admin/security/confirmations", cookie: f.admin}); rec.Code != 200 || !strings.Contains(rec.Body.String(), `"confirmations":[]`) {
		t.Fatalf("confirmations: %d %s", rec.Code, rec.Body)
	}
}
