package fleet

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"cubicle/backend/deskegress"
	"cubicle/backend/engine"
	"cubicle/backend/events"
	"cubicle/backend/fault"
	"cubicle/backend/nodeapi"
	"cubicle/backend/store"
	"cubicle/backend/vm"
	"cubicle/internal/testenv"
	"cubicle/runner/wire"
)

// egressStore keeps node settings in memory; a node it does not know is fault.ErrNotFound.
type egressStore struct {
	mu    sync.Mutex
	nodes map[string]store.NodeSettings
}

func (s *egressStore) NodeSettings(node string) (store.NodeSettings, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	ns, ok := s.nodes[node]
	if !ok {
		return store.NodeSettings{}, fault.NotFound("node %s not found", node)
	}
	return ns, nil
}

func (s *egressStore) UpdateNodeSettings(node string, fn func(*store.NodeSettings) error) (store.NodeSettings, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	ns, ok := s.nodes[node]
	if !ok {
		return store.NodeSettings{}, fault.NotFound("node %s not found", node)
	}
	if err := fn(&ns); err != nil {
		return store.NodeSettings{}, err
	}
	s.nodes[node] = ns
	return ns, nil
}

// egressAgents knows the agents by id.
type egressAgents map[string]string

func (a egressAgents) Agent(id string) (store.Agent, error) {
	name, ok := a[id]
	if !ok {
		return store.Agent{}, fault.NotFound("agent %s not found", id)
	}
	return store.Agent{ID: id, Name: name}, nil
}

// egressRunner is a runner's link that records what it was sent and answers err.
type egressRunner struct {
	id     string
	caps   []string
	engine string // the desktops' engine its hello names
	err    error
	got    []nodeapi.EgressPolicy // the node policies it was sent
	mu     sync.Mutex
}

func (r *egressRunner) Label() string          { return "runner " + r.id }
func (r *egressRunner) Supports(c string) bool { return slices.Contains(r.caps, c) }
func (r *egressRunner) SetEgress(_ context.Context, node nodeapi.EgressPolicy, agents map[string]nodeapi.EgressPolicy) (nodeapi.NodeSettings, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.err != nil {
		return nodeapi.NodeSettings{}, r.err
	}
	r.got = append(r.got, node)
	return nodeapi.NodeSettings{}, nil
}

// egressRunners is a registry of fake runners: connected ones are in up.
type egressRunners struct {
	runners map[string]*egressRunner
	up      map[string]bool
}

func (h *egressRunners) Runner(id string) (EgressRunner, error) {
	r, ok := h.runners[id]
	if !ok {
		return nil, fault.NotFound("runner %s not found", id)
	}
	return r, nil
}
func (h *egressRunners) Connected(id string) bool { return h.up[id] }
func (h *egressRunners) Hello(id string) (wire.Hello, bool) {
	r, ok := h.runners[id]
	if !ok || !h.up[id] {
		return wire.Hello{}, false
	}
	return wire.Hello{Capabilities: r.caps, Engine: r.engine}, true
}
func (h *egressRunners) ConnectedWith(c string) []string {
	var out []string
	for id, r := range h.runners {
		if h.up[id] && slices.Contains(r.caps, c) {
			out = append(out, id)
		}
	}
	slices.Sort(out)
	return out
}

// egressLocal is the server's own node; reapply answers err and counts the calls.
type egressLocal struct {
	err       error
	reapplied int
}

func (l *egressLocal) NodeID() string { return "local" }
func (l *egressLocal) ReapplyEgress(context.Context) error {
	l.reapplied++
	return l.err
}

// egressBus records what was published.
type egressBus struct {
	mu  sync.Mutex
	got []events.EgressBlocked
	aud []events.Audience
}

func (b *egressBus) Publish(t events.Type, aud events.Audience, data any) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if t == events.DesktopEgressBlocked {
		b.got = append(b.got, data.(events.EgressBlocked))
		b.aud = append(b.aud, aud)
	}
}

type egressFixture struct {
	*Egress
	st      *egressStore
	runners *egressRunners
	local   *egressLocal
	bus     *egressBus
	eng     EgressEngine
}

