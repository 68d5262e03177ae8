package tools

import (
	"bytes"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"cubicle/backend/agent"
	"cubicle/backend/fault"
	"cubicle/backend/history"
	"cubicle/backend/sandbox"
)

var hostSpecs = []agent.ToolSpec{
	spec("host_shell", hostShellLead+" on the execution node's host, with the runner user's permissions (default directory: the profile's working directory, else the home directory).", shellParam),
	spec("host_read_file", "Read a file on the execution node's host.", pathParams),
	spec("host_write_file", "Write a file on the execution node's host (replaced atomically).", writeParam),
	spec("host_share_file", shareLead+" on the execution node's host.", shareParams),
	spec("computer_copy_file", "Copy a file between the host and the agent's desktop (binary safe, at most 25 MiB; an existing target is overwritten).",
		`{"type":"object","properties":{"from":{"type":"string","enum":["host","vm"],"description":"where the source is"},"source":{"type":"string"},"target":{"type":"string"}},"required":["from","source","target"]}`),
}

// Host runs the host tools. LocalHost runs them on this machine; the backend's runner host
// runs them on a runner's machine over its link (Environment.Host).
type Host interface {
	Shell(ctx context.Context, cmd, dir string, timeout time.Duration, maxOut int) (ShellResult, error)
	ReadFile(ctx context.Context, path string, max int64) ([]byte, error)
	WriteFile(ctx context.Context, path string, data []byte) error
	Home(ctx context.Context) (string, error)
}

// ShellResult is how a host command ended.
type ShellResult struct {
	ExitCode       int
	Stdout, Stderr []byte
	Truncated      bool
	TimedOut       bool
	// Refused says what the OS sandbox refused (sandbox.Explain), for the chat; Refusals
	// are the same as records (sandbox.Refusals).
	Refused  []string
	Refusals []sandbox.Refusal
	// Unsandboxed: the command ran without an OS sandbox (the node allows that).
	Unsandboxed bool
	// Usage is what the command's process tree cost (history.ProcessUsage).
	Usage agent.ToolUsage
}

// LocalHost is the machine this process runs on.
type LocalHost struct {
	// Interpreter is the program host_shell runs commands with; "" picks the platform's:
	// /bin/sh on Unix; on Windows PowerShell (pwsh, else Windows PowerShell), else cmd.exe.
	Interpreter string
	// Sandbox runs the host tools in an OS sandbox under Policy (issue 26); nil runs them
	// without one (the plain host of unit tests and of the bench's peer row).
	Sandbox *sandbox.Sandbox
	// Policy is the node's sandbox policy; the call's working directory (WithHostWorkDir) is
	// filled in when it names none. Required with Sandbox.
	Policy func(ctx context.Context) (sandbox.Policy, error)
}

type workDirKey struct{}

// WithHostWorkDir returns ctx carrying the agent's working directory on the host, which the
// sandbox makes read-write for the call (a request-scoped value: the call's place).
func WithHostWorkDir(ctx context.Context, dir string) context.Context {
	return context.WithValue(ctx, workDirKey{}, dir)
}

// HostWorkDirOf is the working directory WithHostWorkDir put in ctx ("" = none).
func HostWorkDirOf(ctx context.Context) string {
	d, _ := ctx.Value(workDirKey{}).(string)
	return d
}

// policy is the sandbox policy of a call.
func (h LocalHost) policy(ctx context.Context) (sandbox.Policy, error) {
	if h.Policy == nil {
		return sandbox.Policy{}, errors.New("tools: LocalHost.Sandbox needs LocalHost.Policy")
	}
	p, err := h.Policy(ctx)
	if err != nil {
		return p, err
	}
	if p.WorkDir == "" {
		p.WorkDir = HostWorkDirOf(ctx)
	}
	return p, nil
}

