// Package tools is the agent's toolbox: the computer_* tools that act inside the agent's
// isolated desktop through the in-guest driver, the host_* tools that act on the execution
// node's host (its shell and files, and — for a "host" computer with screen control — its
// screen and input), computer_copy_file between the two, and the browser_* tools that drive
// the agent's own Chromium (SPEC §1.6, §7).
//
// Which of them a turn is offered, and which calls it may run, is decided once per turn by
// the computer gate (package computer): the Box asks Environments for the turn's plan and
// both lists and refuses tools by it, so a tool the model was not offered is refused with a
// message saying what to use instead.
//
// Desktop actions return a screenshot taken once the screen settled (not after a fixed
// sleep). Working directories follow SPEC §1.6/§1.7: the profile's directory (terminal.cwd)
// is the base — "", ".", "auto" and "cwd" mean /home/cua/workspace in the desktop and the
// runner user's home on the host, relative directories start there, absolute ones are used
// as configured — and relative tool paths start from the base.
package tools

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path"
	"strings"
	"time"

	"cubicle/backend/agent"
	"cubicle/backend/computer"
	"cubicle/backend/fault"
	"cubicle/backend/guest"
	"cubicle/backend/sandbox"
	"cubicle/images/guest/wire"
)

// Workspace is the desktop's persistent working directory.
const Workspace = wire.WorkspaceDir

// MaxCopy is the largest file computer_copy_file moves.
const MaxCopy = 25 << 20

// MaxFile is the largest file the read/write tools move.
const MaxFile = 25 << 20

// CapHostTools is the capability a node advertises when it can run host tools.
const CapHostTools = computer.CapHostTools

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

// Clipboard is what the clipboard tools need of a Computer; *guest.Client has it. A Computer
// without it answers those tools as unavailable.
type Clipboard interface {
	ClipboardGet(ctx context.Context, selection, mime string) (guest.Clipboard, error)
	ClipboardSet(ctx context.Context, selections []string, mime string, data []byte) error
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
	for _, specs := range [][]agent.ToolSpec{computerSpecs, cloudSpecs, hostSpecs, hostDesktopSpecs, browserSpecs} {
		for _, s := range specs {
			out = append(out, s.Name)
		}
	}
	return out
}

// Environment is what the tools need to know about an agent in one turn.
type Environment struct {
	// Plan is the turn's computer and the tool families it offers (package computer's gate).
	Plan    computer.Plan
	WorkDir string // the profile's terminal.cwd
	// Host runs the turn's host tools on the node the plan names (Plan.HostNode); nil is
	// Config.Host, this machine.
	Host Host
}

// Environments looks up an agent's environment. It must return the same plan for every call
// of one turn (and of the turn's helpers): the computer is fixed when the turn starts.
type Environments interface {
	Environment(ctx context.Context, t agent.TurnInfo) (Environment, error)
}

// FileGuard refuses sensitive paths (package security implements it). It is safe for
// concurrent use.
type FileGuard interface {
	// CheckPath returns a fault.ErrForbidden error when a tool may not read (write=false) or
	// write the absolute path on a machine whose home directory is home: protected paths
	// given as "~/…" are below it ("" applies none of them).
	CheckPath(path string, write bool, home string) error
}

// Config configures a Box. Desktops and Environments are required.
type Config struct {
	Desktops     Desktops
	Environments Environments
	Host         Host        // nil: the local host (the execution node this process runs on)
	HostDesktop  HostDesktop // the host's screen and input; nil: host desktop tools fail as unavailable
	Browsers     Browsers    // the agents' browsers; nil: browser tools fail as unavailable
	Files        FileGuard   // nil: no path is protected
	// Refusals records what the host sandbox refused (for an administrator to review and
	// perhaps widen); nil records nothing.
	Refusals RefusalRecorder
	Logger   *slog.Logger
	// Settle tunes the screenshot after actions; zero values take the driver's defaults.
	Settle       guest.SettleOptions
	ShellTimeout time.Duration // default 2 minutes; a call may ask for up to 10 minutes
	Workspace    string        // the desktop's working directory; default Workspace
}

