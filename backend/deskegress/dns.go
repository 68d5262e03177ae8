package deskegress

import (
	"context"
	"errors"
	"net"
	"net/netip"

	"golang.org/x/net/dns/dnsmessage"
)

// LookupFunc resolves host on this machine (network "ip4" or "ip6"), as
// net.Resolver.LookupNetIP does.
type LookupFunc func(ctx context.Context, network, host string) ([]netip.Addr, error)

// answerTTL is the TTL of the filter's answers: short, so a name's new addresses are looked
// up (and admitted) again soon.
const answerTTL = 30

// answer is the DNS filter's reply to query q under rules r. A or AAAA for an allowed name is
// resolved with lookup; admit is called with the addresses before the reply is built (it
// opens them in the desktop's table); another type for an allowed name gets an empty answer.
// Any other name gets NXDOMAIN and is returned as blocked. A query that cannot be parsed gets
// FORMERR (nil when not even its header can be read).
func answer(ctx context.Context, q []byte, r Rules, lookup LookupFunc, admit func([]netip.Addr) error) (reply []byte, blocked string) {
	var p dnsmessage.Parser
	h, err := p.Start(q)
	if err != nil {
		return nil, ""
	}
	rh := dnsmessage.Header{ID: h.ID, Response: true, OpCode: h.OpCode, RecursionDesired: h.RecursionDesired, RecursionAvailable: true}
	qs, err := p.AllQuestions()
	if err != nil || len(qs) != 1 || h.Response || h.OpCode != 0 {
		rh.RCode = dnsmessage.RCodeFormatError
		if err == nil && h.OpCode != 0 {
			rh.RCode = dnsmessage.RCodeNotImplemented
		}
		return build(rh, nil, nil), ""
	}
	qq := qs[0]
	name := qq.Name.String()
	if !r.AllowsName(name) {
		rh.RCode = dnsmessage.RCodeNameError
		return build(rh, &qq, nil), trimDot(name)
	}
	var network string
	switch qq.Type {
	case dnsmessage.TypeA:
		network = "ip4"
	case dnsmessage.TypeAAAA:
		network = "ip6"
	default:
		return build(rh, &qq, nil), "" // allowed name, a type the filter does not serve: no data
	}
	addrs, err := lookup(ctx, network, trimDot(name))
	var keep []netip.Addr
	for _, a := range addrs {
		a = a.Unmap()
		if network == "ip4" && a.Is4() || network == "ip6" && a.Is6() {
			keep = append(keep, a)
		}
	}
	if len(keep) > 16 {
		keep = keep[:16] // the answer stays well under 512 bytes
	}
	switch {
	case err != nil && len(keep) == 0:
		if de := (*net.DNSError)(nil); errors.As(err, &de) && de.IsNotFound {
			rh.RCode = dnsmessage.RCodeNameError
		} else {
			rh.RCode = dnsmessage.RCodeServerFailure
		}
		return build(rh, &qq, nil), ""
	case len(keep) > 0:
		if err := admit(keep); err != nil {
			rh.RCode = dnsmessage.RCodeServerFailure
			return build(rh, &qq, nil), ""
		}
	}
	return build(rh, &qq, keep), ""
}

// build encodes a reply; it cannot fail for the values answer gives it.
func build(h dnsmessage.Header, q *dnsmessage.Question, addrs []netip.Addr) []byte {
	b := dnsmessage.NewBuilder(make([]byte, 0, 512), h)
	b.EnableCompression()
	if q != nil {
		_ = b.StartQuestions()
		_ = b.Question(*q)
	}
	_ = b.StartAnswers()
	for _, a := range addrs {
		rh := dnsmessage.ResourceHeader{Name: q.Name, Class: dnsmessage.ClassINET, TTL: answerTTL}
		if a.Is4() {
			_ = b.AResource(rh, dnsmessage.AResource{A: a.As4()})
		} else {
			_ = b.AAAAResource(rh, dnsmessage.AAAAResource{AAAA: a.As16()})
		}
	}
	out, err := b.Finish()
	if err != nil {
		return nil
	}
	return out
}

func trimDot(s string) string {
	if len(s) > 1 && s[len(s)-1] == '.' {
		return s[:len(s)-1]
	}
	return s
}
