package backend

import (
	"cmp"
	"context"
	"errors"
	"slices"
	"strings"
	"time"

	"cubicle/backend/api"
	"cubicle/backend/deskegress"
	"cubicle/backend/engine"
	"cubicle/backend/events"
	"cubicle/backend/fault"
	"cubicle/backend/store"
	"cubicle/backend/vm"
)

// egressBlocked publishes a refusal of a desktop's egress policy (deskegress.Config.OnBlocked).
func (b *Backend) egressBlocked(x deskegress.Blocked) {
	b.Events.Publish(events.DesktopEgressBlocked, events.ForAccount(x.AccountID, true), events.EgressBlocked{
		NodeID: b.nodeID(), InstanceID: x.InstanceID, AccountID: x.AccountID, AgentID: x.AgentID,
		Destination: x.Destination, Port: x.Port, Proto: x.Proto, Time: x.Time})
}

// enforceEgress enforces the egress policy of started desktop in (vm.Config.Egress): its
// agent's own, else the node's. Open where nothing can be enforced is no error; any other
// policy that cannot be enforced fails the start.
func (b *Backend) enforceEgress(ctx context.Context, in store.VMInstance, pid int) error {
	ns, err := b.Store.NodeSettings(in.NodeID)
	if err != nil {
		return err
	}
	p := deskegress.Effective(ns, in.AgentID)
	err = b.DeskEgress.Apply(ctx, deskegress.Desktop{InstanceID: in.ID, AgentID: in.AgentID, AccountID: in.AccountID, PID: pid}, p)
	if err != nil && errors.Is(err, fault.ErrUnavailable) && (p.Mode == "" || p.Mode == deskegress.Open) {
		return nil
	}
	return err
}

// egressAPI is api.Egress for this node's desktops.
type egressAPI struct{ b *Backend }

// EgressView implements api.Egress.
func (e egressAPI) EgressView(ctx context.Context) (api.EgressView, error) {
	b := e.b
	node := b.VMs.NodeID()
	ns, err := b.Store.NodeSettings(node)
	if err != nil {
		return api.EgressView{}, err
	}
	v := api.EgressView{NodeID: node, Node: ns.Egress, Agents: []api.AgentEgress{}, Blocked: b.DeskEgress.Recent()}
	if v.Node.Mode == "" {
		v.Node.Mode = deskegress.Open
	}
	for id, p := range ns.AgentEgress {
		a := api.AgentEgress{AgentID: id, Policy: p}
		if ag, err := b.Profiles.Agent(id); err == nil {
			a.AgentName = ag.Name
		}
		v.Agents = append(v.Agents, a)
	}
	slices.SortFunc(v.Agents, func(x, y api.AgentEgress) int {
		return cmp.Or(strings.Compare(x.AgentName, y.AgentName), strings.Compare(x.AgentID, y.AgentID))
	})
	eng, problem := b.connectedEngine(), ""
	if eng == nil {
		_, problem = b.engineNamed()
	}
	switch {
	case eng == nil && problem == vm.ErrConnecting:
		v.Enforcement = vm.ErrConnecting
	case eng == nil:
		v.Enforcement = "no container engine on this node"
	case eng.Kube != nil:
		v.Enforcement = "desktops run on Kubernetes, where egress policies are not enforced yet (docs/egress.md): only open can be saved"
	}
	return v, nil
}

// localNode refuses a node other than this server's own: policies are enforced by the node
// whose engine runs the desktops, and runners do not take them yet.
func (e egressAPI) localNode(node string) error {
	if node != e.b.VMs.NodeID() {
		if _, err := e.b.Store.NodeSettings(node); err != nil {
			return err
		}
		return fault.Conflict("egress policies are enforced on this server's own desktops (node %q) only; runner %q does not take them yet", e.b.VMs.NodeID(), node)
	}
	return nil
}

// enforceable refuses a policy other than open where desktops run on Kubernetes: the
// NetworkPolicy is generated (deskegress.NetworkPolicy) but the engine does not apply it yet.
func (e egressAPI) enforceable(p store.EgressPolicy) error {
	if p.Mode != deskegress.Open && engine.Kind(e.b.engineInUse.Kind) == engine.Kubernetes {
		return fault.Conflict("egress policies are not enforced on Kubernetes desktops yet (docs/egress.md): only \"open\" can be saved here")
	}
	return nil
}