// newEgressFixture builds an Egress over fakes: node "local" and runners "r1" (connected,
// enforces egress), "old" (connected, an older version without it), "down" (not
// connected) and "kube" (connected, its desktops on a cluster); agents "ada" and "bob"; an engine that is connected.
func newEgressFixture(t *testing.T) *egressFixture {
	t.Helper()
	f := &egressFixture{
		st: &egressStore{nodes: map[string]store.NodeSettings{"local": {NodeID: "local"}, "r1": {NodeID: "r1"},
			"old": {NodeID: "old"}, "down": {NodeID: "down"}, "kube": {NodeID: "kube"}}},
		runners: &egressRunners{runners: map[string]*egressRunner{
			"r1":   {id: "r1", caps: []string{wire.CapEgress}},
			"old":  {id: "old"},
			"down": {id: "down", caps: []string{wire.CapEgress}},
			"kube": {id: "kube", caps: []string{wire.CapEgress}, engine: "kubernetes"},
		}, up: map[string]bool{"r1": true, "old": true, "kube": true}},
		local: &egressLocal{},
		bus:   &egressBus{},
		eng:   EgressEngine{Kind: engine.Podman, Connected: true},
	}
	e, err := NewEgress(EgressConfig{Store: f.st, Agents: egressAgents{"ada": "Ada", "bob": "Bob"},
		Engine: func() EgressEngine { return f.eng }, Events: f.bus, Logger: testenv.Logger(t, slog.LevelInfo)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Close() })
	e.Attach(f.local, f.runners)
	f.Egress = e
	return f
}

func (f *egressFixture) setNode(t *testing.T, node string, p store.EgressPolicy) {
	t.Helper()
	if _, err := f.st.UpdateNodeSettings(node, func(ns *store.NodeSettings) error { ns.Egress = p; return nil }); err != nil {
		t.Fatal(err)
	}
}

func (f *egressFixture) setAgent(t *testing.T, agent string, p store.EgressPolicy) {
	t.Helper()
	if _, err := f.st.UpdateNodeSettings("local", func(ns *store.NodeSettings) error {
		if ns.AgentEgress == nil {
			ns.AgentEgress = map[string]store.EgressPolicy{}
		}
		ns.AgentEgress[agent] = p
		return nil
	}); err != nil {
		t.Fatal(err)
	}
}

func TestNewEgressRequires(t *testing.T) {
	if _, err := NewEgress(EgressConfig{}); err == nil {
		t.Fatal("NewEgress took a config without a store")
	}
}

