// Package vm manages the Local VM desktops of one execution node (SPEC §1.2–§1.5, §5):
// preparing and verifying desktop images, the lifecycle of desktop instances (create, start,
// stop, recreate, remove), the isolation policy (one shared desktop per account or one per
// agent) and capacity, idle auto-stop, and keeping the store in step with what the container
// engine really runs.
//
// One lifecycle path. Every desktop — an agent's or an account's shared one, a helper's task
// desktop, the benchmark's — comes up the same way (lifecycle.go, bringUp): resolve the
// image → reserve a capacity slot (a record state written under the capacity lock) → create
// the container → start it → driver ready → record "running". A desktop that fails to come
// up is stopped (a task desktop removed) and its record set to what the engine then reports.
//
// Detached operations. Lifecycle operations run in goroutines the Manager owns, on its own
// lifetime context, never on the caller's: a caller that goes away (a closed browser) gets
// its context's error at once, while the operation completes or rolls back. Operations on one
// instance run one at a time, in the order they were asked for (queue.go).
//
// Following the engine (follow.go). The Manager subscribes to the engine's container events
// and, for every event of one of its containers, re-reads that instance's containers and
// writes the state the engine reports: a desktop stopped, killed, removed, paused or started
// behind Cubicle's back is seen within a moment, its capacity slot and idle timer follow. A
// full comparison (resync) runs every Config.ResyncInterval and after the event stream
// reconnects, as a safety net. Config.OnChange hears every state change.
//
// Identity. Containers and volumes carry the data file's store id (LabelStore); a Manager
// adopts, lists and removes only its own, never another data directory's.
//
// Instance records are written with a transitional state ("creating", "starting",
// "stopping", "removing") before the engine is touched, so a crash at any point is repaired
// at the next Start: containers are listed by label, adopted when running, interrupted stops
// and removes are completed, and records whose container vanished are marked "absent".
//
// Named volumes for the workspace and the browser profile are created per instance and are
// never removed by this package: they survive stop, remove, recreate and restarts.
//
// Goroutines: the loop (idle timers), the event watcher and its reader, one follower per
// instance with a pending event, detached operations, preparations and idle stops. Start
// starts them; Close cancels them all and waits.
//
// Errors carry fault classes: a missing agent or image fault.ErrNotFound, a refused operation
// (capacity, busy desktop, fixed Compose desktop, preparation running) fault.ErrConflict with
// a message naming who or what is in the way, bad input fault.ErrInvalid, a missing engine or
// driver fault.ErrUnavailable.
package vm

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash/fnv"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"cubicle/backend/engine"
	"cubicle/backend/fault"
	"cubicle/backend/link"
	"cubicle/backend/store"
	"cubicle/images"
	"cubicle/images/guest/wire"
)

// Engine is what the manager needs from a container engine adapter (engine/podman and
// engine/docker satisfy it). Implementations are safe for concurrent use; a missing container
// is fault.ErrNotFound and StopContainer of a stopped container returns nil.
type Engine interface {
	Info(ctx context.Context) (engine.Info, error)
	CreateContainer(ctx context.Context, spec engine.ContainerSpec) (engine.ContainerState, error)
	StartContainer(ctx context.Context, id string) error
	// StopContainer stops a running or paused container.
	StopContainer(ctx context.Context, id string, timeout time.Duration) error
	// PauseContainer freezes a running container's processes (cgroup freezer: memory kept,
	// no CPU); fault.ErrConflict when it does not run or the engine cannot pause (Kubernetes).
	PauseContainer(ctx context.Context, id string) error
	// UnpauseContainer thaws a paused container; fault.ErrConflict when it is not paused.
	UnpauseContainer(ctx context.Context, id string) error
	RemoveContainer(ctx context.Context, id string, force bool) error
	InspectContainer(ctx context.Context, id string) (engine.ContainerState, error)
	// LastOutput is the end of what the container's main process (the driver) wrote: best
	// effort, "" when the engine cannot say. It explains a driver that does not answer.
	LastOutput(ctx context.Context, id string) string
	ListContainers(ctx context.Context, labels map[string]string) ([]engine.ContainerState, error)
	EnsureVolume(ctx context.Context, name string, labels map[string]string) error
	// RemoveVolume: fault.ErrNotFound when absent, fault.ErrConflict while a container uses it.
	RemoveVolume(ctx context.Context, name string) error
	// VolumeSizes measures the named volumes (bytes by name; -1 unknown); it may take seconds.
	VolumeSizes(ctx context.Context, names []string) (map[string]int64, error)
	// ContainerStats samples a running container: fault.ErrConflict when it does not run.
	ContainerStats(ctx context.Context, id string) (engine.Stats, error)
	// ExecAttach starts an attached exec session (the exec link to a desktop's driver).
	ExecAttach(ctx context.Context, id string, spec engine.ExecSpec) (*engine.ExecStream, error)
	// Events subscribes to container events (labels: a selector, nil for all); it returns
	// once the engine accepted the subscription.
	Events(ctx context.Context, labels map[string]string) (*engine.EventStream, error)
}

