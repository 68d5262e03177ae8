package vm

import (
	"context"
	"sync"
	"time"

	"cubicle/backend/fault"
)

// opQueues serialise the operations on each instance in the order they were asked for. A
// place in an instance's queue is taken at once (enqueue) and waited for later (wait), so a
// caller can take its place synchronously and leave the waiting to a goroutine: a removal
// asked for after a creation always runs after it, even when the creation runs detached.
// Each place is a channel closed when its holder releases it; the next place waits on it.
type opQueues struct {
	mu sync.Mutex
	m  map[string]chan struct{} // instance → the newest place's channel; guarded by mu
}

// place is one operation's place in an instance's queue.
type place struct {
	q    *opQueues
	id   string
	prev chan struct{} // closed when the operation before this one is done; nil: none
	done chan struct{} // closed by release
}

// enqueue takes the next place in id's queue.
func (q *opQueues) enqueue(id string) *place {
	q.mu.Lock()
	defer q.mu.Unlock()
	p := &place{q: q, id: id, prev: q.m[id], done: make(chan struct{})}
	q.m[id] = p.done
	return p
}

// wait blocks until every earlier operation on the instance is done.
func (p *place) wait() {
	if p.prev != nil {
		<-p.prev
	}
}

// release lets the next operation run.
func (p *place) release() {
	p.q.mu.Lock()
	if p.q.m[p.id] == p.done {
		delete(p.q.m, p.id) // nobody queued behind: forget the instance
	}
	p.q.mu.Unlock()
	close(p.done)
}

// lock takes id's queue synchronously (waiting for the operations before it) and returns the
// release function.
func (m *Manager) lock(id string) func() {
	p := m.ops.enqueue(id)
	p.wait()
	return p.release
}

// opTimeout bounds one detached operation: a cold start with its driver wait, and a stop.
func (m *Manager) opTimeout() time.Duration {
	return m.cfg.ReadyTimeout + 4*m.cfg.StopTimeout + 2*time.Minute
}

// detach runs op on instance id in the manager's own lifetime, never the caller's: it takes
// id's place in the queue now, runs op in a goroutine the manager owns (with a context of the
// manager's lifetime, bounded by opTimeout) once the operations before it are done, and
// returns op's error — or, as soon as ctx ends, ctx's error, leaving op to complete or roll
// back on its own. After Close it refuses with fault.ErrUnavailable.
func (m *Manager) detach(ctx context.Context, id, what string, op func(ctx context.Context) error) error {
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		return fault.Unavailable("the Local VM manager is shutting down")
	}
	p := m.ops.enqueue(id)
	m.wg.Add(1)
	m.mu.Unlock()
	done := make(chan error, 1)
	go func() {
		defer m.wg.Done()
		p.wait()
		defer p.release()
		if m.ctx.Err() != nil {
			done <- fault.Unavailable("the Local VM manager is shutting down")
			return
		}
		octx, cancel := context.WithTimeout(m.ctx, m.opTimeout())
		defer cancel()
		err := op(octx)
		if ctx.Err() != nil {
			m.log.Info("desktop operation finished after its caller left", "instance", id, "op", what, "err", err)
		}
		done <- err
	}()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Wait returns once every operation asked for on desktop instanceID before the call has
// finished (or ctx ends): a caller that gave up on an action can learn its outcome.
func (m *Manager) Wait(ctx context.Context, instanceID string) error {
	return m.detach(ctx, instanceID, "wait", func(context.Context) error { return nil })
}