// sandboxed puts c into the sandbox under p: its command line wrapped, Cubicle's own
// variables (tokens, keys) out of its environment. The returned cleanup runs when c ended.
func (h LocalHost) sandboxed(ctx context.Context, c *exec.Cmd, p sandbox.Policy) (sandbox.Command, error) {
	w, err := h.Sandbox.Wrap(ctx, p, append([]string{c.Path}, c.Args[1:]...))
	if err != nil {
		return w, err
	}
	c.Env = append(hostEnv(), w.Env...)
	if !w.Sandboxed {
		return w, nil
	}
	path, err := exec.LookPath(w.Argv[0])
	if err != nil {
		w.Cleanup()
		return w, fault.Unavailable("sandbox: %v", err)
	}
	c.Path, c.Args = path, w.Argv
	c.Env = append(c.Env, rawCmdLine(c)...)
	return w, nil
}

// hostEnv is this process's environment without Cubicle's own variables (tokens, keys),
// which a host command must not see; the sandbox's own (CUBICLE_SANDBOX_*) stay.
func hostEnv() []string {
	var env []string
	for _, e := range os.Environ() {
		if !strings.HasPrefix(e, "CUBICLE_") || strings.HasPrefix(e, "CUBICLE_SANDBOX_") {
			env = append(env, e)
		}
	}
	return env
}

// Home is the runner user's home directory.
func (LocalHost) Home(context.Context) (string, error) { return os.UserHomeDir() }

// Shell runs cmd with the host's shell in dir. When the timeout passes, the command and every
// process it started are killed: its process group on Unix, its job object on Windows.
func (h LocalHost) Shell(ctx context.Context, cmd, dir string, timeout time.Duration, maxOut int) (ShellResult, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	for attempt := 1; ; attempt++ {
		res, wrapped, err := h.shellOnce(ctx, cmd, dir, maxOut)
		if err != nil || !wrapped || !sandbox.SetupRaced(res.ExitCode, res.Stderr) || attempt == sandbox.SetupAttempts {
			return res, err
		}
		// The sandbox was not made (a host mount vanished under bubblewrap): nothing ran.
		select {
		case <-ctx.Done():
			return res, nil
		case <-time.After(time.Duration(attempt) * 10 * time.Millisecond):
		}
	}
}

// shellOnce runs cmd once; wrapped says whether it ran in the sandbox.
func (h LocalHost) shellOnce(ctx context.Context, cmd, dir string, maxOut int) (ShellResult, bool, error) {
	c, err := h.command(ctx, cmd)
	if err != nil {
		return ShellResult{}, false, err
	}
	c.Dir = dir
	c.WaitDelay = 2 * time.Second
	var (
		p    sandbox.Policy
		wrap = sandbox.Command{Cleanup: func() {}}
	)
	if h.Sandbox != nil {
		if p, err = h.policy(ctx); err != nil {
			return ShellResult{}, false, err
		}
		if wrap, err = h.sandboxed(ctx, c, p); err != nil {
			return ShellResult{}, false, err
		}
		defer wrap.Cleanup()
	}
	stdout, stderr := &capped{max: maxOut}, &capped{max: maxOut}
	c.Stdout, c.Stderr = stdout, stderr
	err = runTree(c)
	res := ShellResult{Stdout: stdout.buf.Bytes(), Stderr: stderr.buf.Bytes(), Truncated: stdout.cut || stderr.cut,
		Unsandboxed: h.Sandbox != nil && !wrap.Sandboxed, Usage: history.ProcessUsage(c.ProcessState)}
	var ee *exec.ExitError
	switch {
	case ctx.Err() == context.DeadlineExceeded:
		res.TimedOut, res.ExitCode = true, -1
		return res, wrap.Sandboxed, nil
	case errors.As(err, &ee):
		res.ExitCode = ee.ExitCode()
		if wrap.Sandboxed {
			out := append(append([]byte{}, res.Stderr...), res.Stdout...)
			res.Refused, res.Refusals = sandbox.Explain(p, out), sandbox.Refusals(p, out)
		}
		return res, wrap.Sandboxed, nil
	case err != nil:
		if _, statErr := os.Stat(dir); dir != "" && errors.Is(statErr, fs.ErrNotExist) {
			return res, false, fault.NotFound("working directory %s does not exist on the host", dir)
		}
		return res, false, fmt.Errorf("host shell: %w", err)
	}
	return res, wrap.Sandboxed, nil
}

