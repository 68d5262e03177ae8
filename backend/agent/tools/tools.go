// Package tools is the agent's toolbox: the computer_* tools that act inside the agent's
// isolated desktop through the in-guest driver, the host_* tools that act on the execution
// node's host when the person allowed the host environment (SPEC §1.6), and
// computer_copy_file between the two.
//
// Desktop actions return a screenshot taken once the screen settled (not after a fixed
// sleep). Working directories follow SPEC §1.6/§1.7: in the desktop "", ".", "auto" and "cwd"
// mean /home/cua/workspace and relative paths start there; on the host they mean the runner
// user's home; explicit absolute paths are used as configured.
package tools

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"time"

	"cubicle/backend/agent"
	"cubicle/backend/fault"
	"cubicle/backend/guest"
)

// Workspace is the desktop's persistent working directory.
const Workspace = "/home/cua/workspace"

// MaxCopy is the largest file computer_copy_file moves.
const MaxCopy = 25 << 20

// MaxFile is the largest file the read/write tools move.
const MaxFile = 25 << 20

// CapHostTools is the capability a node advertises when it can run host tools.
const CapHostTools = "host-computer-tools-v1"

// Computer is the part of the driver client the tools use (guest.Client implements it).
type Computer interface {
	Screenshot(ctx context.Context, o guest.ScreenshotOptions) (guest.Frame, error)
	WaitSettled(ctx context.Context, o guest.SettleOptions) (guest.Frame, error)
	Input(ctx context.Context, in guest.Input) error
	Exec(ctx context.Context, r guest.ExecRequest) (guest.ExecResult, error)
	ReadFile(ctx context.Context, path string, maxBytes int64) ([]byte, error)
	WriteFile(ctx context.Context, path string, data []byte, mode os.FileMode) error
	Mkdir(ctx context.Context, path string, parents bool) error
}

// writeVM writes a file in the desktop, creating its parent directories.
func writeVM(ctx context.Context, pc Computer, path string, data []byte) error {
	if dir := path[:strings.LastIndexByte(path, '/')+1]; len(dir) > 1 {
		if err := pc.Mkdir(ctx, dir, true); err != nil {
			return err
		}
	}
	return pc.WriteFile(ctx, path, data, 0o644)
}

// Desktops binds a chat thread to its desktop (SPEC §2.3): the first computer tool call of a
// thread acquires it, later calls reuse it. Acquire is safe for concurrent use and idempotent
// per thread; it fails with a clear fault.ErrConflict while a person controls the desktop.
type Desktops interface {
	Acquire(ctx context.Context, t agent.TurnInfo) (Computer, error)
}

// Names lists every tool the toolbox can offer (the access policy denies any other name).
func Names() []string {
	var out []string
	for _, specs := range [][]agent.ToolSpec{computerSpecs, hostSpecs} {
		for _, s := range specs {
			out = append(out, s.Name)
		}
	}
	return out
}

// Environment is what the tools need to know about an agent.
type Environment struct {
	// AllowHost: the person checked "Allow host environment" and an administrator granted the
	// account host tools on this node.
	AllowHost bool
	// AllowHostDesktop: an administrator granted the account host desktop tools on this node.
	AllowHostDesktop bool
	WorkDir          string // the profile's terminal.cwd
}

// Environments looks up an agent's environment at each turn.
type Environments interface {
	Environment(ctx context.Context, t agent.TurnInfo) (Environment, error)
}

// FileGuard refuses sensitive paths (agent/guard implements it).
type FileGuard interface {
	CheckPath(path string, write bool) error
}

// Config configures a Box. Desktops and Environments are required.
type Config struct {
	Desktops     Desktops
	Environments Environments
	Host         Host      // nil: the local host (the execution node this process runs on)
	Files        FileGuard // nil: no path is protected
	NodeCaps     []string  // capabilities of the execution node (CapHostTools enables host tools)
	Logger       *slog.Logger
	// Settle tunes the screenshot after actions; zero values take the driver's defaults.
	Settle       guest.SettleOptions
	ShellTimeout time.Duration // default 2 minutes; a call may ask for up to 10 minutes
	Workspace    string        // the desktop's working directory; default Workspace
}

// Box implements agent.Toolbox.
type Box struct {
	cfg Config
	log *slog.Logger
}

