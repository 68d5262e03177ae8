package kubernetes

import (
	"context"

	"cubicle/backend/engine"
	"cubicle/backend/fault"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// ContainerStats is not offered on a cluster: usage lives in the metrics API (metrics-server),
// which a cluster may not run and the Role Cubicle asks for does not cover. The admin view
// shows no CPU and memory for such desktops (fault.ErrUnavailable, logged at debug level).
func (c *Client) ContainerStats(ctx context.Context, id string) (engine.Stats, error) {
	return engine.Stats{}, fault.Unavailable("desktop usage is not measured on a Kubernetes cluster (no metrics API is used)")
}

// VolumeSizes reports every named claim's size as unknown (-1): a claim's capacity is what was
// asked for, not what its files use, and reading usage would need a pod on the volume.
func (c *Client) VolumeSizes(ctx context.Context, names []string) (map[string]int64, error) {
	out := make(map[string]int64, len(names))
	for _, n := range names {
		out[n] = -1
	}
	return out, nil
}

// Volumes describes the claims whose labels satisfy the selector, except those being deleted.
func (c *Client) Volumes(ctx context.Context, labels map[string]string) ([]engine.Volume, error) {
	list, err := c.cs.CoreV1().PersistentVolumeClaims(c.ns).List(ctx, metav1.ListOptions{LabelSelector: selector(labels)})
	if err != nil {
		return nil, c.wrap("list volumes", err)
	}
	var out []engine.Volume
	for _, v := range list.Items {
		l := decodeLabels(v.Labels, v.Annotations)
		if v.DeletionTimestamp == nil && engine.MatchLabels(l, labels) {
			out = append(out, engine.Volume{Name: v.Name, Labels: l, CreatedAt: v.CreationTimestamp.Time})
		}
	}
	return out, nil
}
