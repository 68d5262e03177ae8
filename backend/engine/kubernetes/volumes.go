package kubernetes

import (
	"context"
	"errors"
	"fmt"
	"slices"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"cubicle/backend/engine"
	"cubicle/backend/fault"
)

// EnsureVolume creates the claim name (ReadWriteOnce, Options.VolumeSize, of
// Options.StorageClass) unless it exists. It returns once the claim exists; its volume is
// provisioned by the cluster (at the latest when a Pod first uses it).
func (c *Client) EnsureVolume(ctx context.Context, name string, labels map[string]string) error {
	op := fmt.Sprintf("create volume %q", name)
	if err := checkName("volume", name); err != nil {
		return err
	}
	l, ann := objectLabels(labels)
	pvc := &corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: l, Annotations: ann},
		Spec: corev1.PersistentVolumeClaimSpec{
			AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			Resources:   corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: c.volumeSize}},
		},
	}
	if c.opts.StorageClass != "" {
		pvc.Spec.StorageClassName = ptr(c.opts.StorageClass)
	}
	_, err := c.cs.CoreV1().PersistentVolumeClaims(c.ns).Create(ctx, pvc, metav1.CreateOptions{})
	if err = c.wrap(op, err); !errors.Is(err, fault.ErrExists) {
		return err
	}
	// a claim being deleted (its finalizer waits for the last Pod) cannot be used again
	cur, err := c.cs.CoreV1().PersistentVolumeClaims(c.ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return c.wrap(op, err)
	}
	if cur.DeletionTimestamp != nil {
		return &engine.Error{Op: op, Class: fault.ErrConflict, Err: errors.New("the claim is being deleted; try again once it is gone")}
	}
	return nil
}

// RemoveVolume deletes claim name, and with it (under the usual reclaim policy) its data.
// A claim a Pod of a container still uses is fault.ErrConflict; a missing one
// fault.ErrNotFound.
func (c *Client) RemoveVolume(ctx context.Context, name string) error {
	op := fmt.Sprintf("remove volume %q", name)
	pvc, err := c.cs.CoreV1().PersistentVolumeClaims(c.ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return c.wrap(op, err)
	}
	if pvc.DeletionTimestamp != nil {
		// removed already: the cluster finishes deleting it (as ListVolumes no longer lists it)
		return &engine.Error{Op: op, Class: fault.ErrNotFound, Err: errors.New("the claim is being deleted already")}
	}
	pods, err := c.cs.CoreV1().Pods(c.ns).List(ctx, metav1.ListOptions{LabelSelector: labelContainer})
	if err != nil {
		return c.wrap(op, err)
	}
	for _, p := range pods.Items {
		if p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed {
			continue
		}
		if slices.ContainsFunc(p.Spec.Volumes, func(v corev1.Volume) bool {
			return v.PersistentVolumeClaim != nil && v.PersistentVolumeClaim.ClaimName == name
		}) {
			return &engine.Error{Op: op, Class: fault.ErrConflict, Err: fmt.Errorf("container %s uses it: stop it first", p.Name)}
		}
	}
	err = c.cs.CoreV1().PersistentVolumeClaims(c.ns).Delete(ctx, name, metav1.DeleteOptions{})
	return c.wrap(op, err)
}

// ListVolumes returns the names of the claims whose labels satisfy the selector, except those
// being deleted.
func (c *Client) ListVolumes(ctx context.Context, labels map[string]string) ([]string, error) {
	vols, err := c.Volumes(ctx, labels)
	if err != nil {
		return nil, err
	}
	out := make([]string, 0, len(vols))
	for _, v := range vols {
		out = append(out, v.Name)
	}
	return out, nil
}
