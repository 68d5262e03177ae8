package podman

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/containers/podman/v5/pkg/bindings/containers"
	"github.com/containers/podman/v5/pkg/bindings/system"
	"github.com/containers/podman/v5/pkg/bindings/volumes"
	"github.com/containers/podman/v5/pkg/domain/entities/types"

	"cubicle/backend/engine"
	"cubicle/backend/fault"
)

// ContainerStats samples what container id uses now (one sample, not a stream):
// fault.ErrNotFound when it does not exist, fault.ErrConflict when it does not run.
func (c *Client) ContainerStats(ctx context.Context, id string) (engine.Stats, error) {
	op := fmt.Sprintf("stats of container %q", id)
	ch, err := containers.Stats(c.ctx(ctx), []string{id}, new(containers.StatsOptions).WithStream(false))
	if err != nil {
		return engine.Stats{}, c.statsFailed(ctx, op, id, err)
	}
	var out engine.Stats
	for r := range ch { // one report (stream off); drained so the reader goroutine ends
		if r.Error != nil {
			err = r.Error
			continue
		}
		for _, s := range r.Stats {
			out = engine.Stats{CPUPercent: s.CPU, MemoryBytes: s.MemUsage, MemoryLimit: s.MemLimit, PIDs: s.PIDs}
		}
	}
	if err != nil {
		return engine.Stats{}, c.statsFailed(ctx, op, id, err)
	}
	if out.MemoryBytes == 0 && out.PIDs == 0 { // Podman reports zeros for a container that does not run
		return engine.Stats{}, fault.Conflict("%s: the container does not run", op)
	}
	return out, nil
}

// statsFailed classifies a failed stats call by looking at the container: Podman's stats
// errors do not always decode (its error field is an interface).
func (c *Client) statsFailed(ctx context.Context, op, id string, err error) error {
	st, ierr := c.InspectContainer(ctx, id)
	switch {
	case errors.Is(ierr, fault.ErrNotFound):
		return ierr
	case ierr == nil && !st.Running:
		return fault.Conflict("%s: the container does not run", op)
	}
	return fail(op, err)
}

// Volumes describes the volumes carrying every label in labels.
func (c *Client) Volumes(ctx context.Context, labels map[string]string) ([]engine.Volume, error) {
	opts := new(volumes.ListOptions)
	if len(labels) > 0 {
		opts.WithFilters(map[string][]string{"label": engine.LabelFilters(labels)})
	}
	list, err := c.listVolumes(ctx, opts)
	if err != nil {
		return nil, err
	}
	out := make([]engine.Volume, 0, len(list))
	for _, v := range list {
		if engine.MatchLabels(v.Labels, labels) {
			out = append(out, engine.Volume{Name: v.Name, Labels: maps.Clone(v.Labels), CreatedAt: v.CreatedAt})
		}
	}
	return out, nil
}

// VolumeSizes returns the size in bytes of the named volumes (every volume when names is
// empty). A volume whose mount point is on this machine is measured directly; otherwise the
// engine measures all its volumes (its disk-usage report walks everything and can take seconds;
// it fails when a container disappears meanwhile, so it is tried up to five times).
func (c *Client) VolumeSizes(ctx context.Context, names []string) (map[string]int64, error) {
	out := map[string]int64{}
	if len(names) > 0 {
		local := true
		for _, n := range names {
			v, err := volumes.Inspect(c.ctx(ctx), n, nil)
			if err != nil {
				if errors.Is(fail("", err), fault.ErrNotFound) {
					continue // not there: no size
				}
				local = false
				break
			}
			size, ok := engine.LocalDirSize(ctx, v.Mountpoint)
			if !ok {
				local = false
				break
			}
			out[n] = size
		}
		if local {
			return out, nil
		}
	}
	var err error
	for attempt := range 5 {
		if attempt > 0 {
			select {
			case <-ctx.Done():
				return nil, fail("measure volumes", ctx.Err())
			case <-time.After(time.Duration(attempt) * 200 * time.Millisecond):
			}
		}
		var df *types.SystemDfReport
		if df, err = system.DiskUsage(c.ctx(ctx), nil); err == nil {
			for _, v := range df.Volumes {
				if v != nil && (len(names) == 0 || slices.Contains(names, v.VolumeName)) {
					out[v.VolumeName] = v.Size
				}
			}
			return out, nil
		}
	}
	return nil, fail("measure volumes", err)
}
