package vm

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"cubicle/backend/engine"
	"cubicle/backend/fault"
	"cubicle/backend/store"
	"cubicle/images/guest/wire"
)

// Instance states (store.VMInstance.State, InstanceView.State). "absent" means there is no
// container (never created, removed, or vanished); the record and the volumes remain.
const (
	StateCreating = "creating" // a slot is reserved and the container is being created
	StateStarting = "starting" // a slot is reserved and an existing container is starting
	StateRunning  = "running"
	// StatePaused: frozen by the engine (Pause, the idle policy, or podman pause): memory
	// kept, no CPU; it still holds its capacity slot (pause.go).
	StatePaused   = "paused"
	StateStopping = "stopping"
	StateStopped  = "stopped"
	StateRemoving = "removing"
	StateAbsent   = "absent"
	StateMissing  = "missing" // a Compose desktop whose container is not there
)

// takesSlot reports whether a desktop in state counts against the node's capacity: whatever
// holds (or is about to hold) a container's processes.
func takesSlot(state string) bool {
	switch state {
	case StateCreating, StateStarting, StateRunning, StatePaused, StateStopping:
		return true
	}
	return false
}

// kind is what a desktop is for: its container's role, whether it gets the persistent
// volumes and an idle timer, and what a failed start leaves behind.
type kind struct {
	role    string
	volumes bool // the record's workspace and browser-profile volumes (those it names)
	idle    bool // an idle timer runs while it is idle
	noSlot  bool // takes none of the node's desktop slots (browsers)
	browser bool // runs Chromium instead of the desktop session (browser.go)
	// removeOnFailure: a desktop that does not come up is removed entirely (task desktops);
	// otherwise it is stopped and kept.
	removeOnFailure bool
}

var (
	kindDesktop = kind{role: RoleDesktop, volumes: true, idle: true}
	kindTask    = kind{role: RoleTask, removeOnFailure: true}
	kindBrowser = kind{role: RoleDesktop, volumes: true, idle: true, noSlot: true, browser: true}
)

// kindOf returns the kind of a record.
func kindOf(in store.VMInstance) kind {
	switch in.Scope {
	case scopeTask:
		return kindTask
	case scopeBrowser:
		return kindBrowser
	}
	return kindDesktop
}

