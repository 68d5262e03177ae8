package vm_test

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"cubicle/backend/guest"
	"cubicle/backend/hostwall"
	"cubicle/backend/vm"
	"cubicle/internal/netns"
	"cubicle/internal/testenv"
)

// probeScript connects, from inside a desktop, to every given address on two ports and prints
// "<addr> <port> open|closed" for each; the desktop's own default gateway is tried first.
const probeScript = `
import socket, sys
def probe(h, p):
    s = socket.socket(socket.AF_INET6 if ":" in h else socket.AF_INET)
    s.settimeout(4)
    try:
        s.connect((h, p)); print(h, p, "open")
    except Exception as e:
        print(h, p, "closed", type(e).__name__)
    finally:
        s.close()
gws = [l.split()[2] for l in open("/proc/net/route") if l.split()[1] == "00000000"]
hosts = [socket.inet_ntoa(bytes.fromhex(g)[::-1]) for g in gws] + sys.argv[3:]
for h in hosts:
    for p in (int(sys.argv[1]), int(sys.argv[2])):
        probe(h, p)
`

// listen serves "hello" on every address of this host at a free port.
func listen(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", ":0")
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
			c.Write([]byte("hello\n"))
			c.Close()
		}
	}()
	return ln.Addr().(*net.TCPAddr).Port
}

// TestRealHostWallUserNamespaceAndSwap runs a real desktop with the host wall and its own user
// namespace (issue 15, item 12): from inside it, services of the host — on the container
// network's gateway and on every other address of this machine — are refused, except the one
// port an administrator allows; the internet is still reachable when this machine reaches it;
// its processes run as a host uid no real user has; swap is limited to nothing beyond memory.
func TestRealHostWallUserNamespaceAndSwap(t *testing.T) {
	if os.Geteuid() != 0 {
		testenv.Missing(t, "the host wall needs root (a rootful engine's namespaces)")
	}
	env := newRealEnv(t)
	seedAgents(t, env.store)
	blocked, allowed := listen(t), listen(t)
	wall := func(c *vm.Config) {
		c.MapUsers = true
		c.KeepRunningOnClose = true
		c.HostWall = func(ctx context.Context, pid int, containerID, runDir string) error {
			w, err := hostwall.Plan(pid, []int{allowed})
			if err != nil {
				return err
			}
			return hostwall.Apply(pid, hostwall.Proof{ContainerID: containerID, RunDir: runDir, ContainerRunDir: vm.RunDirTarget}, w)
		}
	}
	m := env.manager(wall)
	defer m.Close()
	env.prepare(m)
	ctx := context.Background()
	v := act(t, m, "g1", vm.ActionCreate)
	if v.Desktop.HostWall != "on" {
		t.Fatalf("host wall: %q", v.Desktop.HostWall)
	}
	c := dialDesktop(t, m, v.Desktop.ID)

	hosts := hostAddrs(t)
	probeHost(t, c, blocked, allowed, hosts)
	// The internet: as reachable from the desktop as from this machine.
	if hc, err := net.DialTimeout("tcp", "deb.debian.org:80", 5*time.Second); err == nil {
		hc.Close()
		res, err := c.Exec(ctx, guest.ExecRequest{Command: []string{"python3", "-c",
			"import socket; socket.create_connection(('deb.debian.org', 80), timeout=10); print('internet ok')"}, Timeout: time.Minute})
		if err != nil || !strings.Contains(string(res.Stdout), "internet ok") {
			t.Fatalf("the desktop lost the internet: %v %s %s", err, res.Stdout, res.Stderr)
		}
	} else {
		t.Logf("this machine does not reach deb.debian.org (%v): the internet check has nothing to compare with", err)
	}

	// The desktop's processes are a host uid that no user of this machine has.
	st, err := env.eng.InspectContainer(ctx, v.Desktop.Container)
	if err != nil {
		t.Fatal(err)
	}
	uid := hostUID(t, st.PID)
	if uid < 1<<31 {
		t.Fatalf("the desktop's init runs as host uid %d", uid)
	}
	if users := passwdUIDs(t); users[uid] {
		t.Fatalf("host uid %d of the desktop is a real user", uid)
	}
	res, err := c.Exec(ctx, guest.ExecRequest{Shell: "id -u; echo hi > /home/cua/workspace/userns-ok && cat /home/cua/workspace/userns-ok"})
	if err != nil || !strings.Contains(string(res.Stdout), "1000") || !strings.Contains(string(res.Stdout), "hi") {
		t.Fatalf("inside the desktop: %v %q %q", err, res.Stdout, res.Stderr)
	}
	// Swap: memory+swap equals memory.
	res, err = c.Exec(ctx, guest.ExecRequest{Shell: "cat /sys/fs/cgroup/memory/memory.limit_in_bytes /sys/fs/cgroup/memory/memory.memsw.limit_in_bytes 2>/dev/null || cat /sys/fs/cgroup/memory.swap.max"})
	if err != nil {
		t.Fatal(err)
	}
	vals := strings.Fields(string(res.Stdout))
	switch {
	case len(vals) == 2 && vals[0] == vals[1]:
	case len(vals) == 1 && vals[0] == "0":
	default:
		t.Fatalf("swap is not limited: %q %q", res.Stdout, res.Stderr)
	}
	// Restarting the desktop keeps the wall and the workspace's owner.
	act(t, m, "g1", vm.ActionStop)
	v = act(t, m, "g1", vm.ActionStart)
	if v.Desktop.HostWall != "on" {
		t.Fatalf("after a restart: %q", v.Desktop.HostWall)
	}
	c = dialDesktop(t, m, v.Desktop.ID)
	res, err = c.Exec(ctx, guest.ExecRequest{Shell: "cat /home/cua/workspace/userns-ok && echo more >> /home/cua/workspace/userns-ok && echo writable"})
	if err != nil || !strings.Contains(string(res.Stdout), "writable") {
		t.Fatalf("the workspace after a restart: %v %q %q", err, res.Stdout, res.Stderr)
	}
	// Started outside Cubicle (a new network namespace): walled again as soon as the manager
	// sees it run.
	podmanCLI(t, "stop", "-t", "5", v.Desktop.Container)
	waitDesktop(t, m, "g1", vm.StateStopped)
	podmanCLI(t, "start", v.Desktop.Container)
	waitDesktop(t, m, "g1", vm.StateRunning)
	c = dialDesktop(t, m, v.Desktop.ID)
	probeHost(t, c, blocked, allowed, hosts)

	// Restarted outside while no manager runs, then adopted at start-up: walled again.
	m.Close()
	podmanCLI(t, "restart", "-t", "5", v.Desktop.Container)
	m = env.manager(wall)
	defer m.Close()
	if v, err = m.Agent(ctx, "a1", "g1"); err != nil || v.Desktop.State != vm.StateRunning || v.Desktop.HostWall != "on" {
		t.Fatalf("adopted at start-up: %+v, %v", v.Desktop, err)
	}
	c = dialDesktop(t, m, v.Desktop.ID)
	probeHost(t, c, blocked, allowed, hosts)

	// The administrator deletes the retained data: container, volumes and record go.
	if err := m.DeleteData(ctx, v.Desktop.ID); err != nil {
		t.Fatal(err)
	}
	vols, err := env.eng.ListVolumes(ctx, env.labels)
	if err != nil {
		t.Fatal(err)
	}
	for _, vol := range vols {
		if vol == v.Desktop.Workspace || vol == v.Desktop.BrowserVolume {
			t.Fatalf("volume %s left after DeleteData", vol)
		}
	}
	if _, err := env.store.VMInstance(v.Desktop.ID); err == nil {
		t.Fatal("the record is left")
	}
}

