// Package backend wires Cubicle's services together: backend.New(Config) opens the store and
// builds the services, Start(ctx) starts the long-lived owners, Serve runs the HTTP API on a
// listener, Close stops everything and waits for it. The shells (cli's serve mode, the desktop
// app) only talk to this package and to the HTTP API.
package backend

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"cubicle/backend/agent"
	"cubicle/backend/api"
	"cubicle/backend/apitoken"
	"cubicle/backend/auth"
	"cubicle/backend/binding"
	"cubicle/backend/control"
	"cubicle/backend/deskegress"
	"cubicle/backend/doctor"
	"cubicle/backend/engineconn"
	"cubicle/backend/events"
	"cubicle/backend/fault"
	"cubicle/backend/fleet"
	"cubicle/backend/groupchat"
	"cubicle/backend/hostaccess"
	"cubicle/backend/hostdesk"
	"cubicle/backend/housekeeping"
	"cubicle/backend/knowledge"
	"cubicle/backend/link"
	"cubicle/backend/liveview"
	"cubicle/backend/mcpclient"
	"cubicle/backend/mcpserver"
	"cubicle/backend/mcpserver/calls"
	"cubicle/backend/models"
	"cubicle/backend/nodes"
	"cubicle/backend/profile"
	"cubicle/backend/recording"
	"cubicle/backend/sandbox"
	"cubicle/backend/sandboxreview"
	"cubicle/backend/screen"
	"cubicle/backend/security"
	"cubicle/backend/setup"
	"cubicle/backend/snapshot/workspace"
	"cubicle/backend/store"
	"cubicle/backend/vm"
	"cubicle/frontend"
)

// Config configures a Backend. DataDir is required.
type Config struct {
	DataDir string
	Logger  *slog.Logger
	Version string
	// Admin seeds the admin account on first start.
	Admin auth.Bootstrap
	// RequireChosenAdmin refuses to start (fault.ErrForbidden, nothing created) when no admin
	// exists yet and Admin carries no password: a server reachable from other machines must
	// not start with a password only its console has seen.
	RequireChosenAdmin bool
	// AllowedHosts are the host names the HTTP API answers to (see api.Config).
	AllowedHosts []string
	// TrustedOrigins are foreign page origins (the desktop window) allowed to call the API.
	TrustedOrigins []string
	// TrustedProxies are reverse proxies whose X-Forwarded-For/-Proto are believed (see
	// api.Config); SecureCookies marks the session cookie Secure (served over TLS).
	TrustedProxies []string
	SecureCookies  bool
	// EgressLookup resolves the host names of desktops' egress allow-lists (nil: this
	// machine's resolver; tests give names of their own).
	EgressLookup deskegress.LookupFunc
	// Doctor checks the environment for the settings page; nil disables the route.
	Doctor func(ctx context.Context) doctor.Report
	// StoreLockTimeout bounds the wait for the data file's lock (default 1 s).
	StoreLockTimeout time.Duration
	// Engine chooses the container engine of the Local VM: "" = $CUBICLE_ENGINE, else the
	// admin's choice in Settings → Local VM, else auto-detect (Podman first; when only the
	// podman CLI is installed Cubicle starts its own service), "podman", "docker",
	// "kubernetes" (desktops as Pods of a cluster: Kubernetes configures it) or "none" (Local
	// VM off: its routes say why).
	Engine string
	// Kubernetes configures the kubernetes engine (Kind is ignored: see Engine); non-empty
	// fields override $CUBICLE_KUBE* and the saved settings (see enginechoice.go).
	Kubernetes store.EngineSettings
	// ComposeDesktops, when set, puts the Local VM in Compose mode (SPEC §5): these fixed
	// desktops (containers labelled io.cubicle.compose-desktop=<name>) are adopted. Empty:
	// $CUBICLE_COMPOSE_DESKTOPS, a comma-separated list of names (see compose.desktops.yaml).
	ComposeDesktops []vm.ComposeDesktop
	// StatsInterval is how often the desktops' CPU and memory are sampled while an
	// administrator's page shows them; 0 = 5 s.
	StatsInterval time.Duration
	// GuestLink is how desktops' drivers are reached: "auto", "socket" or "exec" (see
	// backend/link); "" = $CUBICLE_GUEST_LINK, else auto.
	GuestLink string
	// DistDirs are directories of runner binaries (cubicle-<os>-<arch>, other versions in
	// <dir>/<version>/) the server offers for download, searched before the directory of the
	// running executable (backend/release).
	DistDirs []string
	// LocalNode is how node "local" is reached: LocalNodeDirect or LocalNodeRunner (the
	// managed local runner, localrunner.go); "" = $CUBICLE_LOCAL_NODE, else DefaultLocalNode.
	LocalNode string
	// PrepareOnFirstStart starts preparing the standard image in the background when the data
	// directory is new (no data file yet) and an engine is there (issue 30): the shells set
	// it; tests that only need a server leave it off.
	PrepareOnFirstStart bool

	// Tests: engineConnect replaces engineconn.ConnectEngineWith (to hold the connection back),
	// engineWait vm.Config.ConnectWait.
	engineConnect func(context.Context, store.EngineSettings, *slog.Logger) (*engineconn.ConnectedEngine, error)
	engineWait    time.Duration
}