// bringUp is the one path every desktop takes to run: resolve the image → reserve a
// capacity slot → create the container (when there is none) → start it → driver ready →
// record "running". The instance's queue is held. A desktop that already runs is adopted; a
// paused one is resumed. labels are added to a new container's (task desktops name their
// task). When it fails after reserving a slot, the desktop is rolled back (failedUp) so that
// its record agrees with the engine and the slot is free again.
//
// With replace (recreate), an existing container is removed after the slot is reserved and a
// new one is created from the image in's key now names; the record stays "creating" all along.
func (m *Manager) bringUp(ctx context.Context, in *store.VMInstance, k kind, labels map[string]string, replace bool) (err error) {
	eng, err := m.needEngine(ctx)
	if err != nil {
		return err
	}
	if in.UserNSBase == 0 && in.ContainerID == "" && m.engines().mapUsers {
		// A record resolved while the engine was still connecting did not know whether
		// desktops get their own user namespace; a new one (not stored yet) gets it now.
		if _, err := m.st.VMInstance(in.ID); errors.Is(err, fault.ErrNotFound) {
			in.UserNSBase = userNSBase(in.ID)
		}
	}
	m.mu.Lock()
	preparing := m.preparing > 0
	m.mu.Unlock()
	if preparing {
		return fault.Conflict("a desktop image is being prepared and every desktop was stopped for it; " +
			"try again when the preparation in Settings → Local VM has finished")
	}
	ctr, found, err := m.findContainer(ctx, *in, k.role)
	if err != nil {
		return err
	}
	if want := m.wantWorkDir(*in); found && !replace && want != in.WorkDir {
		// The agent's working directory changed since the container was made: rebuild it
		// (volumes kept) now that it is being started (SPEC §1.5).
		m.log.Info("rebuilding desktop for a new working directory", "instance", in.ID, "from", in.WorkDir, "to", want)
		replace = true
	}
	switch {
	case replace:
	case found && ctr.Running:
		if err := m.adopt(ctx, in, ctr, k); err != nil {
			return err
		}
		return m.linkOrRepair(ctx, eng, in)
	case found && ctr.Paused && in.State == StatePaused && in.ContainerID == ctr.ID:
		// Paused by Pause or the idle policy (or adopted paused): thawed, its wall stands.
		if err := m.thaw(ctx, eng, in); err != nil {
			return err
		}
		return m.linkOrRepair(ctx, eng, in)
	case found && ctr.Paused:
		if err := eng.UnpauseContainer(ctx, ctr.ID); err != nil && !errors.Is(err, fault.ErrConflict) {
			return fmt.Errorf("resume the paused container %s: %w", ctr.Name, err)
		}
		m.log.Info("desktop resumed from pause", "instance", in.ID)
		if err := m.adopt(ctx, in, ctr, k); err != nil {
			return err
		}
		return m.linkOrRepair(ctx, eng, in)
	}
	ref := ""
	if !found || replace {
		if ref, err = m.imageRef(ctx, in); err != nil {
			return err
		}
	}

	// Reserve a slot: the record's state says so, under the capacity lock, so that two
	// starts can never both take the last one; the slow work below runs without the lock.
	m.capMu.Lock()
	if !k.noSlot {
		if err := m.checkCapacity(ctx, eng, in.ID, in.Scope); err != nil {
			m.capMu.Unlock()
			return err
		}
	}
	state := StateStarting
	if !found || replace {
		state = StateCreating
	}
	if found {
		in.ContainerID = ctr.ID
	}
	err = m.setState(in, state, "")
	m.capMu.Unlock()
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			m.failedUp(ctx, in, k, err)
		}
	}()

	began := time.Now()
	if found && replace {
		m.clearIdle(in.ID)
		// Stopped first: a force removal of a running container in its own user namespace
		// (Config.MapUsers) can find its /dev/shm still mounted (Podman 4: EBUSY).
		if err := eng.StopContainer(ctx, ctr.ID, m.cfg.StopTimeout); err != nil && !errors.Is(err, fault.ErrNotFound) {
			return fmt.Errorf("stop the old container %s: %w", ctr.Name, err)
		}
		if err := eng.RemoveContainer(ctx, ctr.ID, true); err != nil && !errors.Is(err, fault.ErrNotFound) {
			return fmt.Errorf("remove the old container %s: %w", ctr.Name, err)
		}
		found = false
	}
	if !found {
		in.ImageRef, in.ContainerID, in.WorkDir = ref, "", m.wantWorkDir(*in)
		if ctr, err = m.createContainer(ctx, eng, *in, k, labels); err != nil {
			return err
		}
		in.ContainerID = ctr.ID
		if err := m.setState(in, StateCreating, ""); err != nil {
			return err
		}
	}
	if m.cfg.HostWall == nil && m.cfg.Egress != nil {
		// Desktops not on this machine (a cluster): the policy is the cluster's object, in
		// place before the desktop's network exists.
		if err := m.cfg.Egress(ctx, *in, 0); err != nil {
			return fmt.Errorf("enforce the desktop's egress policy: %w", err)
		}
	}
	if err := m.startContainer(ctx, eng, in.ID, in.ContainerID); err != nil {
		return fmt.Errorf("start container %s: %w", in.ContainerName, err)
	}
	if err := m.wall(ctx, eng, in); err != nil {
		return err // failedUp stops (or removes) it: a desktop that cannot be walled off never runs
	}
	if err := m.linkReady(ctx, eng, *in); err != nil {
		return err
	}
	in.StartedAt = m.clock.Now().UTC()
	if k.idle {
		m.armIdle(in.ID)
	}
	if err := m.setState(in, StateRunning, ""); err != nil {
		return err
	}
	m.log.Info("desktop running", "instance", in.ID, "role", k.role, "container", in.ContainerName, "image", in.ImageRef,
		"took", time.Since(began).Round(time.Millisecond))
	return nil
}

