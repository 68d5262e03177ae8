package backend

import (
	"cmp"
	"context"
	"os"
	"path/filepath"
	"strings"
	"time"

	"cubicle/backend/engine"
	"cubicle/backend/engine/kubernetes"
	"cubicle/backend/engineconn"
	"cubicle/backend/fault"
	"cubicle/backend/fleet"
	"cubicle/backend/hostwall"
	"cubicle/backend/housekeeping"
	"cubicle/backend/link"
	"cubicle/backend/vm"
	"cubicle/images"
)

// The cluster's adapter is the egress policies' NetworkPolicy writer on a cluster.
var _ fleet.KubeEgress = (*kubernetes.Client)(nil)

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
		connect = engineconn.ConnectEngineWith
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
	setup := vm.EngineSetup{Engine: eng.Desktops(), MapUsers: eng.MapsUsers(), ImagesProblem: eng.ImagesProblem}
	if eng.Kube != nil {
		setup.Link = engineconn.KubeLinkChoice(b.linkMode, eng.Kube.Host())
	} else {
		setup.Link = engineconn.GuestLinkChoice(ctx, b.linkMode, eng)
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
func (b *Backend) connectedEngine() *engineconn.ConnectedEngine {
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
