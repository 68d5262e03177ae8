package runner

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"slices"
	"time"

	"cubicle/backend/agent/tools"
	"cubicle/backend/fault"
	"cubicle/backend/sandbox"
	"cubicle/runner/wire"
)

// newSandbox detects this machine's host sandbox; forced ("" = $CUBICLE_HOST_SANDBOX) may
// name the kind.
func newSandbox(forced string) (*sandbox.Sandbox, error) {
	mode := sandbox.Kind(forced)
	if forced == "" {
		var err error
		if mode, err = sandbox.Mode(os.Getenv); err != nil {
			return nil, err
		}
	}
	return sandbox.New(mode)
}

// hostFor is the local host of one host tool call: in the sandbox, under the policy the
// server sent (nil from an older server: dir read-write, network on, never unsandboxed),
// with what this runner hides of its own — its data directory and its user's credential
// folders but those the server says an administrator opened (HostSandbox.Readable) — added.
func (r *Runner) hostFor(ctx context.Context, a *wire.HostSandbox, dir string) tools.LocalHost {
	return tools.LocalHost{Sandbox: r.sandbox, Policy: func(context.Context) (sandbox.Policy, error) {
		p := sandbox.Policy{WorkDir: dir, Network: true}
		if a != nil {
			p = sandbox.Policy{WorkDir: a.WorkDir, ReadWrite: a.ReadWrite, Hidden: a.Hidden, Network: a.Network, AllowNone: a.AllowNone}
		}
		var protected []string
		for _, h := range p.Hidden {
			if filepath.IsAbs(h) {
				protected = append(protected, h)
			}
		}
		p.Hidden = append(protected, r.ownProtected()...)
		if home, err := os.UserHomeDir(); err == nil {
			creds := sandbox.HomeSecrets(home)
			if a != nil { // the credential folders an administrator opened, and only those
				creds = slices.DeleteFunc(creds, func(c string) bool { return slices.Contains(a.Readable, c) })
			}
			p.Hidden = append(p.Hidden, creds...)
		}
		return p, nil
	}}
}

// hostOp is the handler of a host tool op (wire.HostShell, …): h, run on this machine's host
// within the limits of wire.MaxHost*, behind the checks every host op shares. The server
// decided (computer gate, guard, host grant) before it sent the request; a runner started
// with --no-host-tools refuses every one, and file paths are checked again here, on this disk
// (checkHostPath). The command or file operation follows the stream: when the server closes
// it (the chat's stop), ctx ends and the command's process group is killed.
func (r *Runner) hostOp(h handler) handler {
	return func(ctx context.Context, st net.Conn, req wire.Request) {
		if r.cfg.NoHostTools {
			hostFail(st, fault.Forbidden("runner %s was started with --no-host-tools: it runs no host tools; restart it without that flag to allow them", r.cfg.Name))
			return
		}
		if r.sandbox == nil {
			hostFail(st, fault.Unavailable("runner %s has no host sandbox", r.cfg.Name))
			return
		}
		h(ctx, st, req)
	}
}

func hostFail(st net.Conn, err error) { wire.WriteFrame(st, wire.Response{Error: wire.ErrorOf(err)}) }

// hostHome answers wire.HostHome: the runner user's home directory.
func (r *Runner) hostHome(ctx context.Context, st net.Conn, _ wire.Request) {
	home, err := (tools.LocalHost{}).Home(ctx)
	if err != nil {
		hostFail(st, fault.Unavailable("the runner user on %s has no home directory: %v", r.cfg.Name, err))
		return
	}
	reply(st, home)
}

// hostInfo answers wire.HostInfoOp: the home, what the runner protects of its own and its
// sandbox.
func (r *Runner) hostInfo(ctx context.Context, st net.Conn, _ wire.Request) {
	info := wire.HostInfo{Protected: r.ownProtected(), Sandbox: string(r.sandbox.Kind()), SandboxProblem: r.sandbox.Problem()}
	if home, err := (tools.LocalHost{}).Home(ctx); err != nil {
		info.HomeProblem = fmt.Sprintf("the runner user on %s has no home directory: %v", r.cfg.Name, err)
	} else {
		info.Home = home
	}
	reply(st, info)
}