// ImageBuilder makes sure a desktop image exists (images.Builder satisfies it). Ensure may
// take minutes (a first build); progress is called from Ensure's goroutine.
type ImageBuilder interface {
	Ensure(ctx context.Context, key images.Key, progress func(images.Progress)) (images.Result, error)
}

// Activity tells the manager who is using a desktop; the control and agent packages
// implement it. Methods are called with no manager lock held and must not block long.
type Activity interface {
	// Busy reports who is using instanceID right now — a running VM task or a person holding
	// control — as words a person can read ("agent Bot's task", "alice (control)"); ok is
	// false when nobody is.
	Busy(instanceID string) (who string, ok bool)
	// StopAll cancels every VM task and ends every control lease of this node's desktops
	// (before an image is prepared, SPEC §1.2).
	StopAll(ctx context.Context, reason string) error
	// Revoke ends the agent task or person's control on instanceID (fenced: late operations of
	// the old holder are refused), before an administrator stops or removes it anyway.
	Revoke(instanceID string)
}

// Clock is the manager's time source; tests pass a fake one.
type Clock interface {
	Now() time.Time
	// NewTimer returns a channel that receives once d has passed, and a stop function.
	NewTimer(d time.Duration) (<-chan time.Time, func() bool)
}

type realClock struct{}

func (realClock) Now() time.Time { return time.Now() }
func (realClock) NewTimer(d time.Duration) (<-chan time.Time, func() bool) {
	t := time.NewTimer(d)
	return t.C, t.Stop
}

// Labels the manager puts on its containers and volumes, next to engine.LabelManaged and
// engine.LabelInstance.
const (
	LabelNode    = wire.LabelNode
	LabelRole    = wire.LabelRole   // "desktop" | "probe" | "task"
	LabelVolume  = wire.LabelVolume // "workspace" | "browser-profile"
	LabelCompose = wire.LabelCompose
	// LabelStore carries the id of the data file (store.Identity) that owns a container or
	// volume: a Manager touches only its own.
	LabelStore = wire.LabelStore
)

// Container roles (LabelRole).
const (
	RoleDesktop = "desktop"
	RoleProbe   = "probe"
)

// Mount points inside a desktop (fixed by the images' contract).
const (
	RunDirTarget     = wire.RunDir
	WorkspaceTarget  = wire.WorkspaceDir
	BrowserTarget    = wire.BrowserProfileDir
	guestSocketName  = wire.SocketName
	defaultStopGrace = 5 * time.Second
)

// ComposeDesktop names a fixed desktop created by Compose (SPEC §5): its container carries
// the label io.cubicle.compose-desktop=<Name>, and its run directory is RunDir (bind-mounted
// at /run/cubicle in the container; "" = <DataDir>/run/compose-<Name>).
type ComposeDesktop struct {
	Name   string
	RunDir string
}

