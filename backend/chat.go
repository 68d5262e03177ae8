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
	"cubicle/backend/hostaccess"
	"cubicle/backend/models"
	"cubicle/backend/profile"
	"cubicle/backend/security"
	"cubicle/backend/store"
)

// systemPrompt tells the model where it works.
const systemPrompt = `You are an AI agent working on your own computer: an isolated Linux desktop (XFCE, 1280x800) with a browser, a terminal and a file manager.
Use the computer_* tools to see and operate it: take a screenshot first, act with clicks, keys and typing, and check the result in the screenshot each action returns. Prefer computer_shell and the file tools for work that does not need the screen.
Your working directory is /home/cua/workspace; files there are kept across restarts.
host_* tools, when offered, act on the person's own machine: use them only when the task needs it.
Be concise; say what you did and what you found.`

// buildChat wires the agent runtime: models, safety layers (Settings → Security), the toolbox
// over the desktops, the thread↔desktop binding, history and saved conversations.
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
	b.HostAccess = hostaccess.New(b.Store)
	envs := environments{st: b.Store, host: b.HostAccess}
	b.Security, err = security.New(security.Config{
		Store: b.Store, DataDir: b.cfg.DataDir, HostHome: home, VMHome: "/home/cua", DefaultLevel: level,
		LocalTools: func() []string { return append(tools.Names(), agent.HelperTool) },
		WorkDir:    envs.workDir(home), Logger: b.log.With("svc", "security"),
	})
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
	b.Binder, err = binding.New(binding.Config{VMs: vms, Tasks: tasks, Names: names, Logger: b.log.With("svc", "binding")})
	if err != nil {
		return err
	}
	box, err := tools.New(tools.Config{Desktops: b.Binder, Environments: envs, Files: hostFiles{b.Security},
		NodeCaps: []string{tools.CapHostTools}, Logger: b.log.With("svc", "tools")})
	if err != nil {
		return err
	}
	b.Chat, err = agent.New(agent.Config{
		Tools: box, Models: b.Models.Resolve, Guard: b.Security,
		Recorder: history.New(b.Store, b.log.With("svc", "history")), Sessions: b.Store,
		TurnEnded: b.Binder.TurnEnded, Logger: b.log.With("svc", "agent"), System: systemPrompt,
		// Temporary task helpers: computer tools only, on a task desktop removed when the task ends.
		Helpers: &agent.HelperConfig{Ended: b.Binder.TaskEnded},
	})
	return err
}

// environments reads an agent's environment from its profile (SPEC §1.6): host tools only
// next to a VM or a cloud computer with "Allow host environment" checked, and only while an
// administrator grants the account host access on this node (SPEC §3).
type environments struct {
	st   *store.Store
	host *hostaccess.Checker
}

func (e environments) Environment(ctx context.Context, t agent.TurnInfo) (tools.Environment, error) {
	if t.AgentID == "" {
		return tools.Environment{}, nil
	}
	a, err := e.st.Agent(t.AgentID)
	if err != nil {
		return tools.Environment{}, err
	}
	if a.AccountID != t.UserID {
		return tools.Environment{}, fmt.Errorf("agent %s belongs to another account", t.AgentID)
	}
	access, err := e.host.Check(a.AccountID, hostaccess.LocalNode)
	if err != nil {
		return tools.Environment{}, err
	}
	return tools.Environment{
		AllowHost:        a.AllowHostEnvironment && profile.AllowsHostEnvironment(a.Computer) && access.HostTools,
		AllowHostDesktop: access.HostDesktop,
		WorkDir:          a.WorkDir,
	}, nil
}

// workDir is where relative paths of a call start: the desktop's workspace, or for host tools
// the agent's working directory (default the runner user's home).
func (e environments) workDir(home string) func(t agent.TurnInfo, tool string) string {
	return func(t agent.TurnInfo, tool string) string {
		if !strings.HasPrefix(tool, "host_") {
			return tools.Workspace
		}
		if a, err := e.st.Agent(t.AgentID); err == nil && filepath.IsAbs(a.WorkDir) {
			return a.WorkDir
		}
		return home
	}
}

// hostFiles is the host tools' own file check, from the protected paths in force.
type hostFiles struct{ s *security.Service }

func (h hostFiles) CheckPath(path string, write bool) error {
	if f := h.s.Safety().HostFiles; f != nil {
		return f.CheckPath(path, write)
	}
	return nil
}

var _ binding.Tasks = (*control.Manager)(nil)
