package deskegress

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"reflect"
	"strings"
	"testing"

	"golang.org/x/net/dns/dnsmessage"

	"cubicle/backend/fault"
	"cubicle/backend/store"
)

func TestNormalize(t *testing.T) {
	p, err := Normalize(store.EgressPolicy{Mode: " Allow-List ", Allow: []string{"Example.COM.", "*.pypi.org", "10.1.2.3", "10.1.2.0/24",
		"10.1.2.7/24", "2001:DB8::1", "::ffff:10.9.9.9", "example.com"}})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"*.pypi.org", "10.1.2.0/24", "10.1.2.3/32", "10.9.9.9/32", "2001:db8::1/128", "example.com"}
	if p.Mode != AllowList || !reflect.DeepEqual(p.Allow, want) {
		t.Fatalf("normalized: %+v", p)
	}
	if p, err := Normalize(store.EgressPolicy{}); err != nil || p.Mode != Open {
		t.Fatalf("empty policy: %+v %v", p, err)
	}
	for _, c := range []struct {
		p    store.EgressPolicy
		want string
	}{
		{store.EgressPolicy{Mode: "half-open"}, `use "open", "allow-list" or "closed"`},
		{store.EgressPolicy{Mode: Closed, Allow: []string{"a.com"}}, "takes no allow entries"},
		{store.EgressPolicy{Mode: AllowList, Allow: []string{"https://example.com/x"}}, "not a URL"},
		{store.EgressPolicy{Mode: AllowList, Allow: []string{"example.com:443"}}, "without a port"},
		{store.EgressPolicy{Mode: AllowList, Allow: []string{"0.0.0.0/0"}}, `use mode "open"`},
		{store.EgressPolicy{Mode: AllowList, Allow: []string{"10.0.0.0/33"}}, "not a CIDR"},
		{store.EgressPolicy{Mode: AllowList, Allow: []string{"exa mple.com"}}, "not a URL"},
		{store.EgressPolicy{Mode: AllowList, Allow: []string{"ex*ample.com"}}, "not a host name"},
		{store.EgressPolicy{Mode: AllowList, Allow: []string{"*.com"}}, "not a host name"},
		{store.EgressPolicy{Mode: AllowList, Allow: []string{"-bad.com"}}, "not a host name"},
		{store.EgressPolicy{Mode: AllowList, Allow: []string{""}}, "empty entry"},
		{store.EgressPolicy{Mode: AllowList, Allow: make([]string, MaxEntries+1)}, "at most"},
	} {
		_, err := Normalize(c.p)
		if !errors.Is(err, fault.ErrInvalid) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: %v (want an invalid error saying %q)", c.p, err, c.want)
		}
	}
}

func TestRulesMatch(t *testing.T) {
	r, err := Compile(store.EgressPolicy{Mode: AllowList, Allow: []string{"example.com", "*.pypi.org", "10.1.0.0/16"}})
	if err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]bool{"example.com": true, "EXAMPLE.com.": true, "www.example.com": false,
		"files.pypi.org": true, "a.b.pypi.org": true, "pypi.org": false, "evilpypi.org": false} {
		if r.AllowsName(name) != want {
			t.Errorf("AllowsName(%q) = %v", name, !want)
		}
	}
	if !r.AllowsAddr(netip.MustParseAddr("10.1.200.3")) || r.AllowsAddr(netip.MustParseAddr("10.2.0.1")) {
		t.Error("AllowsAddr")
	}
	closed, _ := Compile(store.EgressPolicy{Mode: Closed})
	open, _ := Compile(store.EgressPolicy{})
	if closed.AllowsName("example.com") || !open.AllowsName("anything.example") {
		t.Error("closed or open")
	}
	ns := store.NodeSettings{Egress: store.EgressPolicy{Mode: Closed}, AgentEgress: map[string]store.EgressPolicy{"a1": {Mode: Open}}}
	if Effective(ns, "a1").Mode != Open || Effective(ns, "a2").Mode != Closed || Effective(ns, "").Mode != Closed {
		t.Error("Effective: an agent's own policy wins, else the node's")
	}
}

func query(t *testing.T, name string, typ dnsmessage.Type) []byte {
	t.Helper()
	b := dnsmessage.NewBuilder(nil, dnsmessage.Header{ID: 77, RecursionDesired: true})
	b.StartQuestions()
	b.Question(dnsmessage.Question{Name: dnsmessage.MustNewName(name), Type: typ, Class: dnsmessage.ClassINET})
	q, err := b.Finish()
	if err != nil {
		t.Fatal(err)
	}
	return q
}

