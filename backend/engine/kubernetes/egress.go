package kubernetes

import (
	"context"
	"errors"
	"fmt"

	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"cubicle/backend/deskegress"
	"cubicle/backend/fault"
	"cubicle/backend/store"
)

// SetEgress enforces egress policy p on container id's desktop as a NetworkPolicy
// (networkPolicy in netpol.go, docs/egress.md) with the container's name, selecting its Pod by
// the container label and owned by the container's record, so that it is removed with the
// container; it is created, or replaced when it exists. Open deletes it. lookup resolves the
// allow-list's names (their addresses now). Whether the cluster enforces it is its network
// plugin's business: a plugin without NetworkPolicy support accepts the object and ignores it.
func (c *Client) SetEgress(ctx context.Context, id string, p store.EgressPolicy, lookup deskegress.LookupFunc) error {
	op := fmt.Sprintf("egress policy of container %q", id)
	cm, err := c.record(ctx, op, id)
	if err != nil {
		return err
	}
	np, err := networkPolicy(ctx, id, c.ns, map[string]string{labelContainer: id}, p, lookup)
	if err != nil {
		return err
	}
	api := c.netpol.NetworkPolicies(c.ns)
	if np == nil {
		err := api.Delete(ctx, id, metav1.DeleteOptions{})
		if err = c.wrap(op, err); err != nil && !errors.Is(err, fault.ErrNotFound) {
			return err
		}
		return nil
	}
	np.OwnerReferences = []metav1.OwnerReference{{APIVersion: "v1", Kind: "ConfigMap", Name: cm.Name, UID: cm.UID}}
	cur, err := api.Get(ctx, id, metav1.GetOptions{})
	switch err = c.wrap(op, err); {
	case errors.Is(err, fault.ErrNotFound):
		_, err = api.Create(ctx, np, metav1.CreateOptions{})
		return c.wrap(op, err)
	case err != nil:
		return err
	}
	np.ResourceVersion = cur.ResourceVersion
	_, err = api.Update(ctx, np, metav1.UpdateOptions{})
	return c.wrap(op, err)
}

// EgressPolicy returns the NetworkPolicy of container id (nil when it has none).
func (c *Client) EgressPolicy(ctx context.Context, id string) (*networkingv1.NetworkPolicy, error) {
	np, err := c.netpol.NetworkPolicies(c.ns).Get(ctx, id, metav1.GetOptions{})
	if err = c.wrap(fmt.Sprintf("egress policy of container %q", id), err); errors.Is(err, fault.ErrNotFound) {
		return nil, nil
	}
	return np, err
}
