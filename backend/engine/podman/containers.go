package podman

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"strconv"
	"strings"
	"time"

	nettypes "github.com/containers/common/libnetwork/types"
	"github.com/containers/podman/v5/pkg/bindings/containers"
	"github.com/containers/podman/v5/pkg/bindings/images"
	"github.com/containers/podman/v5/pkg/specgen"
	"github.com/containers/storage/pkg/idtools"
	storagetypes "github.com/containers/storage/types"
	spec "github.com/opencontainers/runtime-spec/specs-go"

	"cubicle/backend/engine"
	"cubicle/backend/fault"
)

// CreateContainer creates (does not start) a hardened container from spec: every capability
// dropped except spec.CapAdd, no-new-privileges, the limits of spec.Limits with RLIMIT_NOFILE
// and RLIMIT_NPROC clamped to the host's hard limits, engine.LabelManaged="true", bind mounts
// only from spec.Mounts and named volumes only from spec.Volumes. A name in use is
// fault.ErrExists; a missing image fault.ErrNotFound.
func (c *Client) CreateContainer(ctx context.Context, cs engine.ContainerSpec) (engine.ContainerState, error) {
	op := fmt.Sprintf("create container %q", cs.Name)
	s, err := c.specFor(cs)
	if err != nil {
		return engine.ContainerState{}, fmt.Errorf("%s: %w", op, err)
	}
	if cs.Name != "" {
		// The service answers a name clash with a bare 500, so look first rather than parse its text.
		if ok, err := containers.Exists(c.ctx(ctx), cs.Name, nil); err != nil {
			return engine.ContainerState{}, fail(op, err)
		} else if ok {
			return engine.ContainerState{}, fmt.Errorf("%s: %w", op, fault.Exists("a container named %q exists already", cs.Name))
		}
	}
	// Likewise a missing image: the service would answer 500 (or pull it).
	if ok, err := images.Exists(c.ctx(ctx), cs.Image, nil); err != nil {
		return engine.ContainerState{}, fail(op, err)
	} else if !ok {
		return engine.ContainerState{}, fmt.Errorf("%s: %w", op, fault.NotFound("no image %q: prepare it first", cs.Image))
	}
	resp, err := containers.CreateWithSpec(c.ctx(ctx), s, nil)
	if err != nil {
		return engine.ContainerState{}, fail(op, err)
	}
	for _, w := range resp.Warnings {
		c.logger.Warn("podman create", "container", cs.Name, "warning", w)
	}
	return c.InspectContainer(ctx, resp.ID)
}

