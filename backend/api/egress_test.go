package api

import (
	"context"
	"strings"
	"testing"

	"cubicle/backend/store"
)

// fakeEgress records what the routes hand on (the real one is tested on a real desktop in
// backend's TestDesktopEgressPolicy).
type fakeEgress struct {
	node   store.EgressPolicy
	agents map[string]store.EgressPolicy
	calls  int
}

func (f *fakeEgress) EgressView(context.Context, string) (EgressView, error) {
	v := EgressView{NodeID: "local", Node: f.node}
	for id, p := range f.agents {
		v.Agents = append(v.Agents, AgentEgress{AgentID: id, Policy: p})
	}
	return v, nil
}

func (f *fakeEgress) SetNodeEgress(ctx context.Context, by, node string, p store.EgressPolicy) (EgressView, error) {
	f.calls++
	f.node = p
	return f.EgressView(ctx, "")
}

func (f *fakeEgress) SetAgentEgress(ctx context.Context, by, id string, p *store.EgressPolicy) (EgressView, error) {
	f.calls++
	if p == nil {
		delete(f.agents, id)
	} else {
		f.agents[id] = *p
	}
	return f.EgressView(ctx, "")
}

func (f *fakeEgress) AllowEgress(ctx context.Context, by, node, id, dest string) (EgressView, error) {
	f.calls++
	f.node.Allow = append(f.node.Allow, dest)
	return f.EgressView(ctx, "")
}

// The egress routes (issue 26, item 2): administrators only, bad policies refused with a 400
// that says what to write, nothing handed on; good ones normalized.
func TestEgressRoutes(t *testing.T) {
	f := newFixture(t)
	fe := &fakeEgress{agents: map[string]store.EgressPolicy{}}
	f.srv.cfg.Egress = fe
	for _, r := range []req{
		{method: "GET", path: "/api/app/admin/egress", cookie: f.user},
		{method: "PUT", path: "/api/app/admin/egress/nodes/local", cookie: f.user, body: `{"mode":"open"}`},
		{method: "PUT", path: "/api/app/admin/egress/agents/a1", cookie: f.user, body: `{"mode":"closed"}`},
		{method: "DELETE", path: "/api/app/admin/egress/agents/a1", cookie: f.user},
		{method: "POST", path: "/api/app/admin/egress/allow", cookie: f.user, body: `{"destination":"x.com"}`},
	} {
		if rec := f.do(r); rec.Code != 403 {
			t.Errorf("a member: %s %s: %d", r.method, r.path, rec.Code)
		}
	}
	for _, tc := range []struct{ path, body, says string }{
		{"/api/app/admin/egress/nodes/local", `{}`, "mode is required"},
		{"/api/app/admin/egress/nodes/local", `{"mode":""}`, "mode is required"},
		{"/api/app/admin/egress/nodes/local", `{"mode":"sometimes"}`, `use \"open\", \"allow-list\" or \"closed\"`},
		{"/api/app/admin/egress/nodes/local", `{"mode":"closed","allow":["a.com"]}`, "takes no allow entries"},
		{"/api/app/admin/egress/nodes/local", `{"mode":"allow-list","allow":["https://a.com/"]}`, "not a URL"},
		{"/api/app/admin/egress/nodes/local", `{"mode":"allow-list","allow":["a.com:443"]}`, "without a port"},
		{"/api/app/admin/egress/nodes/local", `{"mode":"allow-list","allow":["10.0.0.0/99"]}`, "not a CIDR"},
		{"/api/app/admin/egress/nodes/local", `{"mode":"allow-list","allow":"a.com"}`, "not valid JSON"},
		{"/api/app/admin/egress/agents/a1", `{"mode":"allow-list","allow":["*"]}`, "not a host name"},
	} {
		rec := f.do(req{method: "PUT", path: tc.path, cookie: f.admin, body: tc.body})
		if rec.Code != 400 || !strings.Contains(rec.Body.String(), tc.says) {
			t.Errorf("%s %s: %d %s (want 400 saying %s)", tc.path, tc.body, rec.Code, rec.Body, tc.says)
		}
	}
	if rec := f.do(req{method: "POST", path: "/api/app/admin/egress/allow", cookie: f.admin, body: `{"destination":"http://x.com/a"}`}); rec.Code != 400 {
		t.Errorf("allow a URL: %d %s", rec.Code, rec.Body)
	}
	if fe.calls != 0 {
		t.Fatalf("refused input was handed on %d times", fe.calls)
	}
	rec := f.do(req{method: "PUT", path: "/api/app/admin/egress/nodes/local", cookie: f.admin, body: `{"mode":"Allow-List","allow":["PyPI.org","10.1.2.3","10.0.0.0/8"]}`})
	v := decodeBody[EgressView](t, rec)
	if rec.Code != 200 || v.Node.Mode != "allow-list" || strings.Join(v.Node.Allow, " ") != "10.0.0.0/8 10.1.2.3/32 pypi.org" {
		t.Fatalf("saved: %d %+v", rec.Code, v)
	}
	if rec := f.do(req{method: "PUT", path: "/api/app/admin/egress/agents/a1", cookie: f.admin, body: `{"mode":"closed"}`}); rec.Code != 200 || fe.agents["a1"].Mode != "closed" {
		t.Fatalf("agent's own: %d %s", rec.Code, rec.Body)
	}
	if rec := f.do(req{method: "DELETE", path: "/api/app/admin/egress/agents/a1", cookie: f.admin}); rec.Code != 200 || len(fe.agents) != 0 {
		t.Fatalf("agent back to the node's: %d %s", rec.Code, rec.Body)
	}
	if rec := f.do(req{method: "POST", path: "/api/app/admin/egress/allow", cookie: f.admin, body: `{"agentId":"a1","destination":"10.9.9.9"}`}); rec.Code != 200 {
		t.Fatalf("allow: %d %s", rec.Code, rec.Body)
	}
	f.srv.cfg.Egress = nil
	if rec := f.do(req{method: "GET", path: "/api/app/admin/egress", cookie: f.admin}); rec.Code != 503 {
		t.Fatalf("without egress: %d", rec.Code)
	}
}
