package fleet

import (
	"context"
	"fmt"
	"time"

	"cubicle/backend/agent/tools"
	"cubicle/backend/computer"
	"cubicle/backend/fault"
	"cubicle/backend/nodes"
	"cubicle/backend/sandbox"
	"cubicle/backend/store"
	"cubicle/runner/wire"
)

// cloudInput fills the gate's cloud fields for agent a: which cloud node serves it, or why
// none does.
func (c *Computers) cloudInput(in *computer.Input, a store.Agent) {
	node, err := c.f.CloudNode(a)
	switch {
	case err != nil:
		in.CloudProblem = err.Error()
	case !c.f.cfg.Runners.Connected(node):
		in.CloudProblem = fmt.Sprintf("its cloud node %s is not connected: its desktop is unreachable until the runner reconnects", c.f.Label(node))
	default:
		in.Node.Cloud, in.CloudNode = true, node
	}
}

// runnerNode describes runner node for the gate: its host runs host tools when it is
// connected and advertised them. A runner's host desktop tools are not offered (they would
// act on this server's screen).
func (c *Computers) runnerNode(node string) computer.Node {
	n := computer.Node{ID: node, Name: c.f.Label(node)}
	hello, ok := c.f.cfg.Runners.Hello(node)
	if !ok {
		n.Problem = n.Name + " is not connected: host tools of agents placed on it run only on that machine, never on this server; start the runner again"
		return n
	}
	for _, cp := range hello.Capabilities {
		if cp == computer.CapHostTools {
			n.Caps = append(n.Caps, cp)
		}
	}
	return n
}

// remoteHost runs host tools on a runner's host over its link (tools.Host). With each file
// operation it sends the paths the host file guard protects there (protected, for the runner's
// home), which a runner with wire.CapHostGuard checks again on its own disk.
type remoteHost struct {
	r         *nodes.Remote
	node      string
	protected func(home string) []string
	policy    func(node, home string) sandbox.Policy
	// readable are the credential folders an administrator opened on node (approved
	// widenings), which the runner stops hiding of its own.
	readable func(node string) []string
}

// hostOf is where a plan's host tools run: nil for this machine, else the runner's host.
func (f *Fleet) hostOf(p computer.Plan) (tools.Host, error) {
	if !p.Host || p.HostNode == "" || p.HostNode == nodes.LocalID {
		return nil, nil
	}
	r, err := f.cfg.Runners.Node(p.HostNode)
	if err != nil {
		return nil, err
	}
	return remoteHost{r: r, node: p.HostNode, protected: f.cfg.HostProtected, policy: f.cfg.HostPolicy,
		readable: f.cfg.HostReadable}, nil
}

func (h remoteHost) Shell(ctx context.Context, cmd, dir string, timeout time.Duration, maxOut int) (tools.ShellResult, error) {
	// The runner kills the command at timeout; the link gets a minute more to say so.
	ctx, cancel := context.WithTimeout(ctx, timeout+time.Minute)
	defer cancel()
	sb, err := h.sandbox(ctx)
	if err != nil {
		return tools.ShellResult{}, err
	}
	res, err := h.r.HostShell(ctx, wire.HostShellArgs{Command: cmd, Dir: dir, TimeoutMS: timeout.Milliseconds(), MaxOutput: maxOut, Sandbox: sb})
	if err != nil {
		return tools.ShellResult{}, err
	}
	out := tools.ShellResult{ExitCode: res.ExitCode, Stdout: res.Stdout, Stderr: res.Stderr, Truncated: res.Truncated, TimedOut: res.TimedOut,
		Refused: res.Refused, Unsandboxed: res.Unsandboxed}
	if len(res.Refused) > 0 && sb != nil {
		// The runner explains in sentences; the records are read here from the same output
		// under the policy this server sent.
		p := sandbox.Policy{WorkDir: sb.WorkDir, ReadWrite: sb.ReadWrite, Hidden: sb.Hidden, Network: sb.Network}
		out.Refusals = sandbox.Refusals(p, append(append([]byte{}, res.Stderr...), res.Stdout...))
	}
	return out, nil
}

// sandbox is the sandbox policy sent with a call (wire.CapHostSandbox). A runner too old to
// sandbox host tools is refused, unless an administrator allowed "no sandbox" for it.
func (h remoteHost) sandbox(ctx context.Context) (*wire.HostSandbox, error) {
	home, err := h.r.HostHome(ctx)
	if err != nil {
		return nil, err
	}
	p := h.policy(h.node, home)
	if !h.r.Supports(wire.CapHostSandbox) {
		if p.AllowNone {
			return nil, nil
		}
		return nil, fault.Conflict("%s runs a version without the host sandbox (capability %s): update it, or allow host tools without a sandbox on it (Settings → Security → host sandbox)",
			h.r.Label(), wire.CapHostSandbox)
	}
	sb := &wire.HostSandbox{WorkDir: tools.HostWorkDirOf(ctx), ReadWrite: p.ReadWrite, Hidden: p.Hidden, Network: p.Network, AllowNone: p.AllowNone}
	if h.readable != nil {
		sb.Readable = h.readable(h.node)
	}
	return sb, nil
}

func (h remoteHost) ReadFile(ctx context.Context, path string, max int64) ([]byte, error) {
	prot, err := h.guarded(ctx)
	if err != nil {
		return nil, err
	}
	sb, err := h.sandbox(ctx)
	if err != nil {
		return nil, err
	}
	return h.r.HostReadFile(ctx, path, max, prot, sb)
}

func (h remoteHost) WriteFile(ctx context.Context, path string, data []byte) error {
	prot, err := h.guarded(ctx)
	if err != nil {
		return err
	}
	sb, err := h.sandbox(ctx)
	if err != nil {
		return err
	}
	return h.r.HostWriteFile(ctx, path, data, prot, sb)
}

// guarded is what the file guard protects on the runner's host (its "~/…" entries below the
// runner's home). The file tools needed that home to be checked on this server already.
func (h remoteHost) guarded(ctx context.Context) ([]string, error) {
	home, err := h.r.HostHome(ctx)
	if err != nil {
		return nil, err
	}
	return h.protected(home), nil
}

func (h remoteHost) Home(ctx context.Context) (string, error) { return h.r.HostHome(ctx) }

// Protected are the paths the runner protects of its own (its data directory), for the guard
// (callPlace).
func (h remoteHost) Protected(ctx context.Context) ([]string, error) { return h.r.HostProtected(ctx) }

var _ tools.Host = remoteHost{}