// Backend is the running set of services.
type Backend struct {
	cfg     Config
	log     *slog.Logger
	sandbox *sandbox.Sandbox // runs this machine's host tools (issue 26)
	// sandboxReview keeps what the host sandbox refused, and its widenings.
	sandboxReview *sandboxreview.Review
	Store         *store.Store
	Events        *events.Bus // every change the UI shows (backend/events; wired in bus.go)
	Auth          *auth.Service
	Profiles      *profile.Service
	VMs           *vm.Manager
	Control       *control.Manager
	Models        *models.Service
	// Security is Settings → Security and the runtime's guard; HostAccess the host grants.
	Security *security.Service
	// Egress is the desktops' egress policies on every node and their enforcement on this
	// one's (backend/fleet, egress.go).
	Egress *fleet.Egress

	HostAccess *hostaccess.Checker
	Chat       *agent.Runtime
	Groups     *groupchat.Service // group chats: members' turns run through Chat
	Binder     *binding.Binder
	HostDesk   *hostdesk.Desktop // the execution node's own screen and input
	// Housekeeping lists and removes leftovers on the engine; nil without an engine.
	Housekeeping *housekeeping.Housekeeper
	Nodes        *nodes.Hub // registered runners and their links
	Screens      *screen.Hubs
	// Recordings record every running desktop (backend/recording; recordings.go).
	Recordings *recording.Service
	LiveView   *liveview.Channel // the computer channel (the live view)
	API        *api.Server
	// Tokens are the personal API tokens; MCP serves the agents' computers over MCP (/mcp).
	Tokens *apitoken.Service
	MCP    *mcpserver.Server
	// MCPClient is the MCP servers agents use (Settings → Tools).
	MCPClient *mcpclient.Service
	// Knowledge is the knowledge base of past runs (recall_past_runs, "ask past runs").
	Knowledge *knowledge.Service
	// Bootstrap says whether the first start created the admin (and its generated password).
	Bootstrap auth.BootstrapResult
	// Setup is the first-run path (backend/setup); FirstStart says this start made the data
	// file (the data directory was new).
	Setup      *setup.Service
	FirstStart bool

	// The engine connects in the background (connectEngine, started by Start): engine is
	// nil until it is connected (or when none was found), engineProblem says why (while it
	// connects: vm.ErrConnecting); both guarded by engMu, as is Housekeeping. engineDone is
	// closed when the connection settled (nil: no engine to connect).
	engMu         sync.Mutex
	engine        *engineconn.ConnectedEngine
	engineProblem string
	engineDone    chan struct{}
	stopConnect   context.CancelFunc
	connWG        sync.WaitGroup
	// engineInUse are the engine settings this process started with (see enginechoice.go),
	// linkMode how desktops' drivers are to be reached (CUBICLE_GUEST_LINK).
	engineInUse store.EngineSettings
	linkMode    link.Mode
	computers   *fleet.Computers // each turn's computer (the gate's plan): b.fleet.Computers()
	fleet       *fleet.Fleet     // which node an agent's (and a desktop's) calls go to; the nodes' stats
	local       *localRunner     // the managed local runner; nil when node "local" is direct
	bg          sync.WaitGroup   // the backup loop, the first start's preparation
	stopBG      context.CancelFunc
	// controlGate, when set (tests only), runs first in controlChanged: it can hold the
	// control loop to show what does not wait for it.
	controlGate atomic.Pointer[func(control.Change)]
	snaps       *workspace.Snapshots // agents' workspace snapshots (built after the fleet)
	recs        *fleet.Recordings    // the API's recordings: the server's own and the runners' (recordings.go)

	closeOnce sync.Once
	closeErr  error
}

