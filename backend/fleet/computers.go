package fleet

import (
	"context"
	"fmt"
	"sync"
	"time"

	"cubicle/backend/agent"
	"cubicle/backend/agent/tools"
	"cubicle/backend/computer"
	"cubicle/backend/fault"
	"cubicle/backend/hostdesk"
	"cubicle/backend/store"
	"cubicle/backend/vm"
)

// Computers fixes each turn's computer (SPEC §1.6, §7): at the start of a turn it reads the
// agent's computer selection, the node's settings, what the host's OS allows and — for auto —
// whether the Local VM can be used, asks the gate (computer.Decide) for the plan, and keeps
// that plan for the whole turn and its helpers (tools.Environments). It announces the plan as
// the turn's first events, binds eagerly when the agent says so, and at the end of a turn
// releases the turn's desktop or browser — stopping it when a person stopped the turn while it
// held it (SPEC §1.5 fencing).
//
// Computers is safe for concurrent use.
type Computers struct {
	f *Fleet

	mu    sync.Mutex
	turns map[string]turnPlan      // main turn id → its plan; guarded by mu
	last  map[string]computer.Plan // agent id → the plan of its latest turn; guarded by mu
}

type turnPlan struct {
	plan  computer.Plan
	agent store.Agent
}

func newComputers(f *Fleet) *Computers {
	return &Computers{f: f, turns: map[string]turnPlan{}, last: map[string]computer.Plan{}}
}

// grant is the host access an administrator granted accountID on nodeID (SPEC §3), which the
// gate asks for every turn.
func (c *Computers) grant(accountID, nodeID string) computer.Grant {
	a, err := c.f.cfg.HostAccess.Check(accountID, nodeID)
	if err != nil {
		return computer.Grant{Denied: true, DesktopDenied: true, Reason: "host access could not be checked: " + err.Error()}
	}
	g := computer.Grant{Denied: !a.HostTools, DesktopDenied: !a.HostDesktop}
	if g.Denied {
		g.Reason = "host access is not granted to this account on " + c.f.Label(nodeID) +
			": an administrator grants it in Settings → Users (host tools on that node)"
	}
	return g
}

// node describes this execution node for the gate. The host's permission is only looked at
// when the agent wants the host (it opens a connection to the display).
func (c *Computers) node(want computer.Kind, a store.Agent) computer.Node {
	if node := NodeOf(a); node != c.f.cfg.Local.NodeID() {
		// A runner's host: its host tools run there over its link (never on the server's own
		// host in their place).
		return c.runnerNode(node)
	}
	n := computer.Node{ID: c.f.cfg.Local.NodeID(), Caps: []string{computer.CapHostTools, computer.CapHostDesktop}}
	if ns, err := c.f.cfg.Store.NodeSettings(n.ID); err == nil {
		n.HostScreenControl = ns.HostScreenControl
	}
	if want == computer.Host && n.HostScreenControl {
		n.Screen = c.f.cfg.HostScreen.Permission()
	}
	return n
}

// Decide computes the plan of agent a's turn now.
func (c *Computers) Decide(ctx context.Context, a store.Agent, helper bool) computer.Plan {
	sel, _ := computer.Parse(a.Computer)
	in := computer.Input{Selected: a.Computer, AllowHost: a.AllowHostEnvironment, Helper: helper, Node: c.node(sel, a)}
	in.Grant = c.grant(a.AccountID, in.Node.ID)
	if sel == computer.Cloud {
		c.cloudInput(&in, a)
	}
	in.VMReady = func() (bool, string) {
		vms, err := c.f.AgentNode(a.ID)
		if err != nil {
			return false, err.Error()
		}
		return vms.VMReady(ctx, a.AccountID, a.ID)
	}
	return computer.Decide(in)
}

func (c *Computers) agent(t agent.TurnInfo) (store.Agent, error) {
	a, err := c.f.cfg.Store.Agent(t.AgentID)
	if err != nil {
		return store.Agent{}, err
	}
	if a.AccountID != t.UserID {
		return store.Agent{}, fault.NotFound("agent %q not found", t.AgentID)
	}
	return a, nil
}

// plan returns the turn's plan, deciding it when the turn has none yet (a turn that did not
// pass Start, e.g. a toolbox used outside a turn).
func (c *Computers) plan(ctx context.Context, t agent.TurnInfo) (turnPlan, error) {
	if t.AgentID == "" {
		return turnPlan{plan: computer.Plan{Selected: computer.None, Kind: computer.None}}, nil
	}
	c.mu.Lock()
	tp, ok := c.turns[t.MainTurnID]
	c.mu.Unlock()
	if ok && t.MainTurnID != "" {
		return tp, nil
	}
	a, err := c.agent(t)
	if err != nil {
		return turnPlan{}, err
	}
	return turnPlan{plan: c.Decide(ctx, a, t.TaskID != ""), agent: a}, nil
}