// ReadFile reads at most max bytes of path (in the sandbox, when there is one).
func (h LocalHost) ReadFile(ctx context.Context, path string, max int64) ([]byte, error) {
	if h.Sandbox == nil {
		return sandbox.ReadFileDirect(path, max)
	}
	p, err := h.policy(ctx)
	if err != nil {
		return nil, err
	}
	return h.Sandbox.ReadFile(ctx, p, path, max)
}

// WriteFile replaces path atomically (temp file + rename), creating parent directories (in
// the sandbox, when there is one).
func (h LocalHost) WriteFile(ctx context.Context, path string, data []byte) error {
	if h.Sandbox == nil {
		return sandbox.WriteFileDirect(path, data)
	}
	p, err := h.policy(ctx)
	if err != nil {
		return err
	}
	return h.Sandbox.WriteFile(ctx, p, path, data)
}

// capped keeps the first max bytes written to it. Safe for concurrent use.
type capped struct {
	mu  sync.Mutex
	buf bytes.Buffer
	max int
	cut bool
}

// String is what was kept.
func (c *capped) String() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.buf.String()
}

func (c *capped) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if room := c.max - c.buf.Len(); room < len(p) {
		c.cut = true
		if room > 0 {
			c.buf.Write(p[:room])
		}
		return len(p), nil
	}
	c.buf.Write(p)
	return len(p), nil
}

// host is where the turn's host tools run: its node's host (Environment.Host), else this
// machine.
func (b *Box) host(env Environment) Host {
	if env.Host != nil {
		return env.Host
	}
	return b.cfg.Host
}

// hostCtx returns ctx carrying the agent's working directory on its host (WithHostWorkDir),
// which the host's sandbox makes read-write.
func (b *Box) hostCtx(ctx context.Context, env Environment) (context.Context, error) {
	dir, err := b.hostDir(ctx, env, "")
	if err != nil {
		return ctx, err
	}
	return WithHostWorkDir(ctx, dir), nil
}

// hostDir resolves the host working directory (SPEC §1.6).
func (b *Box) hostDir(ctx context.Context, env Environment, asked string) (string, error) {
	home, err := b.host(env).Home(ctx)
	if err != nil {
		if fault.Class(err) != nil {
			return "", err
		}
		return "", fault.Unavailable("the runner user has no home directory: %v", err)
	}
	base := HostWorkDir(home, env.WorkDir)
	switch p := hostPath(home, asked); {
	case p == "":
		return base, nil
	case filepath.IsAbs(p):
		return p, nil
	default:
		return filepath.Join(base, p), nil
	}
}

// HostWorkDir is where host tools start on a host whose runner user's home is home, for an
// agent whose working directory is workDir (SPEC §1.6): "", ".", "auto" and "cwd" are the
// home, "~/…" and relative paths are below it, absolute paths are used as given.
func HostWorkDir(home, workDir string) string {
	base := hostPath(home, workDir)
	if base == "" || !filepath.IsAbs(base) {
		base = filepath.Join(home, base)
	}
	return base
}

// hostPath expands "~/" in p; "" stands for the default directory.
func hostPath(home, p string) string {
	switch strings.TrimSpace(p) {
	case "", ".", "auto", "cwd":
		return ""
	}
	if strings.HasPrefix(p, "~/") {
		return filepath.Join(home, p[2:])
	}
	return p
}

