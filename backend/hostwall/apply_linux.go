//go:build linux

package hostwall

import (
	"encoding/binary"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"

	"github.com/google/nftables"
	"github.com/google/nftables/expr"
	"golang.org/x/sys/unix"

	"cubicle/backend/fault"
)

// Apply builds the wall w in the network namespace of process pid, replacing a wall already
// there, once pid is proven to be the desktop (see Proof). Errors: fault.ErrUnavailable when
// the namespace cannot be entered here (not root, an engine in a VM, a remote engine);
// fault.ErrConflict when pid is not the desktop or shares the host's network.
func Apply(pid int, proof Proof, w Wall) error {
	if pid <= 0 {
		return fault.Unavailable("the engine reports no process for the desktop (an engine in a VM or on another machine?): its network cannot be walled off from here")
	}
	if err := proof.check(pid); err != nil {
		return err
	}
	self, err := os.Stat("/proc/self/ns/net")
	if err != nil {
		return fault.Unavailable("host wall: %v", err)
	}
	nsPath := procPath(pid, "ns/net")
	ns, err := os.Stat(nsPath)
	if err != nil {
		return fault.Unavailable("host wall: %v", err)
	}
	if os.SameFile(self, ns) {
		return fault.Conflict("host wall: the desktop shares this machine's network (host networking); it cannot be walled off")
	}
	fd, err := unix.Open(nsPath, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return fault.Unavailable("host wall: open the desktop's network namespace: %v (run Cubicle as root with a rootful engine)", err)
	}
	defer unix.Close(fd)
	c, err := nftables.New(nftables.WithNetNSFd(fd))
	if err != nil {
		return fault.Unavailable("host wall: nftables: %v", err)
	}
	if tables, err := c.ListTablesOfFamily(nftables.TableFamilyINet); err == nil {
		for _, t := range tables {
			if t.Name == Table {
				c.DelTable(t)
			}
		}
	} else {
		return fault.Unavailable("host wall: nftables in the desktop's network namespace: %v (run Cubicle as root with a rootful engine)", err)
	}
	t := c.AddTable(&nftables.Table{Family: nftables.TableFamilyINet, Name: Table})
	accept := nftables.ChainPolicyAccept
	ch := c.AddChain(&nftables.Chain{Name: "output", Table: t, Type: nftables.ChainTypeFilter,
		Hooknum: nftables.ChainHookOutput, Priority: nftables.ChainPriorityFilter, Policy: &accept})
	rule := func(exprs ...expr.Any) { c.AddRule(&nftables.Rule{Table: t, Chain: ch, Exprs: exprs}) }
	for _, a := range w.DNS {
		for _, proto := range []byte{unix.IPPROTO_UDP, unix.IPPROTO_TCP} {
			rule(append(append(daddr(a), l4(proto, 53)...), &expr.Verdict{Kind: expr.VerdictAccept})...)
		}
	}
	for _, a := range w.Blocked {
		for _, p := range w.Ports {
			rule(append(append(daddr(a), l4(unix.IPPROTO_TCP, uint16(p))...), &expr.Verdict{Kind: expr.VerdictAccept})...)
		}
		rule(append(daddr(a), &expr.Reject{Type: unix.NFT_REJECT_ICMPX_UNREACH, Code: unix.NFT_REJECT_ICMPX_ADMIN_PROHIBITED})...)
	}
	if err := c.Flush(); err != nil {
		return fault.Unavailable("host wall: install the rules in the desktop's network namespace: %v", err)
	}
	return nil
}

// daddr matches packets to address a (IPv4 or IPv6) in an inet table.
func daddr(a netip.Addr) []expr.Any {
	if a.Is4() {
		b := a.As4()
		return []expr.Any{
			&expr.Meta{Key: expr.MetaKeyNFPROTO, Register: 1},
			&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{unix.NFPROTO_IPV4}},
			&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseNetworkHeader, Offset: 16, Len: 4},
			&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: b[:]},
		}
	}
	b := a.As16()
	return []expr.Any{
		&expr.Meta{Key: expr.MetaKeyNFPROTO, Register: 1},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{unix.NFPROTO_IPV6}},
		&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseNetworkHeader, Offset: 24, Len: 16},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: b[:]},
	}
}

// l4 matches a transport protocol and destination port.
func l4(proto byte, port uint16) []expr.Any {
	p := make([]byte, 2)
	binary.BigEndian.PutUint16(p, port)
	return []expr.Any{
		&expr.Meta{Key: expr.MetaKeyL4PROTO, Register: 1},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{proto}},
		&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseTransportHeader, Offset: 2, Len: 2},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: p},
	}
}

// check proves that process pid is the desktop: its cgroup names the container's id (Podman
// and Docker, cgroupfs or systemd), else its root shows the desktop's run directory (a bind
// mount of this host's directory).
func (p Proof) check(pid int) error {
	if p.ContainerID != "" {
		if b, err := os.ReadFile(procPath(pid, "cgroup")); err == nil && cgroupNames(string(b), p.ContainerID) {
			return nil
		}
	}
	if p.RunDir == "" {
		return fault.Unavailable("host wall: process %d is not on this machine or not the desktop (its cgroup does not name container %s): its network cannot be walled off from here", pid, p.ContainerID)
	}
	mine, err := os.Stat(p.RunDir)
	if err != nil {
		return fmt.Errorf("host wall: %w", err)
	}
	theirs, err := os.Stat(procPath(pid, "root"+filepath.Clean("/"+p.ContainerRunDir)))
	switch {
	case os.IsPermission(err):
		return fault.Unavailable("host wall: cannot look into the desktop's process (run Cubicle as root with a rootful engine to wall the desktop off from this machine): %v", err)
	case err != nil:
		return fault.Unavailable("host wall: process %d is not on this machine or not the desktop (%v): its network cannot be walled off from here", pid, err)
	case !os.SameFile(mine, theirs):
		return fault.Conflict("host wall: process %d is not this desktop (its run directory differs); refusing to touch its network", pid)
	}
	return nil
}
