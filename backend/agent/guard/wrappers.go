package guard

import (
	"slices"
	"strings"
)

var (
	downloaders  = set("curl", "wget", "fetch", "aria2c", "http", "https", "lwp-request", "GET", "ftp", "tftp", "scp", "rsync")
	networkTools = set("nc", "ncat", "netcat", "nc.traditional", "nc.openbsd", "telnet", "socat", "openssl", "cryptcat")
	decoders     = set("base64", "base32", "xxd", "uudecode", "openssl", "rev", "gunzip", "zcat", "gzip", "xz", "bzip2", "tr", "od")
	shellNames   = set("sh", "bash", "dash", "zsh", "ksh", "mksh", "ash", "csh", "tcsh", "fish", "yash", "rbash", "busybox")
	otherInterps = set("perl", "ruby", "node", "nodejs", "php", "lua", "luajit", "irb", "deno", "bun", "Rscript", "julia", "tclsh", "jshell", "pypy", "pypy3")
	privileged   = set("sudo", "doas", "pkexec", "run0", "su", "runuser")
	// simpleWrappers run the rest of their arguments as a command after their own options;
	// the value is the set of options that take an argument.
	simpleWrappers = map[string]map[string]bool{
		"nohup": nil, "builtin": nil, "time": set("-f", "-o"), "exec": set("-a"),
		"nice": set("-n"), "ionice": set("-c", "-n", "-p"), "setsid": nil,
		"stdbuf": set("-i", "-o", "-e"), "unbuffer": nil, "chrt": nil, "taskset": nil,
		"caffeinate": nil, "proxychains": set("-f"), "proxychains4": set("-f"), "torsocks": nil,
		"strace": set("-o", "-p", "-e", "-s", "-u", "-E", "-P", "-b", "-I", "-X", "-a", "-O", "-S"),
		"ltrace": set("-o", "-p", "-e", "-s", "-u", "-n", "-a"), "firejail": nil, "doas": set("-u", "-C"),
		"sudo":   set("-u", "-g", "-h", "-p", "-C", "-D", "-r", "-t", "-U", "-T", "-R", "--user", "--group", "--host", "--prompt", "--chdir", "--close-from", "--role", "--type", "--other-user", "--command-timeout"),
		"pkexec": set("--user"), "run0": set("-u", "--user", "-g", "--group", "-D", "--chdir", "--property", "--slice", "--unit", "--description", "--setenv"),
		"env": set("-u", "--unset", "-C", "--chdir"), "command": nil, "timeout": set("-s", "--signal", "-k", "--kill-after"),
		"chroot": set("--userspec", "--groups"), "xargs": set("-a", "-d", "-E", "-e", "-I", "-i", "-L", "-l", "-n", "-P", "-s", "--arg-file", "--delimiter", "--max-args", "--max-procs", "--max-lines", "--replace"),
		"watch": set("-n", "--interval", "-d", "--differences"), "flock": set("-w", "--timeout", "-E", "--conflict-exit-code"),
		"parallel": set("-j", "--jobs", "-S", "--sshlogin"), "tini": set("-p", "-e"), "dumb-init": nil, "catatonit": nil,
		"dbus-launch": nil, "dbus-run-session": set("--config-file", "--dbus-daemon"), "numactl": nil, "chronic": nil,
	}
	schedulers = set("at", "batch")
	sshOptions = set("-b", "-c", "-D", "-E", "-e", "-F", "-I", "-i", "-J", "-L", "-l", "-m", "-O", "-o", "-p", "-Q", "-R", "-S", "-W", "-w", "-B")
)

func set(items ...string) map[string]bool {
	m := make(map[string]bool, len(items))
	for _, it := range items {
		m[it] = true
	}
	return m
}

