package backend

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"

	"cubicle/backend/events"
	"cubicle/backend/fault"
	"cubicle/backend/nodes"
	"cubicle/backend/vm"
	"cubicle/runner/wire"
)

// statsNode is one execution node whose running desktops' CPU and memory the sampler reads:
// the local vm.Manager, or a runner's nodes.Remote (op stats over its link). Stats honours
// ctx: it returns soon after ctx ends.
type statsNode interface {
	NodeID() string
	Stats(ctx context.Context) ([]vm.InstanceStats, error)
}

var (
	_ statsNode = (*vm.Manager)(nil)
	_ statsNode = (*nodes.Remote)(nil)
)

// statsSampler publishes the running desktops' CPU and memory (events.DesktopStats) every
// interval while someone may read them (an administrator's stream is open): one events.Stats
// per node that answered, named by that node's id. Otherwise it only wakes to look.
//
// Every node is sampled in its own goroutine with its own deadline (timeout), so a slow or
// dead runner neither delays the other nodes' events nor blocks the ticker; a node whose
// previous sample is still running is skipped for that tick, so a runner that hangs is
// asked at most once per timeout instead of piling up calls.
//
// Ownership: start runs the loop; the loop owns the samples' goroutines; close cancels them
// all and waits for every one of them.
type statsSampler struct {
	interval time.Duration      // between ticks
	timeout  time.Duration      // each node's deadline per sample
	watching func() bool        // whether someone takes the events now
	nodes    func() []statsNode // the nodes to sample now
	publish  func(events.Stats)
	log      *slog.Logger

	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu     sync.Mutex
	active map[string]bool // node ids whose sample is running; guarded by mu
}

// newStatsSampler is the backend's sampler: the local node (whichever way it is reached, so
// its stats come once per tick) and every connected runner that advertises wire.CapStats;
// a runner without it is skipped without a word.
func (b *Backend) newStatsSampler(interval time.Duration) *statsSampler {
	return &statsSampler{
		interval: interval,
		timeout:  3 * interval,
		watching: func() bool { return b.Events.WatchingFor(events.DesktopStats, events.AdminsOnly) },
		nodes:    b.statsNodes,
		publish:  func(s events.Stats) { b.Events.Publish(events.DesktopStats, events.AdminsOnly, s) },
		log:      b.log,
	}
}

// statsNodes lists the nodes to sample now: node "local" once (its vm.Manager, or its managed
// runner's link), then the other connected runners that serve wire.OpStats.
func (b *Backend) statsNodes() []statsNode {
	var out []statsNode
	if b.place != nil {
		if l, err := b.place.local(); err == nil {
			out = append(out, l)
		}
	}
	if b.Nodes == nil {
		return out
	}
	for _, id := range b.Nodes.ConnectedWith(wire.CapStats) {
		if id == nodes.LocalID {
			continue // sampled above, whichever way node "local" runs
		}
		if r, err := b.Nodes.Node(id); err == nil {
			out = append(out, r)
		}
	}
	return out
}

func (s *statsSampler) start() {
	ctx, cancel := context.WithCancel(context.Background())
	s.cancel = cancel
	s.active = map[string]bool{}
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		t := time.NewTicker(s.interval)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
			if !s.watching() {
				continue
			}
			for _, n := range s.nodes() {
				s.sample(ctx, n)
			}
		}
	}()
}

// sample starts sampling node n unless its previous sample still runs.
func (s *statsSampler) sample(ctx context.Context, n statsNode) {
	id := n.NodeID()
	s.mu.Lock()
	if s.active[id] {
		s.mu.Unlock()
		return
	}
	s.active[id] = true
	s.mu.Unlock()
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		defer func() {
			s.mu.Lock()
			delete(s.active, id)
			s.mu.Unlock()
		}()
		sctx, cancel := context.WithTimeout(ctx, s.timeout)
		st, err := n.Stats(sctx)
		cancel()
		if err != nil {
			// Quiet for what is expected: no engine, a runner that is gone, shutting down.
			if ctx.Err() == nil && !errors.Is(err, fault.ErrUnavailable) {
				s.log.Debug("desktop stats", "node", id, "err", err)
			}
			return
		}
		if ctx.Err() != nil {
			return
		}
		out := events.Stats{NodeID: id, Instances: make([]events.InstanceStats, 0, len(st))}
		for _, x := range st {
			out.Instances = append(out.Instances, events.InstanceStats{InstanceID: x.InstanceID, CPUPercent: x.CPUPercent,
				MemoryBytes: x.MemoryBytes, MemoryLimit: x.MemoryLimit, PIDs: x.PIDs})
		}
		s.publish(out)
	}()
}

// close stops the loop and every running sample and waits for them.
func (s *statsSampler) close() {
	if s == nil {
		return
	}
	if s.cancel != nil {
		s.cancel()
	}
	s.wg.Wait()
}
