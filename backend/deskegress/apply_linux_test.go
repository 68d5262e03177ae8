//go:build linux

package deskegress

import (
	"context"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"cubicle/backend/store"
	"cubicle/internal/netns"
)

// probeScript connects from inside a namespace to host:port (a name is resolved there, through
// whatever resolver the namespace is configured with) and prints what happened.
const probeScript = `import socket, sys, time
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

// probe runs probeScript in namespace ns and returns its first word and the seconds it took.
func probe(t *testing.T, ns, host string, port int) (string, float64) {
	t.Helper()
	out, err := exec.Command("ip", "netns", "exec", ns, "python3", "-c", probeScript, host, itoa(port)).CombinedOutput()
	if err != nil {
		t.Fatalf("probe %s:%d: %v %s", host, port, err, out)
	}
	var word string
	var secs float64
	fs := strings.Fields(string(out))
	if len(fs) < 2 {
		t.Fatalf("probe %s:%d: %q", host, port, out)
	}
	word = fs[0]
	d, _ := time.ParseDuration(fs[1] + "s")
	secs = d.Seconds()
	return word, secs
}

func itoa(n int) string { return strconv.Itoa(n) }

// serve listens on addr (an address of this namespace) and greets every connection with "hi".
func serve(t *testing.T, addr string) int {
	t.Helper()
	ln, err := net.Listen("tcp", net.JoinHostPort(addr, "0"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.Write([]byte("hi"))
			c.Close()
		}
	}()
	return ln.Addr().(*net.TCPAddr).Port
}

// A namespace standing for a desktop, its policy enforced from here: an allowed name and an
// allowed CIDR are reached, anything else is refused at once and reported; closed refuses
// everything; open removes the table.
func TestEnforceInNamespace(t *testing.T) {
	if err := netns.Available(); err != nil {
		t.Skip(err)
	}
	if _, err := exec.LookPath("python3"); err != nil {
		t.Skip("needs python3 for the probe")
	}
	desk, err := netns.New("cube")
	if err != nil {
		t.Fatal(err)
	}
	defer desk.Close()
	var svc [2]*netns.Host
	for i := range svc {
		if svc[i], err = netns.New("cubs"); err != nil {
			t.Fatal(err)
		}
		defer svc[i].Close()
	}
	if err := desk.Route("default", desk.ServerAddr); err != nil {
		t.Fatal(err)
	}
	// the services listen on this side's addresses of the links (this namespace's own)
	byName, byCIDR, other := serve(t, svc[0].ServerAddr), serve(t, svc[1].ServerAddr), serve(t, desk.ServerAddr)

	sleep := exec.Command("ip", "netns", "exec", desk.NS, "sleep", "600")
	if err := sleep.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { sleep.Process.Kill(); sleep.Wait() }()
	nsOf := func(pid int) string { s, _ := os.Readlink("/proc/" + itoa(pid) + "/ns/net"); return s }
	self := nsOf(os.Getpid())
	for i := 0; i < 100 && nsOf(sleep.Process.Pid) == self; i++ {
		time.Sleep(10 * time.Millisecond)
	}

	blocked := make(chan Blocked, 100)
	names := map[string]string{"svc.egress.test": svc[0].ServerAddr, "blocked.egress.test": desk.ServerAddr}
	m := New(Config{OnBlocked: func(b Blocked) { blocked <- b }, Lookup: func(ctx context.Context, network, host string) ([]netip.Addr, error) {
		if a, ok := names[host]; ok && network == "ip4" {
			return []netip.Addr{netip.MustParseAddr(a)}, nil
		}
		if ok := names[host] != ""; ok {
			return nil, nil
		}
		return nil, &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}
	}})
	defer m.Close()
	d := Desktop{InstanceID: "i1", AgentID: "a1", AccountID: "u1", PID: sleep.Process.Pid}

	if w, _ := probe(t, desk.NS, desk.ServerAddr, other); w != "open" {
		t.Fatalf("before any policy the namespace reaches %s: %s", desk.ServerAddr, w)
	}
	if err := m.Apply(context.Background(), d, store.EgressPolicy{Mode: AllowList, Allow: []string{"svc.egress.test", svc[1].ServerAddr + "/32"}}); err != nil {
		t.Fatal(err)
	}
	if w, s := probe(t, desk.NS, "svc.egress.test", byName); w != "open" {
		t.Fatalf("allowed name: %s after %.2fs", w, s)
	}
	if w, s := probe(t, desk.NS, svc[1].ServerAddr, byCIDR); w != "open" {
		t.Fatalf("allowed CIDR: %s after %.2fs", w, s)
	}
	if w, s := probe(t, desk.NS, desk.ServerAddr, other); w != "refused" || s > 1 {
		t.Fatalf("an address not allowed: %s after %.2fs (want refused at once)", w, s)
	}
	if w, s := probe(t, desk.NS, "blocked.egress.test", other); w != "noname" || s > 2 {
		t.Fatalf("a name not allowed: %s after %.2fs (want no answer at once)", w, s)
	}
	want := map[string]bool{desk.ServerAddr + " tcp " + itoa(other): false, "blocked.egress.test dns 0": false}
	wantBlocked(t, blocked, want)

	if err := m.Apply(context.Background(), d, store.EgressPolicy{Mode: Closed}); err != nil {
		t.Fatal(err)
	}
	if w, _ := probe(t, desk.NS, "svc.egress.test", byName); w != "noname" {
		t.Fatalf("closed: the allowed name still resolves: %s", w)
	}
	if w, s := probe(t, desk.NS, svc[1].ServerAddr, byCIDR); w != "refused" || s > 1 {
		t.Fatalf("closed: %s after %.2fs", w, s)
	}
	wantBlocked(t, blocked, map[string]bool{"svc.egress.test dns 0": false, svc[1].ServerAddr + " tcp " + itoa(byCIDR): false})
	if got := m.Recent(); len(got) < 4 {
		t.Fatalf("recent refusals: %+v", got)
	}

	if err := m.Apply(context.Background(), d, store.EgressPolicy{Mode: Open}); err != nil {
		t.Fatal(err)
	}
	if len(m.Enforced()) != 0 {
		t.Fatal("open: still enforced")
	}
	if w, _ := probe(t, desk.NS, desk.ServerAddr, other); w != "open" {
		t.Fatalf("open: %s", w)
	}
	out, _ := exec.Command("ip", "netns", "exec", desk.NS, "nft", "list", "tables").CombinedOutput()
	if strings.Contains(string(out), Table) {
		t.Fatalf("open: the table is still there: %s", out)
	}
}

// wantBlocked waits for a refusal of every destination in want ("dest proto port").
func wantBlocked(t *testing.T, ch <-chan Blocked, want map[string]bool) {
	t.Helper()
	deadline := time.After(5 * time.Second)
	for {
		done := true
		for _, seen := range want {
			done = done && seen
		}
		if done {
			return
		}
		select {
		case b := <-ch:
			if b.InstanceID != "i1" || b.AgentID != "a1" || b.Time.IsZero() {
				t.Fatalf("refusal without its desktop: %+v", b)
			}
			want[b.Destination+" "+b.Proto+" "+itoa(b.Port)] = true
		case <-deadline:
			t.Fatalf("refusals not all reported: %v", want)
		}
	}
}
