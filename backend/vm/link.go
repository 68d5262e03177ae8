package vm

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"time"

	"cubicle/backend/engine"
	"cubicle/backend/fault"
	"cubicle/backend/guest"
	"cubicle/backend/link"
	"cubicle/backend/store"
)

// This file is how the manager reaches desktops' drivers: one shared link per running
// desktop (link.Links), made ready when a desktop starts, dropped when it leaves "running",
// and repaired by Start (or an agent's next call, which starts its desktop) when the driver
// cannot be reached: first a reconnect, then a restart of the container — the driver is its
// PID 1 — keeping the container and its volumes.

// linkConnectTimeout bounds connecting to a desktop that should already run (no waiting for
// a driver that is starting).
const linkConnectTimeout = 10 * time.Second

// Link returns the shared connection to running desktop id's driver, connecting when there
// is none (or the last one ended). Everything that drives or watches a desktop uses it; nobody
// but the manager closes it. It never starts or repairs a desktop: one that is not running is
// fault.ErrConflict, a driver that cannot be reached fault.ErrUnavailable (and the desktop is
// unhealthy until Start repairs it).
func (m *Manager) Link(ctx context.Context, id string) (*guest.Client, error) {
	if why := m.Unreachable(); why != "" {
		return nil, fault.Unavailable("%s; desktops on this node cannot be reached until it does", why)
	}
	if c, ok := m.links.Get(id); ok {
		return c, nil
	}
	in, err := m.st.VMInstance(id)
	if err != nil {
		return nil, err
	}
	if in.State != StateRunning {
		return nil, fault.Conflict("%s is %s, not running: start it first", m.describe(in), in.State)
	}
	cctx, cancel := context.WithTimeout(ctx, linkConnectTimeout)
	defer cancel()
	c, err := m.links.Connect(cctx, m.target(in), false)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", m.describe(in), err)
	}
	return c, nil
}

// Tunnel opens a byte stream to address (a loopback host:port) inside running desktop id,
// through its driver and over its transport (guest.OpenTunnel); the caller closes it.
func (m *Manager) Tunnel(ctx context.Context, id, address string) (net.Conn, error) {
	in, err := m.st.VMInstance(id)
	if err != nil {
		return nil, err
	}
	if in.State != StateRunning {
		return nil, fault.Conflict("%s is %s, not running: start it first", m.describe(in), in.State)
	}
	conn, err := m.links.Stream(ctx, m.target(in))
	if err != nil {
		return nil, fmt.Errorf("tunnel to %s in %s: %w", address, m.describe(in), err)
	}
	return guest.OpenTunnel(ctx, conn, address)
}

// DriverStream opens a new raw byte stream to running desktop id's driver over its transport,
// for a caller that speaks the guest protocol itself (a runner relaying a desktop to its
// server); the caller closes it.
func (m *Manager) DriverStream(ctx context.Context, id string) (net.Conn, error) {
	in, err := m.st.VMInstance(id)
	if err != nil {
		return nil, err
	}
	if in.State != StateRunning {
		return nil, fault.Conflict("%s is %s, not running: start it first", m.describe(in), in.State)
	}
	conn, err := m.links.Stream(ctx, m.target(in))
	if err != nil {
		return nil, fmt.Errorf("driver of %s: %w", m.describe(in), err)
	}
	return conn, nil
}

// LinkState reports the link of desktop id (see link.State).
func (m *Manager) LinkState(id string) link.State { return m.links.State(id) }

// GuestLink says how new desktops' drivers are reached and why (CUBICLE_GUEST_LINK).
func (m *Manager) GuestLink() link.Choice { return m.links.Choice() }

// target names in's driver for the transports.
func (m *Manager) target(in store.VMInstance) link.Target {
	t := link.Target{InstanceID: in.ID, ContainerID: in.ContainerID, Socket: m.SocketPath(in.ID)}
	if t.ContainerID == "" {
		t.ContainerID = in.ContainerName
	}
	return t
}

// runMounts is the run-directory bind mount of a new container: only when the socket link
// may be used. With the exec link a desktop has no host mount at all.
func (m *Manager) runMounts(dir string) []engine.Mount {
	if !m.links.Choice().Mount {
		return nil
	}
	return []engine.Mount{{Source: dir, Target: RunDirTarget}}
}

// linkReady waits (up to ReadyTimeout) until the driver of desktop in, just started,
// answers, and keeps the connection as the desktop's link.
func (m *Manager) linkReady(ctx context.Context, eng Engine, in store.VMInstance) error {
	wctx, cancel := context.WithTimeout(ctx, m.cfg.ReadyTimeout)
	defer cancel()
	t := m.target(in)
	if _, err := m.links.Connect(wctx, t, true); err != nil {
		return fault.Unavailable("the desktop started but its driver did not answer within %s (%v)%s; "+
			"recreate the desktop, or prepare the image again", m.cfg.ReadyTimeout, err, silentDriver(ctx, eng, t.ContainerID))
	}
	return nil
}