// DBFile is the store's file name inside the data directory.
const DBFile = "cubicle.db"

// New opens the data directory and builds the services. Nothing runs in the background
// until Start.
func New(cfg Config) (*Backend, error) {
	if cfg.DataDir == "" {
		return nil, errors.New("backend: Config.DataDir is required")
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.RequireChosenAdmin {
		if _, err := os.Stat(filepath.Join(cfg.DataDir, DBFile)); errors.Is(err, fs.ErrNotExist) {
			// A first start: refuse it before anything is created (the directory, the data
			// file, the session key) when no strong admin password was chosen.
			if err := checkFirstAdmin(cfg.Admin); err != nil {
				return nil, err
			}
		}
	}
	if err := os.MkdirAll(cfg.DataDir, 0o700); err != nil {
		return nil, fmt.Errorf("create data dir %s: %w", cfg.DataDir, err)
	}
	_, statErr := os.Stat(filepath.Join(cfg.DataDir, DBFile))
	st, err := store.Open(filepath.Join(cfg.DataDir, DBFile), store.Options{LockTimeout: cfg.StoreLockTimeout, Logger: cfg.Logger})
	if err != nil {
		return nil, fmt.Errorf("open store: %w", err)
	}
	b := &Backend{cfg: cfg, log: cfg.Logger, Store: st, Events: events.New(events.Config{Logger: cfg.Logger.With("svc", "events")}),
		FirstStart: errors.Is(statErr, fs.ErrNotExist)}
	if err := b.build(); err != nil {
		b.Close()
		return nil, err
	}
	return b, nil
}

// checkFirstAdmin refuses a network-facing first start whose admin password was not chosen
// (none given) or is weak.
func checkFirstAdmin(a auth.Bootstrap) error {
	if a.Password == "" {
		return fault.Forbidden("no admin account exists yet; set CUBICLE_ADMIN_USER and a strong CUBICLE_ADMIN_PASSWORD for the first start")
	}
	user := a.Username
	if user == "" {
		user = "admin"
	}
	if err := auth.CheckPassword(a.Password, user); err != nil {
		return fault.Forbidden("CUBICLE_ADMIN_PASSWORD is not strong enough for a server that faces a network: %v", err)
	}
	return nil
}

// The API's snapshots and recordings are their packages' own types, mounted as they are.
var (
	_ api.Snapshots  = (*workspace.Snapshots)(nil)
	_ api.Recordings = (*fleet.Recordings)(nil)
)

func (b *Backend) build() error {
	key, err := auth.LoadOrCreateKey(filepath.Join(b.cfg.DataDir, "secrets", "session.key"))
	if err != nil {
		return err
	}
	b.Auth, err = auth.New(auth.Config{Accounts: b.Store, Key: key, Logger: b.log.With("svc", "auth")})
	if err != nil {
		return err
	}
	if b.cfg.RequireChosenAdmin {
		if _, err := b.Auth.Admin(); err != nil && errors.Is(err, fault.ErrNotFound) {
			// No admin is created for a network-facing start without a strong password.
			if err := checkFirstAdmin(b.cfg.Admin); err != nil {
				return err
			}
		}
	}
	if b.Bootstrap, err = b.Auth.EnsureAdmin(b.cfg.Admin); err != nil {
		return err
	}
	if b.cfg.RequireChosenAdmin {
		if err := b.Auth.NetworkReady(); err != nil {
			return err
		}
	}
	// A deleted agent's snapshots go; no agent is deleted before the build ends.
	forget := func(id string) {
		if b.snaps != nil {
			b.snaps.Forget(id)
		}
	}
	b.Profiles = profile.New(agentStore{b.Store, b.Events, forget}, b.log.With("svc", "profile"))
	if b.Egress, err = fleet.NewEgress(fleet.EgressConfig{Store: b.Store, Agents: b.Profiles, Engine: b.egressEngine,
		Lookup: b.cfg.EgressLookup, Events: b.Events, Logger: b.log.With("svc", "egress")}); err != nil {
		return err
	}
	b.Control = control.New(control.Config{Logger: b.log.With("svc", "control"), OnChange: b.controlChanged})
	if b.VMs, err = b.buildVMs(activity{b}); err != nil {
		return err
	}
	dist := newDist(b.cfg)
	if b.Nodes, err = nodes.New(nodes.Config{Store: b.Store, Logger: b.log.With("svc", "nodes"), Version: b.cfg.Version,
		OnDisconnect: b.nodeDisconnected, OnConnect: b.nodeConnected, Events: b.Events, Dist: dist, OnEgressBlocked: b.Egress.RunnerBlocked}); err != nil {
		return err
	}
	b.Egress.Attach(b.VMs, fleet.EgressHub{Hub: b.Nodes})
	if mode, err := localNodeMode(b.cfg.LocalNode); err != nil {
		return err
	} else if mode == LocalNodeRunner {
		if b.local, err = b.buildLocalRunner(); err != nil {
			return err
		}
	}
	b.HostAccess = hostaccess.New(b.Store)
	b.HostDesk = hostdesk.New(b.log.With("svc", "hostdesk"))
	if b.fleet, err = fleet.New(fleet.Config{Store: b.Store, Runners: b.Nodes, Local: b.VMs, LocalLinked: b.localLinked,
		Control: b.Control, HostAccess: b.HostAccess, HostScreen: b.HostDesk,
		OnPlan: b.planChanged, OnNodeSettings: b.nodeChanged,
		// Security is built with the chat (buildChat); these run only at a turn's time.
		HostPolicy: b.sandboxPolicy, HostProtected: b.hostProtected,
		HostReadable:  func(node string) []string { return b.Security.HostSandbox(node).Read },
		StatsInterval: b.cfg.StatsInterval, Logger: b.log.With("svc", "fleet"),
		StatsWatching: func() bool { return b.Events.WatchingFor(events.DesktopStats, events.AdminsOnly) },
		StatsPublish:  func(s events.Stats) { b.Events.Publish(events.DesktopStats, events.AdminsOnly, s) }}); err != nil {
		return err
	}
	b.computers = b.fleet.Computers()
	if b.snaps, err = workspace.New(workspace.Config{Dir: filepath.Join(b.cfg.DataDir, "snapshots"), Store: b.Store, Volumes: b.VMs,
		Plans: b.computers, Labels: b.fleet, Logger: b.log.With("svc", "snapshot")}); err != nil {
		return err
	}
	if err := b.buildChat(b.fleet.Desktops(), b.fleet.Controls()); err != nil {
		return err
	}
	b.Profiles.WithHostAccess(b.HostAccess, hostaccess.LocalNode)
	b.Screens = screen.New(screen.Config{Observer: b.Control, Logger: b.log.With("svc", "screen")})
	if err := b.buildRecordings(); err != nil {
		return err
	}
	b.LiveView, err = liveview.New(liveview.Config{Desktops: b.fleet.Desktops(), Control: b.fleet.Controls(), Screens: b.Screens,
		Events: b.Events, Logger: b.log.With("svc", "computer")})
	if err != nil {
		return err
	}
	hk := engineHousekeeping{b}
	b.Tokens = apitoken.New(b.Store, b.Profiles)
	mc, err := calls.New(calls.Config{Agents: b.Profiles, Nodes: b.fleet, Control: b.Control, Plans: b.computers,
		Events: b.Events, Runtime: b.Chat, Getenv: os.Getenv})
	if err != nil {
		return err
	}
	if b.MCP, err = mcpserver.New(mcpserver.Config{Computers: mc, Tokens: b.Tokens, Version: b.cfg.Version,
		Logger: b.log.With("svc", "mcp")}); err != nil {
		return err
	}
	if b.Setup, err = setup.New(setup.Config{VMs: b.VMs, Models: b.Models, Agents: b.Store, Logger: b.log.With("svc", "setup"),
		EngineCheck: b.engineCheck}); err != nil {
		return err
	}
	if b.Groups, err = groupchat.New(groupchat.Config{Store: b.Store, Agents: b.Profiles, Chat: b.Chat,
		Logger: b.log.With("svc", "groupchat")}); err != nil {
		return err
	}
	assets, built := frontend.Assets()
	b.API, err = api.New(api.Config{
		Auth: b.Auth, Accounts: b.Store, HostAccess: b.HostAccess, Security: b.Security, Egress: b.Egress, Sandbox: b.sandboxReview,
		Profiles: b.Profiles, Doctor: b.cfg.Doctor, Logger: b.log.With("svc", "api"), VMs: b.VMs,
		Chat: b.Chat, Chats: b.Store, Groups: b.Groups, Models: b.Models, LiveView: b.LiveView, Computers: b.computers, Engines: b,
		Events: b.Events, Setup: b.Setup, Housekeeping: hk, Recordings: b.recs, Tokens: b.Tokens, MCP: b.MCP.Handler(), MCPServers: b.MCPClient, Snapshots: b.snaps, Placement: b.fleet, Runners: b.Nodes, Dist: dist,
		Version: b.cfg.Version, AllowedHosts: b.cfg.AllowedHosts, TrustedOrigins: b.cfg.TrustedOrigins,
		TrustedProxies: b.cfg.TrustedProxies, SecureCookies: b.cfg.SecureCookies,
		Assets: assets, AssetsBuilt: built,
		Knowledge: b.Knowledge,
	})
	return err
}

// Start starts the long-lived services. It returns once they run; ctx bounds start-up only.
// Before anything runs it closes what a crash left open: tool runs still RUNNING become
// INTERRUPTED and conversations whose turn was running get their interruption notice.
func (b *Backend) Start(ctx context.Context) error {
	if n, err := b.Store.InterruptRuns(time.Now()); err != nil {
		return fmt.Errorf("mark interrupted tool runs: %w", err)
	} else if n > 0 {
		b.log.Warn("tool runs interrupted by the last shutdown", "runs", n)
	}
	if _, err := b.Chat.RecoverInterrupted(b.Store); err != nil {
		return err
	}
	if err := b.Control.Start(ctx); err != nil {
		return err
	}
	if err := b.VMs.Start(ctx); err != nil {
		return err
	}
	if err := b.Recordings.Start(ctx); err != nil {
		return err
	}
	if b.local != nil {
		// The managed local runner connects in the background (localrunner.go) once the
		// engine has: node "local" is served directly until it is up, and shows as connecting.
		b.runnerConnecting()
	} else {
		b.runnerUp()
	}
	cctx, cancel := context.WithCancel(context.Background())
	b.stopConnect = cancel
	if b.VMs.Connecting() {
		// The engine connects in the background (vms.go): the server answers meanwhile.
		b.engineDone = make(chan struct{})
		b.connWG.Add(1)
		go b.connectEngine(cctx)
	} else {
		b.engineSettled()
	}
	b.fleet.Start()
	bctx, cancel := context.WithCancel(context.Background())
	b.stopBG = cancel
	b.bg.Add(1)
	go b.backups(bctx)
	if b.FirstStart && b.cfg.PrepareOnFirstStart {
		// In the background: asking the engine takes a moment, and the server's start must
		// not wait for it (issue 31). The preparation itself belongs to the VM manager.
		b.bg.Add(1)
		go func() {
			defer b.bg.Done()
			// after the engine's connection settled (it connects behind the start, vms.go)
			if b.WaitEngine(bctx) == nil {
				b.Setup.PrepareFirstStart(bctx)
			}
		}()
	}
	return ctx.Err()
}

// engineCheck is the doctor's engine check, for the first-run path's engine step while no
// engine is connected (setup.Config.EngineCheck).
func (b *Backend) engineCheck(ctx context.Context) doctor.Check {
	cs := doctor.Engine(os.Getenv("CUBICLE_ENGINE"), os.Getenv, engineconn.DiscoverEngines)(ctx)
	if len(cs) == 0 {
		return doctor.Check{}
	}
	return cs[0]
}

// backups takes a rolling backup of the data file whenever the newest is older than
// store.DefaultBackupEvery, until ctx ends (Close).
func (b *Backend) backups(ctx context.Context) {
	defer b.bg.Done()
	t := time.NewTicker(time.Hour)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			if _, _, err := b.Store.BackupIfDue(store.DefaultBackupEvery); err != nil {
				b.log.Warn("periodic backup of the data file", "err", err)
			}
		}
	}
}