func (b *Box) hostTool(ctx context.Context, t agent.TurnInfo, env Environment, name string, a args, out *agent.ToolOutput) error {
	ctx, err := b.hostCtx(ctx, env)
	if err != nil {
		return err
	}
	switch name {
	case "host_shell":
		cmd, err := a.need("command")
		if err != nil {
			return err
		}
		dir, err := b.hostDir(ctx, env, a.str("cwd"))
		if err != nil {
			return err
		}
		res, err := b.host(env).Shell(ctx, cmd, dir, b.timeout(a), 256<<10)
		if err != nil {
			return err
		}
		if res.Unsandboxed {
			out.Text(sandbox.Unsandboxed + "\n")
		}
		if len(res.Refused) > 0 {
			b.log.Warn("the host sandbox refused an access", "agent", t.AgentID, "refused", res.Refused)
			out.Text("sandbox: " + strings.Join(res.Refused, "\nsandbox: ") + "\n")
			if b.cfg.Refusals != nil && len(res.Refusals) > 0 {
				home, _ := b.host(env).Home(ctx) // known: hostCtx needed it
				b.cfg.Refusals.SandboxRefused(t, env.Plan.HostNode, home, res.Refusals)
			}
		}
		out.Measured(res.Usage)
		if res.TimedOut {
			out.TimedOut()
		}
		return shellResult(out, res.ExitCode, res.Stdout, res.Stderr, res.Truncated, res.TimedOut)
	case "host_share_file":
		p, err := a.need("path")
		if err != nil {
			return err
		}
		if p, err = b.hostDir(ctx, env, p); err != nil {
			return err
		}
		if err := b.checkHostPath(ctx, env, p, false); err != nil {
			return err
		}
		data, err := b.host(env).ReadFile(ctx, p, agent.MaxDataBlock)
		if err != nil {
			return b.fileRefused(ctx, t, env, p, false, err)
		}
		return shareFile(out, p, a.str("name"), data)
	case "host_read_file":
		p, err := a.need("path")
		if err != nil {
			return err
		}
		if p, err = b.hostDir(ctx, env, p); err != nil {
			return err
		}
		if err := b.checkHostPath(ctx, env, p, false); err != nil {
			return err
		}
		data, err := b.host(env).ReadFile(ctx, p, MaxFile)
		if err != nil {
			return b.fileRefused(ctx, t, env, p, false, err)
		}
		fileResult(out, p, data)
		return nil
	case "host_write_file":
		p, err := a.need("path")
		if err != nil {
			return err
		}
		if p, err = b.hostDir(ctx, env, p); err != nil {
			return err
		}
		if err := b.checkHostPath(ctx, env, p, true); err != nil {
			return err
		}
		if isEdit(a) {
			cur, err := b.host(env).ReadFile(ctx, p, MaxFile)
			if err != nil {
				return b.fileRefused(ctx, t, env, p, false, err)
			}
			data, said, err := edit(p, cur, a)
			if err != nil {
				return err
			}
			if err := b.host(env).WriteFile(ctx, p, data); err != nil {
				return b.fileRefused(ctx, t, env, p, true, err)
			}
			out.Text(said + " (on the host)")
			return nil
		}
		data, err := content(a)
		if err != nil {
			return err
		}
		if err := b.host(env).WriteFile(ctx, p, data); err != nil {
			return b.fileRefused(ctx, t, env, p, true, err)
		}
		out.Text(fmt.Sprintf("Wrote %d bytes to %s on the host.", len(data), p))
		return nil
	}
	return fault.Invalid("unknown tool %q", name)
}

// fileRefused records a host file tool's refused access (err, a permission denied on path)
// like a refusal of host_shell, for an administrator to review and perhaps widen the node's
// sandbox; it returns err. The kernel does not say whether the sandbox or the file's own
// permissions refused: both are recorded, as they are for host_shell.
func (b *Box) fileRefused(ctx context.Context, t agent.TurnInfo, env Environment, path string, write bool, err error) error {
	if b.cfg.Refusals != nil && errors.Is(err, fault.ErrForbidden) {
		home, _ := b.host(env).Home(ctx)
		b.cfg.Refusals.SandboxRefused(t, env.Plan.HostNode, home, []sandbox.Refusal{{Path: path, Write: write, Line: err.Error()}})
	}
	return err
}

