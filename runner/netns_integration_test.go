package runner_test

import (
	"net/http"
	"os/exec"
	"strings"
	"testing"
	"time"

	"cubicle/backend/agent"
	"cubicle/backend/nodes"
	"cubicle/backend/vm"
	"cubicle/internal/netns"
)

// host is a network namespace standing for another machine (internal/netns): a veth pair
// joins it to the server's namespace, with a /30 of the project's test subnet 10.231.0.0/16.
type host struct{ *netns.Host }

// newHost makes a namespace; everything is removed when the test ends, failed or not.
func newHost(t *testing.T) *host {
	t.Helper()
	if _, err := exec.LookPath("ip"); err != nil {
		t.Skip("needs iproute2 (ip netns)")
	}
	h, err := netns.New("cubr")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.Close() })
	return &host{h}
}

// link sets the host's link up or down.
func (h *host) link(t *testing.T, up bool) {
	t.Helper()
	if err := h.SetLink(up); err != nil {
		t.Fatal(err)
	}
}

// wrap runs a command inside the host's namespace.
func (h *host) wrap() []string { return h.Wrap() }

// TestRunnersInNetworkNamespaces: two runners on "other machines" (their own network
// namespaces, reaching the server over a veth link) with different capacity; the link goes
// down (fail closed) and up (reconnect, reconcile).
func TestRunnersInNetworkNamespaces(t *testing.T) {
	needEngine(t)
	a, b := newHost(t), newHost(t)
	// The server listens on the first host's link; the second reaches it through its own
	// link and the server's namespace's routing.
	s := startServer(t, a.ServerAddr+":0")
	port := s.url[strings.LastIndex(s.url, ":"):]
	admin, err := s.b.Auth.Admin()
	if err != nil {
		t.Fatal(err)
	}
	start := func(h *host, name string) (nodes.Created, []string, *proc) {
		var c nodes.Created
		s.do(t, "POST", "/api/app/admin/runners", map[string]any{"name": name}, http.StatusCreated, &c)
		t.Cleanup(func() { removeNodeObjects(t, c.ID) })
		// From the second host the server is reached at the first link's address via the
		// second host's gateway.
		if h != a {
			if err := h.Route(a.ServerAddr+"/32", h.ServerAddr); err != nil {
				t.Fatal(err)
			}
		}
		args := []string{"--server", "http://" + a.ServerAddr + port, "--token", c.Token, "--data-dir", t.TempDir(), "--engine", "podman"}
		p := startRunner(t, h.wrap(), args...)
		s.waitStatus(t, c.ID, nodes.StatusConnected, 2*time.Minute)
		return c, args, p
	}
	ra, _, _ := start(a, "host-a")
	rb, _, _ := start(b, "host-b")

	// Capacity is per node: A takes one desktop, B two.
	for node, max := range map[string]int{ra.ID: 1, rb.ID: 2} {
		s.do(t, "PUT", "/api/app/admin/local-vm/policy?node="+node, map[string]any{"isolation": "per-agent", "maxInstances": max}, http.StatusOK, nil)
		s.do(t, "POST", "/api/app/admin/local-vm/prepare?wait=1&node="+node, map[string]string{"imageKey": "standard"}, http.StatusOK, nil)
	}
	if va, vb := s.runnerView(t, ra.ID), s.runnerView(t, rb.ID); va.Desktops.Max != 1 || vb.Desktops.Max != 2 {
		t.Fatalf("capacity: %s %+v, %s %+v", va.Name, va.Desktops, vb.Name, vb.Desktops)
	}
	agentOn := func(name, node string) string {
		var ag struct{ ID string }
		s.do(t, "POST", "/api/app/agents", map[string]string{"name": name}, http.StatusCreated, &ag)
		s.do(t, "PUT", "/api/app/agents/"+ag.ID+"/node", map[string]string{"nodeId": node}, http.StatusOK, nil)
		return ag.ID
	}
	ada, bob := agentOn("Ada", ra.ID), agentOn("Bob", ra.ID)
	state, text := s.shell(t, admin.ID, ada, "n1", "echo on-host-a", 3*time.Minute)
	if state != agent.StateSuccess || !strings.Contains(text, "on-host-a") {
		t.Fatalf("/shell on host A: %s %q", state, text)
	}
	// A is full; B's room does not count for it.
	raw := s.do(t, "POST", "/api/app/agents/"+bob+"/local-vm/create", nil, http.StatusConflict, nil)
	if !strings.Contains(raw, "at most 1 desktops") || !strings.Contains(raw, "Ada") {
		t.Fatalf("full node's refusal: %s", raw)
	}
	s.do(t, "PUT", "/api/app/agents/"+bob+"/node", map[string]string{"nodeId": rb.ID}, http.StatusOK, nil)
	state, text = s.shell(t, admin.ID, bob, "n2", "echo on-host-b", 3*time.Minute)
	if state != agent.StateSuccess || !strings.Contains(text, "on-host-b") {
		t.Fatalf("/shell on host B: %s %q", state, text)
	}
	var st vm.Status
	s.do(t, "GET", "/api/app/admin/local-vm?node="+rb.ID, nil, http.StatusOK, &st)
	if st.Running != 1 || len(st.Instances) != 1 || st.Instances[0].AgentID != bob {
		t.Fatalf("host B's desktops: %+v", st.Instances)
	}

	// Host A's link goes down: the server notices, refuses A's calls; B is untouched.
	a.link(t, false)
	s.waitStatus(t, ra.ID, nodes.StatusDisconnected, 2*time.Minute)
	state, text = s.shell(t, admin.ID, ada, "n3", "echo must-not-run", time.Minute)
	if state == agent.StateSuccess || !strings.Contains(text, "disconnected") {
		t.Fatalf("/shell with host A's link down: %s %q", state, text)
	}
	// Up again: the runner reconnects by itself and its desktop is there, as it was.
	a.link(t, true)
	s.waitStatus(t, ra.ID, nodes.StatusConnected, 3*time.Minute)
	state, text = s.shell(t, admin.ID, ada, "n4", "echo back-on-host-a", 3*time.Minute)
	if state != agent.StateSuccess || !strings.Contains(text, "back-on-host-a") {
		t.Fatalf("/shell after host A's link came back: %s %q", state, text)
	}
	s.do(t, "GET", "/api/app/admin/local-vm?node="+ra.ID, nil, http.StatusOK, &st)
	if st.Running != 1 || st.Instances[0].AgentID != ada {
		t.Fatalf("host A's desktops after the reconnect: %+v", st.Instances)
	}
}
