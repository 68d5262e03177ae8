// Package deskegress decides and enforces what a desktop may reach on the network: its egress
// policy, per node and optionally per agent (docs/egress.md).
//
//   - open: what the engine gives (today's behaviour; the host wall still applies).
//   - allow-list: only the listed host names, addresses and CIDRs; DNS is answered only for
//     the listed names.
//   - closed: nothing but the desktop's own loopback.
//
// The policy is enforced outside the desktop, in its network namespace, as the host wall is
// (package hostwall): an nftables table "cubicle_egress" whose output chain accepts loopback,
// established flows, the allowed CIDRs and the addresses the allowed names resolved to, logs
// everything else to an NFLOG group and rejects it (TCP reset, else ICMP administratively
// prohibited), so a refused connection fails at once instead of timing out. Every DNS query
// (UDP and TCP port 53, whatever resolver the desktop is configured with) is redirected to a
// small DNS filter that Cubicle serves on a socket it opened inside that namespace: it answers
// A/AAAA for allowed names by resolving them on the host, adds the answers to the table's
// address sets before replying, and answers NXDOMAIN for every other name. A refused packet
// and a refused name both reach the caller as a Blocked record (the desktop.egress_blocked
// event). The container has no capabilities, so nothing in it can change the table.
//
// On Kubernetes the same policy becomes a NetworkPolicy for the desktop's Pod (written by the
// kubernetes engine, engine/kubernetes/netpol.go, so that only it links the Kubernetes types);
// a NetworkPolicy cannot name hosts, so there names are resolved when it is generated.
package deskegress

import (
	"maps"
	"net/netip"
	"slices"
	"strings"

	"cubicle/backend/fault"
	"cubicle/backend/store"
)

// The modes of a policy.
const (
	Open      = "open"
	AllowList = "allow-list"
	Closed    = "closed"
)

// MaxEntries bounds an allow-list.
const MaxEntries = 256

// Normalize validates p and returns it in canonical form: mode "open" for "", entries trimmed,
// lower-cased, addresses as CIDRs, sorted and without duplicates. A bad policy is a
// fault.ErrInvalid error that says what to write instead.
func Normalize(p store.EgressPolicy) (store.EgressPolicy, error) {
	out := store.EgressPolicy{Mode: strings.TrimSpace(strings.ToLower(p.Mode)), UpdatedBy: p.UpdatedBy, UpdatedAt: p.UpdatedAt}
	if out.Mode == "" {
		out.Mode = Open
	}
	switch out.Mode {
	case Open, AllowList, Closed:
	default:
		return store.EgressPolicy{}, fault.Invalid("egress mode %q: use \"open\", \"allow-list\" or \"closed\"", p.Mode)
	}
	if out.Mode != AllowList && len(p.Allow) > 0 {
		return store.EgressPolicy{}, fault.Invalid("egress mode %q takes no allow entries (use \"allow-list\")", out.Mode)
	}
	if len(p.Allow) > MaxEntries {
		return store.EgressPolicy{}, fault.Invalid("egress allow-list: %d entries, at most %d", len(p.Allow), MaxEntries)
	}
	for _, e := range p.Allow {
		c, err := NormalizeEntry(e)
		if err != nil {
			return store.EgressPolicy{}, err
		}
		out.Allow = append(out.Allow, c)
	}
	slices.Sort(out.Allow)
	out.Allow = slices.Compact(out.Allow)
	return out, nil
}

