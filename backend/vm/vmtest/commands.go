package vmtest

// The fake engine's command set: what a container's Command and an exec session can run
// (proc.go says how).

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"time"

	"mvdan.cc/sh/v3/expand"
	"mvdan.cc/sh/v3/interp"
	"mvdan.cc/sh/v3/syntax"

	"cubicle/backend/engine"
)

// commands is the fake engine's command set (see the top of this file).
var commands map[string]func(x *process, c cmdIO, args []string) int

func init() {
	commands = map[string]func(x *process, c cmdIO, args []string) int{
		"sh":     (*process).sh,
		"cat":    (*process).cat,
		"dd":     (*process).dd,
		"df":     (*process).df,
		"grep":   (*process).grep,
		"head":   (*process).head,
		"id":     (*process).id,
		"ls":     (*process).ls,
		"mkdir":  (*process).mkdir,
		"mv":     (*process).mv,
		"ps":     (*process).ps,
		"sleep":  (*process).sleep,
		"touch":  (*process).touch,
		"tr":     (*process).tr,
		"ulimit": (*process).ulimit,
		"echo": func(_ *process, c cmdIO, args []string) int {
			fmt.Fprintln(c.stdout, strings.Join(args, " "))
			return 0
		},
		"true":  func(*process, cmdIO, []string) int { return 0 },
		"false": func(*process, cmdIO, []string) int { return 1 },
	}
}

// sh runs `sh -c SCRIPT [NAME ARGS…]` in the interpreter.
func (x *process) sh(c cmdIO, args []string) int {
	if len(args) < 1 || args[0] != "-c" || len(args) < 2 {
		fmt.Fprintln(c.stderr, "sh: the fake engine runs only sh -c SCRIPT")
		return 2
	}
	file, err := syntax.NewParser().Parse(strings.NewReader(args[1]), "sh")
	if err != nil {
		fmt.Fprintf(c.stderr, "sh: %v\n", err)
		return 2
	}
	r, err := interp.New(
		interp.Env(expand.ListEnviron(x.env...)),
		interp.StdIO(c.stdin, c.stdout, c.stderr),
		interp.Params(append([]string{"--"}, args[2:]...)...),
		// ulimit is a builtin the interpreter does not implement: it is the command's.
		interp.CallHandler(func(ctx context.Context, args []string) ([]string, error) {
			if args[0] == "ulimit" {
				args[0] = "/bin/ulimit"
			}
			return args, nil
		}),
		interp.ExecHandlers(func(interp.ExecHandlerFunc) interp.ExecHandlerFunc {
			return func(ctx context.Context, args []string) error {
				hc := interp.HandlerCtx(ctx)
				code := x.command(cmdIO{ctx: ctx, dir: hc.Dir, stdin: hc.Stdin, stdout: hc.Stdout, stderr: hc.Stderr}, args)
				if code != 0 {
					return interp.NewExitStatus(uint8(code))
				}
				return nil
			}
		}),
		interp.OpenHandler(func(ctx context.Context, p string, flag int, perm os.FileMode) (io.ReadWriteCloser, error) {
			return x.open(interp.HandlerCtx(ctx).Dir, p, flag, perm)
		}),
		interp.StatHandler(func(ctx context.Context, name string, follow bool) (fs.FileInfo, error) {
			hp := x.f.hostPath(x.c, interp.HandlerCtx(ctx).Dir, name)
			if follow {
				return os.Stat(hp)
			}
			return os.Lstat(hp)
		}),
	)
	if err != nil {
		fmt.Fprintf(c.stderr, "sh: %v\n", err)
		return 2
	}
	r.Dir = c.dir // the container's path: the interpreter opens and stats through the handlers
	err = r.Run(c.ctx, file)
	var status interp.ExitStatus
	switch {
	case err == nil:
		return 0
	case errors.As(err, &status):
		return int(status)
	case c.ctx.Err() != nil:
		return 137
	default:
		fmt.Fprintf(c.stderr, "sh: %v\n", err)
		return 2
	}
}

