package backend

import (
	"context"
	"fmt"
	"sync"
	"time"

	"cubicle/backend/agent"
	"cubicle/backend/agent/tools"
	"cubicle/backend/api"
	"cubicle/backend/computer"
	"cubicle/backend/fault"
	"cubicle/backend/fleet"
	"cubicle/backend/hostdesk"
	"cubicle/backend/store"
	"cubicle/backend/vm"
)

// computers fixes each turn's computer (SPEC §1.6, §7): at the start of a turn it reads the
// agent's computer selection, the node's settings, what the host's OS allows and — for auto —
// whether the Local VM can be used, asks the gate (computer.Decide) for the plan, and keeps
// that plan for the whole turn and its helpers (tools.Environments). It announces the plan as
// the turn's first events, binds eagerly when the agent says so, and at the end of a turn
// releases the turn's desktop or browser — stopping it when a person stopped the turn while it
// held it (SPEC §1.5 fencing).
type computers struct {
	b *Backend
	// grant decides host access per account and node (SPEC §3); nil grants it. The security
	// work hooks its admin grants in here.
	grant func(accountID, nodeID string) computer.Grant

	mu    sync.Mutex
	turns map[string]turnPlan      // main turn id → its plan; guarded by mu
	last  map[string]computer.Plan // agent id → the plan of its latest turn; guarded by mu
}

type turnPlan struct {
	plan  computer.Plan
	agent store.Agent
}

func newComputers(b *Backend) *computers {
	return &computers{b: b, turns: map[string]turnPlan{}, last: map[string]computer.Plan{}}
}

// node describes this execution node for the gate. The host's permission is only looked at
// when the agent wants the host (it opens a connection to the display).
func (c *computers) node(want computer.Kind, a store.Agent) computer.Node {
	if node := fleet.NodeOf(a); node != c.b.VMs.NodeID() {
		// A runner's host: its host tools run there over its link (never on the server's own
		// host in their place).
		return c.runnerNode(node)
	}
	n := computer.Node{ID: c.b.VMs.NodeID(), Caps: []string{computer.CapHostTools, computer.CapHostDesktop}}
	if ns, err := c.b.Store.NodeSettings(n.ID); err == nil {
		n.HostScreenControl = ns.HostScreenControl
	}
	if want == computer.Host && n.HostScreenControl {
		n.Screen = c.b.HostDesk.Permission()
	}
	return n
}

// decide computes the plan of agent a's turn now.
func (c *computers) decide(ctx context.Context, a store.Agent, helper bool) computer.Plan {
	sel, _ := computer.Parse(a.Computer)
	in := computer.Input{Selected: a.Computer, AllowHost: a.AllowHostEnvironment, Helper: helper, Node: c.node(sel, a)}
	if c.grant != nil {
		in.Grant = c.grant(a.AccountID, in.Node.ID)
	}
	if sel == computer.Cloud {
		c.cloudInput(&in, a)
	}
	in.VMReady = func() (bool, string) {
		vms, err := c.b.fleet.AgentNode(a.ID)
		if err != nil {
			return false, err.Error()
		}
		return vms.VMReady(ctx, a.AccountID, a.ID)
	}
	return computer.Decide(in)
}