// cmdName is the command a word names: its base name without a leading backslash.
func cmdName(w string) string {
	w = strings.TrimLeft(w, `\`)
	if strings.HasPrefix(w, "/proc/") && strings.HasSuffix(w, "/exe") {
		return "sh" // /proc/self/exe, /proc/$$/exe: the running shell itself
	}
	if i := strings.LastIndexByte(w, '/'); i >= 0 && i < len(w)-1 {
		w = w[i+1:]
	}
	return w
}

func isShell(w string) bool { return shellNames[cmdName(w)] }

func isInterpreter(w string) bool {
	n := cmdName(w)
	return shellNames[n] || otherInterps[n] || strings.HasPrefix(n, "python") || n == "eval" || n == "source" || n == "."
}

// step is one unwrapping of a command: the command it runs next, a script it runs, and
// what kind of wrapper it was. note, when set, says why running a command this way is itself
// worth asking about (at severity severity, MEDIUM when empty).
type step struct {
	next     []string
	script   string
	kind     string   // "", "privilege", "shell", "eval", "xargs", "wrapper", "watch", "remote", "runner"
	params   []string // sh -c SCRIPT NAME ARGS…: $0 and the positional parameters of script
	note     string
	severity Severity
}

func (st step) sev() Severity {
	if st.severity == "" {
		return Medium
	}
	return st.severity
}

// unwrap looks through one wrapper (sudo, env, nohup, xargs, bash -c, awk system(), git -c
// core.pager=…, tar --checkpoint-action=exec=…, …). kind "" means argv is not a wrapper and is
// the command itself.
func unwrap(argv []string) step {
	name := cmdName(argv[0])
	args := argv[1:]
	if st, ok := unwrapRunner(name, args); ok {
		return st
	}
	switch {
	case name == "su" || name == "runuser":
		for i, a := range args {
			if (a == "-c" || a == "--command" || a == "--session-command") && i+1 < len(args) {
				return step{script: args[i+1], kind: "privilege"}
			}
			if v, ok := strings.CutPrefix(a, "--command="); ok {
				return step{script: v, kind: "privilege"}
			}
		}
		return step{kind: "privilege"}
	case shellNames[name]:
		if name == "busybox" {
			return step{next: args, kind: "wrapper"}
		}
		hasC := false
		for i := 0; i < len(args); i++ {
			a := args[i]
			if a == "-o" || a == "+o" || a == "-O" || a == "+O" {
				i++
				continue
			}
			if a == "--" || len(a) < 2 || (a[0] != '-' && a[0] != '+') {
				if hasC {
					if a == "--" && i+1 < len(args) {
						i++
						a = args[i]
					}
					return step{script: a, kind: "shell", params: args[i+1:]}
				}
				return step{}
			}
			if !strings.HasPrefix(a, "--") && strings.ContainsRune(a[1:], 'c') {
				hasC = true
			}
		}
		return step{}
	case name == "ssh":
		rest := skipOptions(args, sshOptions)
		if len(rest) > 1 {
			return step{script: strings.Join(rest[1:], " "), kind: "remote"}
		}
		return step{}
	case (name == "docker" || name == "podman") && len(args) > 0 && args[0] == "exec":
		rest := skipOptions(args[1:], set("-e", "--env", "-u", "--user", "-w", "--workdir", "--env-file", "--detach-keys"))
		if len(rest) > 1 {
			return step{next: rest[1:], kind: "wrapper"}
		}
		return step{}
	case name == "kubectl" && slices.Contains(args, "exec"):
		if i := slices.Index(args, "--"); i >= 0 && i+1 < len(args) {
			return step{next: args[i+1:], kind: "wrapper"}
		}
		return step{}
	case name == "eval":
		return step{script: strings.Join(args, " "), kind: "eval"}
	case name == "watch":
		rest := skipOptions(args, simpleWrappers[name])
		return step{script: strings.Join(rest, " "), kind: "watch"}
	case name == "command":
		for _, a := range args {
			if a == "-v" || a == "-V" {
				return step{}
			}
			if !strings.HasPrefix(a, "-") {
				break
			}
		}
	case name == "flock":
		rest := skipOptions(args, simpleWrappers[name])
		for i, a := range args {
			if (a == "-c" || a == "--command") && i+1 < len(args) {
				return step{script: args[i+1], kind: "wrapper"}
			}
		}
		if len(rest) > 1 {
			return step{next: rest[1:], kind: "wrapper"}
		}
		return step{}
	}
	opts, ok := simpleWrappers[name]
	if !ok {
		return step{}
	}
	rest := skipOptions(args, opts)
	kind := "wrapper"
	switch name {
	case "sudo", "doas", "pkexec", "run0":
		kind = "privilege"
	case "env":
		for i, a := range args {
			if (a == "-S" || a == "--split-string") && i+1 < len(args) {
				return step{script: strings.Join(args[i+1:], " "), kind: "wrapper"}
			}
			if v, ok := strings.CutPrefix(a, "--split-string="); ok {
				return step{script: v, kind: "wrapper"}
			}
		}
		for len(rest) > 0 && strings.Contains(rest[0], "=") && !strings.HasPrefix(rest[0], "=") {
			rest = rest[1:]
		}
	case "timeout", "chroot", "chrt", "taskset":
		if len(rest) > 0 {
			rest = rest[1:] // the duration, new root, priority or mask
		}
	case "xargs", "parallel":
		if i := slices.Index(rest, ":::"); i >= 0 {
			rest = rest[:i]
		}
		// -I R (or -i, --replace[=R]) puts each input in place of R.
		repl := replaceString(args)
		if name == "parallel" {
			repl = "{}"
		}
		if repl != "" {
			rest = slices.Clone(rest)
			for i := range rest {
				rest[i] = strings.ReplaceAll(rest[i], repl, dynamic)
			}
		}
		if len(rest) == 0 {
			rest = []string{"echo"}
		}
		rest = append(slices.Clip(rest), dynamic)
		kind = "xargs"
	}
	if len(rest) == 0 {
		return step{kind: kind}
	}
	return step{next: rest, kind: kind}
}

// skipOptions drops leading options (and the arguments of those in withArg).
func skipOptions(args []string, withArg map[string]bool) []string {
	for i := 0; i < len(args); i++ {
		a := args[i]
		if a == "--" {
			return args[i+1:]
		}
		if len(a) < 2 || a[0] != '-' {
			return args[i:]
		}
		if withArg[a] {
			i++
		}
	}
	return nil
}

// finalCommand follows wrappers to the command that really runs (nil when none does).
func finalCommand(argv []string) []string {
	for range 16 {
		if len(argv) == 0 {
			return nil
		}
		st := unwrap(argv)
		if st.kind == "" {
			return argv
		}
		if st.next == nil {
			if st.script != "" {
				return []string{"sh", "-c", st.script} // runs a script: treat as a shell
			}
			return nil
		}
		argv = st.next
	}
	return argv
}

// readsProgramFromStdin reports whether an interpreter runs the program it reads on stdin.
func readsProgramFromStdin(argv []string) bool {
	name := cmdName(argv[0])
	if name == "source" || name == "." {
		return len(argv) > 1 && (argv[1] == "/dev/stdin" || argv[1] == "-" || strings.HasPrefix(argv[1], "/dev/fd/"))
	}
	if schedulers[name] {
		return !hasAny(argv[1:], "-f", "-l", "-r", "-d", "-c")
	}
	if !isInterpreter(name) || name == "eval" {
		return false
	}
	codeFlags := set("-c", "-m", "-e", "-E", "-r", "-p", "--eval", "--print", "--command")
	for _, a := range argv[1:] {
		switch {
		case a == "-" || a == "/dev/stdin":
			return true
		case a == "-s" && shellNames[name]:
			return true
		case codeFlags[a]:
			return false
		case shellNames[name] && len(a) > 1 && a[0] == '-' && a[1] != '-' && strings.ContainsRune(a, 'c'):
			return false
		case !strings.HasPrefix(a, "-"):
			return false // a script file
		}
	}
	return true
}

func hasShortFlag(args []string, f rune) bool {
	for _, a := range args {
		if len(a) > 1 && a[0] == '-' && a[1] != '-' && strings.ContainsRune(a[1:], f) {
			return true
		}
	}
	return false
}

// replaceString is the replacement string xargs or parallel args name (-I R, -IR,
// --replace=R; "{}" for -i and --replace alone), or "" when they name none.
func replaceString(args []string) string {
	repl := ""
	for i, a := range args {
		switch {
		case a == "-I" && i+1 < len(args):
			repl = args[i+1]
		case strings.HasPrefix(a, "-I") && len(a) > 2:
			repl = a[2:]
		case a == "-i" || a == "--replace":
			repl = "{}"
		case strings.HasPrefix(a, "--replace="):
			repl = strings.TrimPrefix(a, "--replace=")
		}
	}
	return repl
}
