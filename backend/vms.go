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
	"cubicle/backend/fleet"
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
	// and the egress policies' NetworkPolicy writer on a cluster
	_ fleet.KubeEgress = (*kubernetes.Client)(nil)
)

// buildVMs builds the Local VM manager with the engine the settings choose (see
// enginechoice.go) still to be connected: connectEngine does that in the background once the
// backend starts (issue 31: discovery, connection, the guest-link choice and the image
// builder took seconds before the server answered). Until then the manager shows the engine
// as connecting; without an engine ("none") it reports why.
func (b *Backend) buildVMs(act vm.Activity) (*vm.Manager, error) {
	log := b.log.With("svc", "vm")
	eff, _, _, err := b.engineChoice()
	if err != nil {
		return nil, err
	}
	b.engineInUse = eff
	b.engineProblem = errNoEngine.Error()
	mode, err := link.ParseMode(cmp.Or(b.cfg.GuestLink, os.Getenv(link.EnvVar)))
	if err != nil {
		return nil, fault.Invalid("%v", err)
	}
	b.linkMode = mode
	compose := b.cfg.ComposeDesktops
	if len(compose) == 0 {
		for _, name := range strings.Split(os.Getenv("CUBICLE_COMPOSE_DESKTOPS"), ",") {
			if name = strings.TrimSpace(name); name != "" {
				compose = append(compose, vm.ComposeDesktop{Name: name})
			}
		}
	}
	cfg := vm.Config{Store: b.Store, EngineProblem: b.engineProblem, DataDir: b.cfg.DataDir, Logger: log, Compose: compose, Activity: act,
		OnChange: b.desktopChanged, OnPrepare: b.prepareChanged, OnSettings: b.nodeChanged, ConnectWait: b.cfg.engineWait}
	if eff.Kind != "none" {
		b.engineProblem = vm.ErrConnecting
		cfg.Connecting, cfg.EngineProblem = true, ""
		if eff.Kind != "kubernetes" {
			// the desktops run on this machine: walled off from its services, their egress
			// enforced here (on a cluster that is a NetworkPolicy, docs/kubernetes.md)
			cfg.HostWall = b.hostWall
			cfg.Egress = b.Egress.Enforce
		} else {
			cfg.Egress = b.Egress.EnforceKube
		}
	}
	return vm.New(cfg)
}

// engineConnectTimeout bounds the engine's discovery and connection; engineWaitMax the wait
// of a request that needs the engine for its outcome (longer: the wait ends with it).
const (
	engineConnectTimeout = 20 * time.Second
	engineWaitMax        = 30 * time.Second
)

// connectEngine connects the engine chosen at New and hands it to the VM manager, in the
// background (a goroutine Start starts and Close stops): the server answers meanwhile and
// shows the engine as connecting. Then it starts the managed local runner, whose hello
// names the engine.
func (b *Backend) connectEngine(ctx context.Context) {
	defer b.connWG.Done()
	defer close(b.engineDone)
	log := b.log.With("svc", "vm")
	connect := b.cfg.engineConnect
	if connect == nil {
		connect = ConnectEngineWith
	}
	cctx, cancel := context.WithTimeout(ctx, engineConnectTimeout)
	eng, err := connect(cctx, b.engineInUse, log)
	cancel()
	if ctx.Err() != nil {
		if eng != nil {
			eng.Close()
		}
		return // closing
	}
	if err != nil {
		log.Warn("no container engine", "err", err)
		b.engMu.Lock()
		b.engineProblem = err.Error()
		b.engMu.Unlock()
		b.VMs.EngineFailed(err.Error())
		b.engineSettled()
		return
	}
	setup := vm.EngineSetup{Engine: eng.Desktops(), MapUsers: eng.mapsUsers(), ImagesProblem: eng.ImagesProblem}
	if eng.Kube != nil {
		setup.Link = kubeLinkChoice(b.linkMode, eng.Kube.Host())
	} else {
		setup.Link = GuestLinkChoice(ctx, b.linkMode, eng)
	}
	log.Info("desktop drivers are reached over the "+setup.Link.Primary+" link", "reason", setup.Link.Reason)
	var hk *housekeeping.Housekeeper
	if eng.Client != nil {
		ib, err := images.New(images.Config{Engine: eng.Client, Logger: b.log.With("svc", "images"),
			WorkDir: filepath.Join(b.cfg.DataDir, "images"), Pins: vm.PinSource(b.Store, b.VMs.NodeID(), os.Getenv)})
		switch {
		case err != nil:
			log.Warn("image preparation unavailable", "err", err)
		case eng.Kube != nil:
			setup.Images = &images.Publisher{Builder: ib, Engine: eng.Client,
				Registry: eng.Settings.Registry, Insecure: eng.Settings.RegistryInsecure}
		default:
			setup.Images = ib
		}
		if hk, err = NewHousekeeper(eng.Client, b.cfg.DataDir, b.Store, b.log.With("svc", "housekeeping")); err != nil {
			log.Warn("leftovers cannot be listed", "err", err)
		}
	}
	b.engMu.Lock()
	b.engine, b.engineProblem, b.Housekeeping = eng, "", hk // Close releases it from here on
	b.engMu.Unlock()
	if err := b.VMs.AttachEngine(ctx, setup); err != nil {
		log.Warn("the container engine connected but could not be used", "err", err)
	}
	if ctx.Err() != nil {
		return // closing: the runner is not started any more
	}
	b.engineSettled()
}

