package docker

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/mount"
	"github.com/docker/docker/pkg/stdcopy"
	"github.com/docker/go-units"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"

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
	cfg, host, plat, err := c.configFor(cs)
	if err != nil {
		return engine.ContainerState{}, fmt.Errorf("%s: %w", op, err)
	}
	if cs.Name != "" {
		// Docker answers a clash with 409, Podman's compatible service with a bare 500: look first.
		if _, err := c.api.ContainerInspect(ctx, cs.Name); err == nil {
			return engine.ContainerState{}, fmt.Errorf("%s: %w", op, fault.Exists("a container named %q exists already", cs.Name))
		} else if statusOf(err) != http.StatusNotFound {
			return engine.ContainerState{}, fail(op, err)
		}
	}
	resp, err := c.api.ContainerCreate(ctx, cfg, host, nil, plat, cs.Name)
	if err != nil {
		err = fail(op, err)
		if fault.Class(err) == fault.ErrConflict {
			return engine.ContainerState{}, fmt.Errorf("%s: %w", op, fault.Exists("a container named %q exists already", cs.Name))
		}
		return engine.ContainerState{}, err
	}
	for _, w := range resp.Warnings {
		c.logger.Warn("docker create", "container", cs.Name, "warning", w)
	}
	return c.InspectContainer(ctx, resp.ID)
}

// configFor turns a ContainerSpec into Docker's create configuration with Cubicle's hardening.
func (c *Client) configFor(cs engine.ContainerSpec) (*container.Config, *container.HostConfig, *ocispec.Platform, error) {
	if cs.Image == "" {
		return nil, nil, nil, fault.Invalid("an image is required")
	}
	cfg := &container.Config{
		Image:    cs.Image,
		Labels:   engine.ManagedLabels(cs.Labels),
		Cmd:      cs.Command,
		User:     cs.User,
		Hostname: cs.Hostname,
	}
	for k, v := range cs.Env {
		cfg.Env = append(cfg.Env, k+"="+v)
	}
	if cs.StopTimeout > 0 {
		secs := int((cs.StopTimeout + time.Second - 1) / time.Second)
		cfg.StopTimeout = &secs
	}
	host := &container.HostConfig{
		CapDrop:        []string{"ALL"},
		CapAdd:         engine.NormalizeCaps(cs.CapAdd),
		SecurityOpt:    []string{"no-new-privileges"},
		ReadonlyRootfs: cs.ReadOnlyRootfs,
		ShmSize:        cs.Limits.ShmBytes,
		NetworkMode:    container.NetworkMode(cs.NetworkMode),
	}
	if cs.IDMap != nil {
		return nil, nil, nil, fault.Invalid("Docker maps user ids only daemon-wide (userns-remap), not per container")
	}
	l := cs.Limits
	host.Memory = l.MemoryBytes
	if l.MemoryBytes > 0 {
		host.MemorySwap = l.MemoryBytes // memory+swap = memory: no swap
	}
	host.NanoCPUs = l.NanoCPUs
	if l.PIDs > 0 {
		p := l.PIDs
		host.PidsLimit = &p
	}
	nofile, nproc := engine.ClampRlimits(l, c.limits)
	if nofile > 0 {
		host.Ulimits = append(host.Ulimits, &units.Ulimit{Name: "nofile", Soft: int64(nofile), Hard: int64(nofile)})
	}
	if nproc > 0 {
		host.Ulimits = append(host.Ulimits, &units.Ulimit{Name: "nproc", Soft: int64(nproc), Hard: int64(nproc)})
	}
	for _, m := range cs.Mounts {
		if m.Source == "" || !strings.HasPrefix(m.Target, "/") {
			return nil, nil, nil, fault.Invalid("bind mount %q -> %q: need a host path and an absolute target", m.Source, m.Target)
		}
		host.Mounts = append(host.Mounts, mount.Mount{Type: mount.TypeBind, Source: m.Source, Target: m.Target, ReadOnly: m.ReadOnly})
	}
	for _, v := range cs.Volumes {
		if v.Name == "" || !strings.HasPrefix(v.Target, "/") {
			return nil, nil, nil, fault.Invalid("volume %q -> %q: need a name and an absolute target", v.Name, v.Target)
		}
		host.Mounts = append(host.Mounts, mount.Mount{Type: mount.TypeVolume, Source: v.Name, Target: v.Target})
	}
	var plat *ocispec.Platform
	if cs.Platform != "" {
		f := strings.Split(cs.Platform, "/")
		if len(f) < 2 || len(f) > 3 || f[0] == "" || f[1] == "" {
			return nil, nil, nil, fault.Invalid("platform %q: want os/arch[/variant]", cs.Platform)
		}
		plat = &ocispec.Platform{OS: f[0], Architecture: f[1]}
		if len(f) == 3 {
			plat.Variant = f[2]
		}
	}
	return cfg, host, plat, nil
}

