package runner

import (
	"context"
	"maps"
	"net"

	"cubicle/backend/deskegress"
	"cubicle/backend/fault"
	"cubicle/backend/nodeapi"
	"cubicle/backend/store"
	"cubicle/backend/vm"
	"cubicle/runner/wire"
)

// The desktops' egress policies on a runner (docs/egress.md): the server sends them
// (wire.OpSetEgress), the runner keeps them in its own store (so they hold across restarts and
// while the link is down) and enforces them with the same package as the server, in each
// desktop's network namespace on this machine; refusals go to the server on the event stream.
// Where its desktops are a cluster's Pods, a policy is the cluster's object instead (a
// NetworkPolicy per desktop, as on the server's own cluster; refusals are not reported there).

// enforceEgress enforces the egress policy of started desktop in (vm.Config.Egress): its
// agent's own, else the node's. Open where nothing can be enforced is no error; any other
// policy that cannot be enforced fails the start.
func (r *Runner) enforceEgress(ctx context.Context, in store.VMInstance, pid int) error {
	ns, err := r.st.NodeSettings(r.nodeID)
	if err != nil {
		return err
	}
	return r.egress.Enforce(ctx, ns, deskegress.Desktop{InstanceID: in.ID, AgentID: in.AgentID, AccountID: in.AccountID, PID: pid})
}

// enforceClusterEgress enforces the egress policy of desktop in on the cluster it runs on
// (vm.Config.Egress where desktops are a cluster's Pods): the cluster's object, written before
// the Pod starts and again when a policy changes; open removes it.
func (r *Runner) enforceClusterEgress(ctx context.Context, in store.VMInstance, _ int) error {
	ns, err := r.st.NodeSettings(r.nodeID)
	if err != nil {
		return err
	}
	lookup := r.cfg.EgressLookup
	if lookup == nil {
		lookup = net.DefaultResolver.LookupNetIP
	}
	return r.policies.SetEgress(ctx, in.ContainerID, deskegress.Effective(ns, in.AgentID), lookup)
}

// egressBlocked hands a refusal to the server's event streams (deskegress.Config.OnBlocked).
func (r *Runner) egressBlocked(b deskegress.Blocked) {
	r.watch.publish(wire.WatchEvent{Kind: wire.WatchEgressBlocked, Blocked: &wire.EgressBlocked{InstanceID: b.InstanceID,
		AgentID: b.AgentID, AccountID: b.AccountID, Destination: b.Destination, Port: b.Port, Proto: b.Proto, Time: b.Time}})
}

// SetEgress replaces the node's and the agents' egress policies (wire.OpSetEgress) and
// enforces them on the running desktops; a desktop on which that fails is stopped (and the
// server hears it stop on the event stream): the policy was taken either way. A bad policy
// is fault.ErrInvalid and changes nothing.
func (r *Runner) SetEgress(ctx context.Context, a wire.EgressArgs) (nodeapi.NodeSettings, error) {
	if r.egress == nil && r.policies == nil {
		return nodeapi.NodeSettings{}, fault.Conflict("this runner has no engine, or its desktops' cluster cannot take policies: egress policies are not enforced here")
	}
	node, err := normalize(a.Node)
	if err != nil {
		return nodeapi.NodeSettings{}, err
	}
	if r.policies != nil {
		// A cluster's policy lists addresses: a wildcard cannot become one. An agent's own
		// wildcard is kept (it holds on other nodes); its desktops here fail to start with why.
		rules, err := deskegress.Compile(node)
		if err != nil {
			return nodeapi.NodeSettings{}, err
		}
		if w := rules.Wildcards(); rules.Mode == deskegress.AllowList && len(w) > 0 {
			return nodeapi.NodeSettings{}, fault.Invalid("*%s: this runner's desktops run on Kubernetes, where a policy is a NetworkPolicy of addresses: list the names instead of a wildcard", w[0])
		}
	}
	agents := map[string]store.EgressPolicy{}
	for id, p := range a.Agents {
		if agents[id], err = normalize(p); err != nil {
			return nodeapi.NodeSettings{}, fault.Invalid("agent %s: %v", id, err)
		}
	}
	ns, err := r.st.UpdateNodeSettings(r.nodeID, func(ns *store.NodeSettings) error {
		ns.Egress, ns.AgentEgress = node, nil
		if len(agents) > 0 {
			ns.AgentEgress = maps.Clone(agents)
		}
		return nil
	})
	if err != nil {
		return nodeapi.NodeSettings{}, err
	}
	r.log.Info("desktop egress policies set by the server", "mode", node.Mode, "entries", len(node.Allow), "agents", len(agents))
	if err := r.vms.ReapplyEgress(ctx); err != nil {
		r.log.Error("stopped desktops whose new egress policy could not be enforced", "err", err)
	}
	return vm.NodeSettingsView(ns), nil
}

// normalize checks a policy from the wire (the server checked it too).
func normalize(p nodeapi.EgressPolicy) (store.EgressPolicy, error) {
	q, err := deskegress.Normalize(store.EgressPolicy{Mode: p.Mode, Allow: p.Allow})
	if err != nil {
		return q, err
	}
	q.UpdatedBy, q.UpdatedAt = p.UpdatedBy, p.UpdatedAt
	return q, nil
}
