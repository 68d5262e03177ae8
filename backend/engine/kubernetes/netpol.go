package kubernetes

import (
	"context"
	"maps"
	"net/netip"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"cubicle/backend/deskegress"
	"cubicle/backend/fault"
	"cubicle/backend/store"
)

// networkPolicy is policy p for the Pods in namespace that carry the labels in selector (a
// desktop's Pod on the kubernetes engine), as a Kubernetes NetworkPolicy restricting egress.
// Open gives nil: no policy (delete one that exists). Closed denies all egress. An allow-list
// allows its CIDRs and the addresses its names resolve to now, through lookup — a
// NetworkPolicy cannot name hosts, so it must be generated again when they change — and, when
// it has names, DNS to the cluster's resolver (kube-system, k8s-app=kube-dns). Unlike the
// nftables enforcement, the cluster's resolver then answers every name; only the addresses
// are limited. Refused connections are not reported on a cluster (that needs the CNI's logs).
func networkPolicy(ctx context.Context, name, namespace string, selector map[string]string, p store.EgressPolicy, lookup deskegress.LookupFunc) (*networkingv1.NetworkPolicy, error) {
	r, err := deskegress.Compile(p)
	if err != nil {
		return nil, err
	}
	if r.Mode == deskegress.Open {
		return nil, nil
	}
	np := &networkingv1.NetworkPolicy{
		TypeMeta:   metav1.TypeMeta{APIVersion: "networking.k8s.io/v1", Kind: "NetworkPolicy"},
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace, Labels: map[string]string{"app.kubernetes.io/managed-by": "cubicle"}},
		Spec: networkingv1.NetworkPolicySpec{
			PodSelector: metav1.LabelSelector{MatchLabels: selector},
			PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeEgress},
			Egress:      []networkingv1.NetworkPolicyEgressRule{},
		},
	}
	if r.Mode == deskegress.Closed {
		return np, nil
	}
	if w := r.Wildcards(); len(w) > 0 {
		return nil, fault.Invalid("egress policy: wildcard names (*%s) cannot become a NetworkPolicy: list the names", strings.Join(w, ", *"))
	}
	cidrs := map[string]bool{}
	for _, pr := range r.Prefixes {
		cidrs[pr.String()] = true
	}
	names := r.Names()
	for _, n := range names {
		for _, network := range []string{"ip4", "ip6"} {
			addrs, err := lookup(ctx, network, n)
			if err != nil && len(addrs) == 0 {
				continue // an address family the name does not have
			}
			for _, a := range addrs {
				a = a.Unmap()
				cidrs[netip.PrefixFrom(a, a.BitLen()).String()] = true
			}
		}
	}
	var to []networkingv1.NetworkPolicyPeer
	for _, c := range slices.Sorted(maps.Keys(cidrs)) {
		to = append(to, networkingv1.NetworkPolicyPeer{IPBlock: &networkingv1.IPBlock{CIDR: c}})
	}
	if len(to) > 0 {
		np.Spec.Egress = append(np.Spec.Egress, networkingv1.NetworkPolicyEgressRule{To: to})
	}
	if len(names) > 0 {
		udp, tcp := corev1.ProtocolUDP, corev1.ProtocolTCP
		dns := intstr.FromInt32(53)
		np.Spec.Egress = append(np.Spec.Egress, networkingv1.NetworkPolicyEgressRule{
			To: []networkingv1.NetworkPolicyPeer{{
				NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"kubernetes.io/metadata.name": "kube-system"}},
				PodSelector:       &metav1.LabelSelector{MatchLabels: map[string]string{"k8s-app": "kube-dns"}},
			}},
			Ports: []networkingv1.NetworkPolicyPort{{Protocol: &udp, Port: &dns}, {Protocol: &tcp, Port: &dns}},
		})
	}
	return np, nil
}
