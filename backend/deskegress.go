package backend

import (
	"cmp"
	"context"
	"errors"
	"net"
	"slices"
	"strings"
	"time"

	"cubicle/backend/api"
	"cubicle/backend/deskegress"
	"cubicle/backend/engine"
	"cubicle/backend/events"
	"cubicle/backend/fault"
	"cubicle/backend/nodeapi"
	"cubicle/backend/nodes"
	"cubicle/backend/store"
	"cubicle/backend/vm"
	"cubicle/runner/wire"
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

// runnerEgressBlocked publishes a refusal a runner's desktop reported (nodes.Config.
// OnEgressBlocked) and keeps it for that runner's Settings card.
func (b *Backend) runnerEgressBlocked(node string, aud events.Audience, x wire.EgressBlocked) {
	b.egressMu.Lock()
	m := b.runnerEgress[node]
	if m == nil {
		if b.runnerEgress == nil {
			b.runnerEgress = map[string]*deskegress.Manager{}
		}
		m = deskegress.New(deskegress.Config{Logger: b.log.With("svc", "egress", "node", node)})
		b.runnerEgress[node] = m
	}
	b.egressMu.Unlock()
	m.Note(deskegress.Blocked{InstanceID: x.InstanceID, AgentID: x.AgentID, AccountID: x.AccountID, Destination: x.Destination,
		Port: x.Port, Proto: x.Proto, Time: x.Time})
	b.Events.Publish(events.DesktopEgressBlocked, aud, events.EgressBlocked{
		NodeID: node, InstanceID: x.InstanceID, AccountID: x.AccountID, AgentID: x.AgentID,
		Destination: x.Destination, Port: x.Port, Proto: x.Proto, Time: x.Time})
}

// runnerRecent is what node's desktops refused since this server started.
func (b *Backend) runnerRecent(node string) []deskegress.Summary {
	b.egressMu.Lock()
	m := b.runnerEgress[node]
	b.egressMu.Unlock()
	if m == nil {
		return []deskegress.Summary{}
	}
	return m.Recent()
}

// enforceKubeEgress enforces the egress policy of desktop in on the cluster it runs on
// (vm.Config.Egress of the kubernetes engine): a NetworkPolicy for its Pod, removed for open.
func (b *Backend) enforceKubeEgress(ctx context.Context, in store.VMInstance, _ int) error {
	eng := b.connectedEngine()
	if eng == nil || eng.Kube == nil {
		return fault.Unavailable("the desktops' cluster is not connected")
	}
	ns, err := b.Store.NodeSettings(in.NodeID)
	if err != nil {
		return err
	}
	lookup := b.cfg.EgressLookup
	if lookup == nil {
		lookup = net.DefaultResolver.LookupNetIP
	}
	return eng.Kube.SetEgress(ctx, in.ContainerID, deskegress.Effective(ns, in.AgentID), lookup)
}

// egressAPI is api.Egress for this node's desktops and the runners'.
type egressAPI struct{ b *Backend }

// EgressView implements api.Egress.
func (e egressAPI) EgressView(ctx context.Context, node string) (api.EgressView, error) {
	b := e.b
	own := b.VMs.NodeID()
	if node == "" {
		node = own
	}
	ns, err := b.Store.NodeSettings(node)
	if err != nil {
		return api.EgressView{}, err
	}
	local, err := b.Store.NodeSettings(own) // the agents' own policies are kept there, for every node
	if err != nil {
		return api.EgressView{}, err
	}
	v := api.EgressView{NodeID: node, Node: ns.Egress, Agents: []api.AgentEgress{}}
	if v.Node.Mode == "" {
		v.Node.Mode = deskegress.Open
	}
	for id, p := range local.AgentEgress {
		a := api.AgentEgress{AgentID: id, Policy: p}
		if ag, err := b.Profiles.Agent(id); err == nil {
			a.AgentName = ag.Name
		}
		v.Agents = append(v.Agents, a)
	}
	slices.SortFunc(v.Agents, func(x, y api.AgentEgress) int {
		return cmp.Or(strings.Compare(x.AgentName, y.AgentName), strings.Compare(x.AgentID, y.AgentID))
	})
	if node != own {
		v.Blocked = b.runnerRecent(node)
		v.Enforcement = e.runnerEnforcement(node)
		return v, nil
	}
	v.Blocked = b.DeskEgress.Recent()
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
		v.Enforcement = "desktops run on Kubernetes: a policy is applied as a NetworkPolicy per desktop, which only a network plugin with NetworkPolicy support enforces; " +
			"names are resolved when it is applied, wildcards cannot be used and refusals are not reported (docs/egress.md)"
	}
	return v, nil
}

// runnerEnforcement is "" when runner node enforces egress policies now, else why not.
func (e egressAPI) runnerEnforcement(node string) string {
	r, err := e.b.Nodes.Node(node)
	if err != nil {
		return err.Error()
	}
	hello, ok := e.b.Nodes.Hello(node)
	switch {
	case !ok:
		return r.Label() + " is not connected: a policy can be changed once it is (it keeps enforcing the last one it got)"
	case !slices.Contains(hello.Capabilities, wire.CapEgress):
		return r.Label() + " does not enforce desktop egress policies (capability " + wire.CapEgress +
			"): update it, or its desktops run on Kubernetes where policies are not enforced yet"
	}
	return ""
}

// runner returns the link of runner node when it can take a policy: connected, with
// wire.CapEgress (fault.ErrConflict saying to update it otherwise).
func (e egressAPI) runner(node string) (*nodes.Remote, error) {
	if _, err := e.b.Store.NodeSettings(node); err != nil {
		return nil, err
	}
	r, err := e.b.Nodes.Node(node)
	if err != nil {
		return nil, err
	}
	if !e.b.Nodes.Connected(node) {
		return nil, fault.Unavailable("%s is not connected: its desktops' egress policy can be changed once it is", r.Label())
	}
	if !r.Supports(wire.CapEgress) {
		return nil, fault.Conflict("%s does not enforce desktop egress policies (capability %s): update it to this server's version (Settings → Runners → Update)",
			r.Label(), wire.CapEgress)
	}
	return r, nil
}