// Config configures a Manager. Store and DataDir are required; Engine and Images may be nil
// when no engine was found (the manager then reports EngineProblem and refuses operations
// that need one), or while it connects (Connecting).
type Config struct {
	Store  *store.Store
	Engine Engine
	// EngineProblem says why Engine is nil and how to fix it (shown to admins).
	EngineProblem string
	// Connecting: Engine is nil because the engine is being connected in the background;
	// AttachEngine or EngineFailed follows. Until then the engine is shown as connecting,
	// desktops' links are refused, and operations that need the engine wait for it (at most
	// ConnectWait, and their context) before they answer fault.ErrUnavailable ("the container
	// engine is still connecting"). Nothing is recorded meanwhile: the records stay as they
	// are until the engine is there to compare them with.
	Connecting bool
	// ConnectWait bounds an operation's wait for a connecting engine; 0 = 30 s (longer than a
	// connection may take: the wait ends with its outcome).
	ConnectWait time.Duration
	Images      ImageBuilder
	// ImagesProblem says why Images is nil when the reason is known (shown when an admin
	// prepares an image).
	ImagesProblem string
	// Link says how desktops' drivers are reached. Link.Choice comes from CUBICLE_GUEST_LINK
	// and the engine (link.Choose); the zero Choice is auto on a local Linux engine. Nil
	// transports are the real ones: the socket, and the exec link through Engine.
	Link   link.Config
	NodeID string // "" = DefaultNodeID
	// DataDir holds the per-instance run directories (<DataDir>/run/<instance>).
	DataDir  string
	Logger   *slog.Logger
	Clock    Clock    // nil = real time
	Limits   Limits   // zero fields take DefaultLimits
	Activity Activity // nil = only MarkBusy/MarkIdle say who is busy
	// IdleUnit is the length of one idle-policy "minute" (tests shorten it); 0 = time.Minute.
	IdleUnit time.Duration
	// StopTimeout is the grace period of a container stop before SIGKILL; 0 = 5 s.
	StopTimeout time.Duration
	// ReadyTimeout bounds the wait for a started desktop's driver; 0 = 90 s.
	ReadyTimeout time.Duration
	// KeepRunningOnClose leaves running desktops running at Close (the default stops them:
	// an execution node that shuts down stops its dynamic instances, SPEC §1.5, §4).
	KeepRunningOnClose bool
	// Compose lists fixed desktops; when non-empty the node is in Compose mode (SPEC §5).
	Compose []ComposeDesktop
	// ExtraLabels are added to every container and volume the manager creates (tests use them
	// to find and clean up only their own objects).
	ExtraLabels map[string]string
	// HostWall walls a started desktop (process pid of container containerID, run directory
	// runDir on this host, which the container may or may not mount) off
	// from this machine's services (see package hostwall); nil leaves its network as the
	// engine made it. It runs after the container started and before anything but the driver
	// runs in it. A fault.ErrUnavailable answer (it cannot be done here, e.g. an engine in a
	// VM) is recorded on the desktop, which runs; any other error fails the start.
	HostWall func(ctx context.Context, pid int, containerID, runDir string) error
	// Egress enforces the desktop's egress policy (package deskegress) on the started desktop
	// in (process pid), right after HostWall; pid is 0 when HostWall could not prove the
	// process to be the desktop's. Without HostWall (desktops on a cluster) it runs before the
	// container starts, with pid 0. Any error fails the start: a policy other than open that
	// cannot be enforced must not leave the desktop open.
	Egress func(ctx context.Context, in store.VMInstance, pid int) error
	// MapUsers gives every new desktop its own user namespace (engine.IDMap): its processes
	// run as host uids of a range no real user has (see userNSBase). Only for engines that map
	// per container (rootful Podman).
	MapUsers bool
	// OnChange, when set, hears every change of a desktop's state (see InstanceChange). It is
	// called synchronously, possibly with an instance's operation under way: it must return
	// quickly and must not call the Manager's lifecycle methods.
	OnChange func(InstanceChange)
	// OnPrepare, when set, hears every step of an image preparation and its end, with the same
	// contract as OnChange.
	OnPrepare func(PrepareState)
	// OnSettings, when set, hears the node's settings after the policy or the idle policy
	// changed, with the same contract as OnChange.
	OnSettings func(store.NodeSettings)
	// ResyncInterval is how often the store is compared with the whole engine, as a safety
	// net under the event stream; 0 = 15 s.
	ResyncInterval time.Duration
}

// InstanceChange is a change of one desktop's recorded state.
type InstanceChange struct {
	InstanceID string
	Scope      string // shared | agent | browser | task | compose
	AccountID  string
	AgentID    string
	State      string // the new state
	Previous   string // the state before ("" for a new record)
	LastError  string
	// Removed: the record itself is gone (a task desktop whose task ended, an orphaned desktop
	// removed by an administrator, the desktop of a deleted agent).
	Removed bool
	At      time.Time
}

