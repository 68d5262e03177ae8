package backend

import (
	"context"
	"io"
	"time"

	"cubicle/backend/agent"
	"cubicle/backend/fault"
	"cubicle/backend/mcpclient"
)

// mcpDesktops runs stdio MCP servers inside agents' own desktops (mcpclient.Desktops): the
// desktop is acquired like a computer tool's (started when needed, held as the turn's task)
// and the server is started in it through its driver (mcpclient.StartInDesk).
type mcpDesktops struct{ b *Backend }

// Key implements mcpclient.Desktops: an agent has one desktop of its own. An agent whose
// computer has no desktop (none, host, browser only) runs no stdio servers: none is started
// for them.
func (d mcpDesktops) Key(t agent.TurnInfo) (string, error) {
	if t.AgentID == "" || t.TaskID != "" {
		return "", fault.Invalid("only an agent's own turns use stdio MCP servers")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	env, err := d.b.computers.Environment(ctx, t)
	if err != nil {
		return "", err
	}
	if !env.Plan.VM && !env.Plan.Cloud {
		return "", fault.Conflict("stdio MCP servers run inside the agent's desktop, and this agent's computer has none: choose Local VM in its computer panel")
	}
	return "agent-" + t.AgentID, nil
}

// Spawn implements mcpclient.Desktops.
func (d mcpDesktops) Spawn(ctx context.Context, t agent.TurnInfo, p mcpclient.Process) (io.ReadWriteCloser, error) {
	desk, err := d.b.Binder.AcquireDesktop(ctx, t)
	if err != nil {
		return nil, err
	}
	if desk.Computer == nil || desk.Tunnel == nil {
		return nil, fault.Unavailable("the agent's desktop cannot run stdio MCP servers (no tunnel to it)")
	}
	return mcpclient.StartInDesk(ctx, mcpclient.Desk{Exec: desk.Computer.Exec, Tunnel: desk.Tunnel}, p)
}
