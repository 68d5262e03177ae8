package backend

import (
	"context"
	"log/slog"
	"time"

	"cubicle/backend/engine"
	"cubicle/backend/engine/docker"
	"cubicle/backend/engine/podman"
)

// DiscoverEngines is engine.Discover with ssh:// endpoints probed through the engine
// clients' own ssh support: docker's connection helper (`ssh … docker system dial-stdio`)
// for Docker endpoints, the Podman bindings' ssh connection for Podman ones.
func DiscoverEngines(ctx context.Context, opts engine.DiscoverOptions) ([]engine.Endpoint, error) {
	if opts.ProbeSSH == nil {
		opts.ProbeSSH = probeSSH
	}
	return engine.Discover(ctx, opts)
}

// probeSSH checks an ssh:// endpoint with the client of its kind.
func probeSSH(ctx context.Context, ep engine.Endpoint, timeout time.Duration) (engine.Kind, string, string, error) {
	if ep.SSHClient() == engine.Docker {
		return docker.PingSSH(ctx, ep.Socket, timeout)
	}
	return podman.PingSSH(ctx, ep.Socket, ep.Identity, ep.VM, timeout)
}

// connectEndpoint opens the adapter that fits ep: the Podman bindings for Podman's unix,
// tcp and ssh addresses; the Docker client for Docker, for named pipes (a Podman machine's
// pipe on Windows speaks the Docker API, which the bindings cannot open) and for ssh
// addresses reached through docker's helper (see Endpoint.SSHClient).
func connectEndpoint(ctx context.Context, ep engine.Endpoint, log *slog.Logger) (EngineClient, error) {
	if ep.Kind == engine.Docker || ep.Scheme() == "npipe" || (ep.Scheme() == "ssh" && ep.SSHClient() == engine.Docker) {
		return docker.Connect(ctx, ep.Socket, docker.Options{Logger: log, TLS: ep.TLS})
	}
	return podman.Connect(ctx, ep.Socket, podman.Options{Logger: log, Identity: ep.Identity, Machine: ep.VM && ep.Scheme() == "ssh"})
}
