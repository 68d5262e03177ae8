// Package fleet is the server's execution nodes at run time: which node an agent's desktop
// calls go to (placement, the cloud node of a cloud computer), each turn's computer (the
// gate's plan, fixed per turn; host tools on a runner's host), the nodes' desktops as the
// binding and the live view use them (starting, linking, fencing, control changes told to
// the desktop's node), the desktops' CPU and memory sampled on every node for
// administrators (stats), the desktops' egress policies on every node (Egress, egress.go),
// and which node records a desktop, with the recordings a runner keeps of its own read over
// its link for the API (recordings.go).
//
// The root package (backend) only wires a Fleet: it hands it the local node's desktop manager
// (vm.Manager), the runners' hub (nodes.Hub) and the few callbacks that reach services built
// after it (the binder, the turn gate), and mounts it where the API and the chat need it. A
// call that the chat or the API makes about a node walks down from here to vm or nodes, never
// back up into the root.
//
// Lifetime: New builds a Fleet with its own lifetime context; Start starts the stats sampler;
// Close cancels the lifetime context (bounded waits such as the cloud node's status calls end
// with it) and waits for every goroutine the Fleet started. Methods are safe for concurrent
// use.
package fleet

import (
	"cmp"
	"context"
	"errors"
	"log/slog"
	"net"
	"sync"
	"time"

	"cubicle/backend/agent"
	"cubicle/backend/agent/tools"
	"cubicle/backend/binding"
	"cubicle/backend/computer"
	"cubicle/backend/control"
	"cubicle/backend/events"
	"cubicle/backend/guest"
	"cubicle/backend/hostaccess"
	"cubicle/backend/hostdesk"
	"cubicle/backend/nodeapi"
	"cubicle/backend/nodes"
	"cubicle/backend/sandbox"
	"cubicle/backend/store"
	"cubicle/backend/vm"
	"cubicle/runner/wire"
)

// Node is one execution node's desktops as the server uses them: the node contract
// (nodeapi.Node) plus the relays to a running desktop. The local node's vm.Manager and a
// runner's nodes.Remote both implement it, so an agent's calls take the same path wherever its
// desktop runs. Methods are safe for concurrent use; a runner whose link is down answers
// fault.ErrUnavailable.
type Node interface {
	nodeapi.Node
	// Link is running desktop id's shared driver link.
	Link(ctx context.Context, id string) (*guest.Client, error)
	// Tunnel opens a byte stream to address inside desktop id, over the same transport.
	Tunnel(ctx context.Context, id, address string) (net.Conn, error)
}

var (
	_ Node = (*vm.Manager)(nil)
	_ Node = (*nodes.Remote)(nil)
)

// Store is what the fleet reads and writes of the store (*store.Store).
type Store interface {
	Agent(id string) (store.Agent, error)
	UpdateAgent(id string, fn func(*store.Agent) error) (store.Agent, error)
	NodeSettings(node string) (store.NodeSettings, error)
	UpdateNodeSettings(node string, fn func(*store.NodeSettings) error) (store.NodeSettings, error)
}

// Runners is the registry of runner nodes and their links (*nodes.Hub).
type Runners interface {
	// Node is runner id's client (which may be disconnected); an unknown or revoked id is
	// fault.ErrNotFound or fault.ErrConflict.
	Node(id string) (*nodes.Remote, error)
	// Known reports whether id may take agents (node "local" included).
	Known(id string) (store.Runner, error)
	// CloudNodes are the connected, unrevoked cloud runners, by name then id.
	CloudNodes() ([]store.Runner, error)
	// Connected reports whether id's link is up; Hello is what it said when it connected.
	Connected(id string) bool
	Hello(id string) (wire.Hello, bool)
	// ConnectedWith are the connected runners advertising capability c, sorted.
	ConnectedWith(c string) []string
}

// HostAccess is the administrators' grants per account and node (*hostaccess.Checker): host
// tools and host screen (Check), placement on a runner (Placement).
type HostAccess interface {
	Check(accountID, nodeID string) (hostaccess.Access, error)
	Placement(accountID, nodeID string) (bool, error)
}

// HostScreen is this execution node's own screen and input (*hostdesk.Desktop).
type HostScreen interface {
	Permission() computer.Permission
	Displays() ([]hostdesk.Display, error)
	Frames(ctx context.Context, o guest.StreamOptions) (guest.FrameStream, error)
	Input(ctx context.Context, display int, in guest.Input) error
}

// Binder is the chat's thread ↔ desktop binding (*binding.Binder), attached after New (it is
// built over the fleet's Desktops).
type Binder interface {
	Acquire(ctx context.Context, t agent.TurnInfo) (tools.Computer, error)
	Browser(ctx context.Context, t agent.TurnInfo) (tools.Browser, error)
	TurnEnded(t agent.TurnInfo)
	Forget(agentID string)
}

// Turns is what the fleet asks of the chat runtime (*agent.Runtime), attached after New.
type Turns interface {
	// Running reports whether agentID runs a turn now.
	Running(agentID string) bool
}

var (
	_ Store      = (*store.Store)(nil)
	_ Runners    = (*nodes.Hub)(nil)
	_ HostAccess = (*hostaccess.Checker)(nil)
	_ HostScreen = (*hostdesk.Desktop)(nil)
	_ Binder     = (*binding.Binder)(nil)
	_ Turns      = (*agent.Runtime)(nil)
)

