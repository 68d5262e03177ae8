//go:build linux

package main

import (
	"context"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	"cubicle/images/guest/wire"
)

// drainGrace is how long output is still read after the command exited: a background
// process that inherited stdout would otherwise hold the call open forever.
const drainGrace = 100 * time.Millisecond

// execer runs commands for the exec operation as the driver's user, each in its own process
// group so a timeout kills everything it started.
type execer struct {
	procs     *procs
	workspace string
	env       []string // the base environment (DISPLAY, HOME, …)
}

func (e *execer) run(ctx context.Context, r wire.ExecRequest) (wire.ExecResult, error) {
	var argv []string
	switch {
	case r.Shell != "" && len(r.Command) > 0:
		return wire.ExecResult{}, wire.Invalid("exec takes either command or shell, not both")
	case r.Shell != "":
		argv = []string{"/bin/sh", "-c", r.Shell}
	case len(r.Command) > 0:
		argv = r.Command
	default:
		return wire.ExecResult{}, wire.Invalid("exec needs a command or a shell line")
	}
	if r.MaxOutput == 0 {
		r.MaxOutput = wire.DefaultExecOutput
	}
	if r.MaxOutput < 0 || r.MaxOutput > wire.MaxExecOutput {
		return wire.ExecResult{}, wire.Invalid("max output %d is outside 0–%d", r.MaxOutput, wire.MaxExecOutput)
	}
	if r.Timeout < 0 {
		return wire.ExecResult{}, wire.Invalid("timeout %v is negative", r.Timeout)
	}
	cwd := resolve(e.workspace, r.Cwd)
	if fi, err := os.Stat(cwd); err != nil {
		return wire.ExecResult{}, fileErr("exec: working directory", cwd, err)
	} else if !fi.IsDir() {
		return wire.ExecResult{}, wire.Invalid("exec: working directory %s is not a directory", cwd)
	}
	path, err := lookPath(argv[0], cwd)
	if err != nil {
		return wire.ExecResult{}, err
	}
	cmd := &exec.Cmd{Path: path, Args: argv, Dir: cwd, Env: e.env}
	for k, v := range r.Env {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}

	// Our own pipes (*os.File): os/exec then starts no copy goroutines, and a PID-1 reaper
	// can own the waiting.
	inR, inW, err := os.Pipe()
	if err != nil {
		return wire.ExecResult{}, err
	}
	outR, outW, err := os.Pipe()
	if err != nil {
		inR.Close()
		inW.Close()
		return wire.ExecResult{}, err
	}
	errR, errW, err := os.Pipe()
	if err != nil {
		inR.Close()
		inW.Close()
		outR.Close()
		outW.Close()
		return wire.ExecResult{}, err
	}
	cmd.Stdin, cmd.Stdout, cmd.Stderr = inR, outW, errW
	start := time.Now()
	pr, err := e.procs.start(cmd)
	inR.Close()
	outW.Close()
	errW.Close()
	if err != nil {
		inW.Close()
		outR.Close()
		errR.Close()
		return wire.ExecResult{}, wire.Invalid("exec %s: %v", argv[0], err)
	}

	var wg sync.WaitGroup
	wg.Add(3)
	go func() {
		defer wg.Done()
		inW.Write(r.Stdin) // an early exit closes the pipe: EPIPE is fine
		inW.Close()
	}()
	var stdout, stderr capped
	stdout.max, stderr.max = r.MaxOutput, r.MaxOutput
	go func() { defer wg.Done(); io.Copy(&stdout, outR) }()
	go func() { defer wg.Done(); io.Copy(&stderr, errR) }()

	var timeout <-chan time.Time
	if r.Timeout > 0 {
		t := time.NewTimer(r.Timeout)
		defer t.Stop()
		timeout = t.C
	}
	res := wire.ExecResult{}
	select {
	case <-pr.done:
	case <-timeout:
		res.TimedOut = true
		pr.signalGroup(syscall.SIGKILL)
		<-pr.done
	case <-ctx.Done():
		pr.signalGroup(syscall.SIGKILL)
		<-pr.done
	}
	res.Duration = time.Since(start)
	if res.TimedOut {
		pr.signalGroup(syscall.SIGKILL) // stragglers that left the shell
	}
	drained := make(chan struct{})
	go func() { wg.Wait(); close(drained) }()
	select {
	case <-drained:
	case <-time.After(drainGrace):
		outR.Close() // unblocks the copies; what was read so far is kept
		errR.Close()
		inW.Close()
		<-drained
	}
	outR.Close()
	errR.Close()
	if ctx.Err() != nil {
		return res, ctx.Err()
	}
	res.ExitCode = pr.exitCode()
	res.CPUTime = time.Duration(pr.usage.Utime.Nano() + pr.usage.Stime.Nano())
	res.MaxRSS = int64(pr.usage.Maxrss) * 1024 // KiB on Linux
	res.Stdout, res.StdoutTruncated = stdout.buf, stdout.truncated
	res.Stderr, res.StderrTruncated = stderr.buf, stderr.truncated
	res.StdoutLen, res.StderrLen = len(res.Stdout), len(res.Stderr)
	return res, nil
}

// lookPath resolves argv[0] like a shell would (relative names with a slash against cwd),
// so a missing program is a clear not-found error rather than a failed start.
func lookPath(name, cwd string) (string, error) {
	if filepath.IsAbs(name) {
		if _, err := os.Stat(name); err != nil {
			return "", fileErr("exec", name, err)
		}
		return name, nil
	}
	if filepath.Base(name) != name {
		p := filepath.Join(cwd, name)
		if _, err := os.Stat(p); err != nil {
			return "", fileErr("exec", p, err)
		}
		return p, nil
	}
	p, err := exec.LookPath(name)
	if err != nil {
		return "", wire.NotFound("exec: program %q not found in PATH", name)
	}
	return p, nil
}

// capped keeps the first max bytes written and counts the rest as truncated; it always
// accepts the write so the child never blocks on a full pipe.
type capped struct {
	max       int
	buf       []byte
	truncated bool
}

// Write implements io.Writer; it never fails.
func (c *capped) Write(p []byte) (int, error) {
	room := c.max - len(c.buf)
	if room >= len(p) {
		c.buf = append(c.buf, p...)
	} else {
		if room > 0 {
			c.buf = append(c.buf, p[:room]...)
		}
		c.truncated = true
	}
	return len(p), nil
}
