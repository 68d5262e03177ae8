package kubernetes_test

import (
	"context"
	"errors"
	"net/netip"
	"slices"
	"testing"
	"time"

	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"cubicle/backend/deskegress"
	"cubicle/backend/engine"
	"cubicle/backend/engine/kubernetes"
	"cubicle/backend/engine/kubernetes/kubetest"
	"cubicle/backend/fault"
	"cubicle/backend/store"
)

// TestEgressNetworkPolicy (issue 26): a desktop's egress policy on the cluster, as Cubicle's
// own user (docs/kubernetes-rbac.yaml). An allow-list becomes a NetworkPolicy named like the
// container, selecting its Pod (the Pod the start creates carries the label), owned by the
// container's record, with the CIDRs, the addresses the names resolve to and DNS to the
// cluster's resolver; closed replaces it with a deny-all; a wildcard is refused and changes
// nothing; open deletes it; removing the container deletes it. Whether the cluster enforces it
// depends on its network plugin (the test cluster's bridge plugin does not): that is not
// tested here.
func TestEgressNetworkPolicy(t *testing.T) {
	cl := kubetest.Need(t)
	image := kubetest.PushBusybox(t, cl)
	c := kubetest.Connect(t, cl, kubernetes.Options{})
	ctx := kubetest.Context(t, 3*time.Minute)
	name := kubetest.Name(t, "egress")
	if _, err := c.CreateContainer(ctx, engine.ContainerSpec{Name: name, Image: image, Labels: kubetest.Labels(t, nil),
		Command: []string{"/bin/sh", "-c", "exec sleep 3600"}, StopTimeout: time.Second}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.RemoveContainer(context.Background(), name, true) })
	lookup := func(_ context.Context, network, host string) ([]netip.Addr, error) {
		if host == "svc.egress.test" && network == "ip4" {
			return []netip.Addr{netip.MustParseAddr("10.9.9.9")}, nil
		}
		return nil, nil
	}
	allow := store.EgressPolicy{Mode: deskegress.AllowList, Allow: []string{"10.1.2.0/24", "svc.egress.test"}}
	if err := c.SetEgress(ctx, name, allow, lookup); err != nil {
		t.Fatal(err)
	}
	np := get(t, ctx, c, name)
	if np == nil {
		t.Fatal("no NetworkPolicy for an allow-list")
	}
	if np.Spec.PodSelector.MatchLabels["cubicle.io/container"] != name || !slices.Equal(np.Spec.PolicyTypes, []networkingv1.PolicyType{networkingv1.PolicyTypeEgress}) {
		t.Fatalf("selector and types: %+v", np.Spec)
	}
	if len(np.OwnerReferences) != 1 || np.OwnerReferences[0].Kind != "ConfigMap" || np.OwnerReferences[0].Name != name {
		t.Fatalf("owner: %+v", np.OwnerReferences)
	}
	var cidrs []string
	dns := false
	for _, r := range np.Spec.Egress {
		for _, to := range r.To {
			if to.IPBlock != nil {
				cidrs = append(cidrs, to.IPBlock.CIDR)
			}
			if to.PodSelector != nil && to.PodSelector.MatchLabels["k8s-app"] == "kube-dns" && len(r.Ports) == 2 {
				dns = true
			}
		}
	}
	if !slices.Equal(cidrs, []string{"10.1.2.0/24", "10.9.9.9/32"}) || !dns {
		t.Fatalf("egress rules: %v, DNS %v (%+v)", cidrs, dns, np.Spec.Egress)
	}
	// The Pod the start creates is the one selected.
	if err := c.StartContainer(ctx, name); err != nil {
		t.Fatal(err)
	}
	pods, err := cl.Clientset(t).CoreV1().Pods(cl.Namespace).List(ctx, metav1.ListOptions{LabelSelector: metav1.FormatLabelSelector(&np.Spec.PodSelector)})
	if err != nil || len(pods.Items) != 1 || pods.Items[0].Name != name {
		t.Fatalf("pods the policy selects: %v %v", pods, err)
	}
	// Closed: the same object, now denying all egress.
	if err := c.SetEgress(ctx, name, store.EgressPolicy{Mode: deskegress.Closed}, lookup); err != nil {
		t.Fatal(err)
	}
	closed := get(t, ctx, c, name)
	if closed == nil || closed.UID != np.UID || len(closed.Spec.Egress) != 0 || len(closed.Spec.PolicyTypes) != 1 {
		t.Fatalf("closed: %+v", closed)
	}
	// A wildcard cannot become a NetworkPolicy: refused, nothing changed.
	err = c.SetEgress(ctx, name, store.EgressPolicy{Mode: deskegress.AllowList, Allow: []string{"*.example.com"}}, lookup)
	if !errors.Is(err, fault.ErrInvalid) {
		t.Fatalf("wildcard: %v", err)
	}
	if again := get(t, ctx, c, name); again == nil || again.ResourceVersion != closed.ResourceVersion {
		t.Fatalf("the refused policy changed the object: %+v", again)
	}
	// Open removes it; a policy again, then removing the container removes it too.
	if err := c.SetEgress(ctx, name, store.EgressPolicy{Mode: deskegress.Open}, lookup); err != nil {
		t.Fatal(err)
	}
	if get(t, ctx, c, name) != nil {
		t.Fatal("open left a NetworkPolicy")
	}
	if err := c.SetEgress(ctx, name, store.EgressPolicy{Mode: deskegress.Closed}, lookup); err != nil {
		t.Fatal(err)
	}
	if err := c.StopContainer(ctx, name, time.Second); err != nil {
		t.Fatal(err)
	}
	if err := c.RemoveContainer(ctx, name, true); err != nil {
		t.Fatal(err)
	}
	if get(t, ctx, c, name) != nil {
		t.Fatal("the container's NetworkPolicy outlived it")
	}
}

func get(t *testing.T, ctx context.Context, c *kubernetes.Client, name string) *networkingv1.NetworkPolicy {
	t.Helper()
	np, err := c.EgressPolicy(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	return np
}
