package deskegress

import (
	"encoding/binary"
	"net/netip"
)

// parsePacket reads the destination, protocol and destination port of an IPv4 or IPv6 packet
// (as NFLOG hands it: from the network header on). IPv6 extension headers are not followed
// (the protocol is then "other").
func parsePacket(p []byte) (dst netip.Addr, proto string, port int, ok bool) {
	if len(p) < 1 {
		return netip.Addr{}, "", 0, false
	}
	var next byte
	var l4 []byte
	switch p[0] >> 4 {
	case 4:
		ihl := int(p[0]&0x0f) * 4
		if len(p) < 20 || ihl < 20 {
			return netip.Addr{}, "", 0, false
		}
		dst = netip.AddrFrom4([4]byte(p[16:20]))
		next = p[9]
		if len(p) >= ihl {
			l4 = p[ihl:]
		}
	case 6:
		if len(p) < 40 {
			return netip.Addr{}, "", 0, false
		}
		dst = netip.AddrFrom16([16]byte(p[24:40]))
		next = p[6]
		l4 = p[40:]
	default:
		return netip.Addr{}, "", 0, false
	}
	switch next {
	case 6, 17:
		proto = map[byte]string{6: "tcp", 17: "udp"}[next]
		if len(l4) >= 4 {
			port = int(binary.BigEndian.Uint16(l4[2:4]))
		}
	case 1, 58:
		proto = "icmp"
	default:
		proto = "other"
	}
	return dst, proto, port, true
}