// copyFile moves a file between the host and the desktop, binary safe.
func (b *Box) copyFile(ctx context.Context, t agent.TurnInfo, env Environment, a args, out *agent.ToolOutput) error {
	from, err := a.need("from")
	if err != nil {
		return err
	}
	src, err := a.need("source")
	if err != nil {
		return err
	}
	dst, err := a.need("target")
	if err != nil {
		return err
	}
	pc, err := b.cfg.Desktops.Acquire(ctx, t)
	if err != nil {
		return fmt.Errorf("desktop: %w", err)
	}
	if ctx, err = b.hostCtx(ctx, env); err != nil {
		return err
	}
	switch from {
	case "host":
		if src, err = b.hostDir(ctx, env, src); err != nil {
			return err
		}
		dst = b.vmPath(env, dst)
		if err := b.checkHostPath(ctx, env, src, false); err != nil {
			return err
		}
		if err := b.checkPath(dst, true); err != nil {
			return err
		}
		data, err := b.host(env).ReadFile(ctx, src, MaxCopy)
		if err != nil {
			return b.fileRefused(ctx, t, env, src, false, err)
		}
		if err := writeVM(ctx, pc, dst, data); err != nil {
			return err
		}
		out.Text(fmt.Sprintf("Copied %d bytes from host:%s to desktop:%s.", len(data), src, dst))
	case "vm":
		src = b.vmPath(env, src)
		if dst, err = b.hostDir(ctx, env, dst); err != nil {
			return err
		}
		if err := b.checkPath(src, false); err != nil {
			return err
		}
		if err := b.checkHostPath(ctx, env, dst, true); err != nil {
			return err
		}
		data, err := pc.ReadFile(ctx, src, MaxCopy)
		if err != nil {
			return err
		}
		if err := b.host(env).WriteFile(ctx, dst, data); err != nil {
			return b.fileRefused(ctx, t, env, dst, true, err)
		}
		out.Text(fmt.Sprintf("Copied %d bytes from desktop:%s to host:%s.", len(data), src, dst))
	default:
		return fault.Invalid(`argument "from" must be "host" or "vm"`)
	}
	return nil
}

func shellResult(out *agent.ToolOutput, code int, stdout, stderr []byte, truncated, timedOut bool) error {
	var sb strings.Builder
	if timedOut {
		sb.WriteString("The command timed out and was killed.\n")
	}
	fmt.Fprintf(&sb, "exit code %d\n", code)
	if len(stdout) > 0 {
		sb.WriteString("stdout:\n" + string(stdout) + "\n")
	}
	if len(stderr) > 0 {
		sb.WriteString("stderr:\n" + string(stderr) + "\n")
	}
	if truncated {
		sb.WriteString("(output truncated)\n")
	}
	out.Text(sb.String())
	if timedOut || code != 0 {
		return errNonZero
	}
	return nil
}

// errNonZero marks a command that ran but failed; its output is already in the result.
var errNonZero = errors.New("the command failed (see its output)")

func fileResult(out *agent.ToolOutput, path string, data []byte) {
	if utf8.Valid(data) && !bytes.ContainsRune(data, 0) {
		out.Text(fmt.Sprintf("%s (%d bytes):\n%s", path, len(data), data))
		return
	}
	out.Text(fmt.Sprintf("%s (%d bytes, binary, base64):\n%s", path, len(data), base64.StdEncoding.EncodeToString(data)))
}

func content(a args) ([]byte, error) {
	if s := a.str("base64"); s != "" {
		data, err := base64.StdEncoding.DecodeString(s)
		if err != nil {
			return nil, fault.Invalid("argument base64 is not valid base64: %v", err)
		}
		return data, nil
	}
	c, ok := a["content"].(string)
	if !ok {
		return nil, fault.Invalid(`argument "content" (text) or "base64" (binary) is required`)
	}
	if len(c) > MaxFile {
		return nil, fault.Invalid("content is larger than %d bytes", MaxFile)
	}
	return []byte(c), nil
}
