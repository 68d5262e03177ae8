// Package egress decides which addresses the server may connect to on a user's behalf (model
// endpoints). A base URL that names, or resolves to, a loopback, private, link-local or
// otherwise non-public address is refused unless an administrator allowed it (SSRF). The
// check runs on the address actually dialled, after name resolution, for every connection —
// so a name that resolves to a public address when it is saved and to 127.0.0.1 later (DNS
// rebinding) is still refused, and so is a redirect to such an address.
package egress

import (
	"context"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"syscall"
	"time"

	"cubicle/backend/fault"
)

// nonPublic are the ranges that are not the public internet: besides what netip's own
// predicates cover (loopback, private, link-local, multicast, unspecified).
var nonPublic = []netip.Prefix{
	netip.MustParsePrefix("0.0.0.0/8"),       // "this network"
	netip.MustParsePrefix("100.64.0.0/10"),   // carrier-grade NAT
	netip.MustParsePrefix("192.0.0.0/24"),    // IETF protocol assignments
	netip.MustParsePrefix("192.0.2.0/24"),    // TEST-NET-1
	netip.MustParsePrefix("198.18.0.0/15"),   // benchmarking
	netip.MustParsePrefix("198.51.100.0/24"), // TEST-NET-2
	netip.MustParsePrefix("203.0.113.0/24"),  // TEST-NET-3
	netip.MustParsePrefix("240.0.0.0/4"),     // reserved, broadcast
	netip.MustParsePrefix("fec0::/10"),       // site-local (deprecated)
	netip.MustParsePrefix("100::/64"),        // discard
	netip.MustParsePrefix("2001:db8::/32"),   // documentation
}

// embedded are IPv6 ranges that carry an IPv4 address, which is what is really reached.
var (
	v4Compat   = netip.MustParsePrefix("::/96")           // IPv4-compatible (deprecated): never public
	translated = netip.MustParsePrefix("::ffff:0:0:0/96") // IPv4-translated (SIIT)
	nat64      = netip.MustParsePrefix("64:ff9b::/96")
	nat64Loc   = netip.MustParsePrefix("64:ff9b:1::/48")
	sixTo4     = netip.MustParsePrefix("2002::/16")
	teredo     = netip.MustParsePrefix("2001::/32") // server in bits 32–63, client inverted in 96–127
)

// Public reports whether ip is a public internet address.
func Public(ip netip.Addr) bool {
	ip = ip.Unmap()
	if !ip.IsValid() || ip.IsLoopback() || ip.IsPrivate() || ip.IsLinkLocalUnicast() || ip.IsLinkLocalMulticast() ||
		ip.IsInterfaceLocalMulticast() || ip.IsMulticast() || ip.IsUnspecified() {
		return false
	}
	for _, p := range nonPublic {
		if p.Contains(ip) {
			return false
		}
	}
	if ip.Is6() {
		b := ip.As16()
		switch {
		case v4Compat.Contains(ip):
			// ::a.b.c.d is no address anyone serves from; some stacks reach a.b.c.d by it.
			return false
		case translated.Contains(ip) || nat64.Contains(ip) || nat64Loc.Contains(ip):
			return Public(netip.AddrFrom4([4]byte{b[12], b[13], b[14], b[15]}))
		case sixTo4.Contains(ip):
			return Public(netip.AddrFrom4([4]byte{b[2], b[3], b[4], b[5]}))
		case teredo.Contains(ip):
			server := netip.AddrFrom4([4]byte{b[4], b[5], b[6], b[7]})
			client := netip.AddrFrom4([4]byte{^b[12], ^b[13], ^b[14], ^b[15]})
			return Public(server) && Public(client)
		}
	}
	return true
}

// Control is a net.Dialer Control function that refuses connections to non-public addresses.
// It sees the address after name resolution, for each connection attempt.
func Control(network, address string, _ syscall.RawConn) error {
	ap, err := netip.ParseAddrPort(address)
	if err != nil {
		return fault.Forbidden("refusing to connect to %q: not an IP address", address)
	}
	if !Public(ap.Addr()) {
		return fault.Forbidden("refusing to connect to %s: it is a loopback, private or otherwise non-public address, "+
			"which model endpoints may only use when an administrator allows it (Settings → Security → model endpoints)", ap.Addr())
	}
	return nil
}

// Transport returns an HTTP transport for calls on a user's behalf. Unless allowPrivate, every
// connection to a non-public address is refused at dial time. Proxies from the environment are
// not used when the check is on: a proxy would hide the real destination from it.
func Transport(allowPrivate bool, responseHeaderTimeout time.Duration) *http.Transport {
	d := &net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second}
	t := &http.Transport{
		DialContext:           loopbackNames(d.DialContext),
		ForceAttemptHTTP2:     true,
		MaxIdleConns:          16,
		IdleConnTimeout:       90 * time.Second,
		TLSHandshakeTimeout:   10 * time.Second,
		ResponseHeaderTimeout: responseHeaderTimeout,
	}
	if allowPrivate {
		t.Proxy = http.ProxyFromEnvironment
		return t
	}
	d.Control = Control
	return t
}

// ModelClient is the HTTP client of calls to a model endpoint on a user's behalf: Transport's
// checks (unless allowPrivate), a 2 min wait for the answer's headers, and no redirects — a key
// goes to the base URL it was saved with and nowhere else. Every model provider uses it.
func ModelClient(allowPrivate bool) *http.Client {
	return &http.Client{
		Transport:     Transport(allowPrivate, 2*time.Minute),
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
}

// loopbackNames dials "localhost" and names under ".localhost" at the loopback addresses
// without asking a resolver (RFC 6761 §6.3: such names always mean this machine; a machine
// whose hosts file or DNS lacks them, or maps them elsewhere, changes nothing), so the check
// sees the loopback address they stand for.
func loopbackNames(dial func(ctx context.Context, network, addr string) (net.Conn, error)) func(ctx context.Context, network, addr string) (net.Conn, error) {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		host, port, err := net.SplitHostPort(addr)
		if err != nil || !IsLocalhostName(host) {
			return dial(ctx, network, addr)
		}
		var first error
		for _, ip := range []string{"127.0.0.1", "::1"} {
			if network == "tcp4" && ip == "::1" || network == "tcp6" && ip == "127.0.0.1" {
				continue
			}
			c, err := dial(ctx, network, net.JoinHostPort(ip, port))
			if err == nil {
				return c, nil
			}
			if first == nil {
				first = err
			}
		}
		return nil, first
	}
}

// IsLocalhostName reports whether host is "localhost" or a name under ".localhost" (any case,
// with or without the final dot).
func IsLocalhostName(host string) bool {
	h := strings.ToLower(strings.TrimSuffix(host, "."))
	return h == "localhost" || strings.HasSuffix(h, ".localhost")
}
