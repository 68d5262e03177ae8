package vm

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"time"

	"cubicle/backend/engine"
	"cubicle/backend/fault"
	"cubicle/backend/store"
)

// Following the engine. The watcher goroutine holds a subscription to the engine's container
// events; a reader goroutine under it turns each event of one of this store's containers
// into follow(instance). follow starts (or re-arms) one follower goroutine per instance,
// which takes the instance's queue — after any operation in flight — and writes what the
// engine reports (syncLocked). Every ResyncInterval, and after the subscription is
// re-established (the engine restarted), resync compares every record with the engine's
// list and follows those that differ. Nothing here changes a container: it only records.

// follower is the state of one instance's follower goroutine. Guarded by Manager.mu.
type follower struct {
	again bool // another event arrived while it ran: sync once more
}

// subscribe opens the engine's event stream, or returns nil (the watcher retries) when there
// is no engine or it refuses.
func (m *Manager) subscribe(ctx context.Context) *engine.EventStream {
	eng := m.engine()
	if eng == nil {
		return nil
	}
	s, err := eng.Events(m.ctx, nil)
	if err != nil {
		m.log.Warn("cannot follow the engine's events; retrying", "err", err)
		m.setUnreachable(err)
		return nil
	}
	return s
}

// Unreachable says why the engine does not answer, "" while it does. While it does not,
// every desktop of the node is unreachable: links are refused at once (Link), operations
// fail with the engine's error, and views say so (HealthUnreachable); nothing is recorded as
// stopped on that account. When the engine answers again, the next resync reconciles the
// records with what it runs. While the engine still connects (Config.Connecting) the
// desktops are unreachable the same way, saying so.
func (m *Manager) Unreachable() string {
	if m.Connecting() {
		return ErrConnecting
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.unreachable
}

// setUnreachable records that the engine's event stream could not be re-opened (err of class
// fault.ErrUnavailable; other errors are not about reaching it) or, with nil, that the
// engine answered (a subscription or a comparison succeeded).
func (m *Manager) setUnreachable(err error) {
	why := ""
	if err != nil {
		if !errors.Is(err, fault.ErrUnavailable) || m.ctx.Err() != nil {
			return
		}
		why = "the container engine does not answer: " + err.Error()
	}
	m.mu.Lock()
	was := m.unreachable
	m.unreachable = why
	m.mu.Unlock()
	switch {
	case was == "" && why != "":
		m.log.Warn("the engine is unreachable: desktops fail closed until it answers", "err", err)
		for _, in := range m.instancesOrNil() {
			m.links.Drop(in.ID) // a link through an engine that is gone (the exec link) is dead
		}
	case was != "" && why == "":
		m.log.Info("the engine answers again; reconciling")
	default:
		return
	}
	for _, in := range m.instancesOrNil() {
		if takesSlot(in.State) {
			m.changed(in, in.State, false)
		}
	}
}

// watch owns the event subscription: it reads events (through a reader goroutine),
// re-subscribes with a backoff when the stream ends, and runs resync on its interval.
func (m *Manager) watch(stream *engine.EventStream) {
	defer m.wg.Done()
	if m.engine() == nil {
		return
	}
	ticker := time.NewTicker(m.cfg.ResyncInterval)
	defer ticker.Stop()
	backoff := 250 * time.Millisecond
	var retry <-chan time.Time
	var ended chan error
	start := func(s *engine.EventStream) {
		stream, ended = s, make(chan error, 1)
		m.wg.Add(1)
		go m.readEvents(s, ended)
	}
	if stream != nil {
		start(stream)
	} else {
		retry = time.After(backoff)
	}
	for {
		select {
		case <-m.ctx.Done():
			if stream != nil {
				stream.Close()
			}
			return
		case err := <-ended:
			stream.Close()
			stream, ended = nil, nil
			m.log.Warn("the engine's event stream ended; resubscribing", "err", err)
			retry = time.After(backoff)
		case <-retry:
			retry = nil
			if s := m.subscribe(m.ctx); s != nil {
				m.setUnreachable(nil)
				start(s)
				backoff = 250 * time.Millisecond
				m.log.Info("following the engine's events again")
			} else {
				backoff = min(2*backoff, 30*time.Second)
				retry = time.After(backoff)
			}
			m.resync() // whatever happened while nobody listened
		case <-ticker.C:
			m.resync()
		}
	}
}

// readEvents reads s until it ends (the watcher closes it at Close) and reports why.
func (m *Manager) readEvents(s *engine.EventStream, ended chan<- error) {
	defer m.wg.Done()
	for {
		ev, err := s.Next()
		if err != nil {
			ended <- err
			return
		}
		if id, ok := m.eventInstance(ev); ok && engine.StateChanging(ev.Action) {
			m.log.Debug("engine event", "instance", id, "action", ev.Action, "container", ev.Name)
			m.follow(id)
		}
	}
}

// eventInstance maps an event to the instance it concerns: a container of this node and this
// store (or an old one without a store label, which syncLocked then checks against its
// record), or a fixed Compose desktop of this node.
func (m *Manager) eventInstance(ev engine.Event) (string, bool) {
	if name := ev.Labels[LabelCompose]; name != "" {
		id := composeID(name)
		_, ok := m.composeByID(id)
		return id, ok
	}
	if ev.Labels[engine.LabelManaged] != "true" || ev.Labels[LabelNode] != m.node {
		return "", false
	}
	if s, ok := ev.Labels[LabelStore]; ok && s != m.storeID {
		return "", false
	}
	id := ev.Labels[engine.LabelInstance]
	if id == "" || ev.Labels[LabelRole] == RoleProbe {
		return "", false
	}
	return id, true
}

// follow makes sure instance id's record is brought in line with the engine soon: by a
// follower goroutine that waits for the operations in flight on it.
func (m *Manager) follow(id string) {
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		return
	}
	if f, ok := m.following[id]; ok {
		f.again = true
		m.mu.Unlock()
		return
	}
	f := &follower{}
	m.following[id] = f
	m.wg.Add(1)
	m.mu.Unlock()
	go func() {
		defer m.wg.Done()
		for {
			release := m.lock(id)
			ctx, cancel := context.WithTimeout(m.ctx, 30*time.Second)
			if err := m.syncLocked(ctx, id, keepError); err != nil && m.ctx.Err() == nil {
				m.log.Warn("follow the engine", "instance", id, "err", err)
			}
			cancel()
			release()
			m.mu.Lock()
			if !f.again || m.closed {
				delete(m.following, id)
				m.mu.Unlock()
				return
			}
			f.again = false
			m.mu.Unlock()
		}
	}()
}

