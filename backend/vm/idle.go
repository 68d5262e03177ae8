package vm

import (
	"context"
	"time"
)

// MarkBusy says that who (e.g. "agent Bot's task", "alice (control)") now uses instanceID: a
// VM task started or a person took control. The idle timer stops; protected operations are
// refused until MarkIdle. Viewing a desktop is not use and must not call this.
func (m *Manager) MarkBusy(instanceID, who string) {
	m.mu.Lock()
	m.busy[instanceID] = who
	delete(m.idleSince, instanceID)
	m.mu.Unlock()
	m.wakeLoop()
}

// MarkIdle says that the task on instanceID ended or control was handed back: the desktop is
// idle and, if it runs, its idle timer starts now (SPEC §1.5).
func (m *Manager) MarkIdle(instanceID string) {
	m.mu.Lock()
	delete(m.busy, instanceID)
	rebuild := m.rebuild[instanceID]
	delete(m.rebuild, instanceID)
	if rebuild && m.ctx != nil && m.ctx.Err() == nil {
		m.wg.Add(1)
		go m.rebuildIdle(instanceID)
	}
	m.mu.Unlock()
	in, err := m.st.VMInstance(instanceID)
	if err == nil && (in.State == StateRunning || in.State == StatePaused) && in.Scope != scopeCompose && in.Scope != scopeTask {
		m.armIdle(instanceID)
	}
}

// armIdle starts instanceID's idle timer now, unless someone uses it.
func (m *Manager) armIdle(id string) {
	m.mu.Lock()
	if _, busy := m.busy[id]; !busy {
		m.idleSince[id] = m.clock.Now()
	}
	m.mu.Unlock()
	m.wakeLoop()
}

func (m *Manager) clearIdle(id string) {
	m.mu.Lock()
	delete(m.idleSince, id)
	m.mu.Unlock()
	m.wakeLoop()
}

// idleDeadline returns when instanceID will be stopped for being idle; ok is false when no
// timer runs (busy, not running, or the policy is "never"). m.mu is held.
func (m *Manager) idleDeadlineLocked(id string) (time.Time, bool) {
	since, ok := m.idleSince[id]
	if !ok || m.idleMins <= 0 {
		return time.Time{}, false
	}
	return since.Add(time.Duration(m.idleMins) * m.cfg.IdleUnit), true
}

// loop owns the idle timers: it sleeps until the earliest deadline (or a wake-up) and stops
// the desktops whose deadline passed.
func (m *Manager) loop() {
	defer m.wg.Done()
	for {
		m.mu.Lock()
		now := m.clock.Now()
		var next time.Time
		var due []string
		for id := range m.idleSince {
			dl, ok := m.idleDeadlineLocked(id)
			if !ok {
				continue
			}
			if !dl.After(now) {
				due = append(due, id)
				delete(m.idleSince, id)
				continue
			}
			if next.IsZero() || dl.Before(next) {
				next = dl
			}
		}
		m.mu.Unlock()
		for _, id := range due {
			m.wg.Add(1)
			go m.idleStop(id)
		}
		var timer <-chan time.Time
		stop := func() bool { return false }
		if !next.IsZero() {
			timer, stop = m.clock.NewTimer(next.Sub(now))
		}
		select {
		case <-m.ctx.Done():
			stop()
			return
		case <-m.wake:
		case <-timer:
		}
		stop()
	}
}

// idleStop stops an instance whose idle deadline passed, unless it became busy meanwhile.
func (m *Manager) idleStop(id string) {
	defer m.wg.Done()
	defer m.lock(id)()
	if who, busy := m.busyWho(id); busy {
		m.log.Info("idle stop skipped: desktop in use", "instance", id, "by", who)
		return
	}
	m.mu.Lock()
	_, rearmed := m.idleSince[id] // handed back again after the deadline fired
	m.mu.Unlock()
	if rearmed {
		return
	}
	in, err := m.st.VMInstance(id)
	if err != nil || (in.State != StateRunning && in.State != StatePaused) {
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(m.ctx), 4*m.cfg.StopTimeout)
	defer cancel()
	m.log.Info("stopping idle desktop", "instance", id, "idleStopMinutes", m.idleMinutes())
	if err := m.stopLocked(ctx, id, false); err != nil {
		m.log.Error("idle stop", "instance", id, "err", err)
	}
}

func (m *Manager) idleMinutes() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.idleMins
}

// rebuildIdle rebuilds an instance whose working directory changed while it was busy, now that
// it is idle (volumes kept), unless it became busy again or stopped meanwhile.
func (m *Manager) rebuildIdle(id string) {
	defer m.wg.Done()
	defer m.lock(id)()
	in, err := m.st.VMInstance(id)
	if err != nil || in.State != StateRunning || in.WorkDir == m.wantWorkDir(in) {
		return
	}
	if _, busy := m.busyWho(id); busy {
		m.mu.Lock()
		m.rebuild[id] = true
		m.mu.Unlock()
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(m.ctx), 2*time.Minute)
	defer cancel()
	m.log.Info("rebuilding idle desktop for a new working directory", "instance", id)
	if err := m.bringUp(ctx, &in, kindOf(in), nil, true); err != nil {
		m.log.Error("rebuild desktop for a new working directory", "instance", id, "err", err)
	}
}