// Config configures a Fleet. Store, Runners, Control, HostAccess and HostScreen are required.
type Config struct {
	Store   Store
	Runners Runners
	// Local is node "local"'s desktop manager; nil: this server has no Local VM (its calls
	// are refused as unavailable).
	Local *vm.Manager
	// LocalLinked reports whether the managed local runner's link is up: node "local" is then
	// reached over it (nil: node "local" is always the manager directly).
	LocalLinked func() bool
	// Control is the desktops' control leases.
	Control    *control.Manager
	HostAccess HostAccess
	HostScreen HostScreen
	// OnPlan is told a turn's computer plan (before: the agent's previous one, had: whether
	// there was one); OnNodeSettings a node's saved settings (host screen control). Optional.
	OnPlan         func(a store.Agent, before, after computer.Plan, had bool)
	OnNodeSettings func(store.NodeSettings)
	// The host sandbox of host tools on a runner whose user's home is home: its policy on
	// node (HostPolicy), the paths the host file guard protects (HostProtected) and the
	// credential folders an administrator opened on node (HostReadable). Required for host
	// tools on runners.
	HostPolicy    func(node, home string) sandbox.Policy
	HostProtected func(home string) []string
	HostReadable  func(node string) []string
	// StatsInterval is how often the desktops' CPU and memory are sampled while
	// StatsWatching; 0 = 5 s. StatsPublish receives one events.Stats per node that answered.
	StatsInterval time.Duration
	StatsWatching func() bool
	StatsPublish  func(events.Stats)
	Logger        *slog.Logger
}

// Fleet routes agents' and desktops' calls to their nodes (placement), fixes each turn's
// computer (Computers), adapts the nodes' desktops to the binding and the live view
// (Desktops, Controls) and samples the nodes' desktops (stats).
type Fleet struct {
	cfg   Config
	log   *slog.Logger
	ctx   context.Context // the lifetime context, cancelled by Close
	stop  context.CancelFunc
	stats *statsSampler
	comp  *Computers
	wg    sync.WaitGroup // the stops that control changes start (controls.go)

	// binder and turns are attached once, before Start (Attach).
	binder Binder
	turns  Turns

	mu     sync.Mutex
	remote map[string]string // desktop id → runner node id; guarded by mu
	cloud  map[string]string // agent id → the cloud node chosen for its cloud computer; guarded by mu

	closeOnce sync.Once
}

// New builds a Fleet; nothing runs in the background until Start.
func New(cfg Config) (*Fleet, error) {
	if cfg.Store == nil || cfg.Runners == nil || cfg.Control == nil || cfg.HostAccess == nil || cfg.HostScreen == nil {
		return nil, errors.New("fleet: Config.Store, Runners, Control, HostAccess and HostScreen are required")
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	ctx, stop := context.WithCancel(context.Background())
	f := &Fleet{cfg: cfg, log: cfg.Logger, ctx: ctx, stop: stop, remote: map[string]string{}, cloud: map[string]string{}}
	interval := cmp.Or(cfg.StatsInterval, 5*time.Second)
	watching, publish := cfg.StatsWatching, cfg.StatsPublish
	if watching == nil || publish == nil {
		watching, publish = func() bool { return false }, func(events.Stats) {}
	}
	f.stats = &statsSampler{interval: interval, timeout: 3 * interval, watching: watching, publish: publish,
		log: cfg.Logger, nodes: f.StatsNodes}
	f.comp = newComputers(f)
	return f, nil
}

// Attach hands the fleet the chat's binder and runtime, which are built over it. It is called
// once, after New and before Start.
func (f *Fleet) Attach(b Binder, t Turns) { f.binder, f.turns = b, t }

// Computers is each turn's computer (tools.Environments, api.Computers, the runtime's turn hooks).
func (f *Fleet) Computers() *Computers { return f.comp }

// Desktops adapts the nodes' desktops to the binding and the live view.
func (f *Fleet) Desktops() Desktops { return Desktops{f: f} }

// Controls is the control service as the live view and the binder use it (see Controls).
func (f *Fleet) Controls() Controls { return Controls{Manager: f.cfg.Control, f: f} }

// Start starts the stats sampler. It is called once.
func (f *Fleet) Start() { f.stats.start(f.ctx) }

// Close cancels the Fleet's lifetime context and waits for its goroutines. It is idempotent.
func (f *Fleet) Close() error {
	f.closeOnce.Do(func() {
		f.stop()
		f.stats.close()
		f.wg.Wait()
	})
	return nil
}

// StatsNodes lists the nodes to sample now: node "local" once (its vm.Manager, or its managed
// runner's link), then the other connected runners that serve wire.OpStats; a runner without
// wire.CapStats is skipped without a word.
func (f *Fleet) StatsNodes() []StatsNode {
	var out []StatsNode
	if l, err := f.Local(); err == nil {
		out = append(out, l)
	}
	for _, id := range f.cfg.Runners.ConnectedWith(wire.CapStats) {
		if id == nodes.LocalID {
			continue // sampled above, whichever way node "local" runs
		}
		if r, err := f.cfg.Runners.Node(id); err == nil {
			out = append(out, r)
		}
	}
	return out
}