// specFor turns a ContainerSpec into a Podman spec generator with Cubicle's hardening.
func (c *Client) specFor(cs engine.ContainerSpec) (*specgen.SpecGenerator, error) {
	if cs.Image == "" {
		return nil, fault.Invalid("an image is required")
	}
	s := specgen.NewSpecGenerator(cs.Image, false)
	s.Name = cs.Name
	s.Labels = engine.ManagedLabels(cs.Labels)
	s.Env = maps.Clone(cs.Env)
	s.Command = cs.Command
	s.User = cs.User
	s.Hostname = cs.Hostname
	s.CapDrop = []string{"ALL"}
	s.CapAdd = engine.NormalizeCaps(cs.CapAdd)
	yes := true
	s.NoNewPrivileges = &yes
	if cs.ReadOnlyRootfs {
		s.ReadOnlyFilesystem = &yes
	}

	res := &spec.LinuxResources{}
	l := cs.Limits
	if l.MemoryBytes > 0 {
		m := l.MemoryBytes
		swap := l.MemoryBytes // memory+swap = memory: no swap
		res.Memory = &spec.LinuxMemory{Limit: &m, Swap: &swap}
	}
	if l.NanoCPUs > 0 {
		period := uint64(100000)
		quota := l.NanoCPUs * int64(period) / 1e9
		res.CPU = &spec.LinuxCPU{Period: &period, Quota: &quota}
	}
	if l.PIDs > 0 {
		res.Pids = &spec.LinuxPids{Limit: l.PIDs}
	}
	if res.Memory != nil || res.CPU != nil || res.Pids != nil {
		s.ResourceLimits = res
	}
	if l.ShmBytes > 0 {
		shm := l.ShmBytes
		s.ShmSize = &shm
	}
	nofile, nproc := engine.ClampRlimits(l, c.limits)
	if nofile > 0 {
		s.Rlimits = append(s.Rlimits, spec.POSIXRlimit{Type: "nofile", Hard: nofile, Soft: nofile})
	}
	if nproc > 0 {
		s.Rlimits = append(s.Rlimits, spec.POSIXRlimit{Type: "nproc", Hard: nproc, Soft: nproc})
	}

	for _, m := range cs.Mounts {
		if m.Source == "" || !strings.HasPrefix(m.Target, "/") {
			return nil, fault.Invalid("bind mount %q -> %q: need a host path and an absolute target", m.Source, m.Target)
		}
		mode := "rw"
		if m.ReadOnly {
			mode = "ro"
		}
		s.Mounts = append(s.Mounts, spec.Mount{Type: "bind", Source: m.Source, Destination: m.Target, Options: []string{"rbind", mode}})
	}
	for _, v := range cs.Volumes {
		if v.Name == "" || !strings.HasPrefix(v.Target, "/") {
			return nil, fault.Invalid("volume %q -> %q: need a name and an absolute target", v.Name, v.Target)
		}
		s.Volumes = append(s.Volumes, &specgen.NamedVolume{Name: v.Name, Dest: v.Target})
	}
	if cs.StopTimeout > 0 {
		secs := uint((cs.StopTimeout + time.Second - 1) / time.Second)
		s.StopTimeout = &secs
	}
	switch mode := cs.NetworkMode; mode {
	case "", "default":
	case "none":
		s.NetNS = specgen.Namespace{NSMode: specgen.NoNetwork}
	case "host":
		s.NetNS = specgen.Namespace{NSMode: specgen.Host}
	case "bridge":
		s.NetNS = specgen.Namespace{NSMode: specgen.Bridge}
	default:
		s.NetNS = specgen.Namespace{NSMode: specgen.Bridge}
		s.Networks = map[string]nettypes.PerNetworkOptions{mode: {}}
	}
	if m := cs.IDMap; m != nil {
		if m.HostID <= 0 || m.Size <= 0 {
			return nil, fault.Invalid("id map %+v: need a host id and a size", *m)
		}
		s.UserNS = specgen.Namespace{NSMode: specgen.Private}
		s.IDMappings = &storagetypes.IDMappingOptions{
			UIDMap: []idtools.IDMap{{ContainerID: 0, HostID: m.HostID, Size: m.Size}},
			GIDMap: []idtools.IDMap{{ContainerID: 0, HostID: m.HostID, Size: m.Size}},
		}
	}
	if cs.Platform != "" {
		p, err := parsePlatform(cs.Platform)
		if err != nil {
			return nil, err
		}
		s.ImageOS, s.ImageArch, s.ImageVariant = p.os, p.arch, p.variant
	}
	return s, nil
}

// StartContainer starts id; starting a running container is a no-op. A container that exits
// at once (engine.StartConfirm) is a failed start naming its exit code and last output.
func (c *Client) StartContainer(ctx context.Context, id string) error {
	op, began := fmt.Sprintf("start container %q", id), time.Now()
	if err := containers.Start(c.ctx(ctx), id, nil); err != nil {
		return fail(op, err)
	}
	return engine.ConfirmStart(ctx, op, time.Since(began),
		func(ctx context.Context) (engine.ContainerState, error) { return c.InspectContainer(ctx, id) },
		func(ctx context.Context) string { return c.LastOutput(ctx, id) })
}

