package guest

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"slices"
	"time"

	"cubicle/backend/fault"
	"cubicle/images/guest/wire"
)

// A tunnel turns one connection to the driver into a raw byte stream to a TCP address on the
// desktop's own loopback interface (e.g. the DevTools port of the agent's Chromium, which the
// container publishes nowhere). It works over any byte stream that reaches the driver — the
// unix socket of the run directory, an exec session, a runner relay — so what uses it does
// not depend on how the host reaches the desktop. The driver accepts only loopback
// addresses; a tunnel is the first and only request of its connection.

// FeatureTunnel is in Hello.Features of a driver that opens tunnels (wire.FeatureTunnel).
const FeatureTunnel = wire.FeatureTunnel

// OpenTunnel performs the handshake on conn (a fresh byte stream to the driver), asks for a
// tunnel to address, and returns the stream to it. conn belongs to the tunnel from then on:
// closing the tunnel closes it. A driver too old to tunnel is fault.ErrConflict.
func OpenTunnel(ctx context.Context, conn net.Conn, address string) (net.Conn, error) {
	fail := func(err error) (net.Conn, error) {
		conn.Close()
		return nil, err
	}
	if dl, ok := ctx.Deadline(); ok {
		conn.SetDeadline(dl)
	} else {
		conn.SetDeadline(time.Now().Add(10 * time.Second))
	}
	stop := context.AfterFunc(ctx, func() { conn.SetDeadline(time.Now()) })
	defer stop()
	br := bufio.NewReaderSize(conn, 32<<10)
	hello, _ := json.Marshal(wire.HelloArgs{Protocol: wire.ProtocolVersion, Client: "cubicle-tunnel"})
	args, _ := json.Marshal(wire.TunnelArgs{Address: address})
	if err := wire.WriteMessage(conn, &wire.Envelope{ID: 0, Op: wire.OpHello, Args: hello}, nil); err != nil {
		return fail(fault.Unavailable("desktop driver: tunnel to %s: %v", address, err))
	}
	if err := wire.WriteMessage(conn, &wire.Envelope{ID: 1, Op: wire.OpTunnel, Args: args}, nil); err != nil {
		return fail(fault.Unavailable("desktop driver: tunnel to %s: %v", address, err))
	}
	for id := uint64(0); id < 2; id++ {
		var env wire.Envelope
		if _, err := wire.ReadMessage(br, &env); err != nil {
			if ctx.Err() != nil {
				return fail(fmt.Errorf("desktop driver: tunnel to %s: %w", address, ctx.Err()))
			}
			return fail(fault.Unavailable("desktop driver: tunnel to %s: %v", address, err))
		}
		if id == 0 && env.Error == nil {
			var h wire.Hello
			json.Unmarshal(env.Result, &h)
			if !slices.Contains(h.Features, wire.FeatureTunnel) {
				return fail(fault.Conflict("the desktop's driver (%s) is older than this Cubicle and cannot open a tunnel: "+
					"prepare the image again in Settings → Local VM", h.Driver))
			}
		}
		if env.Error != nil {
			return fail(fmt.Errorf("desktop driver: tunnel to %s: %w", address, ErrorFor(env.Op, env.Error)))
		}
	}
	conn.SetDeadline(time.Time{})
	return &tunnelConn{Conn: conn, r: br}, nil
}

// DialTunnel opens a tunnel to address through the driver's unix socket.
func DialTunnel(ctx context.Context, socketPath, address string) (net.Conn, error) {
	var d net.Dialer
	conn, err := d.DialContext(ctx, "unix", socketPath)
	if err != nil {
		return nil, fault.Unavailable("desktop driver: nothing answers at %s (is the desktop running?): %v", socketPath, err)
	}
	return OpenTunnel(ctx, conn, address)
}

// tunnelConn reads what the handshake's buffered reader already holds before the connection.
type tunnelConn struct {
	net.Conn
	r *bufio.Reader
}

func (c *tunnelConn) Read(p []byte) (int, error) { return c.r.Read(p) }
