//go:build linux

package liveview

import (
	"net"

	"golang.org/x/sys/unix"
)

// unacked returns the bytes written to c that its peer has not acknowledged yet (TCP's
// SIOCOUTQ), or -1 when c is not a TCP connection or the kernel does not say.
func unacked(c net.Conn) int {
	tc, ok := c.(*net.TCPConn)
	if !ok {
		return -1
	}
	raw, err := tc.SyscallConn()
	if err != nil {
		return -1
	}
	n := -1
	raw.Control(func(fd uintptr) {
		v, err := unix.IoctlGetInt(int(fd), unix.SIOCOUTQ)
		if err == nil {
			n = v
		}
	})
	return n
}
