// Package hostwall keeps a desktop from reaching the services of the machine it runs on: its
// database, its Cubicle API, its SSH — anything listening on one of the host's addresses or on
// the container network's gateway. The desktop keeps its outbound internet (browsing works);
// only the host is walled off, except for the TCP ports an administrator allows (Settings →
// Security → host ports desktops may reach) and the DNS resolver when the host is it.
//
// The wall is a set of nftables rules in the desktop's own network namespace (table
// "cubicle_hostwall", output hook), installed from the host after the container started and
// before anything runs in it but the driver. The container has no capabilities, so nothing in
// it can remove the rules. This works the same with Podman and Docker on a Linux host where
// Cubicle can enter the container's network namespace (a rootful engine, with Cubicle as
// root). Where it cannot — an engine in a VM (macOS, Windows), a remote engine, a rootless
// engine — Apply returns a fault.ErrUnavailable error saying why, and the caller decides.
//
// Before touching a namespace, Apply proves the process is the desktop's: its cgroup must name
// the container's id, or (when it does not) its root directory must contain the desktop's run
// directory (the bind mount Cubicle made for the socket link; the exec link has none), and its
// network namespace must not be the host's own. A PID reported by a remote engine therefore never
// firewalls a process of this machine.
package hostwall

import (
	"bufio"
	"net"
	"net/netip"
	"os"
	"strings"
)

// Proof is what proves that a process is the desktop to wall off.
type Proof struct {
	// ContainerID is the container's full id as the engine reports it; the process's cgroup
	// (read from /proc on this host) must name it.
	ContainerID string
	// RunDir is the desktop's run directory on this host and ContainerRunDir where the
	// container sees it: the process's root must show the same directory there. Used when
	// the cgroup does not prove it; empty when the desktop has no such mount.
	RunDir, ContainerRunDir string
}

// cgroupNames reports whether the /proc/PID/cgroup text names container id: a path element
// that is the id or ends in it after "-" (libpod-ID, docker-ID.scope) or begins with it
// before "." (ID.scope). Short or non-hex ids never match.
func cgroupNames(cgroup, id string) bool {
	if len(id) < 32 || strings.Trim(strings.ToLower(id), "0123456789abcdef") != "" {
		return false
	}
	for _, line := range strings.Split(cgroup, "\n") {
		_, path, ok := strings.Cut(line, ":")
		if !ok {
			continue
		}
		_, path, _ = strings.Cut(path, ":")
		for _, el := range strings.Split(path, "/") {
			el = strings.TrimSuffix(el, ".scope")
			if i := strings.LastIndexByte(el, '-'); i >= 0 {
				el = el[i+1:]
			}
			if el == id {
				return true
			}
		}
	}
	return false
}

// Table is the name of the nftables table holding the wall.
const Table = "cubicle_hostwall"

// Wall is what Apply blocks and allows.
type Wall struct {
	// Blocked are the addresses the desktop may not reach.
	Blocked []netip.Addr
	// Ports are TCP ports the desktop may reach on the blocked addresses anyway.
	Ports []int
	// DNS are blocked addresses the desktop may reach on port 53 (its resolver is the host).
	DNS []netip.Addr
}

// metadata are cloud instance-metadata addresses, blocked too (they hand out the host's
// credentials on cloud machines).
var metadata = []netip.Addr{netip.MustParseAddr("169.254.169.254"), netip.MustParseAddr("fd00:ec2::254"), netip.MustParseAddr("100.100.100.200")}

// hostAddrs returns this machine's own addresses, except loopback (inside the desktop,
// loopback is the desktop's own).
func hostAddrs() ([]netip.Addr, error) {
	ifaces, err := netInterfaceAddrs()
	if err != nil {
		return nil, err
	}
	var out []netip.Addr
	for _, s := range ifaces {
		p, err := netip.ParsePrefix(s)
		if err != nil {
			continue
		}
		a := p.Addr().Unmap()
		if a.IsLoopback() || !a.IsValid() {
			continue
		}
		out = append(out, a)
	}
	return out, nil
}

