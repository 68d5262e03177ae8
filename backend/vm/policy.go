package vm

import (
	"context"
	"fmt"
	"strings"

	"cubicle/backend/fault"
	"cubicle/backend/nodeapi"
	"cubicle/backend/store"
)

// Policy bounds (SPEC §1.3, §1.5).
const (
	MinInstances       = 1
	MaxInstancesLimit  = 4
	MaxIdleStopMinutes = 10080 // one week
)

// SetPolicy changes the node's isolation policy ("shared" | "per-agent") and the number of
// desktops that may run at once (1..4). Switching the isolation is refused while any desktop
// of the node is protected: a VM task runs on it, a person has not handed control back, or a
// stop is pending; the message names who. Desktops that keep running are retained (SPEC §1.3).
// Compose mode refuses count changes.
func (m *Manager) SetPolicy(ctx context.Context, isolation string, maxInstances int) (nodeapi.NodeSettings, error) {
	ns, err := m.setPolicy(isolation, maxInstances)
	if err != nil {
		return nodeapi.NodeSettings{}, err
	}
	return NodeSettingsView(ns), nil
}

func (m *Manager) setPolicy(isolation string, maxInstances int) (store.NodeSettings, error) {
	if isolation != IsolationShared && isolation != IsolationPerAgent {
		return store.NodeSettings{}, fault.Invalid("isolation %q: use %q or %q", isolation, IsolationShared, IsolationPerAgent)
	}
	if maxInstances < MinInstances || maxInstances > MaxInstancesLimit {
		return store.NodeSettings{}, fault.Invalid("maxInstances %d: between %d and %d desktops may run at once",
			maxInstances, MinInstances, MaxInstancesLimit)
	}
	cur, err := m.st.NodeSettings(m.node)
	if err != nil {
		return store.NodeSettings{}, err
	}
	if len(m.cfg.Compose) > 0 && (cur.MaxInstances != maxInstances || cur.Isolation != isolation) {
		return store.NodeSettings{}, fault.Conflict("this node runs %d fixed desktops from compose.desktops.yaml: their number "+
			"and sharing are set by the deployment, not here", len(m.cfg.Compose))
	}
	if cur.Isolation != isolation {
		if err := m.refuseProtected("switch the sharing mode"); err != nil {
			return store.NodeSettings{}, err
		}
	}
	ns, err := m.st.UpdateNodeSettings(m.node, func(ns *store.NodeSettings) error {
		ns.Isolation, ns.MaxInstances = isolation, maxInstances
		return nil
	})
	if err != nil {
		return store.NodeSettings{}, fmt.Errorf("save the Local VM policy: %w", err)
	}
	m.log.Info("local VM policy changed", "isolation", isolation, "maxInstances", maxInstances)
	m.settingsChanged(ns)
	return ns, nil
}

// refuseProtected returns a fault.ErrConflict error when any running desktop of the node is
// in use or has a stop pending.
func (m *Manager) refuseProtected(what string) error {
	var why []string
	for _, in := range m.instancesOrNil() {
		if in.Scope == scopeCompose {
			continue
		}
		if who, ok := m.busyWho(in.ID); ok {
			why = append(why, fmt.Sprintf("%s is in use by %s", m.describe(in), who))
		} else if in.State == StateStopping || in.State == StateRemoving {
			why = append(why, fmt.Sprintf("a stop of %s is still pending", m.describe(in)))
		}
	}
	if len(why) > 0 {
		return fault.Conflict("cannot %s now: %s; wait until the tasks finish and control is handed back", what, strings.Join(why, "; "))
	}
	return nil
}

// SetIdlePolicy sets the node's idle auto-stop in minutes (0 = never, up to 10080) and,
// unless pauseMinutes is nil (kept as it is), the idle pause: a desktop idle that long is
// paused first (0 = never; it must come before the stop). A repeated requestId returns the
// current settings without changing anything, so a retried request is harmless. Running idle
// timers take the new lengths at once.
func (m *Manager) SetIdlePolicy(ctx context.Context, requestID string, minutes int, pauseMinutes *int) (nodeapi.NodeSettings, error) {
	ns, err := m.setIdlePolicy(requestID, minutes, pauseMinutes)
	if err != nil {
		return nodeapi.NodeSettings{}, err
	}
	return NodeSettingsView(ns), nil
}

func (m *Manager) setIdlePolicy(requestID string, minutes int, pauseMinutes *int) (store.NodeSettings, error) {
	if requestID == "" {
		return store.NodeSettings{}, fault.Invalid("requestId is required (any unique string; it makes the change idempotent)")
	}
	if minutes < 0 || minutes > MaxIdleStopMinutes {
		return store.NodeSettings{}, fault.Invalid("idleStopMinutes %d: use 0 (never) to %d", minutes, MaxIdleStopMinutes)
	}
	if pauseMinutes != nil && (*pauseMinutes < 0 || *pauseMinutes > MaxIdleStopMinutes) {
		return store.NodeSettings{}, fault.Invalid("pauseAfterMinutes %d: use 0 (never pause) to %d", *pauseMinutes, MaxIdleStopMinutes)
	}
	ns, err := m.st.UpdateNodeSettings(m.node, func(ns *store.NodeSettings) error {
		if ns.IdlePolicyRequestID == requestID {
			return nil
		}
		pause := ns.PauseAfterMinutes
		if pauseMinutes != nil {
			pause = *pauseMinutes
		}
		if pause > 0 && minutes > 0 && pause >= minutes {
			return fault.Invalid("pauseAfterMinutes %d must be less than idleStopMinutes %d: an idle desktop is paused "+
				"first and stopped later (or send pauseAfterMinutes 0 to never pause)", pause, minutes)
		}
		ns.IdleStopMinutes, ns.PauseAfterMinutes, ns.IdlePolicyRequestID = minutes, pause, requestID
		return nil
	})
	if err != nil {
		return store.NodeSettings{}, fmt.Errorf("save the idle policy: %w", err)
	}
	m.mu.Lock()
	m.idleMins, m.pauseMins = ns.IdleStopMinutes, ns.PauseAfterMinutes
	m.mu.Unlock()
	m.wakeLoop()
	m.settingsChanged(ns)
	return ns, nil
}

// settingsChanged tells Config.OnSettings about the node's settings.
func (m *Manager) settingsChanged(ns store.NodeSettings) {
	if m.cfg.OnSettings != nil {
		m.cfg.OnSettings(ns)
	}
}
