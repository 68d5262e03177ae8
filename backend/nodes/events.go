package nodes

import (
	"context"
	"time"

	"cubicle/backend/events"
	"cubicle/backend/store"
	"cubicle/backend/vm"
	"cubicle/runner/wire"
)

// Publisher is where the hub tells the UI what happens to runners and their desktops
// (*events.Bus).
type Publisher interface {
	Publish(t events.Type, aud events.Audience, data any)
}

// This file follows a connected runner's changes onto the event bus: runner status
// (connected, disconnected, revoked, desktop counts) for administrators, and its desktops'
// states for their accounts and administrators. When the link comes up the runner's own
// report reconciles what the server showed: every desktop it has is published as it is, and
// a desktop it no longer has as removed. When the link ends every desktop the server knew on
// it is published as "unreachable".

// desk is what the hub last knew of a runner's desktop.
type desk = wire.DesktopChange

// publish sends an event when a Publisher is configured.
func (h *Hub) publish(t events.Type, aud events.Audience, data any) {
	if h.cfg.Events != nil {
		h.cfg.Events.Publish(t, aud, data)
	}
}

// runnerEvent publishes node's status as it is now (state, its hello, its desktop counts).
func (h *Hub) runnerEvent(node, state string) {
	ev := events.Runner{NodeID: node, State: state}
	if rec, err := h.cfg.Store.Runner(node); err == nil {
		ev.Name, ev.Cloud, ev.LastSeen = rec.Name, rec.Cloud, rec.LastSeen
		if rec.Revoked {
			ev.State = events.RunnerRevoked
		}
	}
	if c := h.conn(node); c != nil && state == events.RunnerConnected {
		ev.Version, ev.OS, ev.Arch, ev.Engine, ev.EngineError = c.hello.Version, c.hello.OS, c.hello.Arch, c.hello.Engine, c.hello.EngineError
		ev.Capabilities = append([]string{}, c.hello.Capabilities...)
		ev.LastSeen = time.Time{}
	}
	h.mu.Lock()
	running, known := 0, h.desks[node]
	for _, d := range known {
		if d.State == vm.StateRunning {
			running++
		}
	}
	if max, ok := h.max[node]; ok {
		ev.Desktops = &events.RunnerDesktops{Running: running, Max: max}
	}
	if d, ok := h.dups[node]; ok {
		ev.Duplicate = &d
	}
	h.mu.Unlock()
	h.publish(events.RunnerStatus, events.AdminsOnly, ev)
}

// desktopEvent records d as node's desktop and publishes it.
func (h *Hub) desktopEvent(node string, d desk) {
	h.mu.Lock()
	known := h.desks[node]
	if known == nil {
		known = map[string]desk{}
		h.desks[node] = known
	}
	if d.Removed {
		delete(known, d.InstanceID)
	} else {
		known[d.InstanceID] = d
	}
	h.mu.Unlock()
	h.publish(events.DesktopState, h.audience(node, d), events.Desktop{InstanceID: d.InstanceID, NodeID: node, Scope: d.Scope,
		AccountID: d.AccountID, AgentID: d.AgentID, State: d.State, Previous: d.Previous, LastError: d.LastError, Removed: d.Removed})
}

// audience is who may see desktop d of node. The runner says whose desktop it is; the server
// believes it only as far as its own records agree (the agent is that account's and placed on
// that node; a shared desktop's account has an agent there), so a runner cannot show
// anything to an account that has nothing on it. Administrators always see it.
func (h *Hub) audience(node string, d desk) events.Audience {
	placedHere := func(a store.Agent) bool { return a.AccountID == d.AccountID && a.NodeID == node }
	if d.AccountID == "" {
		return events.AdminsOnly
	}
	if d.AgentID != "" {
		if a, err := h.cfg.Store.Agent(d.AgentID); err == nil && placedHere(a) {
			return events.ForAccount(d.AccountID, true)
		}
		return events.AdminsOnly
	}
	if as, err := h.cfg.Store.Agents(d.AccountID); err == nil {
		for _, a := range as {
			if placedHere(a) {
				return events.ForAccount(d.AccountID, true)
			}
		}
	}
	return events.AdminsOnly
}

