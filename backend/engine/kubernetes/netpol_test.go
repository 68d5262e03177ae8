package kubernetes

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"reflect"
	"testing"

	"k8s.io/apimachinery/pkg/util/intstr"

	"cubicle/backend/deskegress"
	"cubicle/backend/fault"
	"cubicle/backend/store"
)

func TestNetworkPolicy(t *testing.T) {
	lookup := func(_ context.Context, network, host string) ([]netip.Addr, error) {
		if host == "svc.test" && network == "ip4" {
			return []netip.Addr{netip.MustParseAddr("203.0.113.7")}, nil
		}
		return nil, &net.DNSError{IsNotFound: true}
	}
	sel := map[string]string{"cubicle.io/container": "abc"}
	np, err := networkPolicy(context.Background(), "egress-abc", "desktops", sel, store.EgressPolicy{Mode: deskegress.Open}, lookup)
	if err != nil || np != nil {
		t.Fatalf("open: %+v %v", np, err)
	}
	np, err = networkPolicy(context.Background(), "egress-abc", "desktops", sel, store.EgressPolicy{Mode: deskegress.Closed}, lookup)
	if err != nil || np.Spec.Egress == nil || len(np.Spec.Egress) != 0 || np.Spec.PolicyTypes[0] != "Egress" || np.Spec.PodSelector.MatchLabels["cubicle.io/container"] != "abc" {
		t.Fatalf("closed: %+v %v", np, err)
	}
	np, err = networkPolicy(context.Background(), "egress-abc", "desktops", sel, store.EgressPolicy{Mode: deskegress.AllowList, Allow: []string{"svc.test", "10.0.0.0/8"}}, lookup)
	if err != nil || len(np.Spec.Egress) != 2 {
		t.Fatalf("allow-list: %+v %v", np, err)
	}
	var cidrs []string
	for _, p := range np.Spec.Egress[0].To {
		cidrs = append(cidrs, p.IPBlock.CIDR)
	}
	if !reflect.DeepEqual(cidrs, []string{"10.0.0.0/8", "203.0.113.7/32"}) || *np.Spec.Egress[1].Ports[0].Port != intOrString53() {
		t.Fatalf("allow-list peers: %v, DNS rule %+v", cidrs, np.Spec.Egress[1])
	}
	if _, err := networkPolicy(context.Background(), "x", "d", sel, store.EgressPolicy{Mode: deskegress.AllowList, Allow: []string{"*.pypi.org"}}, lookup); !errors.Is(err, fault.ErrInvalid) {
		t.Fatalf("a wildcard: %v", err)
	}
}

func intOrString53() intstr.IntOrString { return intstr.FromInt32(53) }
