package podman

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/containers/podman/v5/pkg/bindings/volumes"
	"github.com/containers/podman/v5/pkg/domain/entities/types"

	"cubicle/backend/engine"
)

// EnsureVolume creates the named volume with labels (plus engine.LabelManaged) unless it
// exists already, in which case it is left as it is.
func (c *Client) EnsureVolume(ctx context.Context, name string, labels map[string]string) error {
	op := fmt.Sprintf("ensure volume %q", name)
	ok, err := volumes.Exists(c.ctx(ctx), name, nil)
	if err != nil {
		return fail(op, err)
	}
	if ok {
		return nil
	}
	_, err = volumes.Create(c.ctx(ctx), types.VolumeCreateOptions{Name: name, Label: engine.ManagedLabels(labels)}, nil)
	if err != nil {
		// Lost a race with another creator: that is the state we wanted.
		if ok, xerr := volumes.Exists(c.ctx(ctx), name, nil); xerr == nil && ok {
			return nil
		}
		return fail(op, err)
	}
	return nil
}

// RemoveVolume removes the named volume: fault.ErrNotFound when absent, fault.ErrConflict
// while a container uses it.
func (c *Client) RemoveVolume(ctx context.Context, name string) error {
	if err := volumes.Remove(c.ctx(ctx), name, nil); err != nil {
		return fail(fmt.Sprintf("remove volume %q", name), err)
	}
	return nil
}

// ListVolumes returns the names of the volumes carrying every label in labels.
func (c *Client) ListVolumes(ctx context.Context, labels map[string]string) ([]string, error) {
	opts := new(volumes.ListOptions)
	if len(labels) > 0 {
		opts.WithFilters(map[string][]string{"label": engine.LabelFilters(labels)})
	}
	list, err := c.listVolumes(ctx, opts)
	if err != nil {
		return nil, err
	}
	out := make([]string, 0, len(list))
	for _, v := range list {
		if engine.MatchLabels(v.Labels, labels) {
			out = append(out, v.Name)
		}
	}
	return out, nil
}

// VolumePath returns the named volume's mount point on the engine's machine (fault.ErrNotFound
// when the volume is absent). Workspace snapshots read and restore it there when the engine
// runs on this machine.
func (c *Client) VolumePath(ctx context.Context, name string) (string, error) {
	v, err := volumes.Inspect(c.ctx(ctx), name, nil)
	if err != nil {
		return "", fail(fmt.Sprintf("inspect volume %q", name), err)
	}
	return v.Mountpoint, nil
}

// listVolumes lists volumes, trying again when the listing raced a removal: Podman inspects
// each volume it lists and fails the whole list with a 500 "no such volume" when one was
// removed in between (seen in CI: housekeeping listed while a test removed its desktop).
func (c *Client) listVolumes(ctx context.Context, opts *volumes.ListOptions) ([]*types.VolumeListReport, error) {
	for attempt := 0; ; attempt++ {
		list, err := volumes.List(c.ctx(ctx), opts)
		if err == nil {
			return list, nil
		}
		if attempt == 4 || !strings.Contains(err.Error(), "no such volume") {
			return nil, fail("list volumes", err)
		}
		select {
		case <-ctx.Done():
			return nil, fail("list volumes", ctx.Err())
		case <-time.After(time.Duration(attempt+1) * 50 * time.Millisecond):
		}
	}
}