// RefusalRecorder keeps what the host sandbox refused a call on node, whose runner user's
// home is home. It must not block for long (it runs in the tool call) and is called from many
// turns at once.
type RefusalRecorder interface {
	SandboxRefused(t agent.TurnInfo, node, home string, rs []sandbox.Refusal)
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

// plan returns the turn's plan; a helper's turn is always held to the helper's plan.
func (b *Box) plan(ctx context.Context, t agent.TurnInfo) (Environment, error) {
	env, err := b.cfg.Environments.Environment(ctx, t)
	if err != nil {
		return Environment{}, err
	}
	if t.TaskID != "" {
		env.Plan = env.Plan.ForHelper()
	}
	return env, nil
}

// Tools implements agent.Toolbox: the tools the turn's computer plan offers — nothing when
// the agent has no computer (or its environment cannot be read).
func (b *Box) Tools(ctx context.Context, t agent.TurnInfo) []agent.ToolSpec {
	env, err := b.plan(ctx, t)
	if err != nil {
		b.log.Warn("computer plan of a turn", "agent", t.AgentID, "err", err)
		return nil
	}
	var out []agent.ToolSpec
	for _, group := range [][]agent.ToolSpec{computerSpecs, cloudSpecs, hostSpecs, hostDesktopSpecs, browserSpecs} {
		for _, s := range group {
			if env.Plan.Offers(s.Name) {
				out = append(out, s)
			}
		}
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
	known := strings.HasPrefix(c.Name, computer.PrefixVM) || strings.HasPrefix(c.Name, computer.PrefixHost) ||
		strings.HasPrefix(c.Name, computer.PrefixBrowser) || strings.HasPrefix(c.Name, computer.PrefixCloud)
	if !known {
		return fault.Invalid("unknown tool %q", c.Name)
	}
	env, err := b.plan(ctx, t)
	if err != nil {
		return fmt.Errorf("agent profile: %w", err)
	}
	// The gate: a tool the turn's computer does not offer never runs.
	if why := env.Plan.Check(c.Name); why != "" {
		return fault.Forbidden("%s", why)
	}
	// A cloud_computer_* tool is its computer_* twin on the desktop the binding gives the
	// agent, which is on the cloud node for a cloud computer.
	name, _ := computer.VMTool(c.Name)
	if !strings.HasPrefix(name, computer.PrefixVM) || name == computer.ToolCopy {
		out.Started() // nothing to queue behind (computer tools start once they hold the desktop)
	}
	switch {
	case name == computer.ToolCopy:
		return b.copyFile(ctx, t, env, a, out)
	case computer.IsHostDesktop(name):
		return b.hostDesktopTool(ctx, name, a, out)
	case strings.HasPrefix(name, computer.PrefixHost):
		return b.hostTool(ctx, t, env, name, a, out)
	case strings.HasPrefix(name, computer.PrefixBrowser):
		return b.browserTool(ctx, t, name, a, out)
	}
	return b.computerTool(ctx, t, env, name, a, out)
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

// vmBase is the agent's working directory inside the desktop (SPEC §1.7): the workspace for
// "", ".", "auto" and "cwd", a relative directory under the workspace, an absolute one as
// configured.
func (b *Box) vmBase(env Environment) string {
	return joinVM(b.cfg.Workspace, env.WorkDir)
}

// vmPath resolves a path inside the desktop against the agent's working directory.
func (b *Box) vmPath(env Environment, p string) string {
	return joinVM(b.vmBase(env), p)
}

// joinVM resolves p against base with slash paths (the desktop is Linux whatever the host).
func joinVM(base, p string) string {
	switch strings.TrimSpace(p) {
	case "", ".", "auto", "cwd":
		return base
	}
	if strings.HasPrefix(p, "/") {
		return path.Clean(p)
	}
	return path.Join(base, p)
}
