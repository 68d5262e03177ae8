// Package fleet is the server's execution nodes at run time: which node an agent's desktop
// calls go to (placement, the cloud node of a cloud computer) and the desktops' CPU and memory
// sampled on every node for administrators (stats).
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

	"cubicle/backend/events"
	"cubicle/backend/guest"
	"cubicle/backend/nodeapi"
	"cubicle/backend/nodes"
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
	// ConnectedWith are the connected runners advertising capability c, sorted.
	ConnectedWith(c string) []string
}

// Grants says whether an administrator allowed an account's agents on a runner
// (*hostaccess.Checker).
type Grants interface {
	Placement(accountID, nodeID string) (bool, error)
}

var (
	_ Store   = (*store.Store)(nil)
	_ Runners = (*nodes.Hub)(nil)
)

// Config configures a Fleet. Store and Runners are required.
type Config struct {
	Store   Store
	Runners Runners
	// Local is node "local"'s desktop manager; nil: this server has no Local VM (its calls
	// are refused as unavailable).
	Local *vm.Manager
	// LocalLinked reports whether the managed local runner's link is up: node "local" is then
	// reached over it (nil: node "local" is always the manager directly).
	LocalLinked func() bool
	// Grants decides placement on runners; nil refuses every runner.
	Grants Grants
	// Busy says why an agent cannot move to another node now ("" when it can); nil: never.
	Busy func(ctx context.Context, accountID, agentID string) string
	// Moved is told that an agent moved to another node (the binder forgets its desktop).
	Moved func(agentID string)
	// StatsInterval is how often the desktops' CPU and memory are sampled while
	// StatsWatching; 0 = 5 s. StatsPublish receives one events.Stats per node that answered.
	StatsInterval time.Duration
	StatsWatching func() bool
	StatsPublish  func(events.Stats)
	Logger        *slog.Logger
}

// Fleet routes agents' and desktops' calls to their nodes and samples the nodes' desktops.
type Fleet struct {
	cfg   Config
	log   *slog.Logger
	ctx   context.Context // the lifetime context, cancelled by Close
	stop  context.CancelFunc
	stats *statsSampler

	mu     sync.Mutex
	remote map[string]string // desktop id → runner node id; guarded by mu
	cloud  map[string]string // agent id → the cloud node chosen for its cloud computer; guarded by mu

	closeOnce sync.Once
}

// New builds a Fleet; nothing runs in the background until Start.
func New(cfg Config) (*Fleet, error) {
	if cfg.Store == nil || cfg.Runners == nil {
		return nil, errors.New("fleet: Config.Store and Config.Runners are required")
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
	return f, nil
}

// Start starts the stats sampler. It is called once.
func (f *Fleet) Start() { f.stats.start(f.ctx) }

// Close cancels the Fleet's lifetime context and waits for its goroutines. It is idempotent.
func (f *Fleet) Close() error {
	f.closeOnce.Do(func() {
		f.stop()
		f.stats.close()
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
