//go:build unix

package tools

import (
	"cmp"
	"context"
	"os/exec"
	"syscall"
)

// hostShellLead starts the host_shell tool's description: it names the command language.
const hostShellLead = "Run a shell command"

// command runs script with sh -c in a process group of its own, so that cancelling kills
// everything the command started.
func (h LocalHost) command(ctx context.Context, script string) (*exec.Cmd, error) {
	c := exec.CommandContext(ctx, cmp.Or(h.Interpreter, "/bin/sh"), "-c", script)
	c.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	c.Cancel = func() error { return syscall.Kill(-c.Process.Pid, syscall.SIGKILL) }
	return c, nil
}

// runTree runs c to its end; command already arranged the process group.
func runTree(c *exec.Cmd) error { return c.Run() }

// ownTree puts the process c will start in a process group of its own (HostProc).
func ownTree(c *exec.Cmd) { c.SysProcAttr = &syscall.SysProcAttr{Setpgid: true} }

// endTree asks the process group of c to end (SIGTERM), or kills it.
func endTree(c *exec.Cmd, kill bool) {
	sig := syscall.SIGTERM
	if kill {
		sig = syscall.SIGKILL
	}
	_ = syscall.Kill(-c.Process.Pid, sig)
}

// rawCmdLine hands the sandbox's helper a raw command line; Unix has none (argv is exact).
func rawCmdLine(*exec.Cmd) []string { return nil }
