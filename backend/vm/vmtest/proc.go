package vmtest

import (
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"path"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"cubicle/backend/engine"
	"cubicle/backend/fault"
)

// The fake engine's processes. A container created without a Command runs the image's own
// process, the fake driver (driver.go), which ends at once on a stop (a real desktop's init
// handles SIGTERM). A container created with a Command, and every exec session other than
// the driver's relay, runs that command in the test's own process, on a directory standing
// for the container's root file system (below the engine's temporary directory; bind mounts
// and named volumes are mapped onto their own directories):
//
//   - `sh -c SCRIPT` runs SCRIPT in mvdan.cc/sh's POSIX shell interpreter, whose builtins
//     (echo, read, exit, set, exec, :, …) are its own; ulimit -n/-u is answered from the
//     spec's limits clamped to this process's own (engine.ClampRlimits);
//   - cat, dd (if= of= bs= count=), df -k, grep [-E], head -c, id [-u], ls, mkdir [-p], mv,
//     ps -o args, sleep, touch, tr (one-to-one sets), true and false are the commands.
//     Anything else is "not found" (exit 127).
//
// /proc/1/status (no capability, no new privileges) and the cgroup's memory.max and
// pids.max are written from the spec at each start, and df reports the spec's /dev/shm
// size, so that a container sees the hardening and limits a real engine gives it. What the
// fake does not do: isolate (the commands run as the test's user, with its CPU and memory),
// freeze a paused container's processes, or use the network.
//
// A container's main process as PID 1 ignores SIGTERM, as on Linux a PID 1 without a
// handler does: a stop waits for the stop timeout before it kills it. It ends with its own
// exit code (137 when killed), and its output is the container's log: a start whose process
// failed within engine.StartConfirm is refused with it (engine.ConfirmStart), as real
// engines do.

// proc is one process of the fake engine: a container's main process or an exec session.
type proc struct {
	pid    int
	args   []string
	cancel context.CancelFunc
	done   chan struct{} // closed when it ended
	code   int           // its exit code, once done is closed
	stream io.Closer     // an exec session's engine side, closed when it ends; nil for PID 1
}

// kill ends p: its context is cancelled and an exec session's stream closed (which ends
// reads blocked on it).
func (p *proc) kill() {
	p.cancel()
	if p.stream != nil {
		p.stream.Close()
	}
}

// execCommand runs spec's command in running container c as an exec session. f.mu is held.
func (f *Engine) execCommand(c *Container, spec engine.ExecSpec) (*engine.ExecStream, error) {
	host, eng := duplexPipe()
	out := &framer{w: eng}
	p, err := f.startProc(c, spec.Command, spec.Env, spec.User, spec.WorkDir, eng, out, streamWriter{out, 2}, eng, func(p *proc) {
		f.mu.Lock()
		delete(c.execs, p)
		f.mu.Unlock()
		eng.Close() // the process ended: EOF on the session
	})
	if err != nil {
		return nil, fault.Unavailable("exec in %s: %v", c.State.ID, err)
	}
	c.execs[p] = true
	host.onClose = p.kill // a closed session ends its process
	return engine.NewExecStream(host, nil), nil
}

// streamWriter writes frames of one stream (2: stderr) of a framer.
type streamWriter struct {
	f      *framer
	stream byte
}

func (w streamWriter) Write(p []byte) (int, error) {
	if err := w.f.frame(w.stream, p); err != nil {
		return 0, err
	}
	return len(p), nil
}

// duplex is one end of an in-memory connection that can be half-closed (CloseWrite), as an
// engine's hijacked exec connection can: two net.Pipes, one per direction.
type duplex struct {
	r, w    net.Conn
	onClose func() // called once by Close
	once    sync.Once
}

func duplexPipe() (a, b *duplex) {
	ar, bw := net.Pipe()
	br, aw := net.Pipe()
	return &duplex{r: ar, w: aw}, &duplex{r: br, w: bw}
}

func (d *duplex) Read(p []byte) (int, error)  { return d.r.Read(p) }
func (d *duplex) Write(p []byte) (int, error) { return d.w.Write(p) }
func (d *duplex) CloseWrite() error           { return d.w.Close() }
func (d *duplex) Close() error {
	d.w.Close()
	d.r.Close()
	d.once.Do(func() {
		if d.onClose != nil {
			d.onClose()
		}
	})
	return nil
}
func (d *duplex) LocalAddr() net.Addr                { return d.r.LocalAddr() }
func (d *duplex) RemoteAddr() net.Addr               { return d.r.RemoteAddr() }
func (d *duplex) SetReadDeadline(t time.Time) error  { return d.r.SetReadDeadline(t) }
func (d *duplex) SetWriteDeadline(t time.Time) error { return d.w.SetWriteDeadline(t) }
func (d *duplex) SetDeadline(t time.Time) error {
	d.r.SetDeadline(t)
	return d.w.SetDeadline(t)
}

// logTail keeps a container's output (its log), the last engine.LogTail lines of it asked
// by a failed start. Safe for concurrent use.
type logTail struct {
	mu  sync.Mutex
	buf []byte
}

func (l *logTail) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.buf = append(l.buf, p...)
	if len(l.buf) > 64<<10 {
		l.buf = append([]byte(nil), l.buf[len(l.buf)-32<<10:]...)
	}
	return len(p), nil
}

