// Package calls runs the MCP server's calls in Cubicle: the agents' computers that an API
// token reaches (mcpserver.Computers), each call as a direct call of the agent runtime.
package calls

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"cubicle/backend/agent"
	"cubicle/backend/apitoken"
	"cubicle/backend/computer"
	"cubicle/backend/control"
	"cubicle/backend/events"
	"cubicle/backend/fault"
	"cubicle/backend/mcpserver"
	"cubicle/backend/nodeapi"
	"cubicle/backend/store"
	"cubicle/backend/vm"
)

// Agents lists an account's agents (profile.Service).
type Agents interface {
	List(accountID string) ([]store.Agent, error)
}

// Nodes finds the node an agent's desktop is on (fleet.Fleet).
type Nodes interface {
	ForAgent(agentID string) (nodeapi.Node, error)
}

// Control says who holds a desktop (control.Manager).
type Control interface {
	Holder(desktopID string) (control.Holder, bool)
}

// Plans is the computer gate's decision for an agent (fleet.Computers).
type Plans interface {
	Decide(ctx context.Context, a store.Agent, helper bool) computer.Plan
}

// Events publishes on the event bus (events.Bus).
type Events interface {
	Publish(t events.Type, aud events.Audience, data any)
}

// Runtime runs one tool call as the agent's own (agent.Runtime).
type Runtime interface {
	Call(ctx context.Context, d agent.DirectCall, emit func(agent.Event)) (agent.ContentBlock, error)
}

// Config configures Computers.
type Config struct {
	Agents  Agents
	Nodes   Nodes
	Control Control
	Plans   Plans
	Events  Events
	Runtime Runtime
	Getenv  func(string) string
}

// Computers is Cubicle's side of the MCP server (mcpserver.Computers): it resolves the
// caller's agent — only ever among the token owner's own agents, and only those the token
// names — and runs each call as a direct call of the agent runtime (agent.Runtime.Call), so
// it meets exactly what the agent's own calls meet: the computer gate and capacity with
// auto-start (the binding acquires the desktop), the guard and its confirmations (asked of
// the token's owner in Cubicle), the control lease (input refused while a person took over),
// the history (the source "MCP: <token name>") and the event bus.
type Computers struct {
	cfg Config
	// confirmTimeout bounds the wait for a confirmation ($CUBICLE_MCP_CONFIRM_TIMEOUT, a Go
	// duration; default agent.DefaultConfirmTimeout).
	confirmTimeout time.Duration

	mu    sync.Mutex
	locks map[string]chan struct{} // per conversation: one call at a time
}

// New returns the Computers of cfg; every field of cfg is required.
func New(cfg Config) (*Computers, error) {
	if cfg.Agents == nil || cfg.Nodes == nil || cfg.Control == nil || cfg.Plans == nil || cfg.Events == nil || cfg.Runtime == nil || cfg.Getenv == nil {
		return nil, errors.New("calls: every field of Config is required")
	}
	m := &Computers{cfg: cfg, confirmTimeout: agent.DefaultConfirmTimeout, locks: map[string]chan struct{}{}}
	if v := cfg.Getenv("CUBICLE_MCP_CONFIRM_TIMEOUT"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d <= 0 {
			return nil, fmt.Errorf("CUBICLE_MCP_CONFIRM_TIMEOUT: %q is not a positive duration such as 90s or 5m", v)
		}
		m.confirmTimeout = d
	}
	return m, nil
}

var _ mcpserver.Computers = (*Computers)(nil)

// agentFor finds ref (an id, else a name, case-insensitively) among the agents c reaches.
func (m *Computers) agentFor(c apitoken.Caller, ref string) (store.Agent, error) {
	list, err := m.cfg.Agents.List(c.AccountID)
	if err != nil {
		return store.Agent{}, err
	}
	var byName []store.Agent
	for _, a := range list {
		if !c.Reaches(a.ID) {
			continue
		}
		if a.ID == ref {
			return a, nil
		}
		if strings.EqualFold(a.Name, ref) {
			byName = append(byName, a)
		}
	}
	switch len(byName) {
	case 1:
		return byName[0], nil
	case 0:
		return store.Agent{}, fault.NotFound("no agent %q is reachable with this token; list_computers shows the ones that are", ref)
	}
	return store.Agent{}, fault.Invalid("%d agents are named %q; pass the agent's id instead (list_computers shows it)", len(byName), ref)
}

// Session is the conversation that keeps an MCP token's calls on one agent.
func Session(tokenID, agentID string) string { return "mcp-" + tokenID + "-" + agentID }

