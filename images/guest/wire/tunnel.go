package wire

// A tunnel turns one connection to the driver into a raw byte stream to a TCP address on the
// desktop's own loopback interface (e.g. the DevTools port of an agent's Chromium, published
// nowhere). The driver accepts only loopback addresses; a tunnel is the first and only request
// of its connection (docs/guest-protocol.md, "Tunnel").

// OpTunnel opens a tunnel (args TunnelArgs, empty result; then raw bytes).
const OpTunnel = "tunnel"

// FeatureTunnel is in Hello.Features of a driver that opens tunnels.
const FeatureTunnel = "tunnel"

// TunnelArgs names the tunnel's target: a loopback host and port inside the desktop, e.g.
// "127.0.0.1:9222".
type TunnelArgs struct {
	Address string `json:"address"`
}
