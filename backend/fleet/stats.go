package fleet

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
)

// StatsNode is one execution node whose running desktops' CPU and memory the sampler reads:
// the local vm.Manager, or a runner's nodes.Remote (op stats over its link). Stats honours
// ctx: it returns soon after ctx ends.
type StatsNode interface {
	NodeID() string
	Stats(ctx context.Context) ([]vm.InstanceStats, error)
}

var (
	_ StatsNode = (*vm.Manager)(nil)
	_ StatsNode = (*nodes.Remote)(nil)
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
	nodes    func() []StatsNode // the nodes to sample now
	publish  func(events.Stats)
	log      *slog.Logger

	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu     sync.Mutex
	active map[string]bool // node ids whose sample is running; guarded by mu
}

// start runs the loop until parent ends or close.
func (s *statsSampler) start(parent context.Context) {
	ctx, cancel := context.WithCancel(parent)
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
func (s *statsSampler) sample(ctx context.Context, n StatsNode) {
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
