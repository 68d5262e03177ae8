package bench

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"cubicle/backend/agent/tools"
	"cubicle/backend/sandbox"
)

// RowHostShellSandboxed is the host sandbox's cost per host_shell call (issue 26: at most
// 30 ms p50 over the plain call).
const RowHostShellSandboxed = "host_shell_sandboxed"

// hostShell: host_shell's command (`true` through /bin/sh) in this machine's host sandbox —
// the one the server would use ($CUBICLE_HOST_SANDBOX forces the kind) — next to the same call
// without a sandbox, with a policy like a real node's: a working directory, the data
// directory and the home's credential folders hidden.
func (r *runner) hostShell(ctx context.Context, _ *desktop) error {
	mode, err := sandbox.Mode(os.Getenv)
	if err != nil {
		return err
	}
	sb, err := sandbox.New(mode)
	if err != nil {
		return err
	}
	if sb.Kind() == sandbox.None {
		r.add(Row{ID: RowHostShellSandboxed, Title: "host_shell in the host sandbox", Unit: UnitMS, Better: "lower", Skipped: true,
			Note: "no host sandbox on this machine: " + sb.Problem()})
		return nil
	}
	work, err := os.MkdirTemp(r.cfg.WorkDir, "cubicle-bench-host-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(work)
	data := filepath.Join(work, "data")
	if err := os.MkdirAll(data, 0o700); err != nil {
		return err
	}
	home, _ := os.UserHomeDir()
	policy := sandbox.Policy{WorkDir: work, Hidden: append([]string{data}, sandbox.HomeSecrets(home)...), Network: true}
	boxed := tools.LocalHost{Sandbox: sb, Policy: func(context.Context) (sandbox.Policy, error) { return policy, nil }}
	plain := tools.LocalHost{}
	call := func(h tools.LocalHost) func(int) func() error {
		return func(int) func() error {
			return func() error {
				res, err := h.Shell(ctx, "true", work, time.Minute, 1<<10)
				if err == nil && res.ExitCode != 0 {
					err = fmt.Errorf("host_shell true ended %d: %s", res.ExitCode, res.Stderr)
				}
				return err
			}
		}
	}
	if err := call(boxed)(0)(); err != nil {
		return err
	}
	var o, p []float64
	ours, peer := call(boxed), call(plain)
	if err := interleave(ctx, r.cfg.Counts.Fast, r.cfg.Counts.Fast,
		func(i int) error { return timed(&o, ours(i)) },
		func(i int) error { return timed(&p, peer(i)) }); err != nil {
		return err
	}
	r.add(Row{ID: RowHostShellSandboxed, Title: "host_shell (true) in the host sandbox", Unit: UnitMS, Better: "lower",
		Ours:     Side{Method: "tools.LocalHost.Shell in the " + string(sb.Kind()) + " sandbox (a work directory read-write, the data directory and ~/.ssh etc. hidden)", Samples: o},
		PeerName: "host_shell", Peer: &Side{Method: "tools.LocalHost.Shell without a sandbox: /bin/sh -c true", Samples: p},
		Note: "target: the sandbox adds at most 30 ms p50 per call"})
	return nil
}