// SetNodeEgress implements api.Egress.
func (e egressAPI) SetNodeEgress(ctx context.Context, by, node string, p store.EgressPolicy) (api.EgressView, error) {
	if err := e.localNode(node); err != nil {
		return api.EgressView{}, err
	}
	p, err := deskegress.Normalize(p)
	if err != nil {
		return api.EgressView{}, err
	}
	if err := e.enforceable(p); err != nil {
		return api.EgressView{}, err
	}
	p.UpdatedBy, p.UpdatedAt = by, time.Now().UTC()
	if _, err := e.b.Store.UpdateNodeSettings(node, func(ns *store.NodeSettings) error {
		ns.Egress = p
		return nil
	}); err != nil {
		return api.EgressView{}, err
	}
	e.b.log.Info("desktop egress policy changed", "node", node, "mode", p.Mode, "entries", len(p.Allow), "by", by)
	return e.reapply(ctx)
}

// SetAgentEgress implements api.Egress.
func (e egressAPI) SetAgentEgress(ctx context.Context, by, agentID string, p *store.EgressPolicy) (api.EgressView, error) {
	if _, err := e.b.Profiles.Agent(agentID); err != nil {
		return api.EgressView{}, err
	}
	var pol store.EgressPolicy
	if p != nil {
		var err error
		if pol, err = deskegress.Normalize(*p); err != nil {
			return api.EgressView{}, err
		}
		if err := e.enforceable(pol); err != nil {
			return api.EgressView{}, err
		}
		pol.UpdatedBy, pol.UpdatedAt = by, time.Now().UTC()
	}
	node := e.b.VMs.NodeID()
	if _, err := e.b.Store.UpdateNodeSettings(node, func(ns *store.NodeSettings) error {
		if p == nil {
			delete(ns.AgentEgress, agentID)
			return nil
		}
		if ns.AgentEgress == nil {
			ns.AgentEgress = map[string]store.EgressPolicy{}
		}
		ns.AgentEgress[agentID] = pol
		return nil
	}); err != nil {
		return api.EgressView{}, err
	}
	e.b.log.Info("agent's desktop egress policy changed", "agent", agentID, "mode", pol.Mode, "inherit", p == nil, "by", by)
	return e.reapply(ctx)
}

// AllowEgress implements api.Egress.
func (e egressAPI) AllowEgress(ctx context.Context, by, agentID, destination string) (api.EgressView, error) {
	entry, err := deskegress.NormalizeEntry(destination)
	if err != nil {
		return api.EgressView{}, err
	}
	node := e.b.VMs.NodeID()
	ns, err := e.b.Store.NodeSettings(node)
	if err != nil {
		return api.EgressView{}, err
	}
	if own, ok := ns.AgentEgress[agentID]; ok && agentID != "" {
		if own.Mode != deskegress.AllowList {
			return api.EgressView{}, fault.Conflict("the agent's own egress policy is %q: switch it to \"allow-list\" to allow single destinations", own.Mode)
		}
		own.Allow = append(slices.Clone(own.Allow), entry)
		return e.SetAgentEgress(ctx, by, agentID, &own)
	}
	p := ns.Egress
	switch p.Mode {
	case deskegress.AllowList:
	case deskegress.Closed:
		p.Mode = deskegress.AllowList // closed but for this one destination
	default:
		return api.EgressView{}, fault.Conflict("the node's egress policy is open: nothing is refused, nothing to allow")
	}
	p.Allow = append(slices.Clone(p.Allow), entry)
	return e.SetNodeEgress(ctx, by, node, p)
}

// reapply enforces the saved policies on the running desktops; the view says what failed.
func (e egressAPI) reapply(ctx context.Context) (api.EgressView, error) {
	rerr := e.b.VMs.ReapplyEgress(ctx)
	v, err := e.EgressView(ctx)
	if rerr != nil {
		v.Problem = "stopped desktops whose new policy could not be enforced: " + rerr.Error()
	}
	return v, err
}

var _ api.Egress = egressAPI{}
