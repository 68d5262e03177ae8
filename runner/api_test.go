package runner_test

import (
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"cubicle/backend/nodes"
	"cubicle/backend/vm"
)

// TestRunnerAdminAPI checks the runners' admin routes and the placement route's refusals
// (no engine needed: the runner has none).
func TestRunnerAdminAPI(t *testing.T) {
	s := startServer(t, "127.0.0.1:0")
	var c nodes.Created
	s.do(t, "POST", "/api/app/admin/runners", map[string]any{"name": "cloud-1", "cloud": true, "serverUrl": "https://cubicle.example:8443/"}, http.StatusCreated, &c)
	if !c.Cloud || !strings.HasPrefix(c.JoinCommand, "cubicle runner --server https://cubicle.example:8443 --token "+c.Token+" ") {
		t.Fatalf("created %+v", c)
	}
	for _, bad := range []map[string]any{
		{"name": "x", "serverUrl": "ftp://host"},
		{"name": "x", "serverUrl": "http://host/$(reboot)"},
		{"name": "x", "serverUrl": "http://"},
		{"name": strings.Repeat("n", 65)},
		{"name": "line\nbreak"},
	} {
		s.do(t, "POST", "/api/app/admin/runners", bad, http.StatusBadRequest, nil)
	}
	var list struct{ Runners []nodes.View }
	s.do(t, "GET", "/api/app/admin/runners", nil, http.StatusOK, &list)
	if len(list.Runners) != 1 {
		t.Fatalf("a refused request added a runner: %+v", list.Runners)
	}
	s.do(t, "DELETE", "/api/app/admin/runners/r-000000000000", nil, http.StatusNotFound, nil)
	s.do(t, "DELETE", "/api/app/admin/runners/local", nil, http.StatusBadRequest, nil)

	var ag struct{ ID string }
	s.do(t, "POST", "/api/app/agents", map[string]string{"name": "Ada"}, http.StatusCreated, &ag)
	s.do(t, "PUT", "/api/app/agents/"+ag.ID+"/node", map[string]string{}, http.StatusBadRequest, nil)
	s.do(t, "PUT", "/api/app/agents/nope/node", map[string]string{"nodeId": c.ID}, http.StatusNotFound, nil)
	s.do(t, "PUT", "/api/app/agents/"+ag.ID+"/node", map[string]string{"nodeId": c.ID}, http.StatusOK, nil)

	// The agent's Local VM routes now go to its runner, which has not connected: its desktop
	// reads as unreachable, saying why (a state, not a failed read); actions are refused.
	var av vm.AgentView
	s.do(t, "GET", "/api/app/agents/"+ag.ID+"/local-vm", nil, http.StatusOK, &av)
	if d := av.Desktop; av.AgentID != ag.ID || d.State != vm.StateUnreachable || d.Health != vm.HealthUnreachable ||
		d.NodeID != c.ID || !strings.Contains(d.LastError, "has not connected yet") || av.Images == nil {
		t.Fatalf("agent on a runner that never connected: %+v", av)
	}
	raw := s.do(t, "POST", "/api/app/agents/"+ag.ID+"/local-vm/start", nil, http.StatusServiceUnavailable, nil)
	if !strings.Contains(raw, "has not connected yet") {
		t.Fatalf("start on a runner that never connected: %s", raw)
	}
	raw = s.do(t, "GET", "/api/app/admin/local-vm?node="+c.ID, nil, http.StatusServiceUnavailable, nil)
	if !strings.Contains(raw, "cloud-1") {
		t.Fatalf("node status of a runner that never connected: %s", raw)
	}
	s.do(t, "GET", "/api/app/admin/local-vm?node=r-000000000000", nil, http.StatusNotFound, nil)
	if d, err := s.b.AgentDesktop(t.Context(), mustAdmin(t, s), ag.ID); err != nil || d.State != "unreachable" {
		t.Fatalf("panel of an agent on a runner that never connected: %+v, %v", d, err)
	}

	// A runner that connects without an engine says so; revoke refuses its agent's calls.
	r := startRunner(t, nil, "--server", s.url, "--token", c.Token, "--data-dir", filepath.Join(t.TempDir(), "r"), "--engine", "none")
	v := s.waitStatus(t, c.ID, nodes.StatusConnected, time.Minute)
	if v.Engine != "" || !strings.Contains(v.EngineError, "turned off") {
		t.Fatalf("runner without an engine: %+v", v)
	}
	raw = s.do(t, "POST", "/api/app/agents/"+ag.ID+"/local-vm/create", nil, http.StatusServiceUnavailable, nil)
	if !strings.Contains(raw, "engine") {
		t.Fatalf("create on a runner without an engine: %s", raw)
	}
	s.do(t, "DELETE", "/api/app/admin/runners/"+c.ID, nil, http.StatusOK, nil)
	if code := r.exitCode(t, time.Minute); code != 5 {
		t.Fatalf("revoked runner: exit %d", code)
	}
	// Placing an agent on a revoked runner is refused; moving it home works.
	var ag2 struct{ ID string }
	s.do(t, "POST", "/api/app/agents", map[string]string{"name": "Bob"}, http.StatusCreated, &ag2)
	s.do(t, "PUT", "/api/app/agents/"+ag2.ID+"/node", map[string]string{"nodeId": c.ID}, http.StatusConflict, nil)
	s.do(t, "PUT", "/api/app/agents/"+ag.ID+"/node", map[string]string{"nodeId": "local"}, http.StatusOK, nil)
}

func mustAdmin(t *testing.T, s *server) string {
	t.Helper()
	a, err := s.b.Auth.Admin()
	if err != nil {
		t.Fatal(err)
	}
	return a.ID
}