func (c *computers) agent(t agent.TurnInfo) (store.Agent, error) {
	a, err := c.b.Store.Agent(t.AgentID)
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
func (c *computers) plan(ctx context.Context, t agent.TurnInfo) (turnPlan, error) {
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
	return turnPlan{plan: c.decide(ctx, a, t.TaskID != ""), agent: a}, nil
}

// Environment implements tools.Environments.
func (c *computers) Environment(ctx context.Context, t agent.TurnInfo) (tools.Environment, error) {
	tp, err := c.plan(ctx, t)
	if err != nil {
		return tools.Environment{}, err
	}
	host, err := c.b.hostOf(tp.plan)
	if err != nil {
		return tools.Environment{}, err
	}
	return tools.Environment{Plan: tp.plan, WorkDir: tp.agent.WorkDir, Host: host}, nil
}

// Start implements agent.Config.Start: the turn's plan, fixed now and announced.
func (c *computers) Start(ctx context.Context, t agent.TurnInfo) ([]agent.Notice, error) {
	if t.AgentID == "" {
		return nil, nil
	}
	a, err := c.agent(t)
	if err != nil {
		return nil, fmt.Errorf("agent profile: %w", err)
	}
	p := c.decide(ctx, a, false)
	c.mu.Lock()
	c.turns[t.MainTurnID] = turnPlan{plan: p, agent: a}
	before, had := c.last[a.ID]
	c.last[a.ID] = p
	c.mu.Unlock()
	c.b.planChanged(a, before, p, had)
	c.b.log.Debug("turn computer", "agent", a.ID, "selected", p.Selected, "computer", p.Kind, "tools", p.Families())
	return []agent.Notice{{Name: "computer", Value: p.Notice()}}, nil
}

// TurnStarted implements agent.Config.TurnStarted: eager binding (lazy_init off) acquires the
// turn's desktop or browser before the first model call.
func (c *computers) TurnStarted(ctx context.Context, t agent.TurnInfo) error {
	tp, err := c.plan(ctx, t)
	if err != nil || tp.agent.LazyInit == nil || *tp.agent.LazyInit {
		return nil
	}
	switch {
	case tp.plan.VM, tp.plan.Cloud:
		_, err = c.b.Binder.Acquire(ctx, t)
	case tp.plan.Browser:
		_, err = c.b.Binder.Browser(ctx, t)
	}
	if err != nil {
		return fmt.Errorf("eager binding (lazy_init off): %w", err)
	}
	return nil
}

// TurnEnded implements agent.Config.TurnEnded.
func (c *computers) TurnEnded(t agent.TurnInfo) {
	c.b.Binder.TurnEnded(t)
	c.mu.Lock()
	delete(c.turns, t.MainTurnID)
	c.mu.Unlock()
}

// Last returns the plan of agentID's latest turn in this process.
func (c *computers) Last(agentID string) (computer.Plan, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	p, ok := c.last[agentID]
	return p, ok
}

// fence stops a desktop or browser that a stopped turn held, whatever the idle policy
// ("Never auto-stop" included): its control is revoked first, so late operations of the old
// task are refused, then the instance stops (SPEC §1.5).
func (c *computers) fence(instanceID, reason string) {
	c.b.Control.Revoke(instanceID)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := c.b.fleet.Desktop(instanceID).StopInstance(ctx, instanceID, reason); err != nil {
		c.b.log.Warn("stop a fenced desktop", "instance", instanceID, "reason", reason, "err", err)
	}
}

// Changed applies a saved change of an agent's computer: what it no longer has is revoked —
// its own desktop stops when it leaves the Local VM (and Auto), its browser when it leaves
// Browser only (and Auto), so nothing of the old authorisation keeps running (SPEC §1.5).
// A shared desktop is left running for the account's other agents.
func (c *computers) Changed(ctx context.Context, before, after store.Agent) {
	had, _ := computer.Parse(before.Computer)
	has, _ := computer.Parse(after.Computer)
	usesVM := func(k computer.Kind) bool { return k == computer.VM || k == computer.Auto }
	usesBrowser := func(k computer.Kind) bool { return k == computer.Browser || k == computer.Auto }
	c.b.Binder.Forget(after.ID)
	if usesVM(had) && !usesVM(has) {
		if vms, err := c.b.fleet.NodeFor(before); err != nil {
			c.b.log.Warn("computer change: the agent's node", "agent", after.ID, "err", err)
		} else if v, err := vms.Agent(ctx, after.AccountID, after.ID); err == nil && v.Desktop.Scope == "agent" && runsOrPaused(v.Desktop.State) {
			c.b.fleet.Note(vms, v.Desktop.ID)
			c.fence(v.Desktop.ID, "the agent's computer authorisation was revoked (computer changed to "+string(has)+")")
		}
	}
	if had == computer.Cloud && has != computer.Cloud {
		// Its desktop on the cloud node stops; the choice of cloud node is forgotten.
		if vms, err := c.b.fleet.NodeFor(before); err == nil {
			if v, err := vms.Agent(ctx, before.AccountID, before.ID); err == nil && v.Desktop.Scope == "agent" && runsOrPaused(v.Desktop.State) {
				c.b.fleet.Note(vms, v.Desktop.ID)
				c.fence(v.Desktop.ID, "the agent's computer authorisation was revoked (computer changed to "+string(has)+")")
			}
		}
		c.b.fleet.ForgetCloud(after.ID)
	}
	if usesBrowser(had) && !usesBrowser(has) {
		if v, err := c.b.VMs.Browser(after.AccountID, after.ID); err == nil && runsOrPaused(v.State) {
			c.fence(v.ID, "the agent's browser authorisation was revoked (computer changed to "+string(has)+")")
		}
	}
}

// runsOrPaused: a desktop in state holds a container's processes (a paused one is frozen, and
// would go on when resumed): what a revoked authorisation must stop.
func runsOrPaused(state string) bool { return state == vm.StateRunning || state == vm.StatePaused }

// Busy says why agentID's computer cannot change now: a running turn of the agent, or a task
// or a person's control on its desktop or browser ("" when it can change).
func (c *computers) Busy(ctx context.Context, accountID, agentID string) string {
	if c.b.Chat != nil && c.b.Chat.Running(agentID) {
		return "the agent is running a task"
	}
	if vms, err := c.b.fleet.AgentNode(agentID); err == nil {
		if v, err := vms.Agent(ctx, accountID, agentID); err == nil && v.Desktop.BusyBy != "" {
			return v.Desktop.BusyBy
		} else if err == nil {
			if h, ok := c.b.Control.Holder(v.Desktop.ID); ok {
				return h.Name() + " controls its desktop"
			}
		}
	}
	if v, err := c.b.VMs.Browser(accountID, agentID); err == nil && v.BusyBy != "" {
		return v.BusyBy
	}
	if h, ok := c.b.Control.Holder(hostDesktopID(c.b.VMs.NodeID())); ok && h.Person.AgentID == agentID {
		return h.Name() + " controls the host screen"
	}
	return ""
}

// hostDesktopID is the control-lease key and screen-hub id of a node's host screen.
func hostDesktopID(node string) string { return "host-" + node }

// WorkDirChanged implements api.Computers.
func (c *computers) WorkDirChanged(ctx context.Context, accountID, agentID string) (bool, error) {
	return c.b.VMs.WorkDirChanged(ctx, accountID, agentID)
}

// Plan implements api.Computers: the plan the agent's next turn would get now, and its latest.
func (c *computers) Plan(ctx context.Context, a store.Agent) (computer.Plan, *computer.Plan) {
	next := c.decide(ctx, a, false)
	if last, ok := c.Last(a.ID); ok {
		return next, &last
	}
	return next, nil
}

// Host implements api.Computers.
func (c *computers) Host(ctx context.Context) (api.HostView, error) {
	node := c.b.VMs.NodeID()
	ns, err := c.b.Store.NodeSettings(node)
	if err != nil {
		return api.HostView{}, err
	}
	v := api.HostView{NodeID: node, ScreenControl: ns.HostScreenControl, OS: c.b.HostDesk.Permission(), Displays: []hostdesk.Display{}}
	if v.OS.Granted {
		if ds, err := c.b.HostDesk.Displays(); err == nil {
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
func (c *computers) SetHostScreenControl(ctx context.Context, requestID string, on bool) (api.HostView, error) {
	node := c.b.VMs.NodeID()
	ns, err := c.b.Store.UpdateNodeSettings(node, func(ns *store.NodeSettings) error {
		if requestID != "" && ns.HostRequestID == requestID {
			return nil // applied already
		}
		ns.HostScreenControl, ns.HostRequestID = on, requestID
		return nil
	})
	if err != nil {
		return api.HostView{}, err
	}
	c.b.nodeChanged(ns)
	if !on {
		// Revoked: a person's control of the host screen ends now.
		c.b.Control.Revoke(hostDesktopID(node))
	}
	c.b.log.Info("host screen control changed", "node", node, "on", on)
	return c.Host(ctx)
}

var (
	_ tools.Environments = (*computers)(nil)
	_ api.Computers      = (*computers)(nil)
)
