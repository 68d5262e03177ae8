package backend

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
)

// TestLocalVMAdminRoutesPerNode: every admin route of Settings → Local VM acts on ?node=: an
// unknown node is 404, a registered runner that is not connected is 503 naming it, a revoked
// one is refused too, and none of them touches the local node's settings.
func TestLocalVMAdminRoutesPerNode(t *testing.T) {
	e := newRoutesEnv(t)
	code, body := e.call(e.admin, "POST", "/api/app/admin/runners", `{"name":"desk box"}`)
	if code != http.StatusCreated {
		t.Fatalf("add runner: %d %s", code, body)
	}
	var created struct{ ID string }
	json.Unmarshal([]byte(body), &created)
	code, before := e.call(e.admin, "GET", "/api/app/admin/local-vm", "")
	if code != http.StatusOK {
		t.Fatalf("local status: %d %s", code, before)
	}
	routes := []struct{ method, path, body string }{
		{"GET", "/api/app/admin/local-vm", ""},
		{"POST", "/api/app/admin/local-vm/prepare", `{"imageKey":"standard"}`},
		{"POST", "/api/app/admin/local-vm/prepare?wait=1", `{"imageKey":"standard"}`},
		{"PUT", "/api/app/admin/local-vm/policy", `{"isolation":"per-agent","maxInstances":3}`},
		{"PUT", "/api/app/admin/local-vm/idle-policy", `{"requestId":"r1","idleStopMinutes":7}`},
		{"PUT", "/api/app/admin/local-vm/image-sources", `{"standard":{"image":"docker.io/library/debian:bookworm"}}`},
		{"POST", "/api/app/admin/local-vm/instances/vm-x/stop", ""},
		{"POST", "/api/app/admin/local-vm/instances/vm-x/remove", `{"force":true}`},
		{"DELETE", "/api/app/admin/local-vm/instances/vm-x/data", ""},
		{"GET", "/api/app/admin/local-vm/engine", ""},
		{"PUT", "/api/app/admin/local-vm/engine", `{"requestId":"e1","kind":"docker"}`},
	}
	with := func(path, node string) string {
		if strings.Contains(path, "?") {
			return path + "&node=" + node
		}
		return path + "?node=" + node
	}
	for _, rt := range routes {
		code, body := e.call(e.admin, rt.method, with(rt.path, "r-nosuchnode"), rt.body)
		if code != http.StatusNotFound || !strings.Contains(body, "r-nosuchnode") {
			t.Errorf("%s %s on an unknown node: %d %s, want 404 naming it", rt.method, rt.path, code, body)
		}
		code, body = e.call(e.admin, rt.method, with(rt.path, created.ID), rt.body)
		want := http.StatusServiceUnavailable
		if strings.HasSuffix(rt.path, "/engine") {
			want = http.StatusBadRequest // chosen on the runner's machine
		}
		if code != want || !strings.Contains(body, created.ID) {
			t.Errorf("%s %s on a disconnected runner: %d %s, want %d naming it", rt.method, rt.path, code, body, want)
		}
		if want == http.StatusServiceUnavailable && !strings.Contains(body, "desk box") {
			t.Errorf("%s %s: the refusal does not name the runner: %s", rt.method, rt.path, body)
		}
		// Members are refused whatever the node.
		if code, _ := e.call(e.member, rt.method, with(rt.path, created.ID), rt.body); code != http.StatusForbidden {
			t.Errorf("%s %s as a member: %d", rt.method, rt.path, code)
		}
	}
	// Nothing of that reached the local node.
	if code, after := e.call(e.admin, "GET", "/api/app/admin/local-vm?node=local", ""); code != http.StatusOK || !samePolicy(t, before, after) {
		t.Fatalf("the local node changed: %d\n%s\n%s", code, before, after)
	}
	// Revoked: refused, naming it.
	if code, body := e.call(e.admin, "DELETE", "/api/app/admin/runners/"+created.ID, ""); code != http.StatusOK {
		t.Fatalf("revoke: %d %s", code, body)
	}
	code, body = e.call(e.admin, "PUT", "/api/app/admin/local-vm/policy?node="+created.ID, `{"isolation":"shared","maxInstances":1}`)
	if code < 400 || !strings.Contains(body, "revoked") {
		t.Fatalf("policy on a revoked runner: %d %s", code, body)
	}
}

// samePolicy compares the policy of two Local VM status answers.
func samePolicy(t *testing.T, a, b string) bool {
	t.Helper()
	var x, y struct{ Policy map[string]any }
	if json.Unmarshal([]byte(a), &x) != nil || json.Unmarshal([]byte(b), &y) != nil {
		return false
	}
	xs, _ := json.Marshal(x.Policy)
	ys, _ := json.Marshal(y.Policy)
	return string(xs) == string(ys)
}