// userNSSize is the size of a desktop's id range; ranges start at 2^31, above any real
// user's and the usual subordinate ranges (100000 + 65536·n for the first 32000 users).
const userNSSize = 65536

// userNSBase is the first host id of instance id's range: one of 32767 slots above 2^31,
// chosen by the id's hash (two desktops may share a slot; neither is ever a host user).
func userNSBase(id string) int {
	h := fnv.New32a()
	h.Write([]byte(id))
	return 1<<31 + int(h.Sum32()%32767)*userNSSize
}

// idMap is the user-namespace mapping of in's container (nil when it has none).
func idMap(in store.VMInstance) *engine.IDMap {
	if in.UserNSBase <= 0 {
		return nil
	}
	return &engine.IDMap{HostID: in.UserNSBase, Size: userNSSize}
}

// Limits are the resource limits of a desktop container.
type Limits struct {
	MemoryBytes int64
	NanoCPUs    int64
	PIDs        int64
	ShmBytes    int64
}

// DefaultLimits: 3 GiB of memory, 2 CPUs, 4096 processes, 512 MiB /dev/shm (Chromium).
var DefaultLimits = Limits{MemoryBytes: 3 << 30, NanoCPUs: 2e9, PIDs: 4096, ShmBytes: 512 << 20}

// Manager runs the desktops of one node. Create it with New, then Start; Close stops it.
type Manager struct {
	cfg   Config
	log   *slog.Logger
	st    *store.Store
	clock Clock
	node  string
	links *link.Links // one driver link per running desktop

	storeID string // the data file's id (LabelStore)
	ns      string // the data file's instance namespace (store.Identity)

	ctx    context.Context // lifetime; cancelled by Close
	cancel context.CancelFunc
	wg     sync.WaitGroup
	wake   chan struct{}
	ops    opQueues // per-instance operation queues

	capMu sync.Mutex // held while counting the desktops that take a slot and reserving one

	mu        sync.Mutex           // guards the fields below
	following map[string]*follower // instances with a follower goroutine (follow.go)
	busy      map[string]string    // instance → who uses it (MarkBusy)
	idleSince map[string]time.Time // running, idle instances → when they became idle
	rebuild   map[string]bool      // instances to rebuild for a new working directory once idle
	idleMins  int                  // the node's idleStopMinutes
	pauseMins int                  // the node's pauseAfterMinutes (0 = never)
	// idlePaused: idle instances the idle policy has paused, or tried to (a desktop is paused
	// once per idle period; armIdle starts a new one).
	idlePaused map[string]bool
	preps      map[string]*prepJob // image key → running or last finished preparation
	preparing  int                 // preparations running
	strays     []string            // containers of this store that no record knows
	// unreachable says why the engine stopped answering ("" while it answers): set by the
	// watcher when the event stream cannot be re-opened or a resync fails, cleared when
	// either succeeds (follow.go).
	unreachable string
	started     bool
	closed      bool

	eng       atomic.Pointer[engineSet] // the engine and what comes with it (AttachEngine)
	connected chan struct{}             // closed when a connecting engine is attached or failed
}

// engineSet is the engine the manager uses and what comes with it. Set by New from Config,
// replaced once by AttachEngine or EngineFailed when the engine connects in the background.
type engineSet struct {
	engine        Engine
	problem       string // why engine is nil
	connecting    bool
	images        ImageBuilder
	imagesProblem string
	mapUsers      bool
}

// EngineSetup is what a connected engine brings (AttachEngine): the engine, the image
// builder (or why there is none), how drivers are reached on it, and whether desktops get
// their own user namespace (see Config).
type EngineSetup struct {
	Engine        Engine
	Images        ImageBuilder
	ImagesProblem string
	Link          link.Choice
	MapUsers      bool
}

// ErrConnecting is the problem while the engine connects (Config.Connecting).
const ErrConnecting = "the container engine is still connecting"

