//go:build linux

package backend

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"cubicle/backend/agent"
	"cubicle/backend/deskegress"
	"cubicle/backend/events"
	"cubicle/backend/guest"
	"cubicle/backend/store"
	"cubicle/internal/netns"
	"cubicle/internal/testenv"
)

// egressProbe connects from inside the desktop to host:port (a name is resolved by the
// desktop's own resolver configuration) and prints what happened and how long it took.
const egressProbe = `import socket, sys, time
t = time.monotonic()
try:
    a = socket.getaddrinfo(sys.argv[1], int(sys.argv[2]), socket.AF_INET, socket.SOCK_STREAM)[0][4]
except socket.gaierror as e:
    print("noname %.2f" % (time.monotonic() - t)); sys.exit()
try:
    s = socket.create_connection(a, timeout=8); print("open %.2f %s" % (time.monotonic() - t, s.recv(2).decode()))
except ConnectionRefusedError:
    print("refused %.2f" % (time.monotonic() - t))
except OSError as e:
    print("%s %.2f" % (type(e).__name__, time.monotonic() - t))
`

// listenInHost listens on TCP addr inside test host h's network namespace and greets every
// connection with "hi"; it returns the port.
func listenInHost(t *testing.T, h *netns.Host) int {
	t.Helper()
	type res struct {
		ln  net.Listener
		err error
	}
	ch := make(chan res, 1)
	go func() {
		runtime.LockOSThread()
		self, err := unix.Open("/proc/thread-self/ns/net", unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			ch <- res{err: err}
			return
		}
		defer unix.Close(self)
		target, err := unix.Open(filepath.Join("/run/netns", h.NS), unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			ch <- res{err: err}
			return
		}
		defer unix.Close(target)
		if err := unix.Setns(target, unix.CLONE_NEWNET); err != nil {
			ch <- res{err: err}
			return
		}
		ln, err := net.Listen("tcp", net.JoinHostPort(h.Addr, "0"))
		if unix.Setns(self, unix.CLONE_NEWNET) == nil {
			runtime.UnlockOSThread()
		}
		ch <- res{ln, err}
	}()
	r := <-ch
	if r.err != nil {
		t.Fatal(r.err)
	}
	t.Cleanup(func() { r.ln.Close() })
	go func() {
		for {
			c, err := r.ln.Accept()
			if err != nil {
				return
			}
			c.Write([]byte("hi"))
			c.Close()
		}
	}()
	return r.ln.Addr().(*net.TCPAddr).Port
}