// adopt records a container found running as in's: running since the engine says. A desktop
// not recorded as running (started outside this process) is walled off first (wallOrStop).
func (m *Manager) adopt(ctx context.Context, in *store.VMInstance, ctr engine.ContainerState, k kind) error {
	in.ContainerID = ctr.ID
	if in.ImageRef == "" {
		in.ImageRef = ctr.Image
	}
	if in.State == StateRunning && in.LastError == "" {
		return nil
	}
	if err := m.wallOrStop(ctx, in); err != nil {
		m.syncAfter(ctx, in.ID, err)
		return err
	}
	in.StartedAt = ctr.StartedAt
	if in.StartedAt.IsZero() {
		in.StartedAt = m.clock.Now().UTC()
	}
	if _, err := m.makeRunDirKeepSocket(in.ID); err != nil {
		return err
	}
	if k.idle {
		m.armIdle(in.ID)
	}
	return m.setState(in, StateRunning, "")
}

// failedUp rolls back a desktop that did not come up: a task desktop is removed; any other is
// stopped (when its container runs) and its record set to what the engine reports, with the
// error. It runs on a context of its own, since ctx may be what ended.
func (m *Manager) failedUp(ctx context.Context, in *store.VMInstance, k kind, cause error) {
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 4*m.cfg.StopTimeout+30*time.Second)
	defer cancel()
	m.log.Warn("desktop did not come up; rolling back", "instance", in.ID, "err", cause)
	if k.removeOnFailure {
		if err := m.removeTaskLocked(rctx, in.ID); err != nil {
			m.log.Error("remove a task desktop that did not come up", "instance", in.ID, "err", err)
		}
		return
	}
	if eng := m.engine(); eng != nil && in.ContainerID != "" {
		if err := eng.StopContainer(rctx, in.ContainerID, m.cfg.StopTimeout); err != nil && !errors.Is(err, fault.ErrNotFound) {
			m.log.Error("stop a desktop that did not come up", "instance", in.ID, "err", err)
		}
	}
	if err := m.syncLocked(rctx, in.ID, cause.Error()); err != nil {
		m.log.Error("record a desktop that did not come up", "instance", in.ID, "err", err)
	}
}

// imageRef returns the image a new container of in is created from: in's chosen image key
// (defaulting to the standard image, else the first prepared one) as this node prepared it
// (a browser may use the standard image before it was prepared, see preparedRef).
func (m *Manager) imageRef(ctx context.Context, in *store.VMInstance) (string, error) {
	if in.ImageKey == "" {
		keys := m.preparedKeys()
		switch {
		case slices.Contains(keys, "standard"):
			in.ImageKey = "standard"
		case len(keys) > 0:
			in.ImageKey = keys[0]
		default:
			return "", fault.Conflict("no desktop image is prepared yet: an admin prepares one in Settings → Local VM")
		}
	}
	return m.preparedRef(ctx, *in)
}

// containerSpec is the container of a desktop of kind k with instance id, image ref and
// name: hardened and limited alike for every kind, its run directory mounted when the socket
// link may be used, the persistent volumes for kinds that have them.
func (m *Manager) containerSpec(id, name, ref, runDir string, k kind, in store.VMInstance, extra map[string]string) engine.ContainerSpec {
	labels := m.labels(id, k.role)
	maps.Copy(labels, extra)
	spec := engine.ContainerSpec{
		Name:        name,
		Image:       ref,
		Labels:      labels,
		Env:         map[string]string{wire.EnvRunDir: RunDirTarget},
		Hostname:    "cubicle",
		Mounts:      m.runMounts(runDir), // none with the exec link
		Limits:      m.engineLimits(),
		StopTimeout: m.cfg.StopTimeout,
		IDMap:       idMap(in),
	}
	if k.volumes {
		for _, v := range []engine.VolumeMount{{Name: in.WorkspaceVol, Target: WorkspaceTarget}, {Name: in.ProfileVol, Target: BrowserTarget}} {
			if v.Name != "" {
				spec.Volumes = append(spec.Volumes, v)
			}
		}
	}
	if in.WorkDir != "" {
		spec.Env[wire.EnvWorkspace] = in.WorkDir
	}
	if k.browser {
		browserSpec(&spec, in)
	}
	return spec
}