// TurnPlan is turn t's plan (decided now when the turn has none yet).
func (c *Computers) TurnPlan(ctx context.Context, t agent.TurnInfo) (computer.Plan, error) {
	tp, err := c.plan(ctx, t)
	return tp.plan, err
}

// Environment implements tools.Environments.
func (c *Computers) Environment(ctx context.Context, t agent.TurnInfo) (tools.Environment, error) {
	tp, err := c.plan(ctx, t)
	if err != nil {
		return tools.Environment{}, err
	}
	host, err := c.f.hostOf(tp.plan)
	if err != nil {
		return tools.Environment{}, err
	}
	return tools.Environment{Plan: tp.plan, WorkDir: tp.agent.WorkDir, Host: host}, nil
}

// Start implements agent.Config.Start: the turn's plan, fixed now and announced.
func (c *Computers) Start(ctx context.Context, t agent.TurnInfo) ([]agent.Notice, error) {
	if t.AgentID == "" {
		return nil, nil
	}
	a, err := c.agent(t)
	if err != nil {
		return nil, fmt.Errorf("agent profile: %w", err)
	}
	p := c.Decide(ctx, a, false)
	c.mu.Lock()
	c.turns[t.MainTurnID] = turnPlan{plan: p, agent: a}
	before, had := c.last[a.ID]
	c.last[a.ID] = p
	c.mu.Unlock()
	if c.f.cfg.OnPlan != nil {
		c.f.cfg.OnPlan(a, before, p, had)
	}
	c.f.log.Debug("turn computer", "agent", a.ID, "selected", p.Selected, "computer", p.Kind, "tools", p.Families())
	return []agent.Notice{{Name: "computer", Value: p.Notice()}}, nil
}

// TurnStarted implements agent.Config.TurnStarted: eager binding (lazy_init off) acquires the
// turn's desktop or browser before the first model call.
func (c *Computers) TurnStarted(ctx context.Context, t agent.TurnInfo) error {
	tp, err := c.plan(ctx, t)
	if err != nil || tp.agent.LazyInit == nil || *tp.agent.LazyInit {
		return nil
	}
	switch {
	case tp.plan.VM, tp.plan.Cloud:
		_, err = c.f.binder.Acquire(ctx, t)
	case tp.plan.Browser:
		_, err = c.f.binder.Browser(ctx, t)
	}
	if err != nil {
		return fmt.Errorf("eager binding (lazy_init off): %w", err)
	}
	return nil
}

// TurnEnded implements agent.Config.TurnEnded.
func (c *Computers) TurnEnded(t agent.TurnInfo) {
	c.f.binder.TurnEnded(t)
	c.mu.Lock()
	delete(c.turns, t.MainTurnID)
	c.mu.Unlock()
}

// Last returns the plan of agentID's latest turn in this process.
func (c *Computers) Last(agentID string) (computer.Plan, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	p, ok := c.last[agentID]
	return p, ok
}

// Fence stops a desktop or browser that a stopped turn held, whatever the idle policy
// ("Never auto-stop" included): its control is revoked first, so late operations of the old
// task are refused, then the instance stops (SPEC §1.5).
func (c *Computers) Fence(instanceID, reason string) {
	c.f.cfg.Control.Revoke(instanceID)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := c.f.Desktop(instanceID).StopInstance(ctx, instanceID, reason); err != nil {
		c.f.log.Warn("stop a fenced desktop", "instance", instanceID, "reason", reason, "err", err)
	}
}

// Changed applies a saved change of an agent's computer: what it no longer has is revoked —
// its own desktop stops when it leaves the Local VM (and Auto), its browser when it leaves
// Browser only (and Auto), so nothing of the old authorisation keeps running (SPEC §1.5).
// A shared desktop is left running for the account's other agents.
func (c *Computers) Changed(ctx context.Context, before, after store.Agent) {
	had, _ := computer.Parse(before.Computer)
	has, _ := computer.Parse(after.Computer)
	usesVM := func(k computer.Kind) bool { return k == computer.VM || k == computer.Auto }
	usesBrowser := func(k computer.Kind) bool { return k == computer.Browser || k == computer.Auto }
	c.f.binder.Forget(after.ID)
	if usesVM(had) && !usesVM(has) {
		if vms, err := c.f.NodeFor(before); err != nil {
			c.f.log.Warn("computer change: the agent's node", "agent", after.ID, "err", err)
		} else if v, err := vms.Agent(ctx, after.AccountID, after.ID); err == nil && v.Desktop.Scope == "agent" && runsOrPaused(v.Desktop.State) {
			c.f.Note(vms, v.Desktop.ID)
			c.Fence(v.Desktop.ID, "the agent's computer authorisation was revoked (computer changed to "+string(has)+")")
		}
	}
	if had == computer.Cloud && has != computer.Cloud {
		// Its desktop on the cloud node stops; the choice of cloud node is forgotten.
		if vms, err := c.f.NodeFor(before); err == nil {
			if v, err := vms.Agent(ctx, before.AccountID, before.ID); err == nil && v.Desktop.Scope == "agent" && runsOrPaused(v.Desktop.State) {
				c.f.Note(vms, v.Desktop.ID)
				c.Fence(v.Desktop.ID, "the agent's computer authorisation was revoked (computer changed to "+string(has)+")")
			}
		}
		c.f.ForgetCloud(after.ID)
	}
	if usesBrowser(had) && !usesBrowser(has) {
		if v, err := c.f.cfg.Local.Browser(after.AccountID, after.ID); err == nil && runsOrPaused(v.State) {
			c.Fence(v.ID, "the agent's browser authorisation was revoked (computer changed to "+string(has)+")")
		}
	}
}