// LastOutput is the last engine.LogTail lines container id wrote to stdout and stderr (best
// effort: "" when the engine cannot say).
func (c *Client) LastOutput(ctx context.Context, id string) string {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	out, errs := make(chan string), make(chan string)
	var lines []string
	done := make(chan struct{})
	go func() {
		defer close(done)
		for out != nil || errs != nil {
			select {
			case l, ok := <-out:
				if !ok {
					out = nil
					continue
				}
				lines = append(lines, l)
			case l, ok := <-errs:
				if !ok {
					errs = nil
					continue
				}
				lines = append(lines, l)
			}
		}
	}()
	opts := new(containers.LogOptions).WithStdout(true).WithStderr(true).WithTail(strconv.Itoa(engine.LogTail))
	err := containers.Logs(c.ctx(ctx), id, opts, out, errs)
	close(out)
	close(errs)
	<-done
	if err != nil && len(lines) == 0 {
		return ""
	}
	var b strings.Builder
	for _, l := range lines {
		b.WriteString(l)
		if !strings.HasSuffix(l, "\n") {
			b.WriteByte('\n')
		}
	}
	return b.String()
}

// StopContainer sends the stop signal and kills the container after timeout (rounded up to
// whole seconds; <= 0 uses the container's own stop timeout). Stopping a stopped container is
// a no-op; a paused one is unpaused first (Podman refuses to stop a frozen container).
func (c *Client) StopContainer(ctx context.Context, id string, timeout time.Duration) error {
	op := fmt.Sprintf("stop container %q", id)
	if st, err := c.InspectContainer(ctx, id); err != nil {
		return err
	} else if st.Paused {
		if err := c.UnpauseContainer(ctx, id); err != nil && !errors.Is(err, fault.ErrConflict) {
			return fmt.Errorf("%s: %w", op, err)
		}
	}
	opts := new(containers.StopOptions)
	if timeout > 0 {
		opts.WithTimeout(uint((timeout + time.Second - 1) / time.Second))
	}
	if err := containers.Stop(c.ctx(ctx), id, opts); err != nil {
		return fail(op, err)
	}
	return nil
}

// PauseContainer freezes every process of a running container; fault.ErrConflict when it
// does not run.
func (c *Client) PauseContainer(ctx context.Context, id string) error {
	// Look first: Podman answers a container in the wrong state with a bare 500.
	if st, err := c.InspectContainer(ctx, id); err != nil {
		return err
	} else if !st.Running {
		return fmt.Errorf("pause container %q: %w", id, fault.Conflict("container %q is %s, not running", id, st.Status))
	}
	if err := containers.Pause(c.ctx(ctx), id, nil); err != nil {
		return fail(fmt.Sprintf("pause container %q", id), err)
	}
	return nil
}

// UnpauseContainer thaws a paused container; fault.ErrConflict when it is not paused.
func (c *Client) UnpauseContainer(ctx context.Context, id string) error {
	if st, err := c.InspectContainer(ctx, id); err != nil {
		return err
	} else if !st.Paused {
		return fmt.Errorf("unpause container %q: %w", id, fault.Conflict("container %q is %s, not paused", id, st.Status))
	}
	if err := containers.Unpause(c.ctx(ctx), id, nil); err != nil {
		return fail(fmt.Sprintf("unpause container %q", id), err)
	}
	return nil
}

// RemoveContainer removes id (force: even when running). Its named volumes stay. A missing
// container is fault.ErrNotFound; a running one without force fault.ErrConflict.
func (c *Client) RemoveContainer(ctx context.Context, id string, force bool) error {
	op := fmt.Sprintf("remove container %q", id)
	if !force {
		st, err := c.InspectContainer(ctx, id)
		if err != nil {
			return err
		}
		if st.Running {
			return fmt.Errorf("%s: %w", op, fault.Conflict("container %q is running: stop it first", id))
		}
	}
	// Podman 4.3 may still hold a just-stopped container's mounts (its shm, under a user
	// namespace) for a moment and then answers "device or resource busy": removal is tried
	// again while that lasts (see whileBusy). A container the engine removed in the meantime
	// answers 404: fault.ErrNotFound, which callers removing it take as done.
	err := whileBusy(ctx, removeBusyFor, func() error {
		err := c.removeOnce(ctx, id, force)
		if err != nil && mountBusy(err) {
			c.logger.Debug("a mount of the container is still busy; removing it again", "container", id, "err", err)
		}
		return err
	})
	if err != nil {
		return fail(op, err)
	}
	return nil
}

