package podman

import (
	"context"
	"fmt"

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
	list, err := volumes.List(c.ctx(ctx), opts)
	if err != nil {
		return nil, fail("list volumes", err)
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
