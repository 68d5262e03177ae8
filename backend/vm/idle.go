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

// armIdle starts instanceID's idle timer now, unless someone uses it: a new idle period,
// in which the idle policy may pause it again.
func (m *Manager) armIdle(id string) {
	m.mu.Lock()
	if _, busy := m.busy[id]; !busy {
		m.idleSince[id] = m.clock.Now()
		delete(m.idlePaused, id)
	}
	m.mu.Unlock()
	m.wakeLoop()
}

func (m *Manager) clearIdle(id string) {
	m.mu.Lock()
	delete(m.idleSince, id)
	delete(m.idlePaused, id)
	m.mu.Unlock()
	m.wakeLoop()
}

// idleStep is what the idle policy does next to an idle desktop.
type idleStep int

const (
	idleWait  idleStep = iota // nothing is due yet
	idlePause                 // pause it (memory kept, no CPU)
	idleStop                  // stop it
)

// idleNext is the idle policy's decision for a desktop idle since since, at now: pause it
// pauseMins after since (0 = never; only when that comes before the stop), stop it stopMins
// after since (0 = never), a paused one (paused: by the policy or by hand) is not paused
// again. next is when the following step falls due (zero: none will).
func idleNext(since, now time.Time, pauseMins, stopMins int, unit time.Duration, paused bool) (step idleStep, next time.Time) {
	var pauseAt, stopAt time.Time
	if stopMins > 0 {
		stopAt = since.Add(time.Duration(stopMins) * unit)
	}
	if pauseMins > 0 && !paused && (stopMins <= 0 || pauseMins < stopMins) {
		pauseAt = since.Add(time.Duration(pauseMins) * unit)
	}
	switch {
	case !stopAt.IsZero() && !stopAt.After(now):
		return idleStop, time.Time{}
	case !pauseAt.IsZero() && !pauseAt.After(now):
		return idlePause, stopAt
	case !pauseAt.IsZero():
		return idleWait, pauseAt
	}
	return idleWait, stopAt
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

// loop owns the idle timers: it sleeps until the earliest deadline (or a wake-up), pauses
// the desktops whose pause is due and stops those whose stop is (idleNext).
func (m *Manager) loop() {
	defer m.wg.Done()
	for {
		m.mu.Lock()
		now := m.clock.Now()
		var next time.Time
		var due, pause []string
		for id, since := range m.idleSince {
			step, at := idleNext(since, now, m.pauseMins, m.idleMins, m.cfg.IdleUnit, m.idlePaused[id])
			switch step {
			case idleStop:
				due = append(due, id)
				delete(m.idleSince, id)
				continue
			case idlePause:
				pause = append(pause, id)
				m.idlePaused[id] = true
			}
			if !at.IsZero() && (next.IsZero() || at.Before(next)) {
				next = at
			}
		}
		m.mu.Unlock()
		for _, id := range due {
			m.wg.Add(1)
			go m.idleStop(id)
		}
		for _, id := range pause {
			m.wg.Add(1)
			go m.idlePauseOne(id)
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

// idlePauseOne pauses an instance whose idle pause is due, unless it became busy or was
// handed back (a new idle period) meanwhile. An engine that cannot pause (Kubernetes) leaves
// it running until its idle stop.
func (m *Manager) idlePauseOne(id string) {
	defer m.wg.Done()
	defer m.lock(id)()
	if who, busy := m.busyWho(id); busy {
		m.log.Info("idle pause skipped: desktop in use", "instance", id, "by", who)
		return
	}
	m.mu.Lock()
	still := m.idlePaused[id]
	m.mu.Unlock()
	if !still {
		return
	}
	in, err := m.st.VMInstance(id)
	if err != nil || in.State != StateRunning {
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(m.ctx), time.Minute)
	defer cancel()
	m.log.Info("pausing idle desktop", "instance", id)
	if err := m.pauseLocked(ctx, &in); err != nil {
		m.log.Warn("idle pause (the desktop keeps running until its idle stop)", "instance", id, "err", err)
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