// gateways reads the default gateways of a process's network namespace from /proc.
func gateways(pid int) []netip.Addr {
	var out []netip.Addr
	if f, err := os.Open(procPath(pid, "net/route")); err == nil {
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			fs := strings.Fields(sc.Text())
			if len(fs) < 3 || fs[1] != "00000000" || fs[2] == "00000000" {
				continue
			}
			if a, ok := hexLE4(fs[2]); ok {
				out = append(out, a)
			}
		}
		f.Close()
	}
	if f, err := os.Open(procPath(pid, "net/ipv6_route")); err == nil {
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			fs := strings.Fields(sc.Text())
			if len(fs) < 5 || fs[0] != strings.Repeat("0", 32) || fs[1] != "00" || fs[4] == strings.Repeat("0", 32) {
				continue
			}
			if a, ok := hex16(fs[4]); ok {
				out = append(out, a)
			}
		}
		f.Close()
	}
	return out
}

// resolvers reads the name servers of a container's /etc/resolv.conf (through its root).
func resolvers(pid int) []netip.Addr {
	f, err := os.Open(procPath(pid, "root/etc/resolv.conf"))
	if err != nil {
		return nil
	}
	defer f.Close()
	var out []netip.Addr
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fs := strings.Fields(sc.Text())
		if len(fs) >= 2 && fs[0] == "nameserver" {
			if a, err := netip.ParseAddr(strings.SplitN(fs[1], "%", 2)[0]); err == nil {
				out = append(out, a.Unmap())
			}
		}
	}
	return out
}

// Plan works out the wall for the desktop process pid: this host's addresses, the desktop's
// gateways and the metadata addresses are blocked; ports stay reachable; a resolver among the
// blocked addresses stays reachable on port 53.
func Plan(pid int, ports []int) (Wall, error) {
	host, err := hostAddrs()
	if err != nil {
		return Wall{}, err
	}
	w := Wall{Ports: ports}
	seen := map[netip.Addr]bool{}
	for _, list := range [][]netip.Addr{host, gateways(pid), metadata} {
		for _, a := range list {
			if !seen[a] {
				seen[a] = true
				w.Blocked = append(w.Blocked, a)
			}
		}
	}
	for _, r := range resolvers(pid) {
		if seen[r] {
			w.DNS = append(w.DNS, r)
		}
	}
	return w, nil
}

func hexLE4(s string) (netip.Addr, bool) {
	if len(s) != 8 {
		return netip.Addr{}, false
	}
	var b [4]byte
	for i := 0; i < 4; i++ {
		v, ok := hexByte(s[2*i : 2*i+2])
		if !ok {
			return netip.Addr{}, false
		}
		b[3-i] = v
	}
	return netip.AddrFrom4(b), true
}

func hex16(s string) (netip.Addr, bool) {
	if len(s) != 32 {
		return netip.Addr{}, false
	}
	var b [16]byte
	for i := 0; i < 16; i++ {
		v, ok := hexByte(s[2*i : 2*i+2])
		if !ok {
			return netip.Addr{}, false
		}
		b[i] = v
	}
	return netip.AddrFrom16(b), true
}

func hexByte(s string) (byte, bool) {
	var v byte
	for _, c := range []byte(s) {
		v <<= 4
		switch {
		case c >= '0' && c <= '9':
			v |= c - '0'
		case c >= 'a' && c <= 'f':
			v |= c - 'a' + 10
		case c >= 'A' && c <= 'F':
			v |= c - 'A' + 10
		default:
			return 0, false
		}
	}
	return v, true
}

// netInterfaceAddrs lists this machine's interface addresses as CIDR strings.
func netInterfaceAddrs() ([]string, error) {
	as, err := net.InterfaceAddrs()
	if err != nil {
		return nil, err
	}
	out := make([]string, 0, len(as))
	for _, a := range as {
		out = append(out, a.String())
	}
	return out, nil
}

func procPath(pid int, rest string) string {
	return "/proc/" + itoa(pid) + "/" + rest
}

func itoa(n int) string {
	if n == 0 {
		return "0"
	}
	var b [20]byte
	i := len(b)
	for n > 0 {
		i--
		b[i] = byte('0' + n%10)
		n /= 10
	}
	return string(b[i:])
}