// createContainer creates in's volumes (for kinds that have them) and container, not started.
func (m *Manager) createContainer(ctx context.Context, eng Engine, in store.VMInstance, k kind, extra map[string]string) (engine.ContainerState, error) {
	if k.volumes {
		for vol, what := range map[string]string{in.WorkspaceVol: "workspace", in.ProfileVol: "browser-profile"} {
			if vol == "" {
				continue
			}
			l := m.labels(in.ID, "volume")
			l[LabelVolume] = what
			if err := eng.EnsureVolume(ctx, vol, l); err != nil {
				return engine.ContainerState{}, fmt.Errorf("create volume %s: %w", vol, err)
			}
		}
	}
	dir, err := m.makeRunDir(in.ID)
	if err != nil {
		return engine.ContainerState{}, err
	}
	spec := m.containerSpec(in.ID, in.ContainerName, in.ImageRef, dir, k, in, extra)
	ctr, err := eng.CreateContainer(ctx, spec)
	if errors.Is(err, fault.ErrExists) {
		// A container of that name that the label search did not find. When it carries our
		// store's labels it is ours (from a crash the search missed): remove it and try once
		// more. Another data directory's container is never touched.
		old, ierr := eng.InspectContainer(ctx, in.ContainerName)
		if ierr == nil && old.Labels[LabelStore] == m.storeID && old.Labels[engine.LabelInstance] == in.ID {
			if rerr := eng.RemoveContainer(ctx, old.ID, true); rerr == nil || errors.Is(rerr, fault.ErrNotFound) {
				ctr, err = eng.CreateContainer(ctx, spec)
			}
		} else if ierr == nil {
			return engine.ContainerState{}, fault.Conflict("a container named %s exists and does not belong to this "+
				"Cubicle data directory (store %q); remove or rename it, or use the data directory that made it",
				in.ContainerName, old.Labels[LabelStore])
		}
	}
	if err != nil {
		return engine.ContainerState{}, fmt.Errorf("create container %s: %w", in.ContainerName, err)
	}
	return ctr, nil
}

// startContainer starts container ctrID of instance id (with a fresh socket directory);
// a container still stopping (a stop an earlier process began) is waited for first.
func (m *Manager) startContainer(ctx context.Context, eng Engine, id, ctrID string) error {
	if _, err := m.makeRunDir(id); err != nil {
		return err
	}
	m.settle(ctx, eng, ctrID)
	err := eng.StartContainer(ctx, ctrID)
	if errors.Is(err, fault.ErrConflict) {
		m.settle(ctx, eng, ctrID)
		err = eng.StartContainer(ctx, ctrID)
	}
	return err
}

// wall walls in's started container off from this machine's services (Config.HostWall) and
// records the outcome on in (not in the store: the caller's next setState does). Only errors
// other than "not possible here" are returned. It may run again on a walled desktop (the
// wall is replaced).
func (m *Manager) wall(ctx context.Context, eng Engine, in *store.VMInstance) error {
	if m.cfg.HostWall == nil {
		in.HostWall = ""
		return nil
	}
	st, err := eng.InspectContainer(ctx, in.ContainerID)
	if err != nil {
		return fmt.Errorf("inspect the started desktop: %w", err)
	}
	err = m.cfg.HostWall(ctx, st.PID, in.ContainerID, m.runDir(in.ID))
	pid := st.PID
	switch {
	case err == nil:
		in.HostWall = "on"
	case errors.Is(err, fault.ErrUnavailable):
		pid = 0 // not proven to be the desktop's process: its network is not touched
		in.HostWall = "off: " + err.Error()
		m.log.Warn("desktop not walled off from this machine", "instance", in.ID, "why", err)
	default:
		return fmt.Errorf("wall the desktop off from this machine: %w", err)
	}
	if m.cfg.Egress != nil {
		if err := m.cfg.Egress(ctx, *in, pid); err != nil {
			return fmt.Errorf("enforce the desktop's egress policy: %w", err)
		}
	}
	return nil
}