// Serve runs the HTTP API on ln until ctx ends.
func (b *Backend) Serve(ctx context.Context, ln net.Listener) error {
	return b.API.Run(ctx, ln)
}

// LocalSession returns a session for the local admin (the desktop app's user).
func (b *Backend) LocalSession() (auth.Principal, error) {
	admin, err := b.Auth.Admin()
	if err != nil {
		return auth.Principal{}, err
	}
	return b.Auth.Issue(admin)
}

// Close stops the services and closes the store. It is idempotent.
func (b *Backend) Close() error {
	b.closeOnce.Do(func() {
		var errs []error
		if b.stopConnect != nil {
			b.stopConnect() // the engine's connection (and the runner it starts) first
			b.connWG.Wait()
		}
		if b.Chat != nil {
			b.Chat.StopAll()
		}
		if b.LiveView != nil {
			errs = append(errs, b.LiveView.Close())
		}
		if b.local != nil {
			errs = append(errs, b.local.stop())
		}
		if b.Nodes != nil {
			errs = append(errs, b.Nodes.Close())
		}
		if b.Recordings != nil {
			errs = append(errs, b.Recordings.Close()) // before the screens: its viewers close first
		}
		if b.Screens != nil {
			errs = append(errs, b.Screens.Close())
		}
		if b.MCPClient != nil {
			errs = append(errs, b.MCPClient.Close())
		}
		if b.Binder != nil {
			errs = append(errs, b.Binder.Close())
		}
		if b.HostDesk != nil {
			errs = append(errs, b.HostDesk.Close())
		}
		if b.Control != nil {
			errs = append(errs, b.Control.Close())
		}
		if b.stopBG != nil {
			b.stopBG()
		}
		b.bg.Wait()
		if b.fleet != nil {
			b.fleet.Close()
		}
		if b.VMs != nil {
			errs = append(errs, b.VMs.Close())
		}
		if b.snaps != nil {
			errs = append(errs, b.snaps.Close()) // after the VM manager: no workspace operation runs
		}
		if b.Egress != nil {
			errs = append(errs, b.Egress.Close()) // after the VM manager: no desktop is started any more
		}
		if eng := b.connectedEngine(); eng != nil {
			errs = append(errs, eng.Close())
		}
		if b.Knowledge != nil {
			errs = append(errs, b.Knowledge.Close()) // after the chat: no turn is indexed any more
		}
		errs = append(errs, b.Events.Close()) // after the VM manager: its last changes are published
		errs = append(errs, b.Store.Close())
		b.closeErr = errors.Join(errs...)
	})
	return b.closeErr
}

// localLinked reports whether node "local" is reached over the managed local runner's link.
func (b *Backend) localLinked() bool { return b.local != nil && b.local.Connected() }

// nodeConnected hears a runner's link come up: the managed local runner's first link moves
// node "local" onto it.
func (b *Backend) nodeConnected(node string) {
	if node == nodes.LocalID && b.local != nil {
		b.local.linked()
	}
}

// nodeDisconnected ends the control leases of a runner's desktops when its link ends (fail
// closed: no person keeps control of a desktop nobody can reach, no task goes on).
func (b *Backend) nodeDisconnected(node string, desktops []string) {
	for _, id := range desktops {
		b.Control.Revoke(id)
	}
}

// hostProtected is what the host file guard in force protects on a host whose runner user's
// home is home, as absolute paths.
func (b *Backend) hostProtected(home string) []string {
	if f := b.Security.Safety().HostFiles; f != nil {
		return f.ForHome(home).Protected()
	}
	return nil
}

// The fleet serves the API's placement, computers and egress policies.
var (
	_ api.Placement = (*fleet.Fleet)(nil)
	_ api.Computers = (*fleet.Computers)(nil)
	_ api.Egress    = (*fleet.Egress)(nil)
)
