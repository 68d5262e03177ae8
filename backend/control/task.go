package control

import (
	"fmt"
	"time"

	"cubicle/backend/fault"
)

// BeginTask lets agent task a operate desktopID. It is refused (fault.ErrConflict) while a
// person holds control ("a person is controlling this computer") or another task runs (naming
// its agent). Beginning the running task again succeeds and changes nothing.
func (m *Manager) BeginTask(desktopID string, a Agent) error {
	if desktopID == "" || a.TaskID == "" {
		return fault.Invalid("control: begin task: a desktop and a task are required")
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return fmt.Errorf("control: begin task on %s: %w", desktopID, errClosed)
	}
	d := m.desktopLocked(desktopID)
	now := m.clock.Now()
	m.settleLocked(d, now)
	if l := d.person; l != nil {
		return fmt.Errorf("control: begin task on %s: %w", desktopID, personControlling(l.holder))
	}
	if t := d.task; t != nil {
		if t.Agent == a {
			return nil
		}
		return fmt.Errorf("control: begin task on %s: %w", desktopID,
			refuse(fault.ErrConflict, ReasonAgentRunning, t.Activity()))
	}
	d.version++
	h := Holder{Kind: HolderAgent, Agent: a, Since: now, Version: d.version}
	d.task = &h
	m.emitLocked(Change{DesktopID: d.id, Kind: ChangeTaskStarted, Holder: h, Version: d.version, At: now})
	return nil
}

// EndTask ends task taskID on desktopID. Ending a task that is not running (ended, revoked,
// never begun) succeeds and changes nothing, so it is safe in a deferred cleanup.
func (m *Manager) EndTask(desktopID, taskID string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return fmt.Errorf("control: end task on %s: %w", desktopID, errClosed)
	}
	d := m.desktops[desktopID]
	if d == nil || d.task == nil || d.task.Agent.TaskID != taskID {
		return nil
	}
	h := *d.task
	d.task = nil
	d.version++
	m.emitLocked(Change{DesktopID: d.id, Kind: ChangeTaskEnded, Holder: h, Version: d.version,
		At: m.clock.Now()})
	return nil
}

// CheckTask reports whether task taskID may use its computer tools on desktopID now: nil when
// it is the desktop's running task; otherwise a *RefusedError, "a person is controlling this
// computer" when a person holds control. The agent runtime passes the message to the model as
// the tool's result.
func (m *Manager) CheckTask(desktopID, taskID string) error {
	now := m.clock.Now()
	m.mu.RLock()
	defer m.mu.RUnlock()
	if m.closed {
		return errClosed
	}
	d := m.desktops[desktopID]
	if d == nil {
		return errTaskEnded
	}
	if l := d.activePersonLocked(now); l != nil {
		return personControlling(l.holder)
	}
	if d.task == nil || d.task.Agent.TaskID != taskID {
		return errTaskEnded
	}
	return nil
}

// Holder returns who operates desktopID now, if anyone. A lease past its expiry counts as
// ended even before the loop has announced it.
func (m *Manager) Holder(desktopID string) (Holder, bool) {
	now := m.clock.Now()
	m.mu.RLock()
	defer m.mu.RUnlock()
	d := m.desktops[desktopID]
	if m.closed || d == nil {
		return Holder{}, false
	}
	if l := d.activePersonLocked(now); l != nil {
		return l.holder, true
	}
	if d.task != nil {
		return *d.task, true
	}
	return Holder{}, false
}

// Busy reports whether desktopID is in use — a person holds control or an agent task runs —
// and who (Holder.Name: "Alice", "agent Researcher"). The VM manager refuses instance
// operations by others and holds the idle timer while it is busy; for a full sentence use
// Holder(desktopID) and Holder.Activity.
func (m *Manager) Busy(desktopID string) (who string, busy bool) {
	h, ok := m.Holder(desktopID)
	if !ok {
		return "", false
	}
	return h.Name(), true
}

// activePersonLocked returns d's lease unless it is absent or past its expiry; the caller
// holds mu.
func (d *desktop) activePersonLocked(now time.Time) *lease {
	if d.person == nil || !now.Before(d.person.holder.ExpiresAt) {
		return nil
	}
	return d.person
}

// personControlling is the refusal an agent gets while a person holds control.
func personControlling(h Holder) error {
	return refuse(fault.ErrConflict, ReasonPersonControlling,
		"a person is controlling this computer ("+h.Name()+" took over); wait until control is handed back")
}