// resync compares every record with the engine's containers and follows those that differ;
// it also refreshes the strays (containers of this store no record knows).
func (m *Manager) resync() {
	ctx, cancel := context.WithTimeout(m.ctx, 30*time.Second)
	defer cancel()
	cs, err := m.engine().ListContainers(ctx, map[string]string{engine.LabelManaged: "true", LabelNode: m.node})
	if err != nil {
		if m.ctx.Err() == nil {
			m.log.Warn("resync with the engine", "err", err)
		}
		return // a failed comparison alone (a slow engine) does not make it unreachable: a lost event stream does
	}
	m.setUnreachable(nil)
	ins := m.instancesOrNil()
	byID := map[string]store.VMInstance{}
	for _, in := range ins {
		byID[in.ID] = in
	}
	byInstance := map[string][]engine.ContainerState{}
	var strays []string
	for _, c := range cs {
		id := c.Labels[engine.LabelInstance]
		in, known := byID[id]
		if !m.owns(c, in, known) || c.Labels[LabelRole] == RoleProbe {
			continue
		}
		if !known {
			if c.Labels[LabelRole] == RoleDesktop {
				strays = append(strays, c.Name)
			}
			continue
		}
		byInstance[id] = append(byInstance[id], c)
	}
	for _, in := range ins {
		if in.Scope == scopeCompose {
			m.follow(in.ID)
			continue
		}
		c, state := pick(byInstance[in.ID], in.ContainerID)
		if state != in.State || c.ID != in.ContainerID {
			m.log.Info("record differs from the engine; following", "instance", in.ID, "recorded", in.State, "engine", state)
			m.follow(in.ID)
		}
	}
	slices.Sort(strays)
	m.mu.Lock()
	m.strays = strays
	m.mu.Unlock()
}

// owns reports whether container c is this store's: it carries this store's id, or (made
// before containers carried one) it is exactly the container in, the record of its instance
// (known says there is one), names.
func (m *Manager) owns(c engine.ContainerState, in store.VMInstance, known bool) bool {
	s, labelled := c.Labels[LabelStore]
	if labelled {
		return s == m.storeID
	}
	return known && in.ContainerID != "" && c.ID == in.ContainerID
}

// containersOf lists the containers of in that this store owns.
func (m *Manager) containersOf(ctx context.Context, in store.VMInstance) ([]engine.ContainerState, error) {
	eng, err := m.needEngine(ctx)
	if err != nil {
		return nil, err
	}
	cs, err := eng.ListContainers(ctx, map[string]string{engine.LabelInstance: in.ID, LabelNode: m.node})
	if err != nil {
		return nil, err
	}
	return slices.DeleteFunc(cs, func(c engine.ContainerState) bool { return !m.owns(c, in, true) }), nil
}

