package backend_test

import (
	"net/http"
	"strings"
	"testing"
)

// TestPlacementNeedsAGrant: a member places an agent on a runner only where an administrator
// granted placement for that account and node (like host access); the server's own node
// stays open to everyone. Before, a member could put an agent on any runner.
func TestPlacementNeedsAGrant(t *testing.T) {
	e := newAttackEnv(t)
	place := "/api/app/agents/" + e.memberAgent + "/node"
	code, body := e.send(t, attack{method: "PUT", path: place, token: e.member, body: `{"nodeId":"` + e.runnerID + `"}`})
	if code != http.StatusForbidden || !strings.Contains(body, "administrator") {
		t.Fatalf("a member placing an agent on a runner without a grant: %d %s; want 403 saying an administrator must grant it", code, body)
	}
	if a, err := e.b.Store.Agent(e.memberAgent); err != nil || a.NodeID != "" {
		t.Fatalf("the refused placement moved the agent: %+v %v", a, err)
	}
	// A member cannot grant it to themselves.
	grant := "/api/app/admin/users/" + e.memberID + "/host-access"
	if code, body := e.send(t, attack{method: "PUT", path: grant, token: e.member, body: `{"nodeId":"` + e.runnerID + `","placement":true}`}); code != http.StatusForbidden {
		t.Fatalf("a member granting themselves placement: %d %s", code, body)
	}
	// The admin grants placement on that runner: the member may now place the agent there.
	if code, body := e.send(t, attack{method: "PUT", path: grant, token: e.admin, body: `{"nodeId":"` + e.runnerID + `","placement":true}`}); code != http.StatusOK || !strings.Contains(body, `"placement":true`) {
		t.Fatalf("admin grants placement: %d %s", code, body)
	}
	if code, body := e.send(t, attack{method: "PUT", path: place, token: e.member, body: `{"nodeId":"` + e.runnerID + `"}`}); code != http.StatusOK {
		t.Fatalf("a granted member placing the agent: %d %s", code, body)
	}
	// The server's own node needs no grant; withdrawing the grant stops new placements there.
	if code, body := e.send(t, attack{method: "PUT", path: place, token: e.member, body: `{"nodeId":"local"}`}); code != http.StatusOK {
		t.Fatalf("a member placing the agent back on the server's own node: %d %s", code, body)
	}
	if code, body := e.send(t, attack{method: "PUT", path: grant, token: e.admin, body: `{"nodeId":"` + e.runnerID + `","placement":false}`}); code != http.StatusOK {
		t.Fatalf("admin withdraws placement: %d %s", code, body)
	}
	if code, body := e.send(t, attack{method: "PUT", path: place, token: e.member, body: `{"nodeId":"` + e.runnerID + `"}`}); code != http.StatusForbidden {
		t.Fatalf("placement after the grant was withdrawn: %d %s", code, body)
	}
	// Administrators place on any node.
	if code, body := e.send(t, attack{method: "PUT", path: "/api/app/agents/" + e.adminAgent + "/node", token: e.admin, body: `{"nodeId":"` + e.runnerID + `"}`}); code != http.StatusOK {
		t.Fatalf("an administrator placing an agent on a runner: %d %s", code, body)
	}
}