// New returns a Box.
func New(cfg Config) (*Box, error) {
	if cfg.Desktops == nil || cfg.Environments == nil {
		return nil, errors.New("tools: Config.Desktops and Config.Environments are required")
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Host == nil {
		cfg.Host = LocalHost{}
	}
	if cfg.Workspace == "" {
		cfg.Workspace = Workspace
	}
	if cfg.ShellTimeout <= 0 {
		cfg.ShellTimeout = 2 * time.Minute
	}
	if cfg.Settle.Screenshot.Format == "" {
		cfg.Settle.Screenshot = guest.ScreenshotOptions{Format: "jpeg", Quality: 75, MaxWidth: 1280}
	}
	if cfg.Settle.Max == 0 {
		cfg.Settle.Max = 3 * time.Second
	}
	return &Box{cfg: cfg, log: cfg.Logger}, nil
}

func (b *Box) hostAllowed(env Environment) bool {
	if !env.AllowHost {
		return false
	}
	for _, c := range b.cfg.NodeCaps {
		if c == CapHostTools {
			return true
		}
	}
	return false
}

// Tools implements agent.Toolbox: the computer tools always, the host tools only when the
// person allowed the host environment and the node can run them — and never for a temporary
// task helper (t.TaskID set), which does not inherit host tools (SPEC §1.6).
func (b *Box) Tools(ctx context.Context, t agent.TurnInfo) []agent.ToolSpec {
	out := append([]agent.ToolSpec(nil), computerSpecs...)
	if t.TaskID != "" {
		return out
	}
	env, err := b.cfg.Environments.Environment(ctx, t)
	if err == nil && b.hostAllowed(env) {
		out = append(out, hostSpecs...)
	}
	return out
}

// Call implements agent.Toolbox.
func (b *Box) Call(ctx context.Context, t agent.TurnInfo, c agent.ToolCall, out *agent.ToolOutput) string {
	err := b.call(ctx, t, c, out)
	if err == nil {
		return agent.StateSuccess
	}
	if ctx.Err() != nil {
		out.Text("Interrupted.")
		return agent.StateInterrupted
	}
	if errors.Is(err, fault.ErrForbidden) {
		out.Text("Refused: " + err.Error())
		return agent.StateDenied
	}
	out.Text("Error: " + err.Error())
	return agent.StateError
}

func (b *Box) call(ctx context.Context, t agent.TurnInfo, c agent.ToolCall, out *agent.ToolOutput) error {
	a := args(c.Input)
	switch {
	case strings.HasPrefix(c.Name, "host_"), c.Name == "computer_copy_file":
		if t.TaskID != "" {
			return fault.Forbidden("%s is not available to a task helper: helpers never get host tools; use the computer_* tools of the task desktop", c.Name)
		}
		env, err := b.cfg.Environments.Environment(ctx, t)
		if err != nil {
			return fmt.Errorf("agent profile: %w", err)
		}
		if !b.hostAllowed(env) {
			if !env.AllowHost {
				return fault.Forbidden("%s needs \"Allow host environment\", which is off for this agent; use the computer_* tools, which run inside the agent's desktop", c.Name)
			}
			return fault.Forbidden("this execution node does not offer host tools (capability %s); update its runner", CapHostTools)
		}
		if c.Name == "computer_copy_file" {
			return b.copyFile(ctx, t, a, out)
		}
		return b.hostTool(ctx, env, c.Name, a, out)
	case strings.HasPrefix(c.Name, "computer_"):
		return b.computerTool(ctx, t, c.Name, a, out)
	}
	return fault.Invalid("unknown tool %q", c.Name)
}

// args reads a tool's JSON input.
type args map[string]any

func (a args) str(k string) string {
	s, _ := a[k].(string)
	return s
}

func (a args) need(k string) (string, error) {
	s, ok := a[k].(string)
	if !ok || s == "" {
		return "", fault.Invalid("argument %q (a string) is required", k)
	}
	return s, nil
}

func (a args) int(k string) (int, bool) {
	switch v := a[k].(type) {
	case float64:
		return int(v), true
	case int:
		return v, true
	case json.Number:
		n, err := v.Int64()
		return int(n), err == nil
	}
	return 0, false
}

func (a args) xy() (int, int, error) {
	x, okx := a.int("x")
	y, oky := a.int("y")
	if !okx || !oky || x < 0 || y < 0 {
		return 0, 0, fault.Invalid("arguments x and y (screen pixels, ≥ 0) are required")
	}
	return x, y, nil
}

// image writes a frame to the result.
func image(out *agent.ToolOutput, f guest.Frame) {
	mt := "image/jpeg"
	if f.Format == "png" {
		mt = "image/png"
	}
	out.Text(fmt.Sprintf("Screenshot %dx%d (frame %d).", f.Width, f.Height, f.ID))
	out.Image(mt, base64.StdEncoding.EncodeToString(f.Data))
}

// vmPath resolves a path inside the desktop.
func (b *Box) vmPath(p string) string {
	switch strings.TrimSpace(p) {
	case "", ".", "auto", "cwd":
		return b.cfg.Workspace
	}
	if strings.HasPrefix(p, "/") {
		return p
	}
	return b.cfg.Workspace + "/" + strings.TrimPrefix(p, "./")
}
