package backend

import (
	"context"
	"fmt"
	"os"
	"os/user"
	"path/filepath"
	"slices"
	"time"

	"cubicle/backend/agent"
	"cubicle/backend/agent/guard"
	"cubicle/backend/agent/tools"
	"cubicle/backend/auth"
	"cubicle/backend/binding"
	"cubicle/backend/control"
	"cubicle/backend/history"
	"cubicle/backend/knowledge"
	"cubicle/backend/mcpclient"
	"cubicle/backend/models"
	"cubicle/backend/nodes"
	"cubicle/backend/sandbox"
	"cubicle/backend/sandboxreview"
	"cubicle/backend/security"
	"cubicle/images/guest/wire"
)

// systemPrompt tells the model where it works.
const systemPrompt = `You are an AI agent working on your own computer: an isolated Linux desktop (XFCE, 1280x800) with a browser, a terminal and a file manager.
Use the computer_* tools to see and operate it: take a screenshot first, act with clicks, keys and typing, and check the result in the screenshot each action returns. Prefer computer_shell and the file tools for work that does not need the screen.
Your working directory is /home/cua/workspace; files there are kept across restarts.
host_* tools, when offered, act on the person's own machine: use them only when the task needs it.
Be concise; say what you did and what you found.`

// buildChat wires the agent runtime: models, safety layers (Settings → Security), the
// toolbox over the desktops, the thread↔desktop binding, history and saved conversations.
func (b *Backend) buildChat(vms binding.VMs, tasks binding.Tasks) error {
	key, err := auth.LoadOrCreateKey(filepath.Join(b.cfg.DataDir, "secrets", "model.key"))
	if err != nil {
		return err
	}
	level, err := guard.ParseLevel(os.Getenv("CUBICLE_TOOL_GUARD"))
	if err != nil {
		return fmt.Errorf("CUBICLE_TOOL_GUARD: %w", err)
	}
	home, _ := os.UserHomeDir()
	mode, err := sandbox.Mode(os.Getenv)
	if err != nil {
		return err
	}
	if b.sandbox, err = sandbox.New(mode); err != nil {
		return err
	}
	if b.sandbox.Kind() == sandbox.None {
		b.log.Warn("host tools on this server have no OS sandbox: they run only where an administrator allowed that (Settings → Security → host sandbox)", "why", b.sandbox.Problem())
	}
	b.Security, err = security.New(security.Config{
		Store: b.Store, DataDir: b.cfg.DataDir, VMRunDir: wire.RunDir, HostHome: home, VMHome: "/home/cua", DefaultLevel: level,
		LookupHome:    lookupHome,
		LocalTools:    func() []string { return append(tools.Names(), agent.HelperTool, knowledge.Tool) },
		Place:         b.computers.CallPlace(home),
		SandboxStatus: func() (string, string) { return string(b.sandbox.Kind()), b.sandbox.Problem() },
		Logger:        b.log.With("svc", "security"),
	})
	if err != nil {
		return err
	}
	b.sandboxReview, err = sandboxreview.New(sandboxreview.Config{Store: b.Store, Settings: b.Security, DataDir: b.cfg.DataDir,
		Label: func(node string) string { return b.fleet.Label(node) },
		Runner: func(node string) (sandboxreview.Runner, error) {
			r, err := b.Nodes.Node(node)
			if err != nil {
				return nil, err // not r: a nil *nodes.Remote would be a non-nil Runner
			}
			return r, nil
		},
		Protected: b.hostProtected, Logger: b.log.With("svc", "sandboxreview")})
	if err != nil {
		return err
	}
	if b.Models, err = models.New(models.Config{Store: b.Store, Key: key, Getenv: os.Getenv, Endpoints: b.Security}); err != nil {
		return err
	}
	names := func(agentID string) string {
		if a, err := b.Store.Agent(agentID); err == nil {
			return a.Name
		}
		return agentID
	}
	b.Binder, err = binding.New(binding.Config{VMs: vms, Tasks: tasks, Names: names, Fence: b.computers.Fence,
		Logger: b.log.With("svc", "binding")})
	if err != nil {
		return err
	}
	local := tools.LocalHost{Sandbox: b.sandbox, Policy: func(context.Context) (sandbox.Policy, error) {
		return b.sandboxPolicy(nodes.LocalID, home), nil
	}}
	box, err := tools.New(tools.Config{Desktops: b.Binder, Environments: b.computers, Files: hostFiles{b.Security},
		Host: local, HostDesktop: b.HostDesk, Browsers: b.Binder, Refusals: b.sandboxReview, Logger: b.log.With("svc", "tools")})
	if err != nil {
		return err
	}
	// MCP servers' secrets are sealed like model keys, under the same key file. A call their
	// policy asks about waits for the person as long as an MCP call does
	// ($CUBICLE_MCP_CONFIRM_TIMEOUT).
	var ask time.Duration
	if v := os.Getenv("CUBICLE_MCP_CONFIRM_TIMEOUT"); v != "" {
		if ask, err = time.ParseDuration(v); err != nil || ask <= 0 {
			return fmt.Errorf("CUBICLE_MCP_CONFIRM_TIMEOUT: %q is not a positive duration such as 90s or 5m", v)
		}
	}
	if b.MCPClient, err = mcpclient.New(mcpclient.Config{Store: b.Store, Key: key, Version: b.cfg.Version, AskTimeout: ask,
		Desktops: mcpDesktops{b}, OnServer: mcpServerHost{b: b, local: local, home: home},
		Logger: b.log.With("svc", "mcpclient")}); err != nil {
		return err
	}
	// The knowledge base of past runs: every finished turn is indexed (Finished), agents search
	// it with recall_past_runs; its embeddings key is sealed like model keys.
	if b.Knowledge, err = knowledge.New(knowledge.Config{Store: b.Store, Key: key, Logger: b.log.With("svc", "knowledge")}); err != nil {
		return err
	}
	b.Chat, err = agent.New(agent.Config{
		Tools: toolboxes{box: box, mcp: b.MCPClient, know: b.Knowledge}, Models: b.Models.Resolve, Finished: b.Knowledge.Record,
		Guard:    turnGuard{gate: b.computers, sec: b.Security, mcp: b.MCPClient},
		Recorder: recordedRuns{history.New(runStore{b.Store, b.Events}, b.log.With("svc", "history")), b}, Sessions: b.Store,
		Start: b.computers.Start, TurnStarted: b.turnStarted, TurnEnded: b.turnEnded,
		Logger: b.log.With("svc", "agent"), System: systemPrompt,
		// Temporary task helpers: computer tools only, on a task desktop removed when the task ends.
		Helpers: &agent.HelperConfig{Ended: b.Binder.TaskEnded},
	})
	if err != nil {
		return err
	}
	b.fleet.Attach(b.Binder, b.Chat)
	return nil
}