// removeBusyFor bounds how long a removal is tried again while a mount of the container is
// still busy. The container's cleanup unmounts it when its processes have ended, which on a
// loaded machine has taken longer than the two seconds once allowed here (a helper's task
// desktop, stopped anyway by an administrator, then failed to be removed with a 503).
const removeBusyFor = 30 * time.Second

// whileBusy calls try until it succeeds, fails other than with a busy mount (mountBusy), or
// budget has passed since the first call; it waits 200 ms between calls, doubling up to 2 s.
// It returns try's last error, or ctx's when ctx ends while it waits.
func whileBusy(ctx context.Context, budget time.Duration, try func() error) error {
	start := time.Now()
	wait := 200 * time.Millisecond
	for {
		err := try()
		if err == nil || !mountBusy(err) || time.Since(start) >= budget {
			return err
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(wait):
		}
		wait = min(2*wait, 2*time.Second)
	}
}

func (c *Client) removeOnce(ctx context.Context, id string, force bool) error {
	reps, err := containers.Remove(c.ctx(ctx), id, new(containers.RemoveOptions).WithForce(force))
	if err != nil {
		return err
	}
	for _, r := range reps {
		if r.Err != nil {
			return r.Err
		}
	}
	return nil
}

// mountBusy reports whether the engine refused a removal because a mount of the container is
// still busy (EBUSY, which the engine reports only as text).
func mountBusy(err error) bool {
	return strings.Contains(err.Error(), "device or resource busy")
}

// InspectContainer describes id (name or id); fault.ErrNotFound when absent.
func (c *Client) InspectContainer(ctx context.Context, id string) (engine.ContainerState, error) {
	d, err := containers.Inspect(c.ctx(ctx), id, nil)
	if err != nil {
		return engine.ContainerState{}, fail(fmt.Sprintf("inspect container %q", id), err)
	}
	st := engine.ContainerState{
		ID:      d.ID,
		Name:    strings.TrimPrefix(d.Name, "/"),
		Image:   d.ImageName,
		ImageID: d.Image,
	}
	if d.Config != nil {
		st.Labels = maps.Clone(d.Config.Labels)
	}
	if d.State != nil {
		st.Paused = d.State.Paused || d.State.Status == "paused"
		st.Running = d.State.Running && !st.Paused
		st.Status = d.State.Status
		st.ExitCode = int(d.State.ExitCode)
		st.StartedAt = d.State.StartedAt
		st.PID = d.State.Pid
	}
	for _, m := range d.Mounts {
		switch m.Type {
		case "bind":
			st.Mounts = append(st.Mounts, engine.Mount{Source: m.Source, Target: m.Destination, ReadOnly: !m.RW})
		case "volume":
			st.Volumes = append(st.Volumes, engine.VolumeMount{Name: m.Name, Target: m.Destination})
		}
	}
	return st, nil
}

// ListContainers lists containers, running and stopped, carrying every label in labels.
func (c *Client) ListContainers(ctx context.Context, labels map[string]string) ([]engine.ContainerState, error) {
	opts := new(containers.ListOptions).WithAll(true)
	if len(labels) > 0 {
		opts.WithFilters(map[string][]string{"label": engine.LabelFilters(labels)})
	}
	list, err := containers.List(c.ctx(ctx), opts)
	if err != nil {
		return nil, fail("list containers", err)
	}
	out := make([]engine.ContainerState, 0, len(list))
	for _, lc := range list {
		if !engine.MatchLabels(lc.Labels, labels) {
			continue
		}
		st := engine.ContainerState{
			ID:       lc.ID,
			Image:    lc.Image,
			ImageID:  lc.ImageID,
			Labels:   maps.Clone(lc.Labels),
			Status:   lc.State,
			Running:  lc.State == "running",
			Paused:   lc.State == "paused",
			ExitCode: int(lc.ExitCode),
			PID:      lc.Pid,
		}
		if len(lc.Names) > 0 {
			st.Name = lc.Names[0]
		}
		if lc.StartedAt > 0 {
			st.StartedAt = time.Unix(lc.StartedAt, 0)
		}
		out = append(out, st)
	}
	return out, nil
}
