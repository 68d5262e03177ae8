package backend

import (
	"errors"
	"strings"
	"testing"

	"cubicle/backend/agent"
	"cubicle/backend/deskegress"
	"cubicle/backend/fault"
	"cubicle/backend/store"
)

// TestKubernetesDesktopEgress (issue 26): on the kubernetes engine a desktop's egress policy is
// a NetworkPolicy the cluster holds, through the real Backend and the admin's API: a closed node
// policy is in place when a chat's /shell creates the desktop's Pod (deny-all egress, selecting
// that Pod); an allow-list replaces it on the running desktop; open removes it; a wildcard is
// refused with what to write and changes nothing. Whether packets are dropped is the cluster
// network plugin's business (the test cluster's bridge plugin does not enforce policies).
func TestKubernetesDesktopEgress(t *testing.T) {
	e := newKubeEnv(t)
	b, ctx := e.b, e.ctx
	eg := b.Egress
	node := b.VMs.NodeID()
	if _, err := eg.SetNodeEgress(ctx, e.admin, node, store.EgressPolicy{Mode: deskegress.Closed}); err != nil {
		t.Fatal(err)
	}
	if r := e.shell(t, "eg1", "echo up"); r[0] != agent.StateSuccess {
		t.Fatalf("/shell: %v", r)
	}
	inst, err := instanceOf(b, e.admin, e.agent)
	if err != nil {
		t.Fatal(err)
	}
	kube := b.connectedEngine().Kube
	np, err := kube.EgressPolicy(ctx, inst.ContainerID)
	if err != nil || np == nil || len(np.Spec.Egress) != 0 || np.Spec.PodSelector.MatchLabels["cubicle.io/container"] != inst.ContainerID {
		t.Fatalf("closed: the desktop's NetworkPolicy %+v, %v", np, err)
	}
	if _, err := eg.SetNodeEgress(ctx, e.admin, node, store.EgressPolicy{Mode: deskegress.AllowList, Allow: []string{"10.1.2.0/24"}}); err != nil {
		t.Fatal(err)
	}
	np, err = kube.EgressPolicy(ctx, inst.ContainerID)
	if err != nil || np == nil || len(np.Spec.Egress) != 1 || np.Spec.Egress[0].To[0].IPBlock.CIDR != "10.1.2.0/24" {
		t.Fatalf("allow-list on the running desktop: %+v, %v", np, err)
	}
	if _, err := eg.SetNodeEgress(ctx, e.admin, node, store.EgressPolicy{Mode: deskegress.AllowList, Allow: []string{"*.example.com"}}); !errors.Is(err, fault.ErrInvalid) || !strings.Contains(err.Error(), "list the names") {
		t.Fatalf("a wildcard on a cluster: %v", err)
	}
	if ns, _ := b.Store.NodeSettings(node); len(ns.Egress.Allow) != 1 || ns.Egress.Allow[0] != "10.1.2.0/24" {
		t.Fatalf("the refused policy changed the saved one: %+v", ns.Egress)
	}
	if _, err := eg.SetNodeEgress(ctx, e.admin, node, store.EgressPolicy{Mode: deskegress.Open}); err != nil {
		t.Fatal(err)
	}
	if np, err := kube.EgressPolicy(ctx, inst.ContainerID); err != nil || np != nil {
		t.Fatalf("open left a NetworkPolicy: %+v, %v", np, err)
	}
}
