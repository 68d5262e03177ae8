// Package netns makes network namespaces that stand for other machines: a namespace joined to
// this one by a veth pair, with a /30 of the project's test subnet 10.231.0.0/16 (this side
// .1, the other side .2). The runner tests and `cubicle bench`'s relay rows run a real
// `cubicle runner` process in one (Host.Wrap), so its link to the server crosses a real
// network interface, not loopback. Hosts made at the same time by several processes (test
// packages run in parallel) get distinct /30s: the choice is made under a machine-wide flock.
// It needs Linux, root and iproute2 (`ip`); elsewhere New says why it cannot.
package netns

// Subnet is the address range the hosts' links use.
const Subnet = "10.231.0.0/16"

// Host is a network namespace standing for another machine.
type Host struct {
	NS         string // the namespace's name
	Outer      string // the veth end in this (the server's) namespace
	ServerAddr string // this side's address on the link
	Addr       string // the host's address on the link
}

// Wrap is the command prefix that runs a program inside the host's namespace.
func (h *Host) Wrap() []string { return []string{"ip", "netns", "exec", h.NS} }
