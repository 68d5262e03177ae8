// Package engineconn finds and connects the container engine a node's desktops run on:
// Podman or Docker found on this machine (or reached over ssh/tcp), a Podman service started
// and owned when only the CLI is installed, or a Kubernetes cluster with the local engine
// building the images it pushes. It also reads the engine settings from the environment,
// overlays them, checks them, and decides how the desktops' drivers are reached (the guest
// link). The server (package backend) and `cubicle runner` both connect through it.
package engineconn

import (
	"cmp"
	"context"
	"errors"
	"log/slog"
	"os"
	"runtime"
	"time"

	"cubicle/backend/engine"
	"cubicle/backend/engine/docker"
	"cubicle/backend/engine/kubernetes"
	"cubicle/backend/engine/podman"
	"cubicle/backend/fault"
	"cubicle/backend/housekeeping"
	"cubicle/backend/link"
	"cubicle/backend/store"
	"cubicle/backend/vm"
	"cubicle/images"
)

// The engine adapters satisfy what a connected engine offers.
var (
	_ EngineClient = (*podman.Client)(nil)
	_ EngineClient = (*docker.Client)(nil)
	_ vm.Engine    = (*kubernetes.Client)(nil)
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

// GuestLinkChoice decides how desktops' drivers on engine e are reached under mode (see
// link.Choose). It asks the engine what it runs on only when the answer can change the
// choice: a Docker engine whose socket looks local may be Docker Desktop's VM. Podman's
// answer takes seconds on a busy machine (it counts its storage) and never names Docker
// Desktop, so a Podman engine, a forced mode or a choice of exec is made without it
// (issue 31: the question was on the server's start).
func GuestLinkChoice(ctx context.Context, mode link.Mode, e *ConnectedEngine) link.Choice {
	le := link.Engine{GOOS: runtime.GOOS, Socket: e.Endpoint.Socket, Remote: e.Endpoint.Remote, VM: e.Endpoint.VM}
	c := link.Choose(mode, le)
	if mode != link.Auto || c.Primary == link.NameExec || e.Endpoint.Kind == engine.Podman || e.Client == nil {
		return c
	}
	ictx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if info, err := e.Client.Info(ictx); err == nil {
		le.OperatingSystem = info.OperatingSystem
	}
	return link.Choose(mode, le)
}

// EngineClient is what a connected engine offers: both adapters implement it.
type EngineClient interface {
	vm.Engine
	images.Engine
	images.Pusher
	housekeeping.Engine
	Close() error
}

// ConnectedEngine is a connected container engine and what to release with it.
type ConnectedEngine struct {
	// Client is the local engine (Podman or Docker): the desktops' engine, and the one that
	// builds images. With Kube set it only builds and pushes images, and may be nil (no
	// local engine: ImagesProblem says so).
	Client   EngineClient
	Endpoint engine.Endpoint      // the desktops' engine
	owned    *engine.OwnedService // a Podman service Cubicle started itself

	// Kube is set when the desktops run on a Kubernetes cluster (Settings its settings);
	// Local is then the local engine's endpoint.
	Kube          *kubernetes.Client
	Settings      store.EngineSettings
	Local         engine.Endpoint
	ImagesProblem string // why images cannot be prepared on this node ("" when they can)
}

// Desktops returns the engine the desktops run on.
func (e *ConnectedEngine) Desktops() vm.Engine {
	if e.Kube != nil {
		return e.Kube
	}
	return e.Client
}

// MapsUsers reports whether desktops get their own user namespace: only where the engine maps
// per container (rootful Podman), unless CUBICLE_DESKTOP_USERNS=off keeps the engine's
// default. The engine is asked only when its socket does not tell.
func (e *ConnectedEngine) MapsUsers() bool {
	if e.Endpoint.Kind != engine.Podman || os.Getenv("CUBICLE_DESKTOP_USERNS") == "off" {
		return false
	}
	switch e.Endpoint.Source {
	case engine.SourceRootful:
		return true
	case engine.SourceRootless:
		return false
	case engine.SourceOwned: // a service Cubicle started: rootful when Cubicle runs as root
		return !e.Endpoint.Rootless
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	info, err := e.Client.Info(ctx)
	return err == nil && info.Kind == engine.Podman && !info.Rootless
}

// Close releases the clients and stops a Podman service Cubicle started.
func (e *ConnectedEngine) Close() error {
	var err error
	if e.Client != nil {
		err = e.Client.Close()
	}
	if e.Kube != nil {
		err = errors.Join(err, e.Kube.Close())
	}
	if e.owned != nil {
		err = errors.Join(err, e.owned.Close())
	}
	return err
}

// ConnectEngine finds and connects the container engine: prefer is "", "podman" or "docker"
// ("" = $CUBICLE_ENGINE, else Podman first). When only the podman CLI is installed it starts
// and owns a Podman service. A missing engine is a fault.ErrUnavailable error saying how to
// get one.
func ConnectEngine(ctx context.Context, prefer string, log *slog.Logger) (*ConnectedEngine, error) {
	pref, err := engine.ParseKind(cmp.Or(prefer, os.Getenv("CUBICLE_ENGINE")))
	if err != nil {
		return nil, fault.Invalid("%v", err)
	}
	eps, _ := DiscoverEngines(ctx, engine.DiscoverOptions{Prefer: pref})
	ep, ok := engine.Pick(eps)
	var owned *engine.OwnedService
	if !ok && pref != engine.Docker {
		for _, e := range eps {
			if e.Kind == engine.Podman && e.CLI != "" {
				svc, err := engine.StartPodmanService(ctx, engine.DefaultOwnedSocket(os.Getenv, os.Getuid()), log)
				if err != nil {
					return nil, fault.Unavailable("podman is installed but its service could not be started: %v", err)
				}
				owned = svc
				ep, ok = engine.Endpoint{Kind: engine.Podman, Socket: svc.Socket(), Source: engine.SourceOwned, Rootless: os.Getuid() != 0}, true
				break
			}
		}
	}
	if !ok {
		msg := "no container engine found: install Podman (sudo apt-get install podman) or Docker and start it"
		for _, e := range eps {
			if e.Fix != "" {
				return nil, fault.Unavailable("%s; e.g. %s", msg, e.Fix)
			}
		}
		return nil, fault.Unavailable("%s", msg)
	}
	c, err := connectEndpoint(ctx, ep, log)
	if err != nil {
		if owned != nil {
			owned.Close()
		}
		return nil, err
	}
	log.Info("container engine connected", "kind", ep.Kind, "socket", ep.Socket, "source", ep.Source,
		"version", ep.Version, "remote", ep.Remote, "vm", ep.VM)
	return &ConnectedEngine{Client: c, Endpoint: ep, owned: owned}, nil
}