// TestAllowEgressModes: a refused destination is added to the allow-list that refused it —
// the agent's own when it has one, else the node's; closed becomes an allow-list of that one
// destination; open and an agent's own that is not an allow-list have nothing to add to.
func TestAllowEgressModes(t *testing.T) {
	for _, c := range []struct {
		name          string
		node          store.EgressPolicy
		agent         *store.EgressPolicy // ada's own
		agentID, dest string
		wantErr       error
		wantMsg       string
		wantNode      store.EgressPolicy // node "local" afterwards
		wantAgent     []string           // ada's allow-list afterwards
	}{
		{name: "node allow-list grows", node: store.EgressPolicy{Mode: deskegress.AllowList, Allow: []string{"a.example"}},
			agentID: "ada", dest: "B.example.",
			wantNode: store.EgressPolicy{Mode: deskegress.AllowList, Allow: []string{"a.example", "b.example"}}},
		{name: "closed becomes an allow-list of one", node: store.EgressPolicy{Mode: deskegress.Closed},
			dest:     "10.0.0.7",
			wantNode: store.EgressPolicy{Mode: deskegress.AllowList, Allow: []string{"10.0.0.7/32"}}},
		{name: "open has nothing to allow", node: store.EgressPolicy{Mode: deskegress.Open}, dest: "a.example",
			wantErr: fault.ErrConflict, wantMsg: "the node's egress policy is open: nothing is refused, nothing to allow",
			wantNode: store.EgressPolicy{Mode: deskegress.Open}},
		{name: "no policy is open", dest: "a.example", wantErr: fault.ErrConflict, wantMsg: "is open"},
		{name: "the agent's own allow-list grows, not the node's", node: store.EgressPolicy{Mode: deskegress.Closed},
			agent: &store.EgressPolicy{Mode: deskegress.AllowList, Allow: []string{"a.example"}}, agentID: "ada", dest: "c.example",
			wantNode: store.EgressPolicy{Mode: deskegress.Closed}, wantAgent: []string{"a.example", "c.example"}},
		{name: "the agent's own closed policy is not widened", node: store.EgressPolicy{Mode: deskegress.AllowList},
			agent: &store.EgressPolicy{Mode: deskegress.Closed}, agentID: "ada", dest: "c.example",
			wantErr: fault.ErrConflict, wantMsg: `the agent's own egress policy is "closed": switch it to "allow-list"`,
			wantNode: store.EgressPolicy{Mode: deskegress.AllowList}},
		{name: "another agent's policy does not count", node: store.EgressPolicy{Mode: deskegress.Closed},
			agent: &store.EgressPolicy{Mode: deskegress.Closed}, agentID: "bob", dest: "c.example",
			wantNode: store.EgressPolicy{Mode: deskegress.AllowList, Allow: []string{"c.example"}}},
		{name: "a URL is not a destination", node: store.EgressPolicy{Mode: deskegress.Closed}, dest: "https://a.example/x",
			wantErr: fault.ErrInvalid, wantMsg: "not a URL", wantNode: store.EgressPolicy{Mode: deskegress.Closed}},
	} {
		t.Run(c.name, func(t *testing.T) {
			f := newEgressFixture(t)
			f.setNode(t, "local", c.node)
			if c.agent != nil {
				f.setAgent(t, "ada", *c.agent)
			}
			v, err := f.AllowEgress(context.Background(), "admin", "", c.agentID, c.dest)
			if c.wantErr != nil {
				if !errors.Is(err, c.wantErr) || !strings.Contains(err.Error(), c.wantMsg) {
					t.Fatalf("AllowEgress: %v, want %v saying %q", err, c.wantErr, c.wantMsg)
				}
			} else if err != nil {
				t.Fatalf("AllowEgress: %v", err)
			} else if v.NodeID != "local" {
				t.Errorf("view of node %q, want local", v.NodeID)
			}
			ns, _ := f.st.NodeSettings("local")
			if c.wantNode.Mode != "" && (ns.Egress.Mode != c.wantNode.Mode || !slices.Equal(ns.Egress.Allow, c.wantNode.Allow)) {
				t.Errorf("node policy %+v, want %+v", ns.Egress, c.wantNode)
			}
			if c.wantAgent != nil && !slices.Equal(ns.AgentEgress["ada"].Allow, c.wantAgent) {
				t.Errorf("ada's allow-list %v, want %v", ns.AgentEgress["ada"].Allow, c.wantAgent)
			}
			if c.wantErr == nil && f.local.reapplied == 0 {
				t.Error("the changed policy was not re-applied to the running desktops")
			}
		})
	}
}

// TestSetAgentEgressPushesToRunners: an agent's own policy goes to every connected runner
// that enforces policies, each with its own node's policy; what fails is the view's problem,
// after the local re-application's, and the policy is saved all the same.
func TestSetAgentEgressPushesToRunners(t *testing.T) {
	f := newEgressFixture(t)
	f.runners.runners["r2"] = &egressRunner{id: "r2", caps: []string{wire.CapEgress}, err: fault.Unavailable("link lost")}
	f.runners.runners["gone"] = &egressRunner{id: "gone", caps: []string{wire.CapEgress}} // no settings here
	f.runners.runners["local"] = &egressRunner{id: "local", caps: []string{wire.CapEgress}, err: errors.New("node local was pushed to")}
	f.runners.up["r2"], f.runners.up["gone"], f.runners.up["local"] = true, true, true
	f.st.nodes["r2"] = store.NodeSettings{NodeID: "r2"}
	f.setNode(t, "r1", store.EgressPolicy{Mode: deskegress.Closed})
	f.local.err = errors.New("desktop d1: no namespace")

	v, err := f.SetAgentEgress(context.Background(), "admin", "ada", &store.EgressPolicy{Mode: "Allow-List", Allow: []string{"A.example"}})
	if err != nil {
		t.Fatal(err)
	}
	want := "stopped desktops whose new policy could not be enforced: desktop d1: no namespace; " +
		"runner gone: node gone not found; runner r2: link lost"
	if v.Problem != want {
		t.Errorf("problem:\n %q\nwant\n %q", v.Problem, want)
	}
	if got := f.runners.runners["r1"].got; len(got) != 1 || got[0].Mode != deskegress.Closed {
		t.Errorf("r1 was sent %+v, want its own closed policy once", got)
	}
	if len(f.runners.runners["old"].got) != 0 || len(f.runners.runners["down"].got) != 0 {
		t.Error("a runner that does not enforce policies, or is not connected, was sent one")
	}
	ns, _ := f.st.NodeSettings("local")
	if p := ns.AgentEgress["ada"]; p.Mode != deskegress.AllowList || !slices.Equal(p.Allow, []string{"a.example"}) || p.UpdatedBy != "admin" {
		t.Errorf("ada's saved policy: %+v", p)
	}
	if len(v.Agents) != 1 || v.Agents[0].AgentName != "Ada" {
		t.Errorf("view's agents: %+v", v.Agents)
	}

	// nil: the node's policy again
	f.local.err = nil
	if v, err = f.SetAgentEgress(context.Background(), "admin", "ada", nil); err != nil || len(v.Agents) != 0 {
		t.Fatalf("inherit: %+v %v", v, err)
	}
	if _, err := f.SetAgentEgress(context.Background(), "admin", "nobody", nil); !errors.Is(err, fault.ErrNotFound) {
		t.Errorf("an unknown agent: %v", err)
	}
}