// turnGuard is the runtime's Guard: the computer gate first (a tool this turn's computer does
// not offer is refused, never asked about), then Settings → Security's layers.
type turnGuard struct {
	gate tools.Environments
	sec  *security.Service
	mcp  *mcpclient.Service
}

func (g turnGuard) Check(t agent.TurnInfo, c agent.ToolCall) (agent.Decision, string) {
	if mcpclient.Owns(c.Name) {
		// An MCP server's tool: its server's access policy first, then the tool guard on
		// the arguments (commands and paths), the stricter of the two.
		d, why := g.mcp.Check(t, c)
		if d == agent.Deny {
			return d, why
		}
		d2, why2 := g.sec.CheckArgs(t, c)
		switch {
		case d2 == agent.Deny:
			return d2, why2
		case d2 == agent.Ask && d == agent.Ask:
			return agent.Ask, why + "; " + why2
		case d2 == agent.Ask:
			return d2, why2
		}
		return d, why
	}
	if env, err := g.gate.Environment(context.Background(), t); err == nil {
		plan := env.Plan
		if t.TaskID != "" {
			plan = plan.ForHelper()
		}
		if why := plan.Check(c.Name); why != "" {
			return agent.Deny, why
		}
	}
	return g.sec.Check(t, c)
}

func (g turnGuard) AllowRule(t agent.TurnInfo, c agent.ToolCall, rule string) error {
	return g.sec.AllowRule(t, c, rule)
}

