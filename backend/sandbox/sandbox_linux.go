//go:build linux

package sandbox

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"time"

	"github.com/landlock-lsm/go-landlock/landlock"
	ll "github.com/landlock-lsm/go-landlock/landlock/syscall"
	"golang.org/x/sys/unix"

	"cubicle/backend/fault"
)

// envLandlock carries the Policy (JSON) to this program started again as the Landlock helper.
const envLandlock = "CUBICLE_SANDBOX_LANDLOCK"

// installHint says what to install for a sandbox on Linux.
const installHint = "install bubblewrap (Debian/Ubuntu: apt install bubblewrap; Fedora: dnf install bubblewrap) or run a kernel with Landlock enabled (Linux 5.13 or later, \"landlock\" in the lsm= boot list)"

func init() {
	helperMain()
}

// helperMain is the helper modes of this program, run before anything else: the probe, the
// Landlock helper (restrict, then execute the command or do the file operation) and the file
// helper. A failure to restrict ends the process: nothing runs unsandboxed.
func helperMain() {
	if os.Getenv(envProbe) == "1" {
		os.Exit(0)
	}
	raw, landlocked := os.LookupEnv(envLandlock)
	op := os.Getenv(envFile)
	if !landlocked {
		if op != "" {
			fileHelper(op)
		}
		return
	}
	runtime.LockOSThread() // capabilities are per thread: drop them on the one that goes on
	os.Unsetenv(envLandlock)
	var p Policy
	if err := json.Unmarshal([]byte(raw), &p); err != nil {
		fmt.Fprintf(os.Stderr, "cubicle sandbox: bad policy: %v\n", err)
		os.Exit(126)
	}
	if err := restrictLandlock(p.Clean()); err != nil {
		fmt.Fprintf(os.Stderr, "cubicle sandbox: Landlock: %v\n", err)
		os.Exit(126)
	}
	if op != "" {
		fileHelper(op)
	}
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "cubicle sandbox: no command")
		os.Exit(126)
	}
	bin, err := exec.LookPath(os.Args[1])
	if err != nil {
		fmt.Fprintf(os.Stderr, "cubicle sandbox: %v\n", err)
		os.Exit(127)
	}
	err = unix.Exec(bin, os.Args[1:], os.Environ())
	fmt.Fprintf(os.Stderr, "cubicle sandbox: exec %s: %v\n", bin, err)
	os.Exit(126)
}

// restrictLandlock applies p to this process (every thread) and drops every capability of
// this thread (a root command would otherwise keep raw-I/O and the like).
func restrictLandlock(p Policy) error {
	plan := LandlockPlan(p, func(dir string) ([]Entry, error) {
		ents, err := os.ReadDir(dir)
		out := make([]Entry, 0, len(ents))
		for _, e := range ents {
			out = append(out, Entry{Name: e.Name(), Dir: e.IsDir(), Link: e.Type()&os.ModeSymlink != 0})
		}
		return out, err
	})
	const fileRights = ll.AccessFSExecute | ll.AccessFSWriteFile | ll.AccessFSReadFile | ll.AccessFSTruncate | ll.AccessFSIoctlDev
	var rules []landlock.Rule
	for _, g := range plan {
		var r landlock.FSRule
		switch {
		case g.Access == ListOnly:
			r = landlock.PathAccess(ll.AccessFSReadDir, g.Path)
		case g.Access == ReadOnly && g.Dir:
			r = landlock.RODirs(g.Path)
		case g.Access == ReadOnly:
			r = landlock.ROFiles(g.Path)
		case g.Access == ReadWrite && g.Dir:
			r = landlock.RWDirs(g.Path).WithRefer()
		case g.Access == ReadWrite:
			r = landlock.RWFiles(g.Path)
		case g.Access == Device && g.Dir:
			r = landlock.RWDirs(g.Path).WithIoctlDev()
		default:
			r = landlock.PathAccess(fileRights&^ll.AccessFSExecute, g.Path)
		}
		rules = append(rules, r.IgnoreIfMissing())
	}
	cfg := landlock.Config{HandledAccessFS: landlock.V7.HandledAccessFS, Scoped: landlock.V7.Scoped}
	if !p.Network {
		cfg.HandledAccessNet = landlock.V7.HandledAccessNet // TCP bind and connect, none allowed
	}
	if err := cfg.BestEffort().Restrict(rules...); err != nil {
		return err
	}
	return dropCaps()
}

// dropCaps empties this thread's bounding, ambient, inheritable, permitted and effective
// capability sets, so that an exec'd program (even root's) gains none.
func dropCaps() error {
	if os.Geteuid() != 0 {
		return nil // an ordinary user has none to drop (no new privileges is set by Landlock)
	}
	for c := 0; c <= unix.CAP_LAST_CAP; c++ {
		if err := unix.Prctl(unix.PR_CAPBSET_DROP, uintptr(c), 0, 0, 0); err != nil && err != unix.EINVAL {
			return fmt.Errorf("drop capability %d: %w", c, err)
		}
	}
	unix.Prctl(unix.PR_CAP_AMBIENT, unix.PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0)
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var data [2]unix.CapUserData
	if err := unix.Capset(&hdr, &data[0]); err != nil {
		return fmt.Errorf("capset: %w", err)
	}
	return nil
}