// New checks cfg and returns a Manager. Nothing runs until Start.
func New(cfg Config) (*Manager, error) {
	if cfg.Store == nil || cfg.DataDir == "" {
		return nil, errors.New("vm: Config.Store and Config.DataDir are required")
	}
	if cfg.NodeID == "" {
		cfg.NodeID = DefaultNodeID
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Clock == nil {
		cfg.Clock = realClock{}
	}
	if cfg.Link.Choice.Primary == "" {
		cfg.Link.Choice = link.Choose(link.Auto, link.Engine{GOOS: "linux", Socket: "unix:///"})
	}
	if cfg.Link.Exec == nil && cfg.Engine != nil {
		cfg.Link.Exec = link.Exec{Engine: cfg.Engine}
	}
	if cfg.Link.Logger == nil {
		cfg.Link.Logger = cfg.Logger.With("component", "link")
	}
	if cfg.IdleUnit <= 0 {
		cfg.IdleUnit = time.Minute
	}
	if cfg.StopTimeout <= 0 {
		cfg.StopTimeout = defaultStopGrace
	}
	if cfg.ReadyTimeout <= 0 {
		cfg.ReadyTimeout = 90 * time.Second
	}
	if cfg.ResyncInterval <= 0 {
		cfg.ResyncInterval = 15 * time.Second
	}
	l := &cfg.Limits
	d := DefaultLimits
	if l.MemoryBytes == 0 {
		l.MemoryBytes = d.MemoryBytes
	}
	if l.NanoCPUs == 0 {
		l.NanoCPUs = d.NanoCPUs
	}
	if l.PIDs == 0 {
		l.PIDs = d.PIDs
	}
	if l.ShmBytes == 0 {
		l.ShmBytes = d.ShmBytes
	}
	seen := map[string]bool{}
	for _, c := range cfg.Compose {
		if c.Name == "" || seen[c.Name] {
			return nil, fmt.Errorf("vm: compose desktop names must be unique and not empty (%q)", c.Name)
		}
		seen[c.Name] = true
	}
	id := cfg.Store.Identity()
	if id.ID == "" {
		return nil, errors.New("vm: the store has no identity (open it with store.Open)")
	}
	if cfg.ConnectWait <= 0 {
		cfg.ConnectWait = 30 * time.Second
	}
	ctx, cancel := context.WithCancel(context.Background())
	m := &Manager{
		cfg: cfg, log: cfg.Logger, st: cfg.Store, clock: cfg.Clock, node: cfg.NodeID, storeID: id.ID, ns: id.Namespace,
		links: link.New(cfg.Link),
		ctx:   ctx, cancel: cancel, wake: make(chan struct{}, 1), ops: opQueues{m: map[string]chan struct{}{}},
		following: map[string]*follower{}, busy: map[string]string{}, idleSince: map[string]time.Time{}, idlePaused: map[string]bool{},
		rebuild: map[string]bool{}, preps: map[string]*prepJob{}, connected: make(chan struct{}),
	}
	es := &engineSet{engine: cfg.Engine, problem: cfg.EngineProblem, images: cfg.Images, imagesProblem: cfg.ImagesProblem,
		mapUsers: cfg.MapUsers, connecting: cfg.Connecting && cfg.Engine == nil}
	if es.connecting {
		es.problem = ErrConnecting
	} else {
		close(m.connected)
	}
	m.eng.Store(es)
	return m, nil
}

// engines returns the engine set in force.
func (m *Manager) engines() *engineSet { return m.eng.Load() }

// engine returns the engine, nil while there is none (not found, or still connecting).
func (m *Manager) engine() Engine { return m.engines().engine }

// Connecting reports whether the engine is still being connected (Config.Connecting).
func (m *Manager) Connecting() bool { return m.engines().connecting }

// AttachEngine hands the manager the engine that connected in the background
// (Config.Connecting): from now on it is used, drivers are reached as s.Link says, the
// records are reconciled with what the engine runs (as Start does) and the engine's events
// are followed. Operations waiting for the engine go on. ctx bounds the reconciliation. It is
// an error after Close (the caller then releases the engine) or when no engine was awaited.
func (m *Manager) AttachEngine(ctx context.Context, s EngineSetup) error {
	if s.Engine == nil {
		return errors.New("vm: AttachEngine without an engine")
	}
	m.mu.Lock()
	if m.closed || !m.engines().connecting {
		m.mu.Unlock()
		return errors.New("vm: AttachEngine after Close, or without a connecting engine")
	}
	exec := m.cfg.Link.Exec
	if exec == nil {
		exec = link.Exec{Engine: s.Engine}
	}
	m.links.SetEngine(s.Link, exec)
	m.eng.Store(&engineSet{engine: s.Engine, images: s.Images, imagesProblem: s.ImagesProblem, mapUsers: s.MapUsers})
	started := m.started
	if started {
		m.wg.Add(1) // the watcher; Close waits for it
	}
	m.mu.Unlock()
	close(m.connected)
	if !started {
		return nil // Start reconciles and follows
	}
	events := m.subscribe(ctx)
	err := m.reconcile(ctx)
	if err != nil {
		// The engine answered its connection but not the listing: the watcher's comparisons
		// reconcile the records once it does.
		m.log.Warn("reconcile desktops with the engine that connected", "err", err)
		m.setUnreachable(err)
	}
	go m.watch(events)
	m.wakeLoop()
	return nil
}

// EngineFailed records that the engine awaited (Config.Connecting) could not be connected:
// problem says why and how to fix it; operations waiting for it fail with it.
func (m *Manager) EngineFailed(problem string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if !m.engines().connecting {
		return
	}
	m.eng.Store(&engineSet{problem: problem})
	close(m.connected)
}

// Start reconciles the store with the engine (see the package doc) and starts the loop and
// the engine watcher. ctx bounds the reconciliation only. Calling Start twice is an error.
func (m *Manager) Start(ctx context.Context) error {
	m.mu.Lock()
	if m.started || m.closed {
		m.mu.Unlock()
		return errors.New("vm: Start called twice or after Close")
	}
	m.started = true
	// With an engine still connecting, AttachEngine reconciles and follows it (it sees
	// started); otherwise Start does.
	withEngine := m.engine() != nil
	m.mu.Unlock()
	ns, err := m.st.NodeSettings(m.node)
	if err != nil {
		return fmt.Errorf("vm: start: %w", err)
	}
	m.mu.Lock()
	m.idleMins, m.pauseMins = ns.IdleStopMinutes, ns.PauseAfterMinutes
	m.mu.Unlock()
	if err := os.MkdirAll(m.runRoot(), 0o700); err != nil {
		return fmt.Errorf("vm: start: create run directory: %w", err)
	}
	if !withEngine {
		if m.Connecting() || m.engine() != nil {
			m.log.Info("the container engine is still connecting; desktops are reconciled once it is there")
		} else {
			m.log.Warn("no container engine; desktops are not reconciled", "problem", m.engines().problem)
		}
		m.wg.Add(1)
		go m.loop()
		return nil
	}
	// Subscribe before looking, so that nothing that happens in between is missed.
	events := m.subscribe(ctx)
	if err := m.reconcile(ctx); err != nil {
		if events != nil {
			events.Close()
		}
		return fmt.Errorf("vm: start: %w", err)
	}
	m.wg.Add(2)
	go m.loop()
	go m.watch(events)
	return nil
}

// Close stops the loop, the watcher and any running preparation, lets operations in flight
// finish or roll back, stops the running dynamic desktops (unless Config.KeepRunningOnClose)
// and waits for everything it started. It is idempotent.
func (m *Manager) Close() error {
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		return nil
	}
	m.closed = true
	started := m.started
	m.mu.Unlock()
	m.cancel()
	m.wg.Wait()
	defer m.links.Close()
	if !started || m.engine() == nil || len(m.cfg.Compose) > 0 {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	// Task desktops end with the process whatever KeepRunningOnClose says: no task is left
	// to use them.
	errs := []error{m.removeTasks(ctx)}
	if m.cfg.KeepRunningOnClose {
		return errors.Join(errs...)
	}
	for _, in := range m.instancesOrNil() {
		if in.ContainerID == "" || in.State == StateAbsent || in.Scope == scopeCompose || in.Scope == scopeTask {
			continue
		}
		if err := m.stopLocked(ctx, in.ID, true); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// NodeID returns the execution node this manager runs.
func (m *Manager) NodeID() string { return m.node }

// SocketPath returns the driver socket of instanceID (for the computer channel and tools).
func (m *Manager) SocketPath(instanceID string) string {
	if d, ok := m.composeByID(instanceID); ok {
		return filepath.Join(m.composeRunDir(d), guestSocketName)
	}
	return filepath.Join(m.runDir(instanceID), guestSocketName)
}

func (m *Manager) runRoot() string         { return filepath.Join(m.cfg.DataDir, "run") }
func (m *Manager) runDir(id string) string { return filepath.Join(m.runRoot(), id) }
func (m *Manager) composeRunDir(d ComposeDesktop) string {
	if d.RunDir != "" {
		return d.RunDir
	}
	return filepath.Join(m.runRoot(), "compose-"+d.Name)
}

// makeRunDir creates the instance's run directory: the leaf is world-writable (the driver
// runs as uid 1000 and creates its socket there) inside the app's private 0700 run root.
func (m *Manager) makeRunDir(id string) (string, error) {
	dir := m.runDir(id)
	if err := os.MkdirAll(dir, 0o777); err != nil {
		return "", fmt.Errorf("create run directory %s: %w", dir, err)
	}
	if err := os.Chmod(dir, 0o777); err != nil {
		return "", fmt.Errorf("create run directory %s: %w", dir, err)
	}
	if err := os.Remove(filepath.Join(dir, guestSocketName)); err != nil && !os.IsNotExist(err) {
		return "", fmt.Errorf("remove stale driver socket: %w", err)
	}
	return dir, nil
}

// labels returns the labels of an object of instanceID with role: managed, node, store, role
// and instance, plus Config.ExtraLabels.
func (m *Manager) labels(instanceID, role string) map[string]string {
	l := map[string]string{engine.LabelManaged: "true", LabelNode: m.node, LabelStore: m.storeID, LabelRole: role}
	if dir, err := filepath.Abs(m.cfg.DataDir); err == nil {
		l[wire.LabelDataDir] = dir
	}
	if instanceID != "" {
		l[engine.LabelInstance] = instanceID
	}
	for k, v := range m.cfg.ExtraLabels {
		l[k] = v
	}
	return l
}

// needEngine returns the engine, or the error that says how to get one. While the engine
// connects it waits for it, at most Config.ConnectWait and until ctx ends.
func (m *Manager) needEngine(ctx context.Context) (Engine, error) {
	if m.Connecting() {
		t := time.NewTimer(m.cfg.ConnectWait)
		select {
		case <-m.connected:
		case <-ctx.Done():
		case <-t.C:
		case <-m.ctx.Done():
		}
		t.Stop()
	}
	return m.engineNow()
}

// engineNow returns the engine, or at once the error that says how to get one (or that it
// still connects).
func (m *Manager) engineNow() (Engine, error) {
	es := m.engines()
	if es.connecting {
		return nil, fault.Unavailable("%s; try again in a moment", ErrConnecting)
	}
	if es.engine == nil {
		msg := es.problem
		if msg == "" {
			msg = "no container engine is connected: install Podman (apt-get install podman) and start its service " +
				"(podman system service --time=0 unix:///run/podman/podman.sock &), or start Docker, then restart Cubicle"
		}
		return nil, fault.Unavailable("%s", msg)
	}
	return es.engine, nil
}

// instanceID derives a stable id from an instance's scope, so the same scope always maps to
// the same container name and volumes. ns is the store's instance namespace: "" keeps the ids
// a data file always had; a copy of a data file has its own, so its containers and volumes
// never take the original's names.
func instanceID(ns, node, account, scope, agent string) string {
	key := node + "\x00" + account + "\x00" + scope + "\x00" + agent
	if ns != "" {
		key = ns + "\x00" + key
	}
	h := sha256.Sum256([]byte(key))
	return "vm-" + hex.EncodeToString(h[:8])
}

// wakeLoop asks the loop to recompute its timers.
func (m *Manager) wakeLoop() {
	select {
	case m.wake <- struct{}{}:
	default:
	}
}

func (m *Manager) instancesOrNil() []store.VMInstance {
	ins, err := m.st.VMInstances(m.node)
	if err != nil {
		m.log.Error("list desktop instances", "err", err)
	}
	return ins
}