// hostShell answers wire.HostShell when the command ended; the server's close cancels it.
func (r *Runner) hostShell(ctx context.Context, st net.Conn, req wire.Request) {
	a, err := wire.HostShell.Args(req)
	if err != nil || a.Command == "" {
		hostFail(st, fault.Invalid("%s: a command is required", req.Op))
		return
	}
	timeout := time.Duration(a.TimeoutMS) * time.Millisecond
	if timeout <= 0 || timeout > wire.MaxHostTimeout {
		timeout = wire.MaxHostTimeout
	}
	maxOut := a.MaxOutput
	if maxOut <= 0 || maxOut > wire.MaxHostOutput {
		maxOut = wire.MaxHostOutput
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() { // the server closes the stream to cancel: the read ends
		io.Copy(io.Discard, st)
		cancel()
	}()
	if a.Dir != "" {
		if err := r.checkHostPath(a.Dir, false, nil); err != nil {
			hostFail(st, err)
			return
		}
	}
	r.log.Info("host shell", "dir", a.Dir, "timeout", timeout)
	res, err := r.hostFor(ctx, a.Sandbox, a.Dir).Shell(ctx, a.Command, a.Dir, timeout, maxOut)
	if err != nil {
		hostFail(st, err)
		return
	}
	if ctx.Err() != nil {
		return // cancelled: nobody is listening, and the command's group is gone
	}
	reply(st, wire.HostShellResult{ExitCode: res.ExitCode, Stdout: res.Stdout, Stderr: res.Stderr,
		Truncated: res.Truncated, TimedOut: res.TimedOut, Refused: res.Refused, Unsandboxed: res.Unsandboxed})
}

// hostReadFile answers wire.HostReadFile: HostFile{Size}, then Size raw bytes.
func (r *Runner) hostReadFile(ctx context.Context, st net.Conn, req wire.Request) {
	a, err := wire.HostReadFile.Args(req)
	if err != nil || a.Path == "" {
		hostFail(st, fault.Invalid("%s: a path is required", req.Op))
		return
	}
	if a.Max <= 0 || a.Max > wire.MaxHostFile {
		a.Max = wire.MaxHostFile
	}
	if err := r.checkHostPath(a.Path, false, a.Protected); err != nil {
		r.log.Warn("host file read refused", "path", a.Path, "err", err)
		hostFail(st, err)
		return
	}
	data, err := r.hostFor(ctx, a.Sandbox, r.homeDir()).ReadFile(ctx, a.Path, a.Max)
	if err != nil {
		hostFail(st, err)
		return
	}
	if reply(st, wire.HostFile{Size: int64(len(data))}) == nil {
		st.Write(data)
	}
}

// hostWriteFile answers wire.HostWriteFile once the request's Size raw bytes arrived and were
// written.
func (r *Runner) hostWriteFile(ctx context.Context, st net.Conn, req wire.Request) {
	a, err := wire.HostWriteFile.Args(req)
	if err != nil || a.Path == "" || a.Size < 0 {
		hostFail(st, fault.Invalid("%s: a path and a size are required", req.Op))
		return
	}
	if a.Size > wire.MaxHostFile {
		hostFail(st, fault.Invalid("a file of %d bytes is over the %d bytes a runner writes", a.Size, wire.MaxHostFile))
		return
	}
	data := make([]byte, a.Size)
	st.SetReadDeadline(time.Now().Add(5 * time.Minute))
	if _, err := io.ReadFull(st, data); err != nil {
		hostFail(st, fault.Invalid("the file's %d bytes did not arrive: %v", a.Size, err))
		return
	}
	st.SetReadDeadline(time.Time{})
	// Checked after the bytes arrived: the server reads the answer once its write ended.
	if err := r.checkHostPath(a.Path, true, a.Protected); err != nil {
		r.log.Warn("host file write refused", "path", a.Path, "err", err)
		hostFail(st, err)
		return
	}
	if err := r.hostFor(ctx, a.Sandbox, r.homeDir()).WriteFile(ctx, a.Path, data); err != nil {
		hostFail(st, err)
		return
	}
	reply(st, true)
}

// homeDir is the runner user's home ("" when it has none), the working directory of a file
// operation from a server that sent no sandbox policy.
func (r *Runner) homeDir() string {
	h, _ := os.UserHomeDir()
	return h
}

// reply writes a successful response carrying v.
func reply(st net.Conn, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return wire.WriteFrame(st, wire.Response{Error: wire.ErrorOf(err)})
	}
	return wire.WriteFrame(st, wire.Response{Result: b})
}