// silentDriver says what container id, whose driver did not answer, is doing: whether it
// still runs and the end of the driver's log (what it was waiting for). Best effort: "" when
// the engine cannot say.
func silentDriver(ctx context.Context, eng Engine, id string) string {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	var b strings.Builder
	if st, err := eng.InspectContainer(ctx, id); err == nil {
		switch {
		case st.Running:
			b.WriteString("; its container is running")
		case st.Status != "":
			fmt.Fprintf(&b, "; its container is %s (exit code %d)", st.Status, st.ExitCode)
		}
	}
	if out := strings.TrimSpace(eng.LastOutput(ctx, id)); out != "" {
		b.WriteString("; the driver's last output:\n" + out + "\n")
	}
	return b.String()
}

// ensureLink checks that running desktop in's driver answers (its live link, or a new one).
func (m *Manager) ensureLink(ctx context.Context, in store.VMInstance) error {
	if _, ok := m.links.Get(in.ID); ok {
		return nil
	}
	cctx, cancel := context.WithTimeout(ctx, linkConnectTimeout)
	defer cancel()
	_, err := m.links.Connect(cctx, m.target(in), false)
	return err
}

// linkOrRepair checks that running desktop in (just adopted or resumed) has a driver that
// answers, and repairs it when not: Start (and an agent's next call, which starts its
// desktop) is what repairs a desktop. A driver of another protocol cannot be repaired.
func (m *Manager) linkOrRepair(ctx context.Context, eng Engine, in *store.VMInstance) error {
	err := m.ensureLink(ctx, *in)
	if err == nil || errors.Is(err, fault.ErrConflict) {
		return err
	}
	return m.repairLocked(ctx, eng, in, err)
}

// repairLocked restarts running desktop in whose driver cannot be reached (cause): the
// container is stopped and started again — same container, same volumes — and its driver
// awaited. The instance lock is held.
func (m *Manager) repairLocked(ctx context.Context, eng Engine, in *store.VMInstance, cause error) error {
	m.log.Warn("the desktop's driver cannot be reached; restarting the desktop (its files stay)",
		"instance", in.ID, "container", in.ContainerName, "cause", cause)
	m.links.Drop(in.ID)
	began := time.Now()
	var err error
	for attempt := 1; attempt <= 2; attempt++ {
		if err = m.restartContainer(ctx, eng, *in); err != nil {
			break
		}
		if err = m.wall(ctx, eng, in); err != nil {
			break // stopped below: a desktop that cannot be walled off never runs
		}
		if err = m.linkReady(ctx, eng, *in); err == nil {
			break
		}
		// A driver killed just before (kill -9 of PID 1) is reported running until the engine
		// has cleaned up after it, and that clean-up can stop the container again right after
		// our start: when it is not running now, start it once more.
		if st, ierr := eng.InspectContainer(ctx, in.ContainerID); ierr != nil || st.Running {
			break
		}
		m.log.Info("the desktop stopped again right after its restart (the engine finished an earlier exit); starting it once more",
			"instance", in.ID)
	}
	if err != nil {
		err = fmt.Errorf("repair %s: the driver could not be reached and a restart did not help: %w", m.describe(*in), err)
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*m.cfg.StopTimeout)
		eng.StopContainer(sctx, in.ContainerID, m.cfg.StopTimeout)
		cancel()
		m.syncAfter(ctx, in.ID, err) // records what the engine now reports, with the error
		return err
	}
	in.StartedAt = m.clock.Now().UTC()
	if err := m.setState(in, StateRunning, ""); err != nil {
		return err
	}
	m.log.Info("desktop repaired", "instance", in.ID, "took", time.Since(began).Round(time.Millisecond))
	return nil
}

// restartContainer stops in's container, waits until the engine reports it stopped, and
// starts it again (with a fresh socket directory).
func (m *Manager) restartContainer(ctx context.Context, eng Engine, in store.VMInstance) error {
	if err := eng.StopContainer(ctx, in.ContainerID, m.cfg.StopTimeout); err != nil && !errors.Is(err, fault.ErrNotFound) {
		return fmt.Errorf("stop container %s: %w", in.ContainerName, err)
	}
	deadline := time.Now().Add(2*m.cfg.StopTimeout + time.Second)
	for {
		st, err := eng.InspectContainer(ctx, in.ContainerID)
		if err != nil {
			return fmt.Errorf("inspect container %s: %w", in.ContainerName, err)
		}
		if !st.Running && !settling(st) || time.Now().After(deadline) {
			break
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
	if _, err := m.makeRunDir(in.ID); err != nil {
		return err
	}
	err := eng.StartContainer(ctx, in.ContainerID)
	if errors.Is(err, fault.ErrConflict) {
		m.settle(ctx, eng, in.ContainerID)
		err = eng.StartContainer(ctx, in.ContainerID)
	}
	if err != nil {
		return fmt.Errorf("start container %s: %w", in.ContainerName, err)
	}
	return nil
}
