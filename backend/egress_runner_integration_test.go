//go:build linux

package backend

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http/httptest"
	"net/netip"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"cubicle/backend/agent"
	"cubicle/backend/deskegress"
	"cubicle/backend/events"
	"cubicle/backend/fault"
	"cubicle/backend/guest"
	"cubicle/backend/nodes"
	"cubicle/backend/store"
	"cubicle/backend/vm"
	"cubicle/internal/netns"
	"cubicle/internal/runnertest"
	"cubicle/internal/testenv"
	"cubicle/runner"
	"cubicle/runner/wire"
)

// TestDesktopEgressOnARunner (issue 26): a desktop egress policy for a runner's desktops. A real
// server without an engine of its own and an in-process runner on the real Podman engine,
// connected over HTTP (as `cubicle runner` runs); services in network namespaces of the test's
// own stand for other machines. The admin API's policy for the runner node reaches the runner
// over its link (wire.OpSetEgress), which enforces it with the same code as the server in its
// desktop's network namespace: from inside the desktop an allowed name is reached, another
// address is refused at once (a reset, not a timeout), and the refusal arrives on the server's
// event bus as desktop.egress_blocked with the runner's node, the desktop and the agent, and in
// the runner's Settings view. A runner without the capability is refused with 409 saying to
// update it, and nothing is saved.
func TestDesktopEgressOnARunner(t *testing.T) {
	testenv.RootPodman(t)
	if testing.Short() {
		t.Skip("real desktop test; run without -short")
	}
	if err := netns.Available(); err != nil {
		t.Fatal(err)
	}
	var hosts [2]*netns.Host
	var ports [2]int
	for i := range hosts {
		h, err := netns.New("cuer")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { h.Close() })
		if err := h.Route("default", h.ServerAddr); err != nil {
			t.Fatal(err)
		}
		hosts[i], ports[i] = h, listenInHost(t, h)
	}
	allowed, other := hosts[0], hosts[1]
	names := map[string]string{"svc.egress.test": allowed.Addr}
	lookup := func(ctx context.Context, network, host string) ([]netip.Addr, error) {
		if a, ok := names[host]; ok {
			if network == "ip4" {
				return []netip.Addr{netip.MustParseAddr(a)}, nil
			}
			return nil, nil
		}
		return nil, &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}
	}

	dir := t.TempDir()
	log := testenv.Logger(t, slog.LevelWarn)
	b, err := New(Config{DataDir: filepath.Join(dir, "server"), Engine: "none", LocalNode: LocalNodeDirect,
		AllowedHosts: []string{"127.0.0.1"}, Logger: log.With("side", "server")})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	t.Cleanup(func() { b.Close() })
	if err := b.Start(ctx); err != nil {
		t.Fatal(err)
	}
	if err := b.WaitEngine(ctx); err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(b.API.Handler())
	t.Cleanup(hs.Close)
	srv := hs.URL
	adminAcc, err := b.Auth.Admin()
	if err != nil {
		t.Fatal(err)
	}
	eg := b.Egress
	policy := store.EgressPolicy{Mode: deskegress.AllowList, Allow: []string{"svc.egress.test"}}

	// An older runner (without the capability): 409, saying to update it; nothing saved.
	old, err := b.Nodes.Create("old runner", false, srv)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { removeLabelled(t, map[string]string{vm.LabelNode: old.ID}) })
	oldRunner := runnertest.Start(t, runner.Config{Server: srv, Token: old.Token, DataDir: filepath.Join(dir, "old"), Engine: "podman",
		ConnectEngine: ConnectRunnerEngine, NoHostTools: true, MaxBackoff: time.Second, DropCapabilities: []string{wire.CapEgress},
		Logger: log.With("side", "old")})
	waitFor(t, "the old runner to connect", time.Minute, func() bool { return b.Nodes.Connected(old.ID) })
	if _, err := eg.SetNodeEgress(ctx, adminAcc.ID, old.ID, policy); !errors.Is(err, fault.ErrConflict) || !strings.Contains(err.Error(), "update it") {
		t.Fatalf("a runner without %s: %v", wire.CapEgress, err)
	}
	if ns, _ := b.Store.NodeSettings(old.ID); ns.Egress.Mode != "" {
		t.Fatalf("the refused policy was saved: %+v", ns.Egress)
	}
	oldRunner.Stop()

	created, err := b.Nodes.Create("egress runner", false, srv)
	if err != nil {
		t.Fatal(err)
	}
	node := created.ID
	t.Cleanup(func() { removeLabelled(t, map[string]string{vm.LabelNode: node}) })
	runnertest.Start(t, runner.Config{Server: srv, Token: created.Token, DataDir: filepath.Join(dir, "runner"), Engine: "podman",
		ConnectEngine: ConnectRunnerEngine, NoHostTools: true, MaxBackoff: time.Second, EgressLookup: lookup,
		Logger: log.With("side", "runner")})
	waitFor(t, "the runner to connect", time.Minute, func() bool { return b.Nodes.Connected(node) })
	vms, err := b.fleet.Node(node)
	if err != nil {
		t.Fatal(err)
	}
	pctx, pcancel := context.WithTimeout(ctx, 30*time.Minute)
	defer pcancel()
	if _, err := vms.Prepare(pctx, "standard"); err != nil {
		t.Fatalf("prepare on the runner: %v", err)
	}
	ada, err := b.Profiles.Create(adminAcc.ID, "Ada")
	if err != nil {
		t.Fatal(err)
	}
	if got, err := b.fleet.Place(ctx, adminAcc.ID, ada.ID, node); err != nil || got != node {
		t.Fatalf("place the agent on the runner: %q, %v", got, err)
	}
	v, err := eg.SetNodeEgress(ctx, adminAcc.ID, node, policy)
	if err != nil || v.NodeID != node || v.Node.Mode != deskegress.AllowList || v.Enforcement != "" {
		t.Fatalf("the runner's policy: %+v %v", v, err)
	}
	sub := b.Events.Subscribe(events.SubscribeOptions{Types: []events.Type{events.DesktopEgressBlocked}})
	defer sub.Close()

	// The desktop, on the runner, started by a first /shell under the allow-list.
	var evs []agent.Event
	if err := b.Chat.Run(ctx, agent.Turn{SessionID: "egress", UserID: adminAcc.ID, AgentID: ada.ID, AgentName: "Ada", Input: "/shell echo ok"},
		func(e agent.Event) { evs = append(evs, e) }); err != nil {
		t.Fatal(err)
	}
	av, err := vms.Agent(ctx, adminAcc.ID, ada.ID)
	if err != nil || av.Desktop.State != vm.StateRunning {
		t.Fatalf("the agent's desktop on the runner: %+v %v", av.Desktop, err)
	}
	inst := av.Desktop.ID
	probe := func(host string, port int) string {
		t.Helper()
		res, err := vms.(*nodes.Remote).Link(ctx, inst)
		if err != nil {
			t.Fatal(err)
		}
		out, err := res.Exec(ctx, guest.ExecRequest{Command: []string{"python3", "-c", egressProbe, host, strconv.Itoa(port)}, Timeout: time.Minute})
		if err != nil {
			t.Fatalf("probe %s:%d: %v", host, port, err)
		}
		t.Logf("%s:%d from inside the runner's desktop: %s", host, port, strings.TrimSpace(string(out.Stdout)))
		fs := strings.Fields(string(out.Stdout))
		if len(fs) < 2 {
			t.Fatalf("probe %s:%d: %q %q", host, port, out.Stdout, out.Stderr)
		}
		return fs[0]
	}
	if w := probe("svc.egress.test", ports[0]); w != "open" {
		t.Fatalf("allowed name from the runner's desktop: %s", w)
	}
	// "refused" is a reset answered at once (a dropped packet would end in a timeout).
	if w := probe(other.Addr, ports[1]); w != "refused" {
		t.Fatalf("an address not allowed: %s (want refused at once)", w)
	}
	want := fmt.Sprintf("%s tcp %d", other.Addr, ports[1])
	deadline := time.After(30 * time.Second)
	for seen := false; !seen; {
		select {
		case e := <-sub.C():
			p := e.Data.(events.EgressBlocked)
			if p.NodeID != node || p.InstanceID != inst || p.AgentID != ada.ID || p.Time.IsZero() {
				t.Fatalf("event without the runner's node, its desktop, agent or time: %+v", p)
			}
			seen = fmt.Sprintf("%s %s %d", p.Destination, p.Proto, p.Port) == want
		case <-deadline:
			t.Fatalf("desktop.egress_blocked %q did not reach the server", want)
		}
	}
	if v, err := eg.EgressView(ctx, node); err != nil || !slices.ContainsFunc(v.Blocked, func(s deskegress.Summary) bool {
		return s.Destination == other.Addr && s.AgentID == ada.ID && s.InstanceID == inst
	}) {
		t.Fatalf("the runner's Settings view lists no refusal: %+v %v", v, err)
	}
	// Allowing it from the list reaches the runner too.
	if _, err := eg.AllowEgress(ctx, adminAcc.ID, node, ada.ID, other.Addr); err != nil {
		t.Fatal(err)
	}
	if w := probe(other.Addr, ports[1]); w != "open" {
		t.Fatalf("after allowing it: %s", w)
	}
}