// wallOrStop walls off a running desktop that this process did not start (adopted at
// start-up, started outside Cubicle): its network namespace may be new. When the wall fails
// the container is stopped, so that no desktop runs unwalled.
func (m *Manager) wallOrStop(ctx context.Context, in *store.VMInstance) error {
	eng := m.engine()
	if eng == nil || m.cfg.HostWall == nil {
		return nil
	}
	err := m.wall(ctx, eng, in)
	if err == nil {
		return nil
	}
	m.log.Error("stopping a desktop that could not be walled off", "instance", in.ID, "err", err)
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*m.cfg.StopTimeout+10*time.Second)
	defer cancel()
	if serr := eng.StopContainer(sctx, in.ContainerID, m.cfg.StopTimeout); serr != nil && !errors.Is(serr, fault.ErrNotFound) {
		m.log.Error("stop a desktop that could not be walled off", "instance", in.ID, "err", serr)
	}
	return err
}

// settle waits (up to twice the stop timeout) while container id is between running and
// stopped, e.g. finishing a stop that a crashed process began, or exited but not yet cleaned
// up (Podman's "stopped": its network not yet torn down, so a start now fails with its
// address still allocated — seen when a desktop in its own user namespace lost its PID 1).
func (m *Manager) settle(ctx context.Context, eng Engine, id string) {
	deadline := time.Now().Add(2*m.cfg.StopTimeout + time.Second)
	for time.Now().Before(deadline) {
		st, err := eng.InspectContainer(ctx, id)
		if err != nil || !settling(st) {
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// settling reports whether a container is on its way from running to stopped: stopping, or
// exited with the engine's clean-up still to come (Podman's "stopped", before "exited").
func settling(st engine.ContainerState) bool {
	return !st.Running && (st.Status == "stopping" || st.Status == "stopped")
}

func (m *Manager) engineLimits() engine.Limits {
	l := m.cfg.Limits
	return engine.Limits{MemoryBytes: l.MemoryBytes, NanoCPUs: l.NanoCPUs, PIDs: l.PIDs, ShmBytes: l.ShmBytes,
		NoFile: 20000, NProc: 32768}
}

// findContainer returns the container of in with role, found by its instance label among
// this store's containers.
func (m *Manager) findContainer(ctx context.Context, in store.VMInstance, role string) (engine.ContainerState, bool, error) {
	cs, err := m.containersOf(ctx, in)
	if err != nil {
		return engine.ContainerState{}, false, err
	}
	cs = slices.DeleteFunc(cs, func(c engine.ContainerState) bool { return c.Labels[LabelRole] != role })
	c, state := pick(cs, in.ContainerID)
	return c, state != StateAbsent, nil
}

// checkCapacity refuses to reserve one more slot when the node's MaxInstances are taken
// (except by instance except). What takes a slot comes from the engine — its containers of
// this node and store that run, are paused, or are on their way up or down — plus the slots
// reserved by starts still before the engine (records "creating"/"starting"); an engine
// that cannot be asked refuses the start. capMu is held.
func (m *Manager) checkCapacity(ctx context.Context, eng Engine, except, scope string) error {
	ns, err := m.st.NodeSettings(m.node)
	if err != nil {
		return err
	}
	running, err := m.engineDesktops(ctx, eng, except)
	if err != nil {
		return fmt.Errorf("count the desktops that run: %w", err)
	}
	if len(running) < ns.MaxInstances {
		return nil
	}
	if scope == scopeTask {
		return fault.Conflict("no desktop free for the helper's task: %d of %d running (%s); wait until one stops, "+
			"stop one in Settings → Local VM or raise the limit there, or do the task without a helper",
			len(running), ns.MaxInstances, strings.Join(running, ", "))
	}
	return fault.Conflict("at most %d desktops may run at the same time on this node and %d already run: %s; "+
		"stop one of them, or raise the limit in Settings → Local VM", ns.MaxInstances, len(running), strings.Join(running, ", "))
}

// engineDesktops describes the desktops that take a capacity slot as the engine reports
// them (see checkCapacity), except instance except.
func (m *Manager) engineDesktops(ctx context.Context, eng Engine, except string) ([]string, error) {
	cs, err := eng.ListContainers(ctx, map[string]string{engine.LabelManaged: "true", LabelNode: m.node, LabelStore: m.storeID})
	if err != nil {
		return nil, err
	}
	byID := map[string]store.VMInstance{}
	for _, in := range m.instancesOrNil() {
		byID[in.ID] = in
	}
	taken := map[string]bool{}
	var out []string
	for _, c := range cs {
		id := c.Labels[engine.LabelInstance]
		in, known := byID[id]
		if id == "" || id == except || taken[id] || c.Labels[LabelRole] == RoleProbe {
			continue
		}
		if known && (in.Scope == scopeCompose || kindOf(in).noSlot) {
			continue
		}
		if !c.Running && !c.Paused && c.Status != "stopping" && c.Status != "created" && c.Status != "removing" {
			continue
		}
		if c.Status == "created" && (!known || !takesSlot(in.State)) {
			continue // made but never started (Podman's "created"), unless a start of ours is under way
		}
		taken[id] = true
		if known {
			out = append(out, m.describe(in))
		} else {
			out = append(out, "container "+c.Name)
		}
	}
	for _, in := range byID {
		if in.ID == except || taken[in.ID] || in.Scope == scopeCompose || kindOf(in).noSlot {
			continue
		}
		if in.State == StateCreating || in.State == StateStarting {
			out = append(out, m.describe(in)) // reserved by a start that has not reached the engine yet
		}
	}
	return out, nil
}

// runningDesktops describes the desktops that take a capacity slot, except instance except.
// Compose desktops and browsers do not count.
func (m *Manager) runningDesktops(except string) []string {
	var running []string
	for _, in := range m.instancesOrNil() {
		if in.ID == except || in.Scope == scopeCompose || kindOf(in).noSlot {
			continue
		}
		if takesSlot(in.State) {
			running = append(running, m.describe(in))
		}
	}
	return running
}

// stopLocked stops instance id's container and records what the engine then reports. The
// caller holds the instance's queue unless takeLock is set.
func (m *Manager) stopLocked(ctx context.Context, id string, takeLock bool) error {
	if takeLock {
		defer m.lock(id)()
	}
	in, err := m.st.VMInstance(id)
	if err != nil {
		return err
	}
	m.clearIdle(id)
	if in.ContainerID == "" || in.State == StateAbsent {
		return nil
	}
	eng, err := m.needEngine(ctx)
	if err != nil {
		return err
	}
	if err := m.setState(&in, StateStopping, ""); err != nil {
		return err
	}
	start := time.Now()
	err = m.stopContainer(ctx, eng, id, in.ContainerID)
	if err != nil && !errors.Is(err, fault.ErrNotFound) {
		err = fmt.Errorf("stop container %s: %w", in.ContainerName, err)
		m.syncAfter(ctx, id, err)
		return err
	}
	m.log.Info("desktop stopped", "instance", id, "took", time.Since(start).Round(time.Millisecond))
	return m.syncAfter(ctx, id, nil)
}

// stopContainer stops container ctrID of instance id. A stop the engine reports as failed
// while the container did stop (Podman answers 500 when the killed processes are reaped later
// than it waits for, as on a loaded machine) stopped it: the engine's complaint is logged, not
// returned — the desktop is stopped, and saying otherwise (a 503) would be wrong. A missing
// container is fault.ErrNotFound, as from the engine.
func (m *Manager) stopContainer(ctx context.Context, eng Engine, id, ctrID string) error {
	err := eng.StopContainer(ctx, ctrID, m.cfg.StopTimeout)
	if err == nil || errors.Is(err, fault.ErrNotFound) {
		return err
	}
	m.settle(ctx, eng, ctrID)
	st, ierr := eng.InspectContainer(ctx, ctrID)
	if errors.Is(ierr, fault.ErrNotFound) || (ierr == nil && !st.Running && !st.Paused) {
		m.log.Warn("the engine reported a failed stop, but the desktop's container stopped", "instance", id,
			"container", ctrID, "err", err)
		return nil
	}
	return err
}

// syncAfter records instance id as the engine reports it after an operation that ended with
// cause (nil: success), on a context of its own (ctx may be what ended the operation).
func (m *Manager) syncAfter(ctx context.Context, id string, cause error) error {
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	msg := ""
	if cause != nil {
		msg = cause.Error()
	}
	return m.syncLocked(sctx, id, msg)
}

// removeLocked removes in's container (never its volumes). The instance's queue is held.
func (m *Manager) removeLocked(ctx context.Context, in store.VMInstance) error {
	eng, err := m.needEngine(ctx)
	if err != nil {
		return err
	}
	m.clearIdle(in.ID)
	ctr, found, err := m.findContainer(ctx, in, RoleDesktop)
	if err != nil {
		return err
	}
	if !found && in.ContainerID == "" {
		return m.setState(&in, StateAbsent, "")
	}
	if err := m.setState(&in, StateRemoving, ""); err != nil {
		return err
	}
	id := in.ContainerID
	if found {
		id = ctr.ID
	}
	err = m.stopContainer(ctx, eng, in.ID, id)
	if err == nil || errors.Is(err, fault.ErrNotFound) {
		err = eng.RemoveContainer(ctx, id, true)
	}
	if err != nil && !errors.Is(err, fault.ErrNotFound) {
		err = fmt.Errorf("remove container %s: %w", in.ContainerName, err)
		m.syncAfter(ctx, in.ID, err)
		return err
	}
	return m.syncAfter(ctx, in.ID, nil)
}

// setState records in's new state (and its other fields) in the store and tells OnChange. A
// desktop that leaves "running" loses its driver link (nothing is unhealthy about it).
func (m *Manager) setState(in *store.VMInstance, state, lastErr string) error {
	if state != StateRunning {
		m.links.Drop(in.ID)
	}
	prev, prevErr := in.State, in.LastError
	in.State, in.LastError = state, lastErr
	in.UpdatedAt = m.clock.Now().UTC()
	if in.CreatedAt.IsZero() {
		in.CreatedAt = in.UpdatedAt
	}
	if err := m.st.PutVMInstance(*in); err != nil {
		return fmt.Errorf("record desktop state %s: %w", state, err)
	}
	if prev != state || prevErr != lastErr {
		m.changed(*in, prev, false)
	}
	return nil
}

// changed tells Config.OnChange about in (now in its recorded state, before in prev).
func (m *Manager) changed(in store.VMInstance, prev string, removed bool) {
	if m.cfg.OnChange == nil {
		return
	}
	m.cfg.OnChange(InstanceChange{InstanceID: in.ID, Scope: in.Scope, AccountID: in.AccountID, AgentID: in.AgentID,
		State: in.State, Previous: prev, LastError: in.LastError, Removed: removed, At: in.UpdatedAt})
}

// describe names an instance for people: "the desktop of agent Bot" / "the shared desktop of alice".
func (m *Manager) describe(in store.VMInstance) string {
	switch in.Scope {
	case scopeAgent:
		if ag, err := m.st.Agent(in.AgentID); err == nil {
			return fmt.Sprintf("the desktop of agent %s", ag.Name)
		}
		return fmt.Sprintf("the desktop of agent %s", in.AgentID)
	case scopeShared:
		if acc, err := m.st.Account(in.AccountID); err == nil {
			return fmt.Sprintf("the shared desktop of %s", acc.Username)
		}
		return fmt.Sprintf("the shared desktop of account %s", in.AccountID)
	case scopeBrowser:
		if ag, err := m.st.Agent(in.AgentID); err == nil {
			return fmt.Sprintf("the browser of agent %s", ag.Name)
		}
		return fmt.Sprintf("the browser of agent %s", in.AgentID)
	case scopeTask:
		name := in.AgentID
		if ag, err := m.st.Agent(in.AgentID); err == nil {
			name = ag.Name
		}
		return fmt.Sprintf("the task desktop of helper %s (agent %s)", in.Name, name)
	default:
		return fmt.Sprintf("fixed desktop %s", in.Name)
	}
}

func (m *Manager) preparedKeys() []string {
	imgs, err := m.st.VMImages(m.node)
	if err != nil {
		return nil
	}
	keys := make([]string, 0, len(imgs))
	for _, i := range imgs {
		keys = append(keys, i.Key)
	}
	return keys
}