// Confirmed records every answer a person gives (agent.ConfirmRecorder).
func (g turnGuard) Confirmed(t agent.TurnInfo, r agent.ConfirmResult, reason string) {
	g.sec.Confirmed(t, r, reason)
}

var _ agent.ConfirmRecorder = turnGuard{}

// toolboxes are the runtime's tools: the app's own, the MCP servers' (mcp_*) and the
// knowledge base's (recall_past_runs).
type toolboxes struct {
	box  *tools.Box
	mcp  *mcpclient.Service
	know *knowledge.Service
}

func (t toolboxes) Tools(ctx context.Context, ti agent.TurnInfo) []agent.ToolSpec {
	return append(append(t.box.Tools(ctx, ti), t.mcp.Tools(ctx, ti)...), t.know.Tools(ctx, ti)...)
}

func (t toolboxes) Call(ctx context.Context, ti agent.TurnInfo, c agent.ToolCall, out *agent.ToolOutput) string {
	if knowledge.Owns(c.Name) {
		return t.know.Call(ctx, ti, c, out)
	}
	if mcpclient.Owns(c.Name) {
		return t.mcp.Call(ctx, ti, c, out)
	}
	return t.box.Call(ctx, ti, c, out)
}

// lookupHome is the home directory of account name on this machine, "" when there is none.
func lookupHome(name string) string {
	u, err := user.Lookup(name)
	if err != nil {
		return ""
	}
	return u.HomeDir
}

// sandboxPolicy is the host sandbox's policy on node, whose runner user's home is home: the
// node's settings (Settings → Security), with hidden the paths the file guard protects there
// (the data directory among them) and the credential folders of that home. The call's
// working directory is added by the host (tools.WithHostWorkDir).
func (b *Backend) sandboxPolicy(node, home string) sandbox.Policy {
	set := b.Security.HostSandbox(node)
	// The credential folders an administrator opened for reading (an approved widening) are
	// not hidden; Cubicle's data and the protected paths always are.
	creds := slices.DeleteFunc(sandbox.HomeSecrets(home), func(c string) bool { return slices.Contains(set.Read, c) })
	hidden := append(b.hostProtected(home), creds...)
	if node == nodes.LocalID {
		hidden = append(hidden, b.cfg.DataDir)
	}
	return sandbox.Policy{ReadWrite: set.ReadWrite, Hidden: hidden, Network: !set.NetworkOff, AllowNone: set.AllowNone}
}

// hostFiles is the host tools' own file check, from the protected paths in force, for the
// machine whose home is home.
type hostFiles struct{ s *security.Service }

func (h hostFiles) CheckPath(path string, write bool, home string) error {
	if f := h.s.Safety().HostFiles; f != nil {
		return f.ForHome(home).CheckPath(path, write)
	}
	return nil
}

var _ binding.Tasks = (*control.Manager)(nil)

// turnStarted is agent.Config.TurnStarted: the computer's eager binding, then the workspace's
// snapshot as the turn finds it (snapshot/workspace; never fails the turn).
func (b *Backend) turnStarted(ctx context.Context, t agent.TurnInfo) error {
	if err := b.computers.TurnStarted(ctx, t); err != nil {
		return err
	}
	if b.snaps != nil {
		b.snaps.TurnStarted(ctx, t)
	}
	return nil
}

// turnEnded is agent.Config.TurnEnded: the desktop is released, then the workspace is
// snapshotted when the turn changed it. The snapshot is taken before the turn's answer ends,
// so a chat that reloads its snapshots after the turn finds it.
func (b *Backend) turnEnded(t agent.TurnInfo) {
	if b.snaps == nil {
		b.computers.TurnEnded(t)
		return
	}
	b.snaps.TurnEnded(t, b.computers.TurnEnded) // the plan is asked before the release forgets it
}
