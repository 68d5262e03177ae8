//go:build !linux

package liveview

import "net"

// unacked returns -1: only Linux reports a socket's unacknowledged bytes here; flow control
// then goes by how long writes take.
func unacked(net.Conn) int { return -1 }
