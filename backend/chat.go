package backend

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"cubicle/backend/agent"
	"cubicle/backend/agent/guard"
	"cubicle/backend/agent/tools"
	"cubicle/backend/auth"
	"cubicle/backend/binding"
	"cubicle/backend/control"
	"cubicle/backend/history"
	"cubicle/backend/models"
	"cubicle/backend/vm"
	"cubicle/images/guest/wire"
)

// systemPrompt tells the model where it works.
const systemPrompt = `You are an AI agent working on your own computer: an isolated Linux desktop (XFCE, 1280x800) with a browser, a terminal and a file manager.
Use the computer_* tools to see and operate it: take a screenshot first, act with clicks, keys and typing, and check the result in the screenshot each action returns. Prefer computer_shell and the file tools for work that does not need the screen.
Your working directory is /home/cua/workspace; files there are kept across restarts.
host_* tools, when offered, act on the person's own machine: use them only when the task needs it.
Be concise; say what you did and what you found.`

// buildChat wires the agent runtime: models, safety layers, the toolbox over the desktops,
// the thread↔desktop binding, history and saved conversations.
func (b *Backend) buildChat(vms binding.VMs, tasks binding.Tasks) error {
	key, err := auth.LoadOrCreateKey(filepath.Join(b.cfg.DataDir, "secrets", "model.key"))
	if err != nil {
		return err
	}
	if b.Models, err = models.New(models.Config{Store: b.Store, Key: key, Getenv: os.Getenv}); err != nil {
		return err
	}
	level, err := guard.ParseLevel(os.Getenv("CUBICLE_TOOL_GUARD"))
	if err != nil {
		return fmt.Errorf("CUBICLE_TOOL_GUARD: %w", err)
	}
	g, err := guard.New(guard.Config{Level: level})
	if err != nil {
		return err
	}
	dataDir, err := filepath.Abs(b.cfg.DataDir)
	if err != nil {
		return err
	}
	hostFiles, err := guard.NewFileGuard([]string{dataDir})
	if err != nil {
		return err
	}
	vmFiles, err := guard.NewLexicalFileGuard([]string{wire.RunDir})
	if err != nil {
		return err
	}
	home, _ := os.UserHomeDir()
	safety := &guard.Safety{Guard: g, HostFiles: hostFiles, VMFiles: vmFiles, HostHome: home, VMHome: "/home/cua"}

	names := func(agentID string) string {
		if a, err := b.Store.Agent(agentID); err == nil {
			return a.Name
		}
		return agentID
	}
	b.computers = newComputers(b)
	b.Binder, err = binding.New(binding.Config{VMs: vms, Tasks: tasks, Names: names, Fence: b.computers.fence,
		Logger: b.log.With("svc", "binding")})
	if err != nil {
		return err
	}
	box, err := tools.New(tools.Config{Desktops: b.Binder, Environments: b.computers, Files: hostFiles,
		HostDesktop: b.HostDesk, Browsers: b.Binder, Logger: b.log.With("svc", "tools")})
	if err != nil {
		return err
	}
	b.Chat, err = agent.New(agent.Config{
		Tools: box, Models: b.Models.Resolve, Guard: safetyGuard{s: safety, envs: b.computers, home: home},
		Recorder: history.New(runStore{b.Store, b.Events}, b.log.With("svc", "history")), Sessions: b.Store,
		Start: b.computers.Start, TurnStarted: b.computers.TurnStarted, TurnEnded: b.computers.TurnEnded,
		Logger: b.log.With("svc", "agent"), System: systemPrompt,
		// Temporary task helpers: computer tools only, on a task desktop removed when the task ends.
		Helpers: &agent.HelperConfig{Ended: b.Binder.TaskEnded},
	})
	return err
}

// safetyGuard adapts the safety layers to the runtime's Guard.
type safetyGuard struct {
	s    *guard.Safety
	envs tools.Environments
	home string
}

func (g safetyGuard) Check(t agent.TurnInfo, c agent.ToolCall) (agent.Decision, string) {
	workDir := tools.Workspace
	env, envErr := g.envs.Environment(context.Background(), t)
	if envErr == nil {
		// The computer gate first: a tool this turn's computer does not offer is refused, never
		// asked about.
		plan := env.Plan
		if t.TaskID != "" {
			plan = plan.ForHelper()
		}
		if why := plan.Check(c.Name); why != "" {
			return agent.Deny, why
		}
		if d := vm.ResolveWorkDir(env.WorkDir); d != "" {
			workDir = d
		}
	}
	if strings.HasPrefix(c.Name, "host_") {
		workDir = g.home
		if envErr == nil && filepath.IsAbs(env.WorkDir) {
			workDir = env.WorkDir
		} else if envErr == nil && !filepath.IsAbs(env.WorkDir) && vm.ResolveWorkDir(env.WorkDir) != "" {
			workDir = filepath.Join(g.home, env.WorkDir)
		}
	}
	d, reason, _ := g.s.Decide(guard.ToolCall{Name: c.Name, Args: c.Input}, workDir)
	return agent.Decision(d), reason
}

func (g safetyGuard) AllowRule(t agent.TurnInfo, c agent.ToolCall, rule string) {
	_ = g.s.AllowRule(guard.ToolCall{Name: c.Name, Args: c.Input}, rule)
}

var _ binding.Tasks = (*control.Manager)(nil)