// runsOrPaused: a desktop in state holds a container's processes (a paused one is frozen, and
// would go on when resumed): what a revoked authorisation must stop.
func runsOrPaused(state string) bool { return state == vm.StateRunning || state == vm.StatePaused }

// Busy says why agentID's computer cannot change now: a running turn of the agent, or a task
// or a person's control on its desktop or browser ("" when it can change).
func (c *Computers) Busy(ctx context.Context, accountID, agentID string) string {
	if c.f.turns != nil && c.f.turns.Running(agentID) {
		return "the agent is running a task"
	}
	if vms, err := c.f.AgentNode(agentID); err == nil {
		if v, err := vms.Agent(ctx, accountID, agentID); err == nil && v.Desktop.BusyBy != "" {
			return v.Desktop.BusyBy
		} else if err == nil {
			if h, ok := c.f.cfg.Control.Holder(v.Desktop.ID); ok {
				return h.Name() + " controls its desktop"
			}
		}
	}
	if v, err := c.f.cfg.Local.Browser(accountID, agentID); err == nil && v.BusyBy != "" {
		return v.BusyBy
	}
	if h, ok := c.f.cfg.Control.Holder(hostDesktopID(c.f.cfg.Local.NodeID())); ok && h.Person.AgentID == agentID {
		return h.Name() + " controls the host screen"
	}
	return ""
}

// hostDesktopID is the control-lease key and screen-hub id of a node's host screen.
func hostDesktopID(node string) string { return "host-" + node }

// WorkDirChanged implements api.Computers.
func (c *Computers) WorkDirChanged(ctx context.Context, accountID, agentID string) (bool, error) {
	return c.f.cfg.Local.WorkDirChanged(ctx, accountID, agentID)
}

// Plan (api.Computers) is: the plan the agent's next turn would get now, and its latest.
func (c *Computers) Plan(ctx context.Context, a store.Agent) (computer.Plan, *computer.Plan) {
	next := c.Decide(ctx, a, false)
	if last, ok := c.Last(a.ID); ok {
		return next, &last
	}
	return next, nil
}

// Host implements api.Computers.
func (c *Computers) Host(ctx context.Context) (HostView, error) {
	node := c.f.cfg.Local.NodeID()
	ns, err := c.f.cfg.Store.NodeSettings(node)
	if err != nil {
		return HostView{}, err
	}
	v := HostView{NodeID: node, ScreenControl: ns.HostScreenControl, OS: c.f.cfg.HostScreen.Permission(), Displays: []hostdesk.Display{}}
	if v.OS.Granted {
		if ds, err := c.f.cfg.HostScreen.Displays(); err == nil {
			v.Displays = ds
		} else {
			v.Problem = err.Error()
		}
	}
	v.Available = v.ScreenControl && v.OS.Granted
	switch {
	case !v.OS.Granted:
		v.Problem = v.OS.Missing + "; " + v.OS.HowToGrant
	case !v.ScreenControl:
		v.Problem = "\"Host screen control\" is off: agents whose computer is Host get the host command and file tools only"
	}
	return v, nil
}

// SetHostScreenControl implements api.Computers.
func (c *Computers) SetHostScreenControl(ctx context.Context, requestID string, on bool) (HostView, error) {
	node := c.f.cfg.Local.NodeID()
	ns, err := c.f.cfg.Store.UpdateNodeSettings(node, func(ns *store.NodeSettings) error {
		if requestID != "" && ns.HostRequestID == requestID {
			return nil // applied already
		}
		ns.HostScreenControl, ns.HostRequestID = on, requestID
		return nil
	})
	if err != nil {
		return HostView{}, err
	}
	if c.f.cfg.OnNodeSettings != nil {
		c.f.cfg.OnNodeSettings(ns)
	}
	if !on {
		// Revoked: a person's control of the host screen ends now.
		c.f.cfg.Control.Revoke(hostDesktopID(node))
	}
	c.f.log.Info("host screen control changed", "node", node, "on", on)
	return c.Host(ctx)
}

var _ tools.Environments = (*Computers)(nil)
