package vm

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"cubicle/backend/fault"
	"cubicle/backend/store"
)

// Pausing. A paused desktop is frozen by the engine (the cgroup freezer: its memory is kept,
// its processes get no CPU) and recorded "paused". It still takes a capacity slot — its
// memory is held, and resuming it must never fail for want of one (see takesSlot). Whatever
// makes a desktop ready for use resumes it first: bringUp, which Start, an agent's turn
// (binding → Ensure → Act start) and the live view (backend/fleet/desktops.go) go through. A
// desktop found paused by the engine at start-up is adopted as paused (reconcile).

// Actions of POST /api/app/agents/:id/local-vm/:action that are not Act's: Pause and
// Resume (their own operations of the node contract, so that a runner without them is
// refused by its capability rather than by an unknown action).
const (
	ActionPause  = "pause"
	ActionResume = "resume"
)

// Pause freezes agentID's running desktop: its processes keep their memory and get no CPU
// until Resume (or anything that uses the desktop) thaws them. Pausing a paused desktop is
// no change. A desktop that does not run is fault.ErrConflict saying what to do, one in use
// (a task, a person's control) too, and an engine that cannot pause (Kubernetes) answers
// fault.ErrConflict. Like Act, it runs detached from ctx.
func (m *Manager) Pause(ctx context.Context, accountID, agentID string) (AgentView, error) {
	return m.Act(ctx, accountID, agentID, ActionPause)
}

// Resume thaws agentID's paused desktop and checks that its driver answers; its idle period
// goes on (see thaw). Resuming a running desktop is no change; one that is neither paused nor
// running is fault.ErrConflict (start it instead). Like Act, it runs detached from ctx.
func (m *Manager) Resume(ctx context.Context, accountID, agentID string) (AgentView, error) {
	return m.Act(ctx, accountID, agentID, ActionResume)
}

// pauseLocked freezes running desktop in and records it paused. The instance's queue is held.
func (m *Manager) pauseLocked(ctx context.Context, in *store.VMInstance) error {
	switch in.State {
	case StatePaused:
		return nil
	case StateRunning:
	default:
		return fault.Conflict("%s is %s, not running: only a running desktop can be paused; start it first, "+
			"or leave it as it is (a stopped desktop uses no memory either)", m.describe(*in), in.State)
	}
	eng, err := m.needEngine(ctx)
	if err != nil {
		return err
	}
	if err := pauseRetrying(ctx, eng, in.ContainerID, m.log); err != nil {
		// The refusal is the answer, not the desktop's state: record what the engine reports.
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		defer cancel()
		if serr := m.syncLocked(sctx, in.ID, keepError); serr != nil {
			m.log.Warn("record a desktop whose pause failed", "instance", in.ID, "err", serr)
		}
		return fmt.Errorf("pause container %s: %w", in.ContainerName, err)
	}
	m.mu.Lock()
	m.idlePaused[in.ID] = true // paused in this idle period: the idle stop still follows
	m.mu.Unlock()
	m.log.Info("desktop paused", "instance", in.ID)
	return m.setState(in, StatePaused, "")
}

// pauseTries is how often a pause the engine failed for a passing cause is tried, and
// pauseBackoff the first wait between tries (doubled each time).
const (
	pauseTries   = 4
	pauseBackoff = 250 * time.Millisecond
)

// pauseRetrying asks eng to pause container id, again when it fails for a passing cause. The
// cgroup v1 freezer (runc) gives up on a container whose processes fork while it freezes them
// — a desktop that is starting its session, on a busy machine — and thaws it again ("runc
// pause … exit status 1", classed unavailable); a moment later the same freeze succeeds. A
// refusal (not running, gone, an engine that cannot pause) is answered at once.
func pauseRetrying(ctx context.Context, eng Engine, id string, log *slog.Logger) error {
	wait := pauseBackoff
	for try := 1; ; try++ {
		err := eng.PauseContainer(ctx, id)
		if err == nil || try == pauseTries || !errors.Is(err, fault.ErrUnavailable) {
			return err
		}
		log.Warn("pausing a desktop failed; trying again", "container", id, "try", try, "err", err)
		select {
		case <-ctx.Done():
			return err
		case <-time.After(wait):
		}
		wait *= 2
	}
}

// resumeLocked thaws paused desktop in, records it running and checks its driver. The
// instance's queue is held.
func (m *Manager) resumeLocked(ctx context.Context, in *store.VMInstance) error {
	switch in.State {
	case StateRunning:
		return nil
	case StatePaused:
	default:
		return fault.Conflict("%s is %s, not paused: start it instead", m.describe(*in), in.State)
	}
	eng, err := m.needEngine(ctx)
	if err != nil {
		return err
	}
	if err := m.thaw(ctx, eng, in); err != nil {
		return err
	}
	return m.linkOrRepair(ctx, eng, in)
}

// thaw unpauses in's container (recorded paused by this process: same container, same
// network namespace, so its wall stands) and records it running. Its idle period goes on:
// being resumed is not use (a live view resumes it too; SPEC §1.5: viewing is not activity),
// so the idle stop comes when it was due and the pause is not repeated in this period; a
// turn's task marks it busy, and its end starts a new period. A container the engine no
// longer reports paused is recorded as the engine reports it.
func (m *Manager) thaw(ctx context.Context, eng Engine, in *store.VMInstance) error {
	err := eng.UnpauseContainer(ctx, in.ContainerID)
	if errors.Is(err, fault.ErrConflict) {
		// Not paused (any more): record what it is.
		if err := m.syncAfter(ctx, in.ID, nil); err != nil {
			return err
		}
		cur, rerr := m.st.VMInstance(in.ID)
		if rerr != nil {
			return rerr
		}
		*in = cur
		if in.State != StateRunning {
			return fault.Conflict("%s is %s, not paused: start it instead", m.describe(*in), in.State)
		}
		return nil
	}
	if err != nil {
		err = fmt.Errorf("resume container %s: %w", in.ContainerName, err)
		m.syncAfter(ctx, in.ID, err)
		return err
	}
	m.mu.Lock()
	_, timed := m.idleSince[in.ID]
	m.mu.Unlock()
	if !timed && kindOf(*in).idle {
		m.armIdle(in.ID) // none ran (paused outside Cubicle, or busy when paused)
	}
	m.log.Info("desktop resumed from pause", "instance", in.ID)
	return m.setState(in, StateRunning, "")
}
