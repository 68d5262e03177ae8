package tools

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"sync/atomic"
	"syscall"
	"unsafe"

	"golang.org/x/sys/windows"

	"cubicle/backend/sandbox"
)

// hostShellLead starts the host_shell tool's description: it names the command language.
const hostShellLead = "Run a PowerShell command (cmd.exe syntax when the host has no PowerShell; this host runs Windows)"

// command runs script with PowerShell or cmd.exe (see windowsShell), without a console
// window (the desktop app has none to lend). runTree starts it suspended inside a job object.
func (h LocalHost) command(ctx context.Context, script string) (*exec.Cmd, error) {
	path, kind := windowsShell(h.Interpreter, exec.LookPath, os.Getenv)
	var c *exec.Cmd
	attr := &syscall.SysProcAttr{CreationFlags: windows.CREATE_NO_WINDOW}
	switch kind {
	case cmdShell:
		c = exec.CommandContext(ctx, path)
		attr.CmdLine = cmdLine(path, script)
	default:
		c = exec.CommandContext(ctx, path, powerShellArgs(script)...)
	}
	c.SysProcAttr = attr
	return c, nil
}

// runTree runs c inside a job object so that cancelling kills the whole process tree, not
// just the interpreter. The process starts suspended and is resumed only once it is in the
// job, so nothing it starts can escape. Where a job cannot be used (an old Windows that does
// not nest jobs), cancelling falls back to taskkill /T.
func runTree(c *exec.Cmd) error {
	job, err := windows.CreateJobObject(nil, nil)
	if err != nil {
		return fmt.Errorf("create job object: %w", err)
	}
	defer windows.CloseHandle(job)
	var inJob atomic.Bool
	c.Cancel = func() error {
		if inJob.Load() {
			return windows.TerminateJobObject(job, 1)
		}
		_ = exec.Command("taskkill", "/T", "/F", "/PID", strconv.Itoa(c.Process.Pid)).Run()
		return c.Process.Kill()
	}
	c.SysProcAttr.CreationFlags |= windows.CREATE_SUSPENDED
	if err := c.Start(); err != nil {
		return err
	}
	if assignJob(job, c.Process.Pid) == nil {
		inJob.Store(true)
	}
	if err := resumeProcess(uint32(c.Process.Pid)); err != nil {
		_ = c.Process.Kill()
		_ = c.Wait()
		return fmt.Errorf("resume %s: %w", c.Path, err)
	}
	return c.Wait()
}

// assignJob puts process pid into job.
func assignJob(job windows.Handle, pid int) error {
	p, err := windows.OpenProcess(windows.PROCESS_SET_QUOTA|windows.PROCESS_TERMINATE, false, uint32(pid))
	if err != nil {
		return err
	}
	defer windows.CloseHandle(p)
	return windows.AssignProcessToJobObject(job, p)
}

// resumeProcess resumes every thread of a process started with CREATE_SUSPENDED (os/exec
// does not hand out the thread handle CreateProcess returned).
func resumeProcess(pid uint32) error {
	snap, err := windows.CreateToolhelp32Snapshot(windows.TH32CS_SNAPTHREAD, 0)
	if err != nil {
		return err
	}
	defer windows.CloseHandle(snap)
	te := windows.ThreadEntry32{Size: uint32(unsafe.Sizeof(windows.ThreadEntry32{}))}
	resumed := 0
	for err = windows.Thread32First(snap, &te); err == nil; err = windows.Thread32Next(snap, &te) {
		if te.OwnerProcessID != pid {
			continue
		}
		th, err := windows.OpenThread(windows.THREAD_SUSPEND_RESUME, false, te.ThreadID)
		if err != nil {
			return err
		}
		_, err = windows.ResumeThread(th)
		windows.CloseHandle(th)
		if err != nil {
			return err
		}
		resumed++
	}
	if resumed == 0 {
		return fmt.Errorf("no thread of process %d found", pid)
	}
	return nil
}

// ownTree starts the process c will start without a console window (HostProc). Windows has
// no process group to end with it: endTree ends the process and, with taskkill /T, its tree.
func ownTree(c *exec.Cmd) {
	c.SysProcAttr = &syscall.SysProcAttr{CreationFlags: windows.CREATE_NO_WINDOW}
}

// endTree ends the process of c and its children.
func endTree(c *exec.Cmd, kill bool) {
	_ = exec.Command("taskkill", "/T", "/F", "/PID", strconv.Itoa(c.Process.Pid)).Run()
	if kill {
		_ = c.Process.Kill()
	}
}

// rawCmdLine moves c's raw command line (cmd.exe's, see cmdLine) into the environment for the
// sandbox's helper, which starts the command with it (sandbox.EnvCmdLine): c itself now
// starts the helper, whose own command line Go composes from c.Args.
func rawCmdLine(c *exec.Cmd) []string {
	if c.SysProcAttr == nil || c.SysProcAttr.CmdLine == "" {
		return nil
	}
	line := c.SysProcAttr.CmdLine
	c.SysProcAttr.CmdLine = ""
	return []string{sandbox.EnvCmdLine + "=" + line}
}
