package backend

import (
	"cmp"
	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"time"

	"cubicle/backend/engine"
	"cubicle/backend/engine/docker"
	"cubicle/backend/engine/kubernetes"
	"cubicle/backend/engine/podman"
	"cubicle/backend/fault"
	"cubicle/backend/hostwall"
	"cubicle/backend/housekeeping"
	"cubicle/backend/link"
	"cubicle/backend/store"
	"cubicle/backend/vm"
	"cubicle/images"
)

// The engine adapters satisfy the manager's Engine.
var (
	_ EngineClient = (*podman.Client)(nil)
	_ EngineClient = (*docker.Client)(nil)
	_ vm.Engine    = (*kubernetes.Client)(nil)
)

// buildVMs connects the container engine (see enginechoice.go), sets up the image builder and
// builds the Local VM manager. A missing engine is not an error: the manager reports it.
func (b *Backend) buildVMs(act vm.Activity) (*vm.Manager, error) {
	log := b.log.With("svc", "vm")
	eff, _, _, err := b.engineChoice()
	if err != nil {
		return nil, err
	}
	b.engineInUse = eff
	b.engineProblem = errNoEngine.Error()
	if eff.Kind != "none" {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		eng, err := ConnectEngineWith(ctx, eff, log)
		cancel()
		if err != nil {
			b.engineProblem = err.Error()
		} else {
			b.engineProblem, b.engine = "", eng
		}
	}
	mode, err := link.ParseMode(cmp.Or(b.cfg.GuestLink, os.Getenv(link.EnvVar)))
	if err != nil {
		return nil, fault.Invalid("%v", err)
	}
	compose := b.cfg.ComposeDesktops
	if len(compose) == 0 {
		for _, name := range strings.Split(os.Getenv("CUBICLE_COMPOSE_DESKTOPS"), ",") {
			if name = strings.TrimSpace(name); name != "" {
				compose = append(compose, vm.ComposeDesktop{Name: name})
			}
		}
	}
	cfg := vm.Config{Store: b.Store, EngineProblem: b.engineProblem, DataDir: b.cfg.DataDir, Logger: log, Compose: compose, Activity: act,
		OnChange: b.desktopChanged, OnPrepare: b.prepareChanged, OnSettings: b.nodeChanged}
	if b.engine != nil {
		cfg.Engine = b.engine.Desktops()
		cfg.MapUsers = b.engine.mapsUsers()
		if b.engine.Kube != nil {
			// the desktops run on the cluster's nodes, not here: no host wall (walling
			// desktops off from the cluster's services is a NetworkPolicy, docs/kubernetes.md)
			cfg.Link.Choice = kubeLinkChoice(mode, b.engine.Kube.Host())
		} else {
			cfg.HostWall = b.hostWall
			cfg.Egress = b.enforceEgress
			cfg.Link.Choice = GuestLinkChoice(context.Background(), mode, b.engine)
		}
		log.Info("desktop drivers are reached over the "+cfg.Link.Choice.Primary+" link", "reason", cfg.Link.Choice.Reason)
		cfg.ImagesProblem = b.engine.ImagesProblem
		if b.engine.Client != nil {
			ib, err := images.New(images.Config{Engine: b.engine.Client, Logger: b.log.With("svc", "images"),
				WorkDir: filepath.Join(b.cfg.DataDir, "images"), Pins: vm.PinSource(b.Store, cfg.NodeID, os.Getenv)})
			switch {
			case err != nil:
				log.Warn("image preparation unavailable", "err", err)
			case b.engine.Kube != nil:
				cfg.Images = &images.Publisher{Builder: ib, Engine: b.engine.Client,
					Registry: b.engine.Settings.Registry, Insecure: b.engine.Settings.RegistryInsecure}
			default:
				cfg.Images = ib
			}
		}
	}
	return vm.New(cfg)
}

// hostWall walls a started desktop off from this machine's services, except the host ports
// Settings → Security allows (vm.Config.HostWall).
func (b *Backend) hostWall(ctx context.Context, pid int, containerID, runDir string) error {
	var ports []int
	if b.Security != nil {
		ports = b.Security.DesktopHostPorts()
	}
	w, err := hostwall.Plan(pid, ports)
	if err != nil {
		return err
	}
	return hostwall.Apply(pid, hostwall.Proof{ContainerID: containerID, RunDir: runDir, ContainerRunDir: vm.RunDirTarget}, w)
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

// mapsUsers reports whether desktops get their own user namespace: only where the engine maps
// per container (rootful Podman), unless CUBICLE_DESKTOP_USERNS=off keeps the engine's
// default. The engine is asked only when its socket does not tell.
func (e *ConnectedEngine) mapsUsers() bool {
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

// MapsUsers reports whether desktops on this engine get their own user namespace (see
// mapsUsers); a runner's VM manager uses it as the server's does.
func (e *ConnectedEngine) MapsUsers() bool { return e.mapsUsers() }