// follow runs while c's session does (a goroutine of the hub's WaitGroup): it opens the
// runner's event stream (when the runner offers one), reconciles from the runner's status and
// publishes every change the stream carries.
func (h *Hub) follow(c *conn) {
	defer h.wg.Done()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	sessDone := make(chan struct{})
	defer close(sessDone)
	go func() {
		select {
		case <-c.sess.CloseChan():
			cancel()
		case <-sessDone:
		}
	}()
	r := &Remote{h: h, id: c.node}
	var watch *watchStream
	if hasCap(c.hello, wire.CapEvents) {
		st, err := openWatch(ctx, c)
		if err != nil {
			h.log.Warn("runner events: cannot follow the runner's changes", "node", c.node, "err", err)
		} else {
			watch = st
			defer st.Close()
		}
	}
	h.reconcile(ctx, r, c.node)
	if watch == nil {
		return
	}
	for {
		e, err := watch.next()
		if err != nil {
			return
		}
		switch e.Kind {
		case wire.WatchDesktop:
			if e.Desktop != nil && e.Desktop.InstanceID != "" {
				h.desktopEvent(c.node, *e.Desktop)
				h.runnerEvent(c.node, events.RunnerConnected)
			}
		case wire.WatchSettings:
			if ns := e.Settings; ns != nil {
				h.mu.Lock()
				h.max[c.node] = ns.MaxInstances
				h.mu.Unlock()
				h.publish(events.NodeChanged, events.Everyone, events.Node{NodeID: c.node, Isolation: ns.Isolation,
					MaxInstances: ns.MaxInstances, IdleStopMinutes: ns.IdleStopMinutes, PauseAfterMinutes: ns.PauseAfterMinutes,
					HostScreenControl: ns.HostScreenControl})
				h.runnerEvent(c.node, events.RunnerConnected)
			}
		case wire.WatchPrepare:
			if p := e.Prepare; p != nil {
				h.publish(events.PrepareProgress, events.AdminsOnly, events.Prepare{NodeID: c.node, ImageKey: p.Key,
					Running: p.Running, Phase: p.Phase, Message: p.Message, Percent: p.Percent, StartedAt: p.StartedAt,
					FinishedAt: p.FinishedAt, Error: p.Error})
				if !p.Running && p.Error == "" {
					h.reconcile(ctx, r, c.node) // the prepared images changed
				}
			}
		case wire.WatchEgressBlocked:
			if b := e.Blocked; b != nil && h.cfg.OnEgressBlocked != nil {
				h.cfg.OnEgressBlocked(c.node, h.audience(c.node, desk{AccountID: b.AccountID, AgentID: b.AgentID}), *b)
			}
		case wire.WatchResync:
			h.reconcile(ctx, r, c.node)
		}
	}
}

// reconcile reads node's status and publishes it: its settings, its prepared images, every
// desktop it has (as it is) and every desktop the server knew that it no longer has (removed),
// then the runner's status.
func (h *Hub) reconcile(ctx context.Context, r *Remote, node string) {
	sctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	st, err := r.Status(sctx)
	cancel()
	if err != nil {
		if ctx.Err() == nil {
			h.log.Warn("runner events: cannot read the runner's status", "node", node, "err", err)
			h.runnerEvent(node, events.RunnerConnected)
		}
		return
	}
	h.mu.Lock()
	h.max[node] = st.Policy.MaxInstances
	before := h.desks[node]
	h.desks[node] = map[string]desk{}
	h.mu.Unlock()
	have := map[string]bool{}
	for _, in := range st.Instances {
		have[in.ID] = true
		prev := ""
		if b, ok := before[in.ID]; ok {
			prev = b.State
		}
		h.desktopEvent(node, desk{InstanceID: in.ID, Scope: in.Scope, AccountID: in.AccountID, AgentID: in.AgentID,
			State: in.State, Previous: prev, LastError: in.LastError})
	}
	for id, b := range before {
		if !have[id] {
			b.Previous, b.Removed = b.State, true
			h.desktopEvent(node, b)
		}
	}
	keys := []string{}
	for _, img := range st.Images {
		if img.Prepared {
			keys = append(keys, img.Key)
		}
	}
	h.publish(events.ImagesChanged, events.Everyone, events.Images{NodeID: node, Prepared: keys})
	h.publish(events.NodeChanged, events.Everyone, events.Node{NodeID: node, Isolation: st.Policy.Isolation,
		MaxInstances: st.Policy.MaxInstances, IdleStopMinutes: st.Policy.IdleStopMinutes, PauseAfterMinutes: st.Policy.PauseAfterMinutes})
	h.runnerEvent(node, events.RunnerConnected)
}

// unreachable publishes that node's link ended: every desktop the server knew on it is
// unreachable, then the runner's status (disconnected, or revoked).
func (h *Hub) unreachable(node string) {
	h.mu.Lock()
	known := h.desks[node]
	list := make([]desk, 0, len(known))
	for id, d := range known {
		if d.State != events.DesktopUnreachable {
			d.Previous, d.State = d.State, events.DesktopUnreachable
			d.LastError = "its runner is disconnected: unreachable until it reconnects"
		}
		known[id] = d
		list = append(list, d)
	}
	h.mu.Unlock()
	for _, d := range list {
		h.desktopEvent(node, d)
	}
	h.runnerEvent(node, events.RunnerDisconnected)
}

// watchStream is an open OpWatch stream.
type watchStream struct {
	st interface {
		Read([]byte) (int, error)
		Close() error
	}
}

// openWatch opens c's event stream and waits for the runner's OK.
func openWatch(ctx context.Context, c *conn) (*watchStream, error) {
	st, err := c.sess.OpenStream()
	if err != nil {
		return nil, err
	}
	stop := context.AfterFunc(ctx, func() { st.Close() })
	defer stop()
	if err := wire.WriteFrame(st, wire.Request{Op: wire.Watch.Name}); err != nil {
		st.Close()
		return nil, err
	}
	var resp wire.Response
	if err := wire.ReadFrame(st, &resp); err != nil {
		st.Close()
		return nil, err
	}
	if resp.Error != nil {
		st.Close()
		return nil, resp.Error.Err()
	}
	return &watchStream{st: st}, nil
}

func (w *watchStream) next() (wire.WatchEvent, error) {
	var e wire.WatchEvent
	err := wire.ReadFrame(w.st, &e)
	return e, err
}

// Close ends the stream.
func (w *watchStream) Close() error { return w.st.Close() }
