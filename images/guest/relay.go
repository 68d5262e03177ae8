//go:build linux

package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"time"
)

// relay is the in-guest end of the exec link (cubicle-guest --relay, started by the host as
// an exec session through the engine API): it connects to the driver's socket inside the
// container and copies bytes both ways between it and its own stdin/stdout, which the
// engine attaches to the host. It knows nothing of the protocol — the host's client and the
// driver speak it end to end, handshake included. It waits up to wait for the socket (a
// desktop that is still starting), and ends when the driver closes the connection or the
// host closes stdin (the engine then ends the session).
func relay(ctx context.Context, sock string, wait time.Duration, in io.Reader, out io.Writer) error {
	deadline := time.Now().Add(wait)
	var conn *net.UnixConn
	for {
		c, err := net.DialUnix("unix", nil, &net.UnixAddr{Name: sock, Net: "unix"})
		if err == nil {
			conn = c
			break
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("relay: connect to the driver at %s: %w (is the desktop's driver running?)", sock, err)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(25 * time.Millisecond):
		}
	}
	defer conn.Close()
	stop := context.AfterFunc(ctx, func() { conn.Close() })
	defer stop()
	go func() {
		// Host → driver. When stdin ends the driver sees EOF and closes the connection,
		// which ends the copy below. This goroutine may outlive relay blocked on stdin: the
		// process exits right after relay returns.
		io.Copy(conn, in)
		conn.CloseWrite()
	}()
	// Driver → host, until the driver closes the connection.
	if _, err := io.Copy(out, conn); err != nil && !errors.Is(err, net.ErrClosed) {
		return fmt.Errorf("relay: %w", err)
	}
	return nil
}
