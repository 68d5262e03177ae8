package docker

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/docker/docker/api/types"
	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/volume"

	"cubicle/backend/engine"
	"cubicle/backend/fault"
)

// ContainerStats samples what container id uses now: fault.ErrNotFound when it does not
// exist, fault.ErrConflict when it does not run. The CPU share is measured between two
// consecutive readings of the engine's stats stream (about a second apart), so it does not
// depend on how an engine fills in its "previous" reading.
func (c *Client) ContainerStats(ctx context.Context, id string) (engine.Stats, error) {
	op := fmt.Sprintf("stats of container %q", id)
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	r, err := c.api.ContainerStats(ctx, id, true)
	if err != nil {
		return engine.Stats{}, c.statsFailed(ctx, op, id, err)
	}
	defer r.Body.Close()
	dec := json.NewDecoder(r.Body)
	var first, s container.StatsResponse
	if err := dec.Decode(&first); err != nil || first.Read.IsZero() {
		return engine.Stats{}, c.statsFailed(ctx, op, id, cmp.Or(err, error(fault.Conflict("no reading"))))
	}
	if err := dec.Decode(&s); err != nil || s.Read.IsZero() {
		return engine.Stats{}, c.statsFailed(ctx, op, id, cmp.Or(err, error(fault.Conflict("no reading"))))
	}
	if s.PidsStats.Current == 0 && s.MemoryStats.Usage == 0 {
		return engine.Stats{}, fault.Conflict("%s: the container does not run", op)
	}
	out := engine.Stats{MemoryBytes: s.MemoryStats.Usage, MemoryLimit: s.MemoryStats.Limit, PIDs: s.PidsStats.Current}
	// Memory as `docker stats` shows it: without the page cache the kernel can drop.
	if v, ok := s.MemoryStats.Stats["inactive_file"]; ok && v < out.MemoryBytes {
		out.MemoryBytes -= v
	}
	cpu := float64(s.CPUStats.CPUUsage.TotalUsage) - float64(first.CPUStats.CPUUsage.TotalUsage)
	sys := float64(s.CPUStats.SystemUsage) - float64(first.CPUStats.SystemUsage)
	cpus := float64(s.CPUStats.OnlineCPUs)
	if cpus == 0 {
		cpus = float64(len(s.CPUStats.CPUUsage.PercpuUsage))
	}
	switch {
	case cpu > 0 && sys > 0 && cpus > 0:
		out.CPUPercent = cpu / sys * cpus * 100
	case cpu > 0 && s.Read.After(first.Read): // no system reading: CPU time over wall time
		out.CPUPercent = cpu / float64(s.Read.Sub(first.Read).Nanoseconds()) * 100
	}
	return out, nil
}

// statsFailed classifies a failed stats call by looking at the container.
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
	resp, err := c.api.VolumeList(ctx, volume.ListOptions{Filters: labelArgs(labels)})
	if err != nil {
		return nil, fail("list volumes", err)
	}
	out := make([]engine.Volume, 0, len(resp.Volumes))
	for _, v := range resp.Volumes {
		if v == nil || !engine.MatchLabels(v.Labels, labels) {
			continue
		}
		ev := engine.Volume{Name: v.Name, Labels: maps.Clone(v.Labels)}
		if t, err := time.Parse(time.RFC3339, v.CreatedAt); err == nil {
			ev.CreatedAt = t
		}
		out = append(out, ev)
	}
	return out, nil
}

// VolumeSizes returns the size in bytes of the named volumes (every volume when names is
// empty; -1 when the engine does not say). A volume whose mount point is on this machine is
// measured directly; otherwise the engine measures its volumes.
func (c *Client) VolumeSizes(ctx context.Context, names []string) (map[string]int64, error) {
	out := map[string]int64{}
	if len(names) > 0 {
		local := true
		for _, n := range names {
			v, err := c.api.VolumeInspect(ctx, n)
			if err != nil {
				if statusOf(err) == 404 {
					continue
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
	// The engine's report walks every volume; an engine (Podman's compatible API) fails it when
	// a container disappears meanwhile, which a shared engine does all the time: try again.
	var (
		du  types.DiskUsage
		err error
	)
	for attempt := range 5 {
		if attempt > 0 {
			select {
			case <-ctx.Done():
				return nil, fail("measure volumes", ctx.Err())
			case <-time.After(time.Duration(attempt) * 200 * time.Millisecond):
			}
		}
		if du, err = c.api.DiskUsage(ctx, types.DiskUsageOptions{Types: []types.DiskUsageObject{types.VolumeObject}}); err == nil {
			break
		}
	}
	if err != nil {
		return nil, fail("measure volumes", err)
	}
	for _, v := range du.Volumes {
		if v == nil || (len(names) > 0 && !slices.Contains(names, v.Name)) {
			continue
		}
		size := int64(-1)
		if v.UsageData != nil {
			size = v.UsageData.Size
		}
		out[v.Name] = size
	}
	return out, nil
}