// TestSetNodeEgressOnRunners: a runner's policy is sent to it first and saved only once it
// took it; a runner that is not connected or does not enforce policies is refused with what
// to do.
func TestSetNodeEgressOnRunners(t *testing.T) {
	closed := store.EgressPolicy{Mode: deskegress.Closed}
	for _, c := range []struct {
		node    string
		wantErr error
		wantMsg string
	}{
		{"r1", nil, ""},
		{"down", fault.ErrUnavailable, "runner down is not connected: its desktops' egress policy can be changed once it is"},
		{"old", fault.ErrConflict, "update it to this server's version (Settings → Runners → Update)"},
		{"nowhere", fault.ErrNotFound, "not found"},
	} {
		t.Run(c.node, func(t *testing.T) {
			f := newEgressFixture(t)
			v, err := f.SetNodeEgress(context.Background(), "admin", c.node, closed)
			if c.wantErr != nil {
				if !errors.Is(err, c.wantErr) || !strings.Contains(err.Error(), c.wantMsg) {
					t.Fatalf("SetNodeEgress: %v, want %v saying %q", err, c.wantErr, c.wantMsg)
				}
				if ns, err := f.st.NodeSettings(c.node); err == nil && ns.Egress.Mode != "" {
					t.Errorf("a refused policy was saved: %+v", ns.Egress)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if v.Node.Mode != deskegress.Closed || v.Enforcement != "" {
				t.Errorf("view: %+v", v)
			}
			if f.local.reapplied != 0 {
				t.Error("a runner's policy was re-applied to this node's desktops")
			}
		})
	}

	// a runner that refuses it: nothing is saved here either
	f := newEgressFixture(t)
	f.runners.runners["r1"].err = fault.Invalid("bad policy")
	if _, err := f.SetNodeEgress(context.Background(), "admin", "r1", closed); !errors.Is(err, fault.ErrInvalid) {
		t.Fatalf("refused by the runner: %v", err)
	}
	if ns, _ := f.st.NodeSettings("r1"); ns.Egress.Mode != "" {
		t.Errorf("saved although the runner refused it: %+v", ns.Egress)
	}
}

// TestEgressOnKubernetes: where the desktops run on Kubernetes a wildcard cannot be enforced
// (a NetworkPolicy lists addresses), on this node's policy and an agent's own; a runner's is
// not refused here (a runner whose desktops are on a cluster refuses it itself:
// TestKubernetesRunner).
func TestEgressOnKubernetes(t *testing.T) {
	f := newEgressFixture(t)
	f.eng = EgressEngine{Kind: engine.Kubernetes, Connected: true, Kube: kubeStub{}}
	wild := store.EgressPolicy{Mode: deskegress.AllowList, Allow: []string{"*.example.com"}}
	if _, err := f.SetNodeEgress(context.Background(), "admin", "local", wild); !errors.Is(err, fault.ErrInvalid) || !strings.Contains(err.Error(), "list the names") {
		t.Errorf("node: %v", err)
	}
	if _, err := f.SetAgentEgress(context.Background(), "admin", "ada", &wild); !errors.Is(err, fault.ErrInvalid) {
		t.Errorf("agent: %v", err)
	}
	if _, err := f.SetNodeEgress(context.Background(), "admin", "r1", wild); err != nil {
		t.Errorf("runner: %v", err)
	}
	v, err := f.SetNodeEgress(context.Background(), "admin", "local", store.EgressPolicy{Mode: deskegress.AllowList, Allow: []string{"www.example.com"}})
	if err != nil || !strings.Contains(v.Enforcement, "NetworkPolicy") {
		t.Errorf("names: %+v %v", v, err)
	}
}

type kubeStub struct{}

func (kubeStub) SetEgress(context.Context, string, store.EgressPolicy, deskegress.LookupFunc) error {
	return nil
}

// TestEgressViewEnforcement: the view says why policies are not enforced on a node.
func TestEgressViewEnforcement(t *testing.T) {
	for _, c := range []struct {
		name string
		node string
		eng  EgressEngine
		want string
	}{
		{"enforced here", "", EgressEngine{Kind: engine.Podman, Connected: true}, ""},
		{"connecting", "", EgressEngine{Kind: engine.Podman, Problem: vm.ErrConnecting}, vm.ErrConnecting},
		{"no engine", "local", EgressEngine{Problem: "nothing found"}, "no container engine on this node"},
		{"kubernetes", "", EgressEngine{Kind: engine.Kubernetes, Connected: true, Kube: kubeStub{}}, "desktops run on Kubernetes"},
		{"runner enforces", "r1", EgressEngine{}, ""},
		{"runner too old", "old", EgressEngine{}, "runner old does not enforce desktop egress policies (capability " + wire.CapEgress + ")"},
		{"runner down", "down", EgressEngine{}, "runner down is not connected: a policy can be changed once it is"},
		{"runner on a cluster", "kube", EgressEngine{}, "desktops run on Kubernetes: a policy is applied as a NetworkPolicy"},
	} {
		t.Run(c.name, func(t *testing.T) {
			f := newEgressFixture(t)
			f.eng = c.eng
			v, err := f.EgressView(context.Background(), c.node)
			if err != nil {
				t.Fatal(err)
			}
			if c.want == "" && v.Enforcement != "" || !strings.HasPrefix(v.Enforcement, c.want) {
				t.Errorf("enforcement %q, want %q", v.Enforcement, c.want)
			}
			if v.Node.Mode != deskegress.Open || v.Agents == nil || v.Blocked == nil {
				t.Errorf("view of a node without a policy: %+v", v)
			}
		})
	}
}

// TestRunnerBlocked: a runner desktop's refusal is published to whom the hub says and kept
// for that runner's view only.
func TestRunnerBlocked(t *testing.T) {
	f := newEgressFixture(t)
	aud := events.ForAccount("acc1", true)
	at := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	f.RunnerBlocked("r1", aud, wire.EgressBlocked{InstanceID: "d1", AgentID: "ada", AccountID: "acc1", Destination: "10.0.0.9", Port: 443, Proto: "tcp", Time: at})
	f.RunnerBlocked("r1", aud, wire.EgressBlocked{InstanceID: "d1", AgentID: "ada", AccountID: "acc1", Destination: "10.0.0.9", Port: 443, Proto: "tcp", Time: at.Add(time.Second)})
	if len(f.bus.got) != 2 || f.bus.got[0].NodeID != "r1" || f.bus.got[0].Destination != "10.0.0.9" || f.bus.aud[0] != aud {
		t.Fatalf("published: %+v to %+v", f.bus.got, f.bus.aud)
	}
	v, err := f.EgressView(context.Background(), "r1")
	if err != nil {
		t.Fatal(err)
	}
	if len(v.Blocked) != 1 || v.Blocked[0].Count != 2 || v.Blocked[0].Destination != "10.0.0.9" {
		t.Errorf("r1's refusals: %+v", v.Blocked)
	}
	for _, node := range []string{"", "old"} {
		if v, _ := f.EgressView(context.Background(), node); len(v.Blocked) != 0 {
			t.Errorf("node %q shows r1's refusals: %+v", node, v.Blocked)
		}
	}
}
