package tools

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"sync"
	"time"

	"cubicle/backend/fault"
	"cubicle/backend/sandbox"
)

// HostProc is a long-lived process on this machine (LocalHost.Spawn): Write is its stdin,
// Read its stdout; Close ends it.
type HostProc struct {
	c      *exec.Cmd
	stdin  *os.File // ours: the write end of its stdin
	stdout *os.File // ours: the read end of its stdout
	stderr *capped  // the start of what it wrote to stderr
	done   chan struct{}
	once   sync.Once
}

// Spawn starts argv (env added to a clean environment) in dir, in the sandbox under the
// node's policy with dir read-write — as host_shell runs — as a process that lives until
// Close, in a process group of its own (Unix). A stdio MCP server an administrator runs on
// the server is one. With no sandbox it is refused unless the node allows that.
func (h LocalHost) Spawn(ctx context.Context, argv, env []string, dir string) (*HostProc, error) {
	if len(argv) == 0 || argv[0] == "" {
		return nil, fault.Invalid("no command to start")
	}
	path, err := exec.LookPath(argv[0])
	if err != nil {
		return nil, fault.NotFound("the command %q is not found on this server: %v", argv[0], err)
	}
	if st, err := os.Stat(dir); err != nil || !st.IsDir() {
		return nil, fault.NotFound("working directory %s does not exist on the host", dir)
	}
	c := exec.Command(path, argv[1:]...)
	c.Dir = dir
	c.Env = hostEnv()
	wrap := sandbox.Command{Cleanup: func() {}}
	if h.Sandbox != nil {
		p, err := h.policy(WithHostWorkDir(ctx, dir))
		if err != nil {
			return nil, err
		}
		if wrap, err = h.sandboxed(ctx, c, p); err != nil {
			return nil, err
		}
	}
	c.Env = append(c.Env, env...)
	ownTree(c)
	inR, inW, err := os.Pipe()
	if err != nil {
		wrap.Cleanup()
		return nil, err
	}
	outR, outW, err := os.Pipe()
	if err != nil {
		inR.Close()
		inW.Close()
		wrap.Cleanup()
		return nil, err
	}
	p := &HostProc{c: c, stdin: inW, stdout: outR, stderr: &capped{max: 4096}, done: make(chan struct{})}
	c.Stdin, c.Stdout, c.Stderr = inR, outW, p.stderr
	err = c.Start()
	inR.Close() // the child's ends
	outW.Close()
	if err != nil {
		inW.Close()
		outR.Close()
		wrap.Cleanup()
		return nil, fmt.Errorf("start %s: %w", argv[0], err)
	}
	go func() { // owned by p: ends when the process does (Close makes sure it does)
		c.Wait()
		wrap.Cleanup()
		close(p.done)
	}()
	return p, nil
}

// Read reads the process's stdout.
func (p *HostProc) Read(b []byte) (int, error) { return p.stdout.Read(b) }

// Write writes to the process's stdin.
func (p *HostProc) Write(b []byte) (int, error) { return p.stdin.Write(b) }

// Close closes its stdin (a well-behaved server ends on EOF), then ends its process tree —
// asked first, killed after 2 s — and waits for it.
func (p *HostProc) Close() error {
	p.once.Do(func() {
		p.stdin.Close()
		select {
		case <-p.done:
		case <-time.After(500 * time.Millisecond):
			endTree(p.c, false)
			select {
			case <-p.done:
			case <-time.After(2 * time.Second):
				endTree(p.c, true)
				<-p.done
			}
		}
		p.stdout.Close()
	})
	return nil
}

// Log is the start of what the process wrote to stderr (for a message when it did not answer).
func (p *HostProc) Log(context.Context) string { return strings.TrimSpace(p.stderr.String()) }

var _ io.ReadWriteCloser = (*HostProc)(nil)