// Issue 26, item 6: from inside a real desktop, an allow-list lets through an allowed name and
// an allowed CIDR (services in network namespaces of the test's own, on 10.231.0.0/16), refuses
// anything else at once and reports it as desktop.egress_blocked; closed refuses everything;
// open is what it was; an agent's own policy wins over the node's.
func TestDesktopEgressPolicy(t *testing.T) {
	testenv.RootPodman(t)
	if testing.Short() {
		t.Skip("real desktop test; run without -short")
	}
	if err := netns.Available(); err != nil {
		t.Fatal(err)
	}
	// three services, each in a namespace standing for another machine
	var hosts [3]*netns.Host
	var ports [3]int
	for i := range hosts {
		h, err := netns.New("cueg")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { h.Close() })
		if err := h.Route("default", h.ServerAddr); err != nil {
			t.Fatal(err)
		}
		hosts[i], ports[i] = h, listenInHost(t, h)
	}
	byName, byCIDR, other := hosts[0], hosts[1], hosts[2]
	names := map[string]string{"svc.egress.test": byName.Addr, "other.egress.test": other.Addr}
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
	b, err := New(Config{DataDir: filepath.Join(dir, "data"), Engine: "podman", AllowedHosts: []string{"127.0.0.1"}, Logger: log, EgressLookup: lookup})
	if err != nil {
		t.Fatal(err)
	}
	storeID := b.Store.Identity().ID
	t.Cleanup(func() { removeStoreObjects(t, storeID) })
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	t.Cleanup(func() { b.Close() })
	if err := b.Start(ctx); err != nil {
		t.Fatal(err)
	}
	if err := b.WaitEngine(ctx); err != nil {
		t.Fatal(err)
	}
	pctx, pcancel := context.WithTimeout(ctx, 30*time.Minute)
	if _, err := b.VMs.Prepare(pctx, "standard"); err != nil {
		t.Fatalf("prepare: %v", err)
	}
	pcancel()
	admin, err := b.Auth.Admin()
	if err != nil {
		t.Fatal(err)
	}
	ag, err := b.Profiles.Create(admin.ID, "Ada")
	if err != nil {
		t.Fatal(err)
	}
	eg := b.Egress
	node := b.VMs.NodeID()
	if _, err := eg.SetNodeEgress(ctx, admin.ID, node, store.EgressPolicy{Mode: deskegress.AllowList,
		Allow: []string{"svc.egress.test", byCIDR.Addr + "/32"}}); err != nil {
		t.Fatal(err)
	}
	sub := b.Events.Subscribe(events.SubscribeOptions{Types: []events.Type{events.DesktopEgressBlocked}})
	defer sub.Close()

	// the desktop, created by a first /shell under the allow-list
	var evs []agent.Event
	if err := b.Chat.Run(ctx, agent.Turn{SessionID: "egress", UserID: admin.ID, AgentID: ag.ID, AgentName: "Ada", Input: "/shell echo ok"},
		func(e agent.Event) { evs = append(evs, e) }); err != nil {
		t.Fatal(err)
	}
	inst, err := instanceOf(b, admin.ID, ag.ID)
	if err != nil {
		t.Fatal(err)
	}
	if inst.State != "running" {
		t.Fatalf("desktop %s: %s %s", inst.ID, inst.State, inst.LastError)
	}
	c, err := b.VMs.Link(ctx, inst.ID)
	if err != nil {
		t.Fatal(err)
	}
	probe := func(host string, port int) (string, float64) {
		t.Helper()
		res, err := c.Exec(ctx, guest.ExecRequest{Command: []string{"python3", "-c", egressProbe, host, strconv.Itoa(port)}, Timeout: time.Minute})
		if err != nil {
			t.Fatalf("probe %s:%d: %v", host, port, err)
		}
		fs := strings.Fields(string(res.Stdout))
		if len(fs) < 2 {
			t.Fatalf("probe %s:%d: %q %q", host, port, res.Stdout, res.Stderr)
		}
		s, _ := strconv.ParseFloat(fs[1], 64)
		t.Logf("%s:%d from inside the desktop: %s", host, port, strings.TrimSpace(string(res.Stdout)))
		return fs[0], s
	}
	wantEvents := func(want ...string) {
		t.Helper()
		seen := map[string]bool{}
		deadline := time.After(10 * time.Second)
		for {
			done := true
			for _, w := range want {
				done = done && seen[w]
			}
			if done {
				return
			}
			select {
			case e := <-sub.C():
				p := e.Data.(events.EgressBlocked)
				if p.InstanceID != inst.ID || p.AgentID != ag.ID || p.NodeID != node || p.Time.IsZero() {
					t.Fatalf("event without its desktop, agent or time: %+v", p)
				}
				seen[fmt.Sprintf("%s %s %d", p.Destination, p.Proto, p.Port)] = true
			case <-deadline:
				t.Fatalf("desktop.egress_blocked not published for all of %q (seen %v)", want, seen)
			}
		}
	}

	if w, s := probe("svc.egress.test", ports[0]); w != "open" {
		t.Fatalf("allowed name: %s after %.2fs", w, s)
	}
	if w, s := probe(byCIDR.Addr, ports[1]); w != "open" {
		t.Fatalf("allowed CIDR: %s after %.2fs", w, s)
	}
	if w, s := probe(other.Addr, ports[2]); w != "refused" || s > 1 {
		t.Fatalf("an address not allowed: %s after %.2fs (want refused at once)", w, s)
	}
	if w, s := probe("other.egress.test", ports[2]); w != "noname" || s > 2 {
		t.Fatalf("a name not allowed: %s after %.2fs (want no answer at once)", w, s)
	}
	wantEvents(fmt.Sprintf("%s tcp %d", other.Addr, ports[2]), "other.egress.test dns 0")
	v, err := eg.EgressView(ctx, "")
	if err != nil || len(v.Blocked) < 2 {
		t.Fatalf("Settings lists no refused destinations: %+v %v", v, err)
	}

	// allowing a refused destination from the list opens it
	if _, err := eg.AllowEgress(ctx, admin.ID, "", ag.ID, other.Addr); err != nil {
		t.Fatal(err)
	}
	if w, s := probe(other.Addr, ports[2]); w != "open" {
		t.Fatalf("after allowing it: %s after %.2fs", w, s)
	}

	if _, err := eg.SetNodeEgress(ctx, admin.ID, node, store.EgressPolicy{Mode: deskegress.Closed}); err != nil {
		t.Fatal(err)
	}
	for i, h := range []string{"svc.egress.test", byCIDR.Addr, other.Addr} {
		if w, s := probe(h, ports[i]); w != "refused" && w != "noname" || s > 2 {
			t.Fatalf("closed: %s: %s after %.2fs", h, w, s)
		}
	}
	wantEvents("svc.egress.test dns 0", fmt.Sprintf("%s tcp %d", byCIDR.Addr, ports[1]))

	// an agent's own policy wins over the node's
	if _, err := eg.SetAgentEgress(ctx, admin.ID, ag.ID, &store.EgressPolicy{Mode: deskegress.AllowList, Allow: []string{byCIDR.Addr}}); err != nil {
		t.Fatal(err)
	}
	if w, _ := probe(byCIDR.Addr, ports[1]); w != "open" {
		t.Fatalf("the agent's own allow-list: %s", w)
	}
	if w, _ := probe(other.Addr, ports[2]); w != "refused" {
		t.Fatalf("the agent's own allow-list: %s", w)
	}
	if _, err := eg.SetAgentEgress(ctx, admin.ID, ag.ID, nil); err != nil {
		t.Fatal(err)
	}

	if _, err := eg.SetNodeEgress(ctx, admin.ID, node, store.EgressPolicy{Mode: deskegress.Open}); err != nil {
		t.Fatal(err)
	}
	for i, h := range []string{byName.Addr, byCIDR.Addr, other.Addr} {
		if w, s := probe(h, ports[i]); w != "open" {
			t.Fatalf("open: %s: %s after %.2fs", h, w, s)
		}
	}
	av, err := b.VMs.Agent(ctx, admin.ID, ag.ID)
	if err != nil {
		t.Fatal(err)
	}
	wantHostWalled(t, b, av.Desktop) // the host wall stands next to the policy
}