// pick chooses, among an instance's containers, the one that matters (running, else paused,
// else the recorded one, else the first) and says what state it puts the instance in.
func pick(cs []engine.ContainerState, recorded string) (engine.ContainerState, string) {
	if len(cs) == 0 {
		return engine.ContainerState{}, StateAbsent
	}
	best := -1
	score := func(c engine.ContainerState) int {
		switch {
		case c.Running:
			return 3
		case c.Paused:
			return 2
		case c.ID == recorded:
			return 1
		}
		return 0
	}
	for i, c := range cs {
		if best < 0 || score(c) > score(cs[best]) {
			best = i
		}
	}
	return cs[best], engineState(cs[best])
}

// engineState is the instance state a container's engine state means.
func engineState(c engine.ContainerState) string {
	switch {
	case c.Running:
		return StateRunning
	case c.Paused:
		return StatePaused
	case c.Status == "stopping":
		return StateStopping
	case c.Status == "removing":
		return StateRemoving
	}
	return StateStopped
}

// keepError, as syncLocked's lastErr, keeps the recorded error of a desktop that is not
// running (why it stopped); the outcome of an operation passes its own ("" on success).
const keepError = "\x00keep"

// syncLocked records instance id as the engine reports it: its container (or none), its
// state, and lastErr (see keepError; a running desktop has none); the idle timer follows
// (armed when the desktop starts running, cleared when it stops). The instance's queue is
// held. A Compose desktop is re-read by its label. A missing record is no error (a task
// desktop was removed).
func (m *Manager) syncLocked(ctx context.Context, id, lastErr string) error {
	in, err := m.st.VMInstance(id)
	if errors.Is(err, fault.ErrNotFound) {
		return nil
	} else if err != nil {
		return err
	}
	if in.Scope == scopeCompose {
		if d, ok := m.composeByID(id); ok {
			return m.adoptOneCompose(ctx, d)
		}
		return nil
	}
	cs, err := m.containersOf(ctx, in)
	if err != nil {
		return err
	}
	role := kindOf(in).role
	cs = slices.DeleteFunc(cs, func(c engine.ContainerState) bool { return c.Labels[LabelRole] != role })
	c, state := pick(cs, in.ContainerID)
	prev := in.State
	switch {
	case state == StateRunning:
		lastErr = ""
	case lastErr == keepError && (prev == StateRunning || prev == StatePaused) && state == StateStopped:
		// Our own stops record their outcome under the queue before anyone follows, so a
		// running desktop that is found exited ended outside Cubicle: say so and how to go on.
		lastErr = fmt.Sprintf("the desktop's container exited by itself (exit code %d: its driver ended, "+
			"or it was stopped outside Cubicle); start the desktop again", c.ExitCode)
	case lastErr == keepError:
		lastErr = in.LastError
	}
	if state == prev && c.ID == in.ContainerID && lastErr == in.LastError {
		return nil
	}
	in.ContainerID = c.ID
	if state == StateAbsent {
		in.ImageRef = ""
	} else if in.ImageRef == "" {
		in.ImageRef = c.Image
	}
	if state == StateRunning && prev != StateRunning && prev != StatePaused {
		// Started outside this process: walled off before it is recorded running; a desktop
		// that cannot be is stopped.
		if err := m.wallOrStop(ctx, &in); err != nil {
			state, lastErr = StateStopped, err.Error()
		}
	}
	if state == StateRunning && prev != StateRunning && prev != StatePaused {
		in.StartedAt = c.StartedAt
		if in.StartedAt.IsZero() {
			in.StartedAt = m.clock.Now().UTC()
		}
		if _, err := m.makeRunDirKeepSocket(id); err != nil && !os.IsExist(err) {
			m.log.Warn("run directory of an adopted desktop", "instance", id, "err", err)
		}
	}
	// The idle timer first, so that whoever reads the new state sees its timer too.
	switch {
	case state == StateRunning || state == StatePaused:
		if kindOf(in).idle && prev != StateRunning && prev != StatePaused {
			m.armIdle(id)
		}
	default:
		m.clearIdle(id)
	}
	if err := m.setState(&in, state, lastErr); err != nil {
		return err
	}
	if prev != state {
		m.log.Info("desktop state follows the engine", "instance", id, "was", prev, "now", state,
			"container", strings.TrimPrefix(c.Name, "/"))
	}
	return nil
}