func (m *Computers) List(ctx context.Context, c apitoken.Caller) ([]mcpserver.Computer, error) {
	list, err := m.cfg.Agents.List(c.AccountID)
	if err != nil {
		return nil, err
	}
	out := []mcpserver.Computer{}
	for _, a := range list {
		if !c.Reaches(a.ID) {
			continue
		}
		pc := mcpserver.Computer{AgentID: a.ID, Name: a.Name, Computer: cmp.Or(a.Computer, "none")}
		if vms, err := m.cfg.Nodes.ForAgent(a.ID); err == nil {
			if v, err := vms.Agent(ctx, c.AccountID, a.ID); err == nil {
				pc.State, pc.Node = v.Desktop.State, v.Desktop.NodeID
				if v.Desktop.ID != "" {
					if h, ok := m.cfg.Control.Holder(v.Desktop.ID); ok && h.Kind == control.HolderPerson {
						pc.ControlledBy = h.Person.Username
					}
				}
			}
		}
		out = append(out, pc)
	}
	return out, nil
}

// lock serialises the calls of one conversation (a client may send several at once); it
// gives up when ctx ends.
func (m *Computers) lock(ctx context.Context, key string) (func(), error) {
	m.mu.Lock()
	ch := m.locks[key]
	if ch == nil {
		ch = make(chan struct{}, 1)
		m.locks[key] = ch
	}
	m.mu.Unlock()
	select {
	case ch <- struct{}{}:
		return func() { <-ch }, nil
	case <-ctx.Done():
		return nil, context.Cause(ctx)
	}
}

// toolName is the name the agent's own toolbox gives tool on a's computer: computer_* for a
// desktop, its cloud_computer_* twin for a cloud computer. A click with button "right" or
// clicks 2 is the right or double click.
func (m *Computers) toolName(ctx context.Context, a store.Agent, tool string, args map[string]any) string {
	if tool == "computer_click" {
		if b, _ := args["button"].(string); b == "right" {
			tool = "computer_right_click"
		} else if fmt.Sprint(args["clicks"]) == "2" {
			tool = "computer_double_click"
		}
		delete(args, "button")
		delete(args, "clicks")
	}
	plan := m.cfg.Plans.Decide(ctx, a, false)
	if !plan.Offers(tool) && plan.Offers(computer.PrefixCloud+strings.TrimPrefix(tool, computer.PrefixVM)) {
		return computer.PrefixCloud + strings.TrimPrefix(tool, computer.PrefixVM)
	}
	return tool
}

func (m *Computers) Call(ctx context.Context, c apitoken.Caller, ref, tool string, args map[string]any) ([]agent.ContentBlock, string, error) {
	a, err := m.agentFor(c, ref)
	if err != nil {
		return nil, "", err
	}
	sess := Session(c.TokenID, a.ID)
	unlock, err := m.lock(ctx, sess)
	if err != nil {
		return nil, "", err
	}
	defer unlock()
	via := "MCP: " + c.TokenName
	call := agent.ToolCall{ID: "mcp_" + agent.NewID()[:12], Name: m.toolName(ctx, a, tool, args), Input: args}
	emit := func(e agent.Event) {
		var st string
		switch e.Type {
		case agent.RequireUserConfirm:
			st = "asked"
		case agent.UserConfirmResult:
			st = "answered"
		case agent.AllToolsDenied:
			st = "expired"
			if ctx.Err() != nil {
				st = "cancelled"
			}
		default:
			return
		}
		p := events.Confirm{SessionID: sess, AgentID: a.ID, Source: via, State: st, Reason: e.Reason}
		if st == "asked" {
			p.ToolCalls = e.ToolCalls
			if v, ok := e.Value.(map[string]any); ok {
				p.Deadline, _ = v["deadline"].(string)
			}
		}
		m.cfg.Events.Publish(events.ConfirmRequested, events.ForAccount(c.AccountID, false), p)
	}
	res, err := m.cfg.Runtime.Call(ctx, agent.DirectCall{SessionID: sess, UserID: c.AccountID, AgentID: a.ID, AgentName: a.Name,
		Via: via, Call: call, ConfirmTimeout: m.confirmTimeout}, emit)
	if err != nil {
		return nil, "", err
	}
	return res.Content, res.State, nil
}

func (m *Computers) Power(ctx context.Context, c apitoken.Caller, ref string, on bool) (string, error) {
	a, err := m.agentFor(c, ref)
	if err != nil {
		return "", err
	}
	vms, err := m.cfg.Nodes.ForAgent(a.ID)
	if err != nil {
		return "", err
	}
	action := vm.ActionStop
	if on {
		action = vm.ActionStart
	}
	v, err := vms.Act(ctx, c.AccountID, a.ID, action)
	if err != nil {
		return "", err
	}
	return fmt.Sprintf("The desktop of %s is %s.", a.Name, cmp.Or(v.Desktop.State, "unknown")), nil
}