// open opens container path p (relative to dir); /dev/null and /dev/zero are the devices.
func (x *process) open(dir, p string, flag int, perm os.FileMode) (io.ReadWriteCloser, error) {
	switch p {
	case "/dev/null":
		return nopRWC{Reader: strings.NewReader(""), Writer: io.Discard}, nil
	case "/dev/zero":
		return nopRWC{Reader: zeros{}, Writer: io.Discard}, nil
	}
	return os.OpenFile(x.f.hostPath(x.c, dir, p), flag, perm)
}

type nopRWC struct {
	io.Reader
	io.Writer
}

func (nopRWC) Close() error { return nil }

type zeros struct{}

func (zeros) Read(p []byte) (int, error) { clear(p); return len(p), nil }

// input returns the files args name (stdin for none or "-"), reporting what cannot be opened.
func (x *process) input(c cmdIO, cmd string, args []string, each func(r io.Reader) bool) int {
	if len(args) == 0 {
		args = []string{"-"}
	}
	code := 0
	for _, a := range args {
		if a == "-" {
			if !each(c.stdin) {
				return 1
			}
			continue
		}
		f, err := x.open(c.dir, a, os.O_RDONLY, 0)
		if err != nil {
			fmt.Fprintf(c.stderr, "%s: %s: No such file or directory\n", cmd, a)
			code = 1
			continue
		}
		ok := each(f)
		f.Close()
		if !ok {
			return 1
		}
	}
	return code
}

func (x *process) cat(c cmdIO, args []string) int {
	return x.input(c, "cat", args, func(r io.Reader) bool {
		_, err := io.Copy(c.stdout, ctxReader{c.ctx, r})
		return err == nil
	})
}

// ctxReader ends a read loop once ctx ends (a killed process); a read already blocked
// returns when its source closes.
type ctxReader struct {
	ctx context.Context
	r   io.Reader
}

func (r ctxReader) Read(p []byte) (int, error) {
	if err := r.ctx.Err(); err != nil {
		return 0, err
	}
	return r.r.Read(p)
}

func (x *process) head(c cmdIO, args []string) int {
	if len(args) < 2 || args[0] != "-c" {
		fmt.Fprintln(c.stderr, "head: the fake engine knows only head -c N [FILE]")
		return 1
	}
	n, err := strconv.ParseInt(args[1], 10, 64)
	if err != nil {
		fmt.Fprintf(c.stderr, "head: invalid number %q\n", args[1])
		return 1
	}
	return x.input(c, "head", args[2:], func(r io.Reader) bool {
		_, err := io.CopyN(c.stdout, r, n)
		return err == nil || err == io.EOF
	})
}

func (x *process) dd(c cmdIO, args []string) int {
	in, out, bs, count := "-", "-", int64(512), int64(-1)
	for _, a := range args {
		k, v, _ := strings.Cut(a, "=")
		switch k {
		case "if":
			in = v
		case "of":
			out = v
		case "bs", "count":
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				fmt.Fprintf(c.stderr, "dd: invalid number %q\n", v)
				return 1
			}
			if k == "bs" {
				bs = n
			} else {
				count = n
			}
		}
	}
	var r io.Reader = c.stdin
	if in != "-" {
		f, err := x.open(c.dir, in, os.O_RDONLY, 0)
		if err != nil {
			fmt.Fprintf(c.stderr, "dd: %s: %v\n", in, err)
			return 1
		}
		defer f.Close()
		r = f
	}
	w := c.stdout
	if out != "-" {
		f, err := x.open(c.dir, out, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
		if err != nil {
			fmt.Fprintf(c.stderr, "dd: %s: %v\n", out, err)
			return 1
		}
		defer f.Close()
		w = f
	}
	if count >= 0 {
		r = io.LimitReader(r, bs*count)
	}
	n, err := io.Copy(w, ctxReader{c.ctx, r})
	fmt.Fprintf(c.stderr, "%d+0 records in\n%d+0 records out\n", n/bs, n/bs)
	if err != nil {
		return 1
	}
	return 0
}

