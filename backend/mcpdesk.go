package backend

import (
	"context"
	"io"
	"slices"
	"sort"
	"time"

	"cubicle/backend/agent"
	"cubicle/backend/agent/tools"
	"cubicle/backend/fault"
	"cubicle/backend/hostaccess"
	"cubicle/backend/mcpclient"
	"cubicle/backend/nodes"
	"cubicle/backend/sandbox"
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

// mcpServerHost runs the stdio MCP servers an administrator marked "runs on the server"
// (mcpclient.Config.OnServer): on this machine, in its OS sandbox under node local's host
// sandbox policy — as host_shell runs — with the agent's host working directory read-write.
// Host access rules apply: only turns whose account has host tools on this server (an
// administrator, or an account granted them) reach such a server; one process per server and
// agent.
type mcpServerHost struct {
	b     *Backend
	local tools.LocalHost
	home  string // this machine's user's home
}

// Key implements mcpclient.Desktops: the agent, once its account's host access is checked.
func (h mcpServerHost) Key(t agent.TurnInfo) (string, error) {
	if t.AgentID == "" || t.TaskID != "" {
		return "", fault.Invalid("only an agent's own turns use stdio MCP servers")
	}
	ok, err := h.b.HostAccess.HostTools(t.UserID, hostaccess.LocalNode)
	if err != nil {
		return "", err
	}
	if !ok {
		return "", fault.Forbidden("this MCP server runs on the Cubicle server, with host access: an administrator grants host tools on %s in Settings → Users", h.b.fleet.Label(hostaccess.LocalNode))
	}
	return "agent-" + t.AgentID, nil
}

// Spawn implements mcpclient.Desktops: p started in the sandbox, in the agent's host working
// directory (SPEC §1.6: its working directory setting, below this machine's home).
func (h mcpServerHost) Spawn(ctx context.Context, t agent.TurnInfo, p mcpclient.Process) (io.ReadWriteCloser, error) {
	if _, err := h.Key(t); err != nil { // checked again: the grant may have been taken back
		return nil, err
	}
	dir := h.workDir(ctx, t)
	var env []string
	for k, v := range p.Env {
		env = append(env, k+"="+v)
	}
	sort.Strings(env)
	proc, err := h.local.Spawn(ctx, append([]string{p.Command}, p.Args...), env, dir)
	if err != nil {
		return nil, err // not proc: a nil *HostProc would be a non-nil io.ReadWriteCloser
	}
	return proc, nil
}

// workDir is the agent's host working directory on this machine.
func (h mcpServerHost) workDir(ctx context.Context, t agent.TurnInfo) string {
	if env, err := h.b.computers.Environment(ctx, t); err == nil {
		return tools.HostWorkDir(h.home, env.WorkDir)
	}
	return h.home
}

// SandboxRefused implements mcpclient.SandboxWatcher: what the OS sandbox refused a server
// running here, read from its tool's result as host_shell's are read from its error output,
// is recorded for an administrator's review (Settings → Security → host sandbox, where it can
// become a widening) and said to the agent.
func (h mcpServerHost) SandboxRefused(t agent.TurnInfo, output string) []string {
	if !sandbox.MayReport(output) {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	p, err := h.local.Policy(ctx)
	if err != nil {
		return nil
	}
	if p.WorkDir == "" { // as Spawn ran it: the agent's working directory read-write
		p.WorkDir = h.workDir(ctx, t)
	}
	rs := sandbox.Refusals(p, []byte(output))
	if len(rs) == 0 {
		return nil
	}
	h.b.log.Warn("the host sandbox refused an MCP server on this machine an access", "agent", t.AgentID, "refused", len(rs))
	h.b.sandboxReview.SandboxRefused(t, nodes.LocalID, h.home, rs)
	var notes []string
	for _, r := range rs {
		if n := r.Note(p); !slices.Contains(notes, n) {
			notes = append(notes, n)
		}
	}
	return notes
}