// hostAddrs lists this machine's IPv4 addresses, leaving out loopback and the project's test
// subnet: other test packages running at the same time make and remove network namespaces
// there (runner tests, relay bench), so those addresses come and go during this test.
func hostAddrs(t *testing.T) []string {
	t.Helper()
	_, testNet, err := net.ParseCIDR(netns.Subnet)
	if err != nil {
		t.Fatal(err)
	}
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		t.Fatal(err)
	}
	var hosts []string
	for _, a := range addrs {
		ip := a.(*net.IPNet).IP
		if !ip.IsLoopback() && ip.To4() != nil && !testNet.Contains(ip) {
			hosts = append(hosts, ip.String())
		}
	}
	if len(hosts) == 0 {
		t.Fatal("this machine has no IPv4 address besides loopback to probe")
	}
	return hosts
}

// probeHost checks from inside desktop c that the host's services are refused on the
// container network's gateway and on every address in hosts, except port allowed.
func probeHost(t *testing.T, c *guest.Client, blocked, allowed int, hosts []string) {
	t.Helper()
	res, err := c.Exec(context.Background(), guest.ExecRequest{Command: append([]string{"python3", "-c", probeScript,
		strconv.Itoa(blocked), strconv.Itoa(allowed)}, hosts...), Timeout: 2 * time.Minute})
	if err != nil || res.ExitCode != 0 {
		t.Fatalf("probe: %v %d %s", err, res.ExitCode, res.Stderr)
	}
	out := string(res.Stdout)
	t.Logf("from inside the desktop:\n%s", out)
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) < 2*(1+len(hosts)) {
		t.Fatalf("probe printed %d lines for %d addresses", len(lines), 1+len(hosts))
	}
	for _, l := range lines {
		f := strings.Fields(l)
		switch {
		case f[1] == strconv.Itoa(blocked) && f[2] != "closed":
			t.Errorf("the desktop reached a host service: %s", l)
		case f[1] == strconv.Itoa(allowed) && f[2] != "open":
			t.Errorf("the allowed host port is not reachable: %s", l)
		}
	}
}

func hostUID(t *testing.T, pid int) int {
	t.Helper()
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if fs := strings.Fields(sc.Text()); len(fs) > 1 && fs[0] == "Uid:" {
			n, _ := strconv.Atoi(fs[1])
			return n
		}
	}
	t.Fatal("no Uid line")
	return 0
}

func passwdUIDs(t *testing.T) map[int]bool {
	t.Helper()
	raw, err := os.ReadFile("/etc/passwd")
	if err != nil {
		t.Fatal(err)
	}
	out := map[int]bool{}
	for _, l := range strings.Split(string(raw), "\n") {
		if fs := strings.Split(l, ":"); len(fs) > 2 {
			if n, err := strconv.Atoi(fs[2]); err == nil {
				out[n] = true
			}
		}
	}
	return out
}
