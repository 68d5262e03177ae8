package docker

import (
	"context"
	"fmt"

	"github.com/docker/docker/api/types/volume"

	"cubicle/backend/engine"
)

// EnsureVolume creates the named volume with labels (plus engine.LabelManaged) unless it
// exists already, in which case it is left as it is.
func (c *Client) EnsureVolume(ctx context.Context, name string, labels map[string]string) error {
	op := fmt.Sprintf("ensure volume %q", name)
	if _, err := c.api.VolumeInspect(ctx, name); err == nil {
		return nil
	} else if statusOf(err) != 404 {
		return fail(op, err)
	}
	if _, err := c.api.VolumeCreate(ctx, volume.CreateOptions{Name: name, Labels: engine.ManagedLabels(labels)}); err != nil {
		if _, ierr := c.api.VolumeInspect(ctx, name); ierr == nil {
			return nil // lost a race with another creator: that is the state we wanted
		}
		return fail(op, err)
	}
	return nil
}

// RemoveVolume removes the named volume: fault.ErrNotFound when absent, fault.ErrConflict
// while a container uses it.
func (c *Client) RemoveVolume(ctx context.Context, name string) error {
	if err := c.api.VolumeRemove(ctx, name, false); err != nil {
		return fail(fmt.Sprintf("remove volume %q", name), err)
	}
	return nil
}

// ListVolumes returns the names of the volumes carrying every label in labels.
func (c *Client) ListVolumes(ctx context.Context, labels map[string]string) ([]string, error) {
	resp, err := c.api.VolumeList(ctx, volume.ListOptions{Filters: labelArgs(labels)})
	if err != nil {
		return nil, fail("list volumes", err)
	}
	out := make([]string, 0, len(resp.Volumes))
	for _, v := range resp.Volumes {
		if v != nil && engine.MatchLabels(v.Labels, labels) {
			out = append(out, v.Name)
		}
	}
	return out, nil
}

// VolumePath returns the named volume's mount point on the engine's machine (fault.ErrNotFound
// when the volume is absent). Workspace snapshots read and restore it there when the engine
// runs on this machine.
func (c *Client) VolumePath(ctx context.Context, name string) (string, error) {
	v, err := c.api.VolumeInspect(ctx, name)
	if err != nil {
		return "", fail(fmt.Sprintf("inspect volume %q", name), err)
	}
	return v.Mountpoint, nil
}
