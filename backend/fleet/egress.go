package fleet

import (
	"cmp"
	"context"
	"errors"
	"log/slog"
	"net"
	"slices"
	"strings"
	"sync"
	"time"

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

// EgressView is what Settings shows of the egress policies of a node (api.EgressView).
type EgressView struct {
	NodeID string             `json:"nodeId"`
	Node   store.EgressPolicy `json:"node"`
	Agents []AgentEgress      `json:"agents"`
	// Blocked are the destinations refused since the server started, the latest first.
	Blocked []deskegress.Summary `json:"blocked"`
	// Enforcement is "" when policies are enforced on this node's desktops, else why not.
	Enforcement string `json:"enforcement,omitempty"`
	// Problem says what went wrong re-applying a changed policy to running desktops (they
	// were stopped).
	Problem string `json:"problem,omitempty"`
}

// AgentEgress is one agent's own policy.
type AgentEgress struct {
	AgentID   string             `json:"agentId"`
	AgentName string             `json:"agentName,omitempty"`
	Policy    store.EgressPolicy `json:"policy"`
}

// EgressStore is where the policies are kept (*store.Store): a node's in its settings, the
// agents' own in the settings of the server's own node, for every node.
type EgressStore interface {
	NodeSettings(node string) (store.NodeSettings, error)
	UpdateNodeSettings(node string, fn func(*store.NodeSettings) error) (store.NodeSettings, error)
}

// EgressAgents names the agents (*profile.Service); an unknown id is fault.ErrNotFound.
type EgressAgents interface {
	Agent(id string) (store.Agent, error)
}

// EgressRunner is one runner's link as the egress policies use it (*nodes.Remote).
type EgressRunner interface {
	// Label names the runner for people.
	Label() string
	// Supports reports whether the link is up and the runner advertised capability c.
	Supports(c string) bool
	// SetEgress hands the runner its node's policy and the agents' own; it takes them whole
	// or refuses them whole.
	SetEgress(ctx context.Context, node nodeapi.EgressPolicy, agents map[string]nodeapi.EgressPolicy) (nodeapi.NodeSettings, error)
}

// EgressRunners is the registry of runners and their links (*nodes.Hub through EgressHub).
// Methods are safe for concurrent use.
type EgressRunners interface {
	// Runner is runner id's link (which may be down); an unknown or revoked id is
	// fault.ErrNotFound or fault.ErrConflict.
	Runner(id string) (EgressRunner, error)
	// Connected reports whether id's link is up; Hello is what it said when it connected.
	Connected(id string) bool
	Hello(id string) (wire.Hello, bool)
	// ConnectedWith are the connected runners advertising capability c, sorted.
	ConnectedWith(c string) []string
}

// EgressHub is the runners' hub as EgressRunners.
type EgressHub struct{ *nodes.Hub }

// Runner implements EgressRunners.
func (h EgressHub) Runner(id string) (EgressRunner, error) {
	r, err := h.Node(id)
	if err != nil {
		return nil, err
	}
	return r, nil
}

// EgressLocal is the server's own node's desktop manager (*vm.Manager).
type EgressLocal interface {
	NodeID() string
	// ReapplyEgress enforces the saved policies again on the running desktops, stopping
	// those on which that fails; it returns what failed.
	ReapplyEgress(ctx context.Context) error
}

// KubeEgress writes the NetworkPolicy of a desktop's Pod (*kubernetes.Client): p for
// desktop id, its names resolved with lookup; none for open.
type KubeEgress interface {
	SetEgress(ctx context.Context, id string, p store.EgressPolicy, lookup deskegress.LookupFunc) error
}

// EgressEngine is the server's own node's container engine as the policies see it.
type EgressEngine struct {
	// Kind is the engine the node was configured with, connected or not.
	Kind engine.Kind
	// Connected says the engine is connected; Problem, when it is not, says why
	// (vm.ErrConnecting while it connects).
	Connected bool
	Problem   string
	// Kube is the connected cluster when the desktops run on Kubernetes, else nil.
	Kube KubeEgress
}

// EgressPublisher is the event bus (*events.Bus).
type EgressPublisher interface {
	Publish(t events.Type, aud events.Audience, data any)
}

var (
	_ EgressStore     = (*store.Store)(nil)
	_ EgressRunner    = (*nodes.Remote)(nil)
	_ EgressRunners   = EgressHub{}
	_ EgressLocal     = (*vm.Manager)(nil)
	_ EgressPublisher = (*events.Bus)(nil)
)

// EgressConfig configures an Egress. Store, Agents, Engine and Events are required.
type EgressConfig struct {
	Store  EgressStore
	Agents EgressAgents
	// Engine reports the state of this node's engine now; it is asked on every call.
	Engine func() EgressEngine
	// Lookup resolves the host names of allow-lists (nil: this machine's resolver).
	Lookup deskegress.LookupFunc
	// Events hears every refusal (events.DesktopEgressBlocked).
	Events EgressPublisher
	Logger *slog.Logger
}

// Egress is the desktops' egress policies on every node (api.Egress): a node's policy and the
// agents' own, saved here and pushed to the runners that enforce them (wire.CapEgress);
// their enforcement on this node's desktops (Enforce, EnforceKube: vm.Config.Egress); the
// refusals this node's desktops and the runners' report, published and kept for the views.
//
// Lifetime: NewEgress builds it with this node's deskegress.Manager; Attach hands it the
// desktop manager and the runners' hub, which are built over its Enforce and RunnerBlocked;
// Close, after the desktop manager's, releases the desktops it enforces. Methods are safe
// for concurrent use.
type Egress struct {
	cfg   EgressConfig
	log   *slog.Logger
	desks *deskegress.Manager // this node's desktops

	// local and runners are attached once, before any desktop starts (Attach).
	local   EgressLocal
	runners EgressRunners

	mu sync.Mutex
	// refused keeps, per runner, the refusals its desktops reported (for Recent only:
	// nothing is enforced through them); guarded by mu.
	refused map[string]*deskegress.Manager
}

// NewEgress builds an Egress; nothing runs in the background.
func NewEgress(cfg EgressConfig) (*Egress, error) {
	if cfg.Store == nil || cfg.Agents == nil || cfg.Engine == nil || cfg.Events == nil {
		return nil, errors.New("fleet: EgressConfig.Store, Agents, Engine and Events are required")
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Lookup == nil {
		cfg.Lookup = net.DefaultResolver.LookupNetIP
	}
	e := &Egress{cfg: cfg, log: cfg.Logger, refused: map[string]*deskegress.Manager{}}
	e.desks = deskegress.New(deskegress.Config{Logger: cfg.Logger, Lookup: cfg.Lookup, OnBlocked: e.localBlocked})
	return e, nil
}

// Attach hands the Egress this node's desktop manager and the runners' registry. It is
// called once, after NewEgress and before the server starts.
func (e *Egress) Attach(local EgressLocal, runners EgressRunners) {
	e.local, e.runners = local, runners
}

// Release stops enforcing the policy of this node's desktop instanceID (it stopped).
func (e *Egress) Release(instanceID string) { e.desks.Release(instanceID) }

// Close releases every desktop of this node; it is called after the desktop manager's Close,
// when no desktop is started any more.
func (e *Egress) Close() error { return e.desks.Close() }

// nodeID is this server's own node.
func (e *Egress) nodeID() string {
	if e.local != nil {
		return e.local.NodeID()
	}
	return nodes.LocalID
}

// localBlocked publishes a refusal of a desktop's egress policy (deskegress.Config.OnBlocked).
func (e *Egress) localBlocked(x deskegress.Blocked) {
	e.cfg.Events.Publish(events.DesktopEgressBlocked, events.ForAccount(x.AccountID, true), events.EgressBlocked{
		NodeID: e.nodeID(), InstanceID: x.InstanceID, AccountID: x.AccountID, AgentID: x.AgentID,
		Destination: x.Destination, Port: x.Port, Proto: x.Proto, Time: x.Time})
}

// Enforce enforces the egress policy of started desktop in on this machine
// (vm.Config.Egress): its agent's own, else the node's. Open where nothing can be enforced
// is no error; any other policy that cannot be enforced fails the start.
func (e *Egress) Enforce(ctx context.Context, in store.VMInstance, pid int) error {
	ns, err := e.cfg.Store.NodeSettings(in.NodeID)
	if err != nil {
		return err
	}
	return e.desks.Enforce(ctx, ns, deskegress.Desktop{InstanceID: in.ID, AgentID: in.AgentID, AccountID: in.AccountID, PID: pid})
}

// EnforceKube enforces the egress policy of desktop in on the cluster it runs on
// (vm.Config.Egress of the kubernetes engine): a NetworkPolicy for its Pod, removed for open.
func (e *Egress) EnforceKube(ctx context.Context, in store.VMInstance, _ int) error {
	eng := e.cfg.Engine()
	if !eng.Connected || eng.Kube == nil {
		return fault.Unavailable("the desktops' cluster is not connected")
	}
	ns, err := e.cfg.Store.NodeSettings(in.NodeID)
	if err != nil {
		return err
	}
	return eng.Kube.SetEgress(ctx, in.ContainerID, deskegress.Effective(ns, in.AgentID), e.cfg.Lookup)
}

// RunnerBlocked publishes a refusal a runner's desktop reported (nodes.Config.
// OnEgressBlocked) and keeps it for that runner's Settings card.
func (e *Egress) RunnerBlocked(node string, aud events.Audience, x wire.EgressBlocked) {
	e.mu.Lock()
	m := e.refused[node]
	if m == nil {
		m = deskegress.New(deskegress.Config{Logger: e.log.With("node", node)})
		e.refused[node] = m
	}
	e.mu.Unlock()
	m.Note(deskegress.Blocked{InstanceID: x.InstanceID, AgentID: x.AgentID, AccountID: x.AccountID, Destination: x.Destination,
		Port: x.Port, Proto: x.Proto, Time: x.Time})
	e.cfg.Events.Publish(events.DesktopEgressBlocked, aud, events.EgressBlocked{
		NodeID: node, InstanceID: x.InstanceID, AccountID: x.AccountID, AgentID: x.AgentID,
		Destination: x.Destination, Port: x.Port, Proto: x.Proto, Time: x.Time})
}

// runnerRecent is what node's desktops refused since this server started.
func (e *Egress) runnerRecent(node string) []deskegress.Summary {
	e.mu.Lock()
	m := e.refused[node]
	e.mu.Unlock()
	if m == nil {
		return []deskegress.Summary{}
	}
	return m.Recent()
}

// EgressView is node's view ("" = this server's own node; a runner's is what the server sent
// it, with the refusals it reported).
func (e *Egress) EgressView(ctx context.Context, node string) (EgressView, error) {
	own := e.nodeID()
	if node == "" {
		node = own
	}
	ns, err := e.cfg.Store.NodeSettings(node)
	if err != nil {
		return EgressView{}, err
	}
	local, err := e.cfg.Store.NodeSettings(own) // the agents' own policies are kept there, for every node
	if err != nil {
		return EgressView{}, err
	}
	v := EgressView{NodeID: node, Node: ns.Egress, Agents: []AgentEgress{}}
	if v.Node.Mode == "" {
		v.Node.Mode = deskegress.Open
	}
	for id, p := range local.AgentEgress {
		a := AgentEgress{AgentID: id, Policy: p}
		if ag, err := e.cfg.Agents.Agent(id); err == nil {
			a.AgentName = ag.Name
		}
		v.Agents = append(v.Agents, a)
	}
	slices.SortFunc(v.Agents, func(x, y AgentEgress) int {
		return cmp.Or(strings.Compare(x.AgentName, y.AgentName), strings.Compare(x.AgentID, y.AgentID))
	})
	if node != own {
		v.Blocked = e.runnerRecent(node)
		v.Enforcement = e.runnerEnforcement(node)
		return v, nil
	}
	v.Blocked = e.desks.Recent()
	switch eng := e.cfg.Engine(); {
	case !eng.Connected && eng.Problem == vm.ErrConnecting:
		v.Enforcement = vm.ErrConnecting
	case !eng.Connected:
		v.Enforcement = "no container engine on this node"
	case eng.Kube != nil:
		v.Enforcement = kubeEnforcement
	}
	return v, nil
}

// runnerEnforcement is "" when runner node enforces egress policies now, else why not.
func (e *Egress) runnerEnforcement(node string) string {
	r, err := e.runners.Runner(node)
	if err != nil {
		return err.Error()
	}
	hello, ok := e.runners.Hello(node)
	switch {
	case !ok:
		return r.Label() + " is not connected: a policy can be changed once it is (it keeps enforcing the last one it got)"
	case !slices.Contains(hello.Capabilities, wire.CapEgress):
		return r.Label() + " does not enforce desktop egress policies (capability " + wire.CapEgress +
			"): update it to this server's version"
	case hello.Engine == string(engine.Kubernetes):
		return kubeEnforcement
	}
	return ""
}

// kubeEnforcement is how a policy holds where desktops run on Kubernetes (this server's own
// cluster or a runner's).
const kubeEnforcement = "desktops run on Kubernetes: a policy is applied as a NetworkPolicy per desktop, which only a network plugin with NetworkPolicy support enforces; " +
	"names are resolved when it is applied, wildcards cannot be used and refusals are not reported (docs/egress.md)"

// runner returns the link of runner node when it can take a policy: connected, with
// wire.CapEgress (fault.ErrConflict saying to update it otherwise).
func (e *Egress) runner(node string) (EgressRunner, error) {
	if _, err := e.cfg.Store.NodeSettings(node); err != nil {
		return nil, err
	}
	r, err := e.runners.Runner(node)
	if err != nil {
		return nil, err
	}
	if !e.runners.Connected(node) {
		return nil, fault.Unavailable("%s is not connected: its desktops' egress policy can be changed once it is", r.Label())
	}
	if !r.Supports(wire.CapEgress) {
		return nil, fault.Conflict("%s does not enforce desktop egress policies (capability %s): update it to this server's version (Settings → Runners → Update)",
			r.Label(), wire.CapEgress)
	}
	return r, nil
}

// push sends runner r the node's policy p and the agents' own policies.
func (e *Egress) push(ctx context.Context, r EgressRunner, p store.EgressPolicy) error {
	local, err := e.cfg.Store.NodeSettings(e.nodeID())
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
func (e *Egress) enforceable(p store.EgressPolicy) error {
	if e.cfg.Engine().Kind != engine.Kubernetes || p.Mode != deskegress.AllowList {
		return nil
	}
	for _, a := range p.Allow {
		if strings.HasPrefix(a, "*.") {
			return fault.Invalid("%s: desktops run on Kubernetes, where a policy is a NetworkPolicy of addresses: list the names instead of a wildcard", a)
		}
	}
	return nil
}

// SetNodeEgress saves node's policy and re-applies it to the running desktops. A runner's
// policy is sent to it first (it must be connected and support it) and saved here once it
// took it.
func (e *Egress) SetNodeEgress(ctx context.Context, by, node string, p store.EgressPolicy) (EgressView, error) {
	p, err := deskegress.Normalize(p)
	if err != nil {
		return EgressView{}, err
	}
	own := node == e.nodeID()
	if own {
		if err := e.enforceable(p); err != nil {
			return EgressView{}, err
		}
	}
	p.UpdatedBy, p.UpdatedAt = by, time.Now().UTC()
	if !own {
		r, err := e.runner(node)
		if err != nil {
			return EgressView{}, err
		}
		// The runner takes it (and stops a desktop that cannot follow, which the server hears
		// on its event stream) or refuses it whole: then nothing is saved here either.
		if err := e.push(ctx, r, p); err != nil {
			return EgressView{}, err
		}
	}
	if _, err := e.cfg.Store.UpdateNodeSettings(node, func(ns *store.NodeSettings) error {
		ns.Egress = p
		return nil
	}); err != nil {
		return EgressView{}, err
	}
	e.log.Info("desktop egress policy changed", "node", node, "mode", p.Mode, "entries", len(p.Allow), "by", by)
	if !own {
		return e.EgressView(ctx, node)
	}
	return e.reapply(ctx, node)
}

// SetAgentEgress saves an agent's own policy (nil: the node's again) and re-applies it. An
// agent's own policy holds wherever its desktops run: it is sent to every connected runner
// that enforces policies (what fails is in the view's problem).
func (e *Egress) SetAgentEgress(ctx context.Context, by, agentID string, p *store.EgressPolicy) (EgressView, error) {
	if _, err := e.cfg.Agents.Agent(agentID); err != nil {
		return EgressView{}, err
	}
	var pol store.EgressPolicy
	if p != nil {
		var err error
		if pol, err = deskegress.Normalize(*p); err != nil {
			return EgressView{}, err
		}
		if err := e.enforceable(pol); err != nil {
			return EgressView{}, err
		}
		pol.UpdatedBy, pol.UpdatedAt = by, time.Now().UTC()
	}
	node := e.nodeID()
	if _, err := e.cfg.Store.UpdateNodeSettings(node, func(ns *store.NodeSettings) error {
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
		return EgressView{}, err
	}
	e.log.Info("agent's desktop egress policy changed", "agent", agentID, "mode", pol.Mode, "inherit", p == nil, "by", by)
	var problems []string
	for _, id := range e.runners.ConnectedWith(wire.CapEgress) {
		if id == node {
			continue
		}
		r, err := e.runners.Runner(id)
		if err == nil {
			var ns store.NodeSettings
			if ns, err = e.cfg.Store.NodeSettings(id); err == nil {
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

// AllowEgress adds destination (a refused address or name) to the allow-list that refused
// it: agentID's own when the agent has one, else node's ("" = this server's own). An open
// policy, or an agent's own that is not an allow-list, is fault.ErrConflict.
func (e *Egress) AllowEgress(ctx context.Context, by, node, agentID, destination string) (EgressView, error) {
	entry, err := deskegress.NormalizeEntry(destination)
	if err != nil {
		return EgressView{}, err
	}
	own := e.nodeID()
	if node == "" {
		node = own
	}
	local, err := e.cfg.Store.NodeSettings(own)
	if err != nil {
		return EgressView{}, err
	}
	if a, ok := local.AgentEgress[agentID]; ok && agentID != "" {
		if a.Mode != deskegress.AllowList {
			return EgressView{}, fault.Conflict("the agent's own egress policy is %q: switch it to \"allow-list\" to allow single destinations", a.Mode)
		}
		a.Allow = append(slices.Clone(a.Allow), entry)
		if _, err := e.SetAgentEgress(ctx, by, agentID, &a); err != nil {
			return EgressView{}, err
		}
		return e.EgressView(ctx, node)
	}
	ns, err := e.cfg.Store.NodeSettings(node)
	if err != nil {
		return EgressView{}, err
	}
	p := ns.Egress
	switch p.Mode {
	case deskegress.AllowList:
	case deskegress.Closed:
		p.Mode = deskegress.AllowList // closed but for this one destination
	default:
		return EgressView{}, fault.Conflict("the node's egress policy is open: nothing is refused, nothing to allow")
	}
	p.Allow = append(slices.Clone(p.Allow), entry)
	return e.SetNodeEgress(ctx, by, node, p)
}

// reapply enforces the saved policies on this node's running desktops; the view says what
// failed.
func (e *Egress) reapply(ctx context.Context, node string) (EgressView, error) {
	rerr := e.local.ReapplyEgress(ctx)
	v, err := e.EgressView(ctx, node)
	if rerr != nil {
		v.Problem = "stopped desktops whose new policy could not be enforced: " + rerr.Error()
	}
	return v, err
}
