//go:build linux

package sandbox

import (
	"encoding/base64"
	"net"
	"strconv"
)

func b64(s string) string { return base64.StdEncoding.EncodeToString([]byte(s)) }

type listener struct {
	net.Listener
	port string
}

// netListen listens on a loopback TCP port, accepting and closing connections.
func netListen() (*listener, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	return &listener{Listener: ln, port: strconv.Itoa(ln.Addr().(*net.TCPAddr).Port)}, nil
}