func detect(mode Kind, exe string) (Kind, string, error) {
	switch mode {
	case None:
		return None, "the host sandbox is turned off (" + EnvMode + "=none)", nil
	case Seatbelt, AppContainer:
		return "", "", fault.Invalid("%s=%s is not Linux's; on Linux use bwrap or landlock", EnvMode, mode)
	}
	var problems []string
	if mode == Auto || mode == Bwrap {
		err := probeBwrap(exe)
		if err == nil {
			return Bwrap, "", nil
		}
		if mode == Bwrap {
			return "", "", fault.Unavailable("%s=bwrap: bubblewrap is not usable here: %v", EnvMode, err)
		}
		problems = append(problems, err.Error())
	}
	v, err := ll.LandlockGetABIVersion()
	if err == nil && v >= 1 {
		return Landlock, "", nil
	}
	if mode == Landlock {
		return "", "", fault.Unavailable("%s=landlock: this kernel has no Landlock (%v)", EnvMode, err)
	}
	problems = append(problems, fmt.Sprintf("Landlock is not available (%v)", err))
	return None, fmt.Sprintf("%s; %s", joinSemi(problems), installHint), nil
}

func joinSemi(s []string) string {
	out := ""
	for i, e := range s {
		if i > 0 {
			out += "; "
		}
		out += e
	}
	return out
}

// probeBwrap runs this program's probe mode in bubblewrap with the namespaces a command gets.
func probeBwrap(exe string) error {
	bin, err := exec.LookPath("bwrap")
	if err != nil {
		return fmt.Errorf("bubblewrap (bwrap) is not installed")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	args := append(BwrapArgs(Policy{Network: false}, func(string) (bool, bool) { return false, false }, "", ""), "--", exe)
	for attempt := 1; ; attempt++ {
		cmd := exec.CommandContext(ctx, bin, args...)
		cmd.Env = append(os.Environ(), envProbe+"=1")
		out, err := cmd.CombinedOutput()
		var ee *exec.ExitError
		switch {
		case err == nil:
			return nil
		case errors.As(err, &ee) && SetupRaced(ee.ExitCode(), out) && attempt < SetupAttempts:
			continue // a host mount vanished while bubblewrap made the sandbox: not a verdict
		}
		return fmt.Errorf("bubblewrap cannot make its sandbox here (%v: %s)", err, trim(out))
	}
}

func trim(b []byte) string {
	if len(b) > 300 {
		b = b[:300]
	}
	return string(b)
}

// wrap builds the command line of kind s.kind.
func (s *Sandbox) wrap(_ context.Context, p Policy, argv []string) (Command, error) {
	p.ReadWrite = append(p.ReadWrite, Scratch...)
	p.Hidden = withTargets(p.Hidden)
	p = p.Clean()
	switch s.kind {
	case Landlock:
		raw, err := json.Marshal(p)
		if err != nil {
			return Command{}, err
		}
		return Command{Argv: append([]string{s.exe}, argv...), Env: []string{envLandlock + "=" + string(raw)}, Cleanup: func() {}, Sandboxed: true}, nil
	case Bwrap:
		dir, err := os.MkdirTemp("", "cubicle-sandbox-")
		if err != nil {
			return Command{}, fault.Unavailable("sandbox: %v", err)
		}
		deny := filepath.Join(dir, "denied")
		if err := os.WriteFile(deny, nil, 0); err != nil {
			os.RemoveAll(dir)
			return Command{}, fault.Unavailable("sandbox: %v", err)
		}
		args := BwrapArgs(p, pathKind, deny, "")
		return Command{Argv: append(append([]string{"bwrap"}, args...), append([]string{"--"}, argv...)...),
			Cleanup: func() { os.RemoveAll(dir) }, Sandboxed: true}, nil
	}
	return Command{}, fault.Unavailable("sandbox kind %q cannot run commands here", s.kind)
}

// pathKind says whether p exists and is a directory (links followed).
func pathKind(p string) (bool, bool) {
	st, err := os.Stat(p)
	if err != nil {
		return false, false
	}
	return true, st.IsDir()
}

// withTargets adds the targets of hidden paths that are (or pass through) symbolic links:
// hiding a link's name alone would leave its target open.
func withTargets(hidden []string) []string {
	out := slices.Clone(hidden)
	for _, h := range hidden {
		if t, err := filepath.EvalSymlinks(h); err == nil && t != h && !slices.Contains(out, t) {
			out = append(out, t)
		}
	}
	return out
}
