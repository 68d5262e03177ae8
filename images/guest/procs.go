//go:build linux

package main

import (
	"errors"
	"os"
	"os/exec"
	"os/signal"
	"sync"
	"syscall"
)

// procs starts child processes and collects their exit statuses.
//
// In global mode (PID 1, or a child subreaper) it owns every child of the process: one
// goroutine reaps with wait4(-1) on SIGCHLD — zombies of orphaned grandchildren included —
// and hands the status of processes started here to their waiters. Started processes must
// then never be waited for by os/exec (their stdio must be *os.File so exec starts no copy
// goroutines). Otherwise each process gets its own waiting goroutine.
type procs struct {
	global bool

	mu      sync.Mutex // guards waiting; held across Start+register so the reaper finds every pid
	waiting map[int]*proc

	stop chan struct{}
	wg   sync.WaitGroup
}

// proc is a started process; done is closed once it has been reaped.
type proc struct {
	cmd    *exec.Cmd
	pid    int
	done   chan struct{}
	status syscall.WaitStatus // valid after done
	usage  syscall.Rusage     // valid after done: the child's and its waited-for descendants'
}

func newProcs(global bool) *procs {
	p := &procs{global: global, waiting: map[int]*proc{}, stop: make(chan struct{})}
	if global {
		sig := make(chan os.Signal, 16)
		signal.Notify(sig, syscall.SIGCHLD)
		p.wg.Add(1)
		go p.reapLoop(sig)
	}
	return p
}

// Close stops the reaper goroutine (global mode).
func (p *procs) Close() {
	select {
	case <-p.stop:
	default:
		close(p.stop)
	}
	p.wg.Wait()
}

func (p *procs) start(cmd *exec.Cmd) (*proc, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	pr := &proc{cmd: cmd, pid: cmd.Process.Pid, done: make(chan struct{})}
	if p.global {
		p.waiting[pr.pid] = pr
		return pr, nil
	}
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		st, err := cmd.Process.Wait()
		if err == nil {
			pr.status = st.Sys().(syscall.WaitStatus)
			if ru, ok := st.SysUsage().(*syscall.Rusage); ok && ru != nil {
				pr.usage = *ru
			}
		}
		close(pr.done)
	}()
	return pr, nil
}

func (p *procs) reapLoop(sig chan os.Signal) {
	defer p.wg.Done()
	defer signal.Stop(sig)
	for {
		p.reapAll()
		select {
		case <-p.stop:
			return
		case <-sig:
		}
	}
}

// reapAll collects every exited child without blocking.
func (p *procs) reapAll() {
	for {
		var st syscall.WaitStatus
		var ru syscall.Rusage
		pid, err := syscall.Wait4(-1, &st, syscall.WNOHANG, &ru)
		if errors.Is(err, syscall.EINTR) {
			continue
		}
		if err != nil || pid <= 0 {
			return
		}
		p.mu.Lock()
		pr := p.waiting[pid]
		delete(p.waiting, pid)
		p.mu.Unlock()
		if pr != nil {
			pr.status, pr.usage = st, ru
			pr.cmd.Process.Release()
			close(pr.done)
		}
	}
}

// signalGroup signals the process group of pr (started with Setpgid).
func (pr *proc) signalGroup(sig syscall.Signal) {
	syscall.Kill(-pr.pid, sig)
}

// exitCode is the exit status, or 128+signal for a killed process.
func (pr *proc) exitCode() int {
	if pr.status.Signaled() {
		return 128 + int(pr.status.Signal())
	}
	return pr.status.ExitStatus()
}