// WaitEngine waits until the engine chosen at New is connected or known to be missing (see
// connectEngine), or ctx ends. It returns at once when there is none to connect.
func (b *Backend) WaitEngine(ctx context.Context) error {
	if b.engineDone == nil {
		return nil
	}
	select {
	case <-b.engineDone:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// connectedEngine returns the connected engine, nil while there is none.
func (b *Backend) connectedEngine() *ConnectedEngine {
	b.engMu.Lock()
	defer b.engMu.Unlock()
	return b.engine
}

// egressEngine is this node's engine as the egress policies see it (fleet.EgressConfig.Engine).
func (b *Backend) egressEngine() fleet.EgressEngine {
	e := fleet.EgressEngine{Kind: engine.Kind(b.engineInUse.Kind)}
	b.engMu.Lock()
	defer b.engMu.Unlock()
	if b.engine == nil {
		e.Problem = b.engineProblem
		return e
	}
	e.Connected = true
	if b.engine.Kube != nil {
		e.Kube = b.engine.Kube
	}
	return e
}

// housekeeper returns the leftovers' housekeeper, or why there is none. While the engine
// connects it waits for it (as the Local VM's operations do), at most engineWaitMax and
// until ctx ends.
func (b *Backend) housekeeper(ctx context.Context) (*housekeeping.Housekeeper, error) {
	if b.engineDone != nil {
		wctx, cancel := context.WithTimeout(ctx, cmp.Or(b.cfg.engineWait, engineWaitMax))
		b.WaitEngine(wctx)
		cancel()
	}
	b.engMu.Lock()
	defer b.engMu.Unlock()
	switch {
	case b.Housekeeping != nil:
		return b.Housekeeping, nil
	case b.engineProblem == vm.ErrConnecting:
		return nil, fault.Unavailable("leftovers cannot be listed yet: %s; try again in a moment", vm.ErrConnecting)
	}
	return nil, fault.Unavailable("leftovers cannot be listed: no container engine is connected (see `cubicle doctor`)")
}

// engineHousekeeping is api.Housekeeping over the housekeeper of the engine once it is
// connected.
type engineHousekeeping struct{ b *Backend }

func (h engineHousekeeping) Scan(ctx context.Context) (housekeeping.Report, error) {
	hk, err := h.b.housekeeper(ctx)
	if err != nil {
		return housekeeping.Report{}, err
	}
	return hk.Scan(ctx)
}

func (h engineHousekeeping) Clean(ctx context.Context, sel housekeeping.Selection) ([]housekeeping.Outcome, error) {
	hk, err := h.b.housekeeper(ctx)
	if err != nil {
		return nil, err
	}
	return hk.Clean(ctx, sel)
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