func (l *logTail) last(n int) string {
	l.mu.Lock()
	defer l.mu.Unlock()
	lines := strings.Split(strings.TrimRight(string(l.buf), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// ensureDirs makes the engine's temporary directory (once) and c's root and volume
// directories, and writes the files the kernel would show c. f.mu is held.
func (f *Engine) ensureDirs(c *Container) error {
	if f.dir == "" {
		dir, err := os.MkdirTemp("", "cubicle-vmtest-")
		if err != nil {
			return err
		}
		f.dir = dir
	}
	c.root = filepath.Join(f.dir, "containers", c.State.ID)
	for _, d := range []string{"bin", "dev/shm", "etc", "proc/1", "run", "sys/fs/cgroup", "tmp", "data"} {
		if err := os.MkdirAll(filepath.Join(c.root, filepath.FromSlash(d)), 0o777); err != nil {
			return err
		}
	}
	for _, v := range c.Spec.Volumes {
		if err := os.MkdirAll(f.volumeDir(v.Name), 0o777); err != nil {
			return err
		}
	}
	max := func(n int64) string {
		if n <= 0 {
			return "max"
		}
		return strconv.FormatInt(n, 10)
	}
	files := map[string]string{
		"proc/1/status":            "Name:\tinit\nCapEff:\t0000000000000000\nNoNewPrivs:\t1\n",
		"sys/fs/cgroup/memory.max": max(c.Spec.Limits.MemoryBytes) + "\n",
		"sys/fs/cgroup/pids.max":   max(c.Spec.Limits.PIDs) + "\n",
	}
	for name, body := range files {
		if err := os.WriteFile(filepath.Join(c.root, filepath.FromSlash(name)), []byte(body), 0o644); err != nil {
			return err
		}
	}
	return nil
}

// volumeDir is where volume name keeps its files.
func (f *Engine) volumeDir(name string) string { return filepath.Join(f.dir, "volumes", name) }

// hostPath maps path p of container c (absolute, or relative to dir) to the host: through
// the bind mount or volume with the longest matching target, else below c's root.
func (f *Engine) hostPath(c *Container, dir, p string) string {
	if !path.IsAbs(p) {
		p = path.Join(dir, p)
	}
	p = path.Clean(p)
	best, host := "", ""
	try := func(target, source string) {
		target = path.Clean(target)
		if (p == target || strings.HasPrefix(p, strings.TrimSuffix(target, "/")+"/")) && len(target) > len(best) {
			best, host = target, source
		}
	}
	for _, m := range c.Spec.Mounts {
		try(m.Target, m.Source)
	}
	for _, v := range c.Spec.Volumes {
		try(v.Target, f.volumeDir(v.Name))
	}
	if best == "" {
		return filepath.Join(c.root, filepath.FromSlash(p))
	}
	return filepath.Join(host, filepath.FromSlash(strings.TrimPrefix(p, best)))
}

// startProc runs args in c as a new process and returns it; its end calls ended (without
// f.mu). f.mu is held.
func (f *Engine) startProc(c *Container, args []string, env map[string]string, user, dir string,
	stdin io.Reader, stdout, stderr io.Writer, stream io.Closer, ended func(*proc)) (*proc, error) {
	if err := f.ensureDirs(c); err != nil {
		return nil, err
	}
	f.pids++
	ctx, cancel := context.WithCancel(context.Background())
	p := &proc{pid: f.pids, args: args, cancel: cancel, done: make(chan struct{}), stream: stream}
	if user == "" {
		user = c.Spec.User
	}
	if dir == "" {
		dir = "/"
	}
	vars := []string{"PATH=/bin", "HOME=/root", "HOSTNAME=" + c.Spec.Hostname}
	for _, m := range []map[string]string{c.Spec.Env, env} {
		for k, v := range m {
			vars = append(vars, k+"="+v)
		}
	}
	x := &process{f: f, c: c, user: user, env: vars}
	go func() { // owned by p: ends when args end or p.cancel is called
		defer cancel()
		p.code = x.run(ctx, args, dir, stdin, stdout, stderr)
		close(p.done)
		ended(p)
	}()
	return p, nil
}

// process is what the commands of one fake process share.
type process struct {
	f    *Engine
	c    *Container
	user string
	env  []string
}

// cmdIO is one command's standard streams and working directory.
type cmdIO struct {
	ctx            context.Context
	dir            string
	stdin          io.Reader
	stdout, stderr io.Writer
}

// run runs args and returns the exit code.
func (x *process) run(ctx context.Context, args []string, dir string, stdin io.Reader, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		return 0
	}
	if stdin == nil {
		stdin = strings.NewReader("")
	}
	return x.command(cmdIO{ctx: ctx, dir: dir, stdin: stdin, stdout: stdout, stderr: stderr}, args)
}

// command runs one command of the set; a killed process ends with 137.
func (x *process) command(io_ cmdIO, args []string) int {
	name := path.Base(args[0])
	fn, ok := commands[name]
	if !ok {
		fmt.Fprintf(io_.stderr, "sh: %s: not found\n", args[0])
		return 127
	}
	code := fn(x, io_, args[1:])
	if io_.ctx.Err() != nil {
		return 137
	}
	return code
}