func TestDNSAnswer(t *testing.T) {
	r, _ := Compile(store.EgressPolicy{Mode: AllowList, Allow: []string{"svc.test", "gone.test"}})
	lookup := func(_ context.Context, network, host string) ([]netip.Addr, error) {
		switch {
		case host == "svc.test" && network == "ip4":
			return []netip.Addr{netip.MustParseAddr("10.231.0.2"), netip.MustParseAddr("2001:db8::2")}, nil
		case host == "svc.test":
			return []netip.Addr{netip.MustParseAddr("2001:db8::2")}, nil
		}
		return nil, &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}
	}
	var admitted []netip.Addr
	admit := func(a []netip.Addr) error { admitted = append(admitted, a...); return nil }
	parse := func(reply []byte) (dnsmessage.Header, []dnsmessage.Resource) {
		var m dnsmessage.Message
		if err := m.Unpack(reply); err != nil {
			t.Fatal(err)
		}
		if m.ID != 77 || !m.Response || len(m.Questions) != 1 {
			t.Fatalf("reply header: %+v", m.Header)
		}
		return m.Header, m.Answers
	}

	reply, blocked := answer(context.Background(), query(t, "svc.test.", dnsmessage.TypeA), r, lookup, admit)
	h, ans := parse(reply)
	if blocked != "" || h.RCode != dnsmessage.RCodeSuccess || len(ans) != 1 || ans[0].Body.(*dnsmessage.AResource).A != [4]byte{10, 231, 0, 2} {
		t.Fatalf("A of an allowed name: %+v %+v %q", h, ans, blocked)
	}
	if !reflect.DeepEqual(admitted, []netip.Addr{netip.MustParseAddr("10.231.0.2")}) {
		t.Fatalf("admitted before the reply: %v", admitted)
	}
	reply, _ = answer(context.Background(), query(t, "svc.test.", dnsmessage.TypeAAAA), r, lookup, admit)
	if _, ans := parse(reply); len(ans) != 1 {
		t.Fatalf("AAAA: %+v", ans)
	}
	reply, _ = answer(context.Background(), query(t, "svc.test.", dnsmessage.TypeTXT), r, lookup, admit)
	if h, ans := parse(reply); h.RCode != dnsmessage.RCodeSuccess || len(ans) != 0 {
		t.Fatalf("TXT of an allowed name: %+v %+v", h, ans)
	}
	reply, blocked = answer(context.Background(), query(t, "evil.test.", dnsmessage.TypeA), r, lookup, admit)
	if h, ans := parse(reply); h.RCode != dnsmessage.RCodeNameError || len(ans) != 0 || blocked != "evil.test" {
		t.Fatalf("a name not allowed: %+v %+v %q", h, ans, blocked)
	}
	reply, blocked = answer(context.Background(), query(t, "gone.test.", dnsmessage.TypeA), r, lookup, admit)
	if h, _ := parse(reply); h.RCode != dnsmessage.RCodeNameError || blocked != "" {
		t.Fatalf("an allowed name that does not exist: %+v %q", h, blocked)
	}
	admitFails := func([]netip.Addr) error { return errors.New("nft") }
	reply, _ = answer(context.Background(), query(t, "svc.test.", dnsmessage.TypeA), r, lookup, admitFails)
	if h, ans := parse(reply); h.RCode != dnsmessage.RCodeServerFailure || len(ans) != 0 {
		t.Fatalf("addresses that could not be opened are not handed out: %+v %+v", h, ans)
	}
	if reply, _ := answer(context.Background(), []byte{1, 2, 3}, r, lookup, admit); reply != nil {
		t.Fatal("garbage answered")
	}
}

func TestParsePacket(t *testing.T) {
	v4 := make([]byte, 24)
	v4[0], v4[9] = 0x45, 6
	copy(v4[16:20], []byte{10, 231, 1, 2})
	v4[22], v4[23] = 0x1f, 0x90
	if dst, proto, port, ok := parsePacket(v4); !ok || dst.String() != "10.231.1.2" || proto != "tcp" || port != 8080 {
		t.Fatalf("v4: %v %s %d %v", dst, proto, port, ok)
	}
	v6 := make([]byte, 48)
	v6[0], v6[6] = 0x60, 17
	copy(v6[24:40], netip.MustParseAddr("2001:db8::9").AsSlice())
	v6[42], v6[43] = 0, 53
	if dst, proto, port, ok := parsePacket(v6); !ok || dst.String() != "2001:db8::9" || proto != "udp" || port != 53 {
		t.Fatalf("v6: %v %s %d %v", dst, proto, port, ok)
	}
	if _, _, _, ok := parsePacket([]byte{0x45, 0}); ok {
		t.Fatal("a short packet parsed")
	}
}
