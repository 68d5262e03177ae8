package egress

import (
	"context"
	"errors"
	"net/netip"
	"testing"
	"time"

	"cubicle/backend/fault"
)

func TestPublic(t *testing.T) {
	tests := []struct {
		ip     string
		public bool
	}{
		{"8.8.8.8", true}, {"1.1.1.1", true}, {"2606:4700:4700::1111", true}, {"151.101.1.69", true},
		{"127.0.0.1", false}, {"127.255.0.9", false}, {"::1", false}, {"10.1.2.3", false}, {"172.16.0.1", false},
		{"172.31.255.255", false}, {"192.168.1.1", false}, {"169.254.169.254", false}, {"fe80::1", false},
		{"fc00::1", false}, {"fd12:3456::1", false}, {"0.0.0.0", false}, {"::", false}, {"100.64.0.1", false},
		{"224.0.0.1", false}, {"255.255.255.255", false}, {"::ffff:127.0.0.1", false}, {"::ffff:10.0.0.1", false},
		{"64:ff9b::7f00:1", false}, {"64:ff9b::808:808", true}, {"2002:7f00:1::", false}, {"2002:808:808::", true},
		{"fec0::1", false}, {"198.18.0.1", false}, {"192.0.2.5", false},
		// IPv4 inside IPv6, every way it is carried: IPv4-compatible (deprecated, ::/96),
		// IPv4-mapped, IPv4-translated (SIIT), NAT64 (well-known and local-use), 6to4, Teredo.
		{"::7f00:1", false}, {"::127.0.0.1", false}, {"::a00:1", false}, {"::808:808", false}, {"::ffff:7f00:1", false},
		{"::ffff:0:7f00:1", false}, {"::ffff:0:a00:1", false}, {"::ffff:0:808:808", true},
		{"64:ff9b::a00:1", false}, {"64:ff9b::c0a8:101", false}, {"64:ff9b:1::7f00:1", false}, {"64:ff9b::a9fe:a9fe", false},
		{"2002:a00:1::", false}, {"2002:c0a8:101::1", false}, {"2002:a9fe:a9fe::", false},
		{"2001:0:808:808::80ff:fffe", false}, {"2001:0:7f00:1:0:0:f7f7:f7f7", false}, {"2001:0:808:808:0:0:f7f7:f7f7", true},
	}
	for _, tt := range tests {
		if got := Public(netip.MustParseAddr(tt.ip)); got != tt.public {
			t.Errorf("Public(%s) = %v, want %v", tt.ip, got, tt.public)
		}
	}
}

func TestControl(t *testing.T) {
	if err := Control("tcp", "127.0.0.1:80", nil); !errors.Is(err, fault.ErrForbidden) {
		t.Fatalf("loopback: %v", err)
	}
	if err := Control("tcp", "[::ffff:169.254.169.254]:80", nil); !errors.Is(err, fault.ErrForbidden) {
		t.Fatalf("mapped metadata address: %v", err)
	}
	if err := Control("tcp", "[::7f00:1]:80", nil); !errors.Is(err, fault.ErrForbidden) {
		t.Fatalf("IPv4-compatible loopback: %v", err)
	}
	if err := Control("tcp", "8.8.8.8:443", nil); err != nil {
		t.Fatalf("public: %v", err)
	}
}

// A proxy from the environment would hide the real destination from the dial-time check: the
// checked transport never uses one; the admin-allowed one does.
func TestTransportIgnoresProxiesWhenChecking(t *testing.T) {
	t.Setenv("HTTPS_PROXY", "http://8.8.8.8:3128")
	t.Setenv("HTTP_PROXY", "http://8.8.8.8:3128")
	if tr := Transport(false, time.Second); tr.Proxy != nil {
		t.Fatal("the checked transport uses a proxy")
	}
	if tr := Transport(true, time.Second); tr.Proxy == nil {
		t.Fatal("the admin-allowed transport ignores the environment's proxy")
	}
	// The checked transport refuses a private address however it is named.
	_, err := Transport(false, time.Second).DialContext(context.Background(), "tcp", "localhost:1")
	if !errors.Is(err, fault.ErrForbidden) {
		t.Fatalf("localhost through the checked transport: %v", err)
	}
}
