package backend

import (
	"cmp"
	"context"
	"fmt"
	"os"
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
	"cubicle/backend/store"
	"cubicle/backend/vm"
)

// mcpComputers is Cubicle's side of the MCP server (mcpserver.Computers): it resolves the
// caller's agent — only ever among the token owner's own agents, and only those the token
// names — and runs each call as a direct call of the agent runtime (agent.Runtime.Call), so
// it meets exactly what the agent's own calls meet: the computer gate and capacity with
// auto-start (the binding acquires the desktop), the guard and its confirmations (asked of
// the token's owner in Cubicle), the control lease (input refused while a person took over),
// the history (the source "MCP: <token name>") and the event bus.
type mcpComputers struct {
	b *Backend
	// confirmTimeout bounds the wait for a confirmation ($CUBICLE_MCP_CONFIRM_TIMEOUT, a Go
	// duration; default agent.DefaultConfirmTimeout).
	confirmTimeout time.Duration

	mu    sync.Mutex
	locks map[string]chan struct{} // per conversation: one call at a time
}

func newMCPComputers(b *Backend) (*mcpComputers, error) {
	m := &mcpComputers{b: b, confirmTimeout: agent.DefaultConfirmTimeout, locks: map[string]chan struct{}{}}
	if v := os.Getenv("CUBICLE_MCP_CONFIRM_TIMEOUT"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d <= 0 {
			return nil, fmt.Errorf("CUBICLE_MCP_CONFIRM_TIMEOUT: %q is not a positive duration such as 90s or 5m", v)
		}
		m.confirmTimeout = d
	}
	return m, nil
}

var _ mcpserver.Computers = (*mcpComputers)(nil)

// agentFor finds ref (an id, else a name, case-insensitively) among the agents c reaches.
func (m *mcpComputers) agentFor(c apitoken.Caller, ref string) (store.Agent, error) {
	list, err := m.b.Profiles.List(c.AccountID)
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

// SessionID is the conversation that keeps an MCP token's calls on one agent.
func mcpSession(tokenID, agentID string) string { return "mcp-" + tokenID + "-" + agentID }

func (m *mcpComputers) List(ctx context.Context, c apitoken.Caller) ([]mcpserver.Computer, error) {
	list, err := m.b.Profiles.List(c.AccountID)
	if err != nil {
		return nil, err
	}
	out := []mcpserver.Computer{}
	for _, a := range list {
		if !c.Reaches(a.ID) {
			continue
		}
		pc := mcpserver.Computer{AgentID: a.ID, Name: a.Name, Computer: cmp.Or(a.Computer, "none")}
		if vms, err := m.b.fleet.ForAgent(a.ID); err == nil {
			if v, err := vms.Agent(ctx, c.AccountID, a.ID); err == nil {
				pc.State, pc.Node = v.Desktop.State, v.Desktop.NodeID
				if v.Desktop.ID != "" {
					if h, ok := m.b.Control.Holder(v.Desktop.ID); ok && h.Kind == control.HolderPerson {
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
func (m *mcpComputers) lock(ctx context.Context, key string) (func(), error) {
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
func (m *mcpComputers) toolName(ctx context.Context, a store.Agent, tool string, args map[string]any) string {
	if tool == "computer_click" {
		if b, _ := args["button"].(string); b == "right" {
			tool = "computer_right_click"
		} else if fmt.Sprint(args["clicks"]) == "2" {
			tool = "computer_double_click"
		}
		delete(args, "button")
		delete(args, "clicks")
	}
	plan := m.b.computers.Decide(ctx, a, false)
	if !plan.Offers(tool) && plan.Offers(computer.PrefixCloud+strings.TrimPrefix(tool, computer.PrefixVM)) {
		return computer.PrefixCloud + strings.TrimPrefix(tool, computer.PrefixVM)
	}
	return tool
}

func (m *mcpComputers) Call(ctx context.Context, c apitoken.Caller, ref, tool string, args map[string]any) ([]agent.ContentBlock, string, error) {
	a, err := m.agentFor(c, ref)
	if err != nil {
		return nil, "", err
	}
	sess := mcpSession(c.TokenID, a.ID)
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
		m.b.Events.Publish(events.ConfirmRequested, events.ForAccount(c.AccountID, false), p)
	}
	res, err := m.b.Chat.Call(ctx, agent.DirectCall{SessionID: sess, UserID: c.AccountID, AgentID: a.ID, AgentName: a.Name,
		Via: via, Call: call, ConfirmTimeout: m.confirmTimeout}, emit)
	if err != nil {
		return nil, "", err
	}
	return res.Content, res.State, nil
}

func (m *mcpComputers) Power(ctx context.Context, c apitoken.Caller, ref string, on bool) (string, error) {
	a, err := m.agentFor(c, ref)
	if err != nil {
		return "", err
	}
	vms, err := m.b.fleet.ForAgent(a.ID)
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