func (x *process) tr(c cmdIO, args []string) int {
	if len(args) != 2 {
		fmt.Fprintln(c.stderr, "tr: the fake engine knows only tr SET1 SET2")
		return 1
	}
	from, to := unescape(args[0]), unescape(args[1])
	if len(from) != len(to) {
		fmt.Fprintln(c.stderr, "tr: the fake engine maps sets of one length only")
		return 1
	}
	var table [256]byte
	for i := range table {
		table[i] = byte(i)
	}
	for i := range from {
		table[from[i]] = to[i]
	}
	buf := make([]byte, 32<<10)
	r := ctxReader{c.ctx, c.stdin}
	for {
		n, err := r.Read(buf)
		for i := range buf[:n] {
			buf[i] = table[buf[i]]
		}
		if _, werr := c.stdout.Write(buf[:n]); werr != nil {
			return 1
		}
		if err != nil {
			return 0
		}
	}
}

// unescape reads tr's escapes \0 (NUL), \n, \t and \\.
func unescape(s string) []byte {
	var out []byte
	for i := 0; i < len(s); i++ {
		if s[i] != '\\' || i+1 == len(s) {
			out = append(out, s[i])
			continue
		}
		i++
		switch s[i] {
		case '0':
			out = append(out, 0)
		case 'n':
			out = append(out, '\n')
		case 't':
			out = append(out, '\t')
		default:
			out = append(out, s[i])
		}
	}
	return out
}

func (x *process) grep(c cmdIO, args []string) int {
	if len(args) > 0 && args[0] == "-E" {
		args = args[1:]
	}
	if len(args) == 0 {
		fmt.Fprintln(c.stderr, "grep: no pattern")
		return 2
	}
	re, err := regexp.Compile(args[0])
	if err != nil {
		fmt.Fprintf(c.stderr, "grep: %v\n", err)
		return 2
	}
	found := false
	code := x.input(c, "grep", args[1:], func(r io.Reader) bool {
		sc := bufio.NewScanner(ctxReader{c.ctx, r})
		for sc.Scan() {
			if re.MatchString(sc.Text()) {
				found = true
				fmt.Fprintln(c.stdout, sc.Text())
			}
		}
		return true
	})
	switch {
	case code != 0:
		return 2
	case !found:
		return 1
	}
	return 0
}

// df -k reports /dev/shm with the spec's size (64 MiB by default, as engines give) and any
// other path as the container's root.
func (x *process) df(c cmdIO, args []string) int {
	fmt.Fprintln(c.stdout, "Filesystem     1K-blocks  Used Available Use% Mounted on")
	for _, a := range args {
		if a == "-k" {
			continue
		}
		if path.Clean(a) == "/dev/shm" {
			size := x.c.Spec.Limits.ShmBytes
			if size <= 0 {
				size = 64 << 20
			}
			fmt.Fprintf(c.stdout, "shm %d 0 %d 0%% /dev/shm\n", size>>10, size>>10)
			continue
		}
		fmt.Fprintf(c.stdout, "overlay %d 0 %d 0%% /\n", 1<<20, 1<<20)
	}
	return 0
}

// id prints the user's id: a number, root (0) or nobody (65534); -u or nothing.
func (x *process) id(c cmdIO, args []string) int {
	uid := x.user
	if u, _, ok := strings.Cut(uid, ":"); ok {
		uid = u
	}
	switch uid {
	case "", "root":
		uid = "0"
	case "nobody":
		uid = "65534"
	}
	if len(args) > 0 && args[0] == "-u" {
		fmt.Fprintln(c.stdout, uid)
		return 0
	}
	fmt.Fprintf(c.stdout, "uid=%s gid=%s\n", uid, uid)
	return 0
}