// push sends runner r the node's policy p and the agents' own policies.
func (e egressAPI) push(ctx context.Context, r *nodes.Remote, p store.EgressPolicy) error {
	local, err := e.b.Store.NodeSettings(e.b.VMs.NodeID())
	if err != nil {
		return err
	}
	agents := map[string]nodeapi.EgressPolicy{}
	for id, a := range local.AgentEgress {
		agents[id] = nodeapi.EgressPolicy{Mode: a.Mode, Allow: a.Allow, UpdatedBy: a.UpdatedBy, UpdatedAt: a.UpdatedAt}
	}
	_, err = r.SetEgress(ctx, nodeapi.EgressPolicy{Mode: p.Mode, Allow: p.Allow, UpdatedBy: p.UpdatedBy, UpdatedAt: p.UpdatedAt}, agents)
	return err
}

// enforceable refuses a policy that cannot be enforced where this node's desktops run: on
// Kubernetes a NetworkPolicy cannot name wildcards (it lists addresses).
func (e egressAPI) enforceable(p store.EgressPolicy) error {
	if engine.Kind(e.b.engineInUse.Kind) != engine.Kubernetes || p.Mode != deskegress.AllowList {
		return nil
	}
	for _, a := range p.Allow {
		if strings.HasPrefix(a, "*.") {
			return fault.Invalid("%s: desktops run on Kubernetes, where a policy is a NetworkPolicy of addresses: list the names instead of a wildcard", a)
		}
	}
	return nil
}

// SetNodeEgress implements api.Egress. A runner's policy is sent to it first (it must be
// connected and support it) and saved here once it took it.
func (e egressAPI) SetNodeEgress(ctx context.Context, by, node string, p store.EgressPolicy) (api.EgressView, error) {
	p, err := deskegress.Normalize(p)
	if err != nil {
		return api.EgressView{}, err
	}
	own := node == e.b.VMs.NodeID()
	if own {
		if err := e.enforceable(p); err != nil {
			return api.EgressView{}, err
		}
	}
	p.UpdatedBy, p.UpdatedAt = by, time.Now().UTC()
	if !own {
		r, err := e.runner(node)
		if err != nil {
			return api.EgressView{}, err
		}
		// The runner takes it (and stops a desktop that cannot follow, which the server hears
		// on its event stream) or refuses it whole: then nothing is saved here either.
		if err := e.push(ctx, r, p); err != nil {
			return api.EgressView{}, err
		}
	}
	if _, err := e.b.Store.UpdateNodeSettings(node, func(ns *store.NodeSettings) error {
		ns.Egress = p
		return nil
	}); err != nil {
		return api.EgressView{}, err
	}
	e.b.log.Info("desktop egress policy changed", "node", node, "mode", p.Mode, "entries", len(p.Allow), "by", by)
	if !own {
		return e.EgressView(ctx, node)
	}
	return e.reapply(ctx, node)
}

// SetAgentEgress implements api.Egress. An agent's own policy holds wherever its desktops
// run: it is sent to every connected runner that enforces policies (what fails is in the
// view's problem).
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
	var problems []string
	for _, id := range e.b.Nodes.ConnectedWith(wire.CapEgress) {
		if id == node {
			continue
		}
		r, err := e.b.Nodes.Node(id)
		if err == nil {
			var ns store.NodeSettings
			if ns, err = e.b.Store.NodeSettings(id); err == nil {
				err = e.push(ctx, r, ns.Egress)
			}
		}
		if err != nil {
			problems = append(problems, "runner "+id+": "+err.Error())
		}
	}
	v, err := e.reapply(ctx, node)
	if len(problems) > 0 {
		v.Problem = strings.TrimPrefix(v.Problem+"; "+strings.Join(problems, "; "), "; ")
	}
	return v, err
}

// AllowEgress implements api.Egress.
func (e egressAPI) AllowEgress(ctx context.Context, by, node, agentID, destination string) (api.EgressView, error) {
	entry, err := deskegress.NormalizeEntry(destination)
	if err != nil {
		return api.EgressView{}, err
	}
	own := e.b.VMs.NodeID()
	if node == "" {
		node = own
	}
	local, err := e.b.Store.NodeSettings(own)
	if err != nil {
		return api.EgressView{}, err
	}
	if a, ok := local.AgentEgress[agentID]; ok && agentID != "" {
		if a.Mode != deskegress.AllowList {
			return api.EgressView{}, fault.Conflict("the agent's own egress policy is %q: switch it to \"allow-list\" to allow single destinations", a.Mode)
		}
		a.Allow = append(slices.Clone(a.Allow), entry)
		if _, err := e.SetAgentEgress(ctx, by, agentID, &a); err != nil {
			return api.EgressView{}, err
		}
		return e.EgressView(ctx, node)
	}
	ns, err := e.b.Store.NodeSettings(node)
	if err != nil {
		return api.EgressView{}, err
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

// reapply enforces the saved policies on this node's running desktops; the view says what
// failed.
func (e egressAPI) reapply(ctx context.Context, node string) (api.EgressView, error) {
	rerr := e.b.VMs.ReapplyEgress(ctx)
	v, err := e.EgressView(ctx, node)
	if rerr != nil {
		v.Problem = "stopped desktops whose new policy could not be enforced: " + rerr.Error()
	}
	return v, err
}

var _ api.Egress = egressAPI{}