// NormalizeEntry validates one allow-list entry — a host name (example.com), a wildcard of its
// subdomains (*.example.com), an address (10.0.0.5, 2001:db8::1) or a CIDR (10.0.0.0/24) —
// and returns its canonical form.
func NormalizeEntry(e string) (string, error) {
	s := strings.ToLower(strings.TrimSpace(e))
	if s == "" {
		return "", fault.Invalid("egress allow-list: empty entry")
	}
	if strings.Contains(s, "://") || strings.ContainsAny(s, "?#@ ") || strings.Count(s, "/") > 1 {
		return "", fault.Invalid("egress allow-list entry %q: give a host name (example.com), *.example.com, an address or a CIDR, not a URL", e)
	}
	if strings.Contains(s, "/") {
		p, err := netip.ParsePrefix(s)
		if err != nil {
			return "", fault.Invalid("egress allow-list entry %q: not a CIDR (write e.g. 10.0.0.0/24 or 2001:db8::/48)", e)
		}
		p = netip.PrefixFrom(p.Addr().Unmap(), p.Bits()-unmapBits(p.Addr()))
		if p.Bits() == 0 {
			return "", fault.Invalid("egress allow-list entry %q allows every address: use mode \"open\" instead", e)
		}
		return p.Masked().String(), nil
	}
	if a, err := netip.ParseAddr(strings.Trim(s, "[]")); err == nil {
		if a.Zone() != "" {
			return "", fault.Invalid("egress allow-list entry %q: an address with a zone cannot be allowed", e)
		}
		a = a.Unmap()
		return netip.PrefixFrom(a, a.BitLen()).String(), nil
	}
	name := strings.TrimSuffix(s, ".")
	wild := strings.HasPrefix(name, "*.")
	if !validName(strings.TrimPrefix(name, "*.")) || strings.Contains(name[min(2, len(name)):], "*") || wild && !strings.Contains(name[2:], ".") {
		if strings.Contains(name, ":") {
			return "", fault.Invalid("egress allow-list entry %q: give the host without a port (the policy allows every port of an allowed host)", e)
		}
		return "", fault.Invalid("egress allow-list entry %q: not a host name (letters, digits, '-' and dots; *.example.com for its subdomains)", e)
	}
	return name, nil
}

func unmapBits(a netip.Addr) int {
	if a.Is4In6() {
		return 96
	}
	return 0
}

// validName reports whether s is a DNS host name (LDH labels; "_" allowed for service names).
func validName(s string) bool {
	if s == "" || len(s) > 253 {
		return false
	}
	for _, l := range strings.Split(s, ".") {
		if l == "" || len(l) > 63 || l[0] == '-' || l[len(l)-1] == '-' {
			return false
		}
		for _, c := range []byte(l) {
			if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
				return false
			}
		}
	}
	return true
}

// Rules is a normalized policy compiled for matching.
type Rules struct {
	Mode     string
	names    map[string]bool
	suffixes []string // ".example.com" for *.example.com
	Prefixes []netip.Prefix
}

// Compile compiles a policy (normalizing it first).
func Compile(p store.EgressPolicy) (Rules, error) {
	n, err := Normalize(p)
	if err != nil {
		return Rules{}, err
	}
	r := Rules{Mode: n.Mode, names: map[string]bool{}}
	for _, e := range n.Allow {
		switch {
		case strings.Contains(e, "/"):
			r.Prefixes = append(r.Prefixes, netip.MustParsePrefix(e))
		case strings.HasPrefix(e, "*."):
			r.suffixes = append(r.suffixes, e[1:])
		default:
			r.names[e] = true
		}
	}
	return r, nil
}

// Names are the allowed host names, sorted.
func (r Rules) Names() []string { return slices.Sorted(maps.Keys(r.names)) }

// Wildcards are the allowed name suffixes (".example.com" for *.example.com), sorted.
func (r Rules) Wildcards() []string { return slices.Sorted(slices.Values(r.suffixes)) }

// AllowsName reports whether the desktop may resolve (and so reach) host name.
func (r Rules) AllowsName(name string) bool {
	if r.Mode == Open {
		return true
	}
	name = strings.TrimSuffix(strings.ToLower(name), ".")
	if r.names[name] {
		return true
	}
	for _, s := range r.suffixes {
		if strings.HasSuffix(name, s) {
			return true
		}
	}
	return false
}

// AllowsAddr reports whether address a is in one of the allowed CIDRs.
func (r Rules) AllowsAddr(a netip.Addr) bool {
	if r.Mode == Open {
		return true
	}
	a = a.Unmap()
	for _, p := range r.Prefixes {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

// Effective is the policy for a desktop of agentID on a node with settings ns: the agent's own
// when it has one (agent desktops only; "" for a shared desktop), else the node's.
func Effective(ns store.NodeSettings, agentID string) store.EgressPolicy {
	if p, ok := ns.AgentEgress[agentID]; ok && agentID != "" {
		return p
	}
	return ns.Egress
}