func (x *process) ls(c cmdIO, args []string) int {
	if len(args) == 0 {
		args = []string{"."}
	}
	code := 0
	for _, a := range args {
		entries, err := os.ReadDir(x.f.hostPath(x.c, c.dir, a))
		if err != nil {
			fmt.Fprintf(c.stderr, "ls: %s: No such file or directory\n", a)
			code = 1
			continue
		}
		for _, e := range entries {
			fmt.Fprintln(c.stdout, e.Name())
		}
	}
	return code
}

func (x *process) mkdir(c cmdIO, args []string) int {
	all := len(args) > 0 && args[0] == "-p"
	if all {
		args = args[1:]
	}
	for _, a := range args {
		hp := x.f.hostPath(x.c, c.dir, a)
		var err error
		if all {
			err = os.MkdirAll(hp, 0o755)
		} else {
			err = os.Mkdir(hp, 0o755)
		}
		if err != nil {
			fmt.Fprintf(c.stderr, "mkdir: %s: %v\n", a, err)
			return 1
		}
	}
	return 0
}

func (x *process) mv(c cmdIO, args []string) int {
	if len(args) != 2 {
		fmt.Fprintln(c.stderr, "mv: the fake engine moves one file")
		return 1
	}
	if err := os.Rename(x.f.hostPath(x.c, c.dir, args[0]), x.f.hostPath(x.c, c.dir, args[1])); err != nil {
		fmt.Fprintf(c.stderr, "mv: %v\n", err)
		return 1
	}
	return 0
}

func (x *process) touch(c cmdIO, args []string) int {
	for _, a := range args {
		f, err := x.open(c.dir, a, os.O_WRONLY|os.O_CREATE, 0o644)
		if err != nil {
			fmt.Fprintf(c.stderr, "touch: %s: %v\n", a, err)
			return 1
		}
		f.Close()
	}
	return 0
}

// ps lists the container's processes' command lines (ps -o args; other columns are not
// known).
func (x *process) ps(c cmdIO, args []string) int {
	x.f.mu.Lock()
	var lines []string
	if p := x.c.pid1; p != nil {
		lines = append(lines, strings.Join(p.args, " "))
	}
	var execs []*proc
	for p := range x.c.execs {
		execs = append(execs, p)
	}
	x.f.mu.Unlock()
	sort.Slice(execs, func(i, j int) bool { return execs[i].pid < execs[j].pid })
	for _, p := range execs {
		lines = append(lines, strings.Join(p.args, " "))
	}
	fmt.Fprintln(c.stdout, "COMMAND")
	for _, l := range lines {
		fmt.Fprintln(c.stdout, l)
	}
	return 0
}

func (x *process) sleep(c cmdIO, args []string) int {
	if len(args) != 1 {
		fmt.Fprintln(c.stderr, "sleep: one duration in seconds")
		return 1
	}
	s, err := strconv.ParseFloat(args[0], 64)
	if err != nil {
		fmt.Fprintf(c.stderr, "sleep: invalid number %q\n", args[0])
		return 1
	}
	select {
	case <-time.After(time.Duration(s * float64(time.Second))):
		return 0
	case <-c.ctx.Done():
		return 137
	}
}

// ulimit -n and -u answer the spec's limits as a real engine sets them: clamped to the hard
// limits of this process (engine.ClampRlimits).
func (x *process) ulimit(c cmdIO, args []string) int {
	nofile, nproc := engine.ClampRlimits(x.c.Spec.Limits, engine.ReadHostLimits(""))
	for _, a := range args {
		switch a {
		case "-n":
			fmt.Fprintln(c.stdout, nofile)
		case "-u":
			fmt.Fprintln(c.stdout, nproc)
		default:
			fmt.Fprintf(c.stderr, "ulimit: the fake engine knows -n and -u, not %s\n", a)
			return 2
		}
	}
	return 0
}