// StartContainer starts id; starting a running container is a no-op. A container that exits
// at once (engine.StartConfirm) is a failed start naming its exit code and last output.
func (c *Client) StartContainer(ctx context.Context, id string) error {
	op, began := fmt.Sprintf("start container %q", id), time.Now()
	if err := c.api.ContainerStart(ctx, id, container.StartOptions{}); err != nil {
		if statusOf(err) == 304 {
			return nil
		}
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
	rc, err := c.api.ContainerLogs(ctx, id, container.LogsOptions{ShowStdout: true, ShowStderr: true, Tail: strconv.Itoa(engine.LogTail)})
	if err != nil {
		return ""
	}
	defer rc.Close()
	var out bytes.Buffer
	if _, err := stdcopy.StdCopy(&out, &out, io.LimitReader(rc, 64<<10)); err != nil && out.Len() == 0 {
		return ""
	}
	return out.String()
}

// StopContainer sends the stop signal and kills the container after timeout (rounded up to
// whole seconds; <= 0 uses the container's own stop timeout). Stopping a stopped container is
// a no-op; a paused one is unpaused first.
func (c *Client) StopContainer(ctx context.Context, id string, timeout time.Duration) error {
	// A paused container is unpaused first: Docker would deliver SIGTERM only after the
	// grace period (its processes are frozen), and Podman's compatible service refuses.
	if st, err := c.InspectContainer(ctx, id); err != nil {
		return err
	} else if st.Paused {
		if err := c.UnpauseContainer(ctx, id); err != nil && !errors.Is(err, fault.ErrConflict) {
			return fmt.Errorf("stop container %q: %w", id, err)
		}
	}
	var opts container.StopOptions
	if timeout > 0 {
		secs := int((timeout + time.Second - 1) / time.Second)
		opts.Timeout = &secs
	}
	if err := c.api.ContainerStop(ctx, id, opts); err != nil {
		if statusOf(err) == 304 {
			return nil
		}
		return fail(fmt.Sprintf("stop container %q", id), err)
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
	if err := c.api.ContainerPause(ctx, id); err != nil {
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
	if err := c.api.ContainerUnpause(ctx, id); err != nil {
		return fail(fmt.Sprintf("unpause container %q", id), err)
	}
	return nil
}

// RemoveContainer removes id (force: even when running). Its named volumes stay. A missing
// container is fault.ErrNotFound; a running one without force fault.ErrConflict.
func (c *Client) RemoveContainer(ctx context.Context, id string, force bool) error {
	if !force {
		// Podman's compatible service answers a running container with 500, Docker with 409.
		st, err := c.InspectContainer(ctx, id)
		if err != nil {
			return err
		}
		if st.Running {
			return fmt.Errorf("remove container %q: %w", id, fault.Conflict("container %q is running: stop it first", id))
		}
	}
	if err := c.api.ContainerRemove(ctx, id, container.RemoveOptions{Force: force}); err != nil {
		return fail(fmt.Sprintf("remove container %q", id), err)
	}
	return nil
}

// InspectContainer describes id (name or id); fault.ErrNotFound when absent.
func (c *Client) InspectContainer(ctx context.Context, id string) (engine.ContainerState, error) {
	d, err := c.api.ContainerInspect(ctx, id)
	if err != nil {
		return engine.ContainerState{}, fail(fmt.Sprintf("inspect container %q", id), err)
	}
	st := engine.ContainerState{ID: d.ID, Name: strings.TrimPrefix(d.Name, "/"), ImageID: d.Image}
	if d.Config != nil {
		st.Image = d.Config.Image
		st.Labels = maps.Clone(d.Config.Labels)
	}
	if d.State != nil {
		st.Paused = d.State.Paused
		st.Running = d.State.Running && !d.State.Paused
		st.Status = string(d.State.Status)
		st.ExitCode = d.State.ExitCode
		st.PID = d.State.Pid
		if t, err := time.Parse(time.RFC3339Nano, d.State.StartedAt); err == nil && t.Year() > 1 {
			st.StartedAt = t
		}
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
	list, err := c.api.ContainerList(ctx, container.ListOptions{All: true, Filters: labelArgs(labels)})
	if err != nil {
		return nil, fail("list containers", err)
	}
	out := make([]engine.ContainerState, 0, len(list))
	for _, s := range list {
		if !engine.MatchLabels(s.Labels, labels) {
			continue
		}
		st := engine.ContainerState{
			ID:      s.ID,
			Image:   s.Image,
			ImageID: s.ImageID,
			Labels:  maps.Clone(s.Labels),
			Status:  string(s.State),
			Running: s.State == container.StateRunning,
			Paused:  s.State == container.StatePaused,
		}
		if len(s.Names) > 0 {
			st.Name = strings.TrimPrefix(s.Names[0], "/")
		}
		out = append(out, st)
	}
	return out, nil
}
