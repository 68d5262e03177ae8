//go:build linux

package main

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net"
	"sync"
	"time"

	"cubicle/images/guest/wire"
)

// tunnel serves a tunnel request (guest.OpTunnel): it connects to a TCP address on this
// container's loopback interface, answers the request, and from then on copies bytes both
// ways between the client's connection and the target until either side closes or ctx ends
// (the driver stops). Only loopback targets are allowed: a tunnel reaches what the desktop
// runs for itself (the browser's DevTools port), never the network.
func (s *server) tunnel(ctx context.Context, cn *conn, br *bufio.Reader, env wire.Envelope) {
	var a wire.TunnelArgs
	if err := json.Unmarshal(env.Args, &a); err != nil {
		cn.reply(env.ID, nil, nil, wire.Invalid("tunnel: malformed arguments: %v", err))
		return
	}
	if err := loopbackOnly(a.Address); err != nil {
		cn.reply(env.ID, nil, nil, err)
		return
	}
	d := net.Dialer{Timeout: 5 * time.Second}
	target, err := d.DialContext(ctx, "tcp", a.Address)
	if err != nil {
		cn.reply(env.ID, nil, nil, wire.Unavailable("tunnel: nothing answers at %s in the desktop: %v", a.Address, err))
		return
	}
	defer target.Close()
	cn.reply(env.ID, struct{}{}, nil, nil)
	s.log.Debug("tunnel opened", "address", a.Address)
	stop := context.AfterFunc(ctx, func() {
		target.Close()
		cn.c.Close()
	})
	defer stop()
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		io.Copy(target, br) // bytes the handshake's reader already buffered come first
		if tc, ok := target.(*net.TCPConn); ok {
			tc.CloseWrite()
		}
	}()
	io.Copy(cn.c, target)
	cn.c.Close()
	target.Close()
	wg.Wait()
	s.log.Debug("tunnel closed", "address", a.Address)
}

// loopbackOnly accepts host:port addresses whose host is a loopback IP or "localhost".
func loopbackOnly(addr string) error {
	host, port, err := net.SplitHostPort(addr)
	if err != nil || port == "" {
		return wire.Invalid("tunnel: address %q is not host:port", addr)
	}
	if host == "localhost" {
		return nil
	}
	ip := net.ParseIP(host)
	if ip == nil || !ip.IsLoopback() {
		return wire.Forbidden("tunnel: only loopback addresses of the desktop can be reached, not %q", addr)
	}
	return nil
}
