package guard

import (
	"regexp"
	"slices"
	"strings"
)

// Programs that run a command for you. Each is looked through like a wrapper, so the command
// it runs meets every rule; the unusual ones are also worth asking about in themselves (a
// command hidden in awk's system(), a pager set through git -c, tar's checkpoint action).

// runnerOpts are options with a value of the wrappers below (so the command after them is
// found).
var (
	systemdRunOpts = set("-u", "--unit", "-p", "--property", "--slice", "--description", "-E", "--setenv", "--uid", "--gid",
		"--working-directory", "-M", "--machine", "-H", "--host", "--on-active", "--on-boot", "--on-startup",
		"--on-unit-active", "--on-unit-inactive", "--on-calendar", "--on-timezone-change", "--timer-property",
		"--path-property", "--socket-property", "--service-type", "--nice", "-S", "--shell")
	unshareOpts = set("--map-user", "--map-group", "--propagation", "--setgroups", "-S", "--setuid", "-G", "--setgid",
		"-w", "--wd", "-R", "--root", "--map-users", "--map-groups", "--load-interp")
	setprivOpts = set("--reuid", "--regid", "--ruid", "--rgid", "--euid", "--egid", "--groups", "--inh-caps",
		"--ambient-caps", "--bounding-set", "--securebits", "--selinux-label", "--apparmor-profile", "--landlock-access",
		"--landlock-rule", "--pdeathsig", "--ptracer")
	nsenterOpts = set("-t", "--target", "-S", "--setuid", "-G", "--setgid", "-r", "--root", "-w", "--wd", "--env")
	bwrapOpts1  = set("--chdir", "--unsetenv", "--uid", "--gid", "--hostname", "--dir", "--tmpfs", "--proc", "--dev",
		"--remount-ro", "--seccomp", "--info-fd", "--json-status-fd", "--block-fd", "--userns-block-fd", "--sync-fd",
		"--exec-label", "--file-label", "--cap-add", "--cap-drop", "--perms", "--size", "--lock-file", "--mqueue", "--userns",
		"--userns2", "--pidns", "--argv0", "--args")
	bwrapOpts2   = set("--bind", "--ro-bind", "--dev-bind", "--bind-try", "--ro-bind-try", "--dev-bind-try", "--symlink", "--setenv", "--file", "--bind-data", "--ro-bind-data", "--chmod")
	npxOpts      = set("-p", "--package", "-c", "--call", "--cache", "--registry")
	terminalExec = set("xterm", "uxterm", "x-terminal-emulator", "konsole", "lxterminal", "mate-terminal", "terminator", "urxvt", "rxvt", "st", "alacritty", "kitty", "tilix", "qterminal", "xfce4-terminal", "gnome-terminal", "foot", "wezterm")
)

// gitRunKeys are configuration keys whose value git runs as a command.
var gitRunKeys = regexp.MustCompile(`(?i)^(?:core\.(?:pager|sshcommand|editor|fsmonitor|gitproxy|askpass|hookspath)|alias\..+|diff\.external|diff\..+\.(?:textconv|command)|merge\..+\.driver|filter\..+\.(?:clean|smudge|process)|credential(?:\..+)?\.helper|sequence\.editor|gpg(?:\..+)?\.program|uploadpack\.packobjectshook|pager\..+|interactive\.difffilter|web\.browser|browser\..+\.cmd|man\..+\.cmd|remote\..+\.(?:uploadpack|receivepack)|sendemail\..+)$`)

// unwrapRunner looks through the programs that run a command for you.
func unwrapRunner(name string, args []string) (step, bool) {
	switch name {
	case "systemd-run":
		return step{next: skipOptions(args, systemdRunOpts), kind: "runner",
			note: "runs a command as a separate systemd unit, outside this session", severity: High}, true
	case "unshare":
		return step{next: skipOptions(args, unshareOpts), kind: "wrapper",
			note: "runs a command in new namespaces (unshare)"}, true
	case "setpriv":
		return step{next: skipOptions(args, setprivOpts), kind: "wrapper", note: "runs a command with changed privileges (setpriv)"}, true
	case "nsenter":
		st := step{next: skipOptions(args, nsenterOpts), kind: "wrapper", note: "runs a command inside another process's namespaces (nsenter)", severity: High}
		for i, a := range args {
			if (a == "-t" || a == "--target") && i+1 < len(args) && args[i+1] == "1" || a == "--target=1" || a == "-t1" {
				st.severity, st.note = Critical, "enters the namespaces of the host's init process (nsenter -t 1), escaping the container"
			}
		}
		return st, true
	case "sg":
		if len(args) >= 3 && (args[1] == "-c" || args[1] == "--command") {
			return step{script: args[2], kind: "privilege"}, true
		}
		if len(args) >= 2 {
			return step{script: strings.Join(args[1:], " "), kind: "privilege"}, true
		}
		return step{kind: "privilege"}, true
	case "script":
		for i, a := range args {
			if (a == "-c" || a == "--command" || len(a) > 2 && a[0] == '-' && a[1] != '-' && strings.HasSuffix(a, "c")) && i+1 < len(args) {
				return step{script: args[i+1], kind: "runner"}, true
			}
			if v, ok := strings.CutPrefix(a, "--command="); ok {
				return step{script: v, kind: "runner"}, true
			}
		}
	case "capsh":
		if i := slices.Index(args, "--"); i >= 0 {
			return step{next: append([]string{"bash"}, args[i+1:]...), kind: "wrapper", note: "runs a shell with changed capabilities (capsh)"}, true
		}
	case "bwrap":
		for i := 0; i < len(args); i++ {
			a := args[i]
			switch {
			case bwrapOpts2[a]:
				i += 2
			case bwrapOpts1[a]:
				i++
			case a == "--":
				return step{next: args[i+1:], kind: "wrapper"}, true
			case !strings.HasPrefix(a, "-"):
				return step{next: args[i:], kind: "wrapper"}, true
			}
		}
		return step{kind: "wrapper"}, true
	case "ip":
		// ip netns exec NAME CMD…
		if len(args) >= 3 && args[0] == "netns" && args[1] == "exec" {
			return step{next: args[3:], kind: "wrapper"}, len(args) > 3
		}
	case "npx", "bunx", "pnpx":
		rest := skipOptions(args, npxOpts)
		for i, a := range args {
			if (a == "-c" || a == "--call") && i+1 < len(args) {
				return step{script: args[i+1], kind: "runner"}, true
			}
		}
		return step{next: rest, kind: "wrapper"}, len(rest) > 0
	case "pnpm", "yarn":
		if len(args) > 1 && (args[0] == "dlx" || args[0] == "exec") {
			return step{next: skipOptions(args[1:], npxOpts), kind: "wrapper"}, true
		}
	case "toybox":
		return step{next: args, kind: "wrapper"}, len(args) > 0
	case "awk", "gawk", "mawk", "nawk":
		if prog := awkProgram(args); prog != "" {
			if cmds := awkCommands(prog); len(cmds) > 0 {
				return step{script: strings.Join(cmds, "\n"), kind: "runner", note: name + " runs a shell command from its program (system(), a pipe to a command)"}, true
			}
		}
	case "vim", "vi", "nvim", "view", "ex", "gvim", "vimdiff", "rvim":
		if cmds := vimCommands(args); len(cmds) > 0 {
			return step{script: strings.Join(cmds, "\n"), kind: "runner", note: name + " runs a shell command given on its command line"}, true
		}
	case "git":
		if script := gitCommand(args); script != "" {
			return step{script: script, kind: "runner", note: "git runs a command set through its configuration (-c, config, --upload-pack)", severity: High}, true
		}
	case "tar", "bsdtar":
		if script := tarCommand(args); script != "" {
			return step{script: script, kind: "runner", note: "tar runs a command while it works (--checkpoint-action, --to-command, -I)", severity: High}, true
		}
	case "sqlite3", "sqlite":
		var cmds []string
		for _, a := range args {
			for _, line := range strings.Split(a, "\n") {
				line = strings.TrimSpace(line)
				if rest, ok := strings.CutPrefix(line, ".shell "); ok {
					cmds = append(cmds, rest)
				} else if rest, ok := strings.CutPrefix(line, ".system "); ok {
					cmds = append(cmds, rest)
				}
			}
		}
		if len(cmds) > 0 {
			return step{script: strings.Join(cmds, "\n"), kind: "runner", note: name + " runs a shell command (.shell, .system)"}, true
		}
	case "make", "gmake":
		for i, a := range args {
			v, ok := "", false
			if (a == "--eval" || a == "-E") && i+1 < len(args) {
				v, ok = args[i+1], true
			} else if v, ok = strings.CutPrefix(a, "--eval="); !ok {
				continue
			}
			return step{script: makeRecipes(v), kind: "runner", note: "make runs commands given on its command line (--eval)"}, ok
		}
	case "sed", "gsed":
		if sedExecutes(args) {
			return step{kind: "runner", note: "sed runs the text it edits as a shell command (the e command or flag)", severity: High}, true
		}
	case "gdb":
		var cmds []string
		for i, a := range args {
			if (a == "-ex" || a == "--eval-command" || a == "-iex") && i+1 < len(args) {
				c := strings.TrimSpace(args[i+1])
				if rest, ok := strings.CutPrefix(c, "!"); ok {
					cmds = append(cmds, rest)
				} else if rest, ok := strings.CutPrefix(c, "shell "); ok {
					cmds = append(cmds, rest)
				}
			}
		}
		if len(cmds) > 0 {
			return step{script: strings.Join(cmds, "\n"), kind: "runner", note: "gdb runs a shell command"}, true
		}
	case "man":
		for i, a := range args {
			if (a == "-P" || a == "--pager") && i+1 < len(args) {
				return step{script: args[i+1], kind: "runner", note: "man runs a command as its pager"}, true
			}
			if v, ok := strings.CutPrefix(a, "--pager="); ok {
				return step{script: v, kind: "runner", note: "man runs a command as its pager"}, true
			}
		}
	case "zip":
		for i, a := range args {
			if (a == "-TT" || a == "--unzip-command") && i+1 < len(args) {
				return step{script: args[i+1], kind: "runner", note: "zip runs a command to test the archive", severity: High}, true
			}
		}
	case "rsync":
		for i, a := range args {
			if (a == "-e" || a == "--rsh") && i+1 < len(args) {
				return step{script: args[i+1], kind: "runner"}, true
			}
			if v, ok := strings.CutPrefix(a, "--rsh="); ok {
				return step{script: v, kind: "runner"}, true
			}
		}
	case "ssh", "scp", "sftp":
		for i, a := range args {
			v := ""
			if a == "-o" && i+1 < len(args) {
				v = args[i+1]
			} else if strings.HasPrefix(a, "-o") && len(a) > 2 {
				v = a[2:]
			}
			k, val, ok := strings.Cut(v, "=")
			if !ok {
				k, val, ok = strings.Cut(v, " ")
			}
			if ok && (strings.EqualFold(k, "ProxyCommand") || strings.EqualFold(k, "LocalCommand") || strings.EqualFold(k, "KnownHostsCommand")) {
				return step{script: val, kind: "runner", note: name + " runs a local command (" + k + ")", severity: High}, true
			}
		}
	case "expect":
		for i, a := range args {
			if a == "-c" && i+1 < len(args) {
				if cmds := spawnCommands(args[i+1]); len(cmds) > 0 {
					return step{script: strings.Join(cmds, "\n"), kind: "runner"}, true
				}
			}
		}
	case "osascript":
		for i, a := range args {
			if a == "-e" && i+1 < len(args) {
				if m := doShellScript.FindAllStringSubmatch(args[i+1], -1); len(m) > 0 {
					var cmds []string
					for _, x := range m {
						cmds = append(cmds, x[1])
					}
					return step{script: strings.Join(cmds, "\n"), kind: "runner"}, true
				}
			}
		}
	case "xfce4-terminal", "gnome-terminal", "mate-terminal", "tilix", "terminator", "lxterminal", "qterminal":
		// -e takes one command line, -x (and --) the rest as argv.
		for i, a := range args {
			switch {
			case (a == "-e" || a == "--command") && i+1 < len(args):
				return step{script: args[i+1], kind: "runner"}, true
			case strings.HasPrefix(a, "--command="):
				return step{script: strings.TrimPrefix(a, "--command="), kind: "runner"}, true
			case a == "-x" || a == "--execute" || a == "--":
				return step{next: args[i+1:], kind: "wrapper"}, i+1 < len(args)
			}
		}
	}
	if st, ok := unwrapEditor(name, args); ok {
		return st, true
	}
	if terminalExec[name] {
		for i, a := range args {
			if a == "-e" || a == "--" || a == "-x" {
				return step{next: args[i+1:], kind: "wrapper"}, i+1 < len(args)
			}
		}
	}
	return step{}, false
}

// awkProgram is awk's program text: the first operand after the options ("" when it comes
// from a file with -f).
func awkProgram(args []string) string {
	for i := 0; i < len(args); i++ {
		a := args[i]
		switch {
		case a == "-f" || a == "--file":
			return ""
		case a == "-F" || a == "-v" || a == "--assign" || a == "--field-separator":
			i++
		case a == "--":
			if i+1 < len(args) {
				return args[i+1]
			}
			return ""
		case strings.HasPrefix(a, "-") && len(a) > 1:
		default:
			return a
		}
	}
	return ""
}

var (
	awkSystem   = regexp.MustCompile(`\bsystem\s*\(([^)]*)\)`)
	awkPipe     = regexp.MustCompile(`("[^"]*"(?:\s*"[^"]*")*)\s*\|&?\s*getline|\|&?\s*("[^"]*"(?:\s*"[^"]*")*)`)
	awkLiterals = regexp.MustCompile(`"((?:[^"\\]|\\.)*)"`)
	// awkComputed finds a command awk runs that is computed: system(var), var | getline,
	// print | var.
	awkComputed = regexp.MustCompile(`\bsystem\s*\(\s*[^")\s]|[A-Za-z_]\w*\s*\|&?\s*getline|\|&?\s*([A-Za-z_]\w*)`)
)

// awkCommands are the shell commands an awk program runs: the arguments of system() and the
// commands it pipes to or reads from, with adjacent string literals joined (awk concatenates
// them) and anything computed standing in as unknown text.
func awkCommands(prog string) []string {
	var out []string
	join := func(expr string) string {
		lits := awkLiterals.FindAllStringSubmatch(expr, -1)
		var b strings.Builder
		rest := awkLiterals.ReplaceAllString(expr, "")
		for _, l := range lits {
			b.WriteString(ansiC(l[1]))
		}
		if strings.TrimSpace(rest) != "" || len(lits) == 0 {
			b.WriteString(dynamicVar)
		}
		return b.String()
	}
	for _, m := range awkSystem.FindAllStringSubmatch(prog, -1) {
		out = append(out, join(m[1]))
	}
	for _, m := range awkPipe.FindAllStringSubmatch(prog, -1) {
		for _, g := range m[1:] {
			if g != "" {
				out = append(out, join(g))
			}
		}
	}
	// A computed command may be any string of the program: each is read as one.
	for _, m := range awkComputed.FindAllStringSubmatch(strings.ReplaceAll(prog, "||", " "), -1) {
		if m[1] == "getline" {
			continue
		}
		for i, l := range awkLiterals.FindAllStringSubmatch(prog, -1) {
			if i >= 24 {
				break
			}
			out = append(out, ansiC(l[1]))
		}
		break
	}
	return out
}

// vimCommands are the shell commands given to vim on its command line (-c ':!cmd', +'!cmd',
// --cmd, and :call system('cmd')).
func vimCommands(args []string) []string {
	var out []string
	add := func(c string) {
		c = strings.TrimLeft(strings.TrimSpace(c), ":")
		switch {
		case strings.HasPrefix(c, "!"):
			out = append(out, strings.TrimPrefix(c, "!"))
		case strings.HasPrefix(c, "sil") && strings.Contains(c, "!"):
			out = append(out, c[strings.Index(c, "!")+1:])
		case strings.Contains(c, "system(") || strings.Contains(c, "terminal") || strings.HasPrefix(c, "r !") || strings.HasPrefix(c, "w !"):
			lits := quotedLiterals(c)
			if len(lits) == 0 {
				lits = []string{dynamicVar}
			}
			out = append(out, lits...)
			if i := strings.Index(c, "!"); i >= 0 && (strings.HasPrefix(c, "r ") || strings.HasPrefix(c, "w ")) {
				out = append(out, c[i+1:])
			}
		}
	}
	for i, a := range args {
		switch {
		case (a == "-c" || a == "--cmd") && i+1 < len(args):
			add(args[i+1])
		case strings.HasPrefix(a, "+") && len(a) > 1:
			add(a[1:])
		}
	}
	return out
}

// gitCommand is the command a git invocation runs from configuration it is given: -c
// key=value (and --config-env) with a key whose value git runs, `git config key value`
// setting one, and --upload-pack / --receive-pack / -u on the command line.
func gitCommand(args []string) string {
	var cmds []string
	value := func(kv string) {
		k, v, ok := strings.Cut(kv, "=")
		if ok && gitRunKeys.MatchString(strings.TrimSpace(k)) {
			cmds = append(cmds, strings.TrimPrefix(strings.TrimSpace(v), "!"))
		}
	}
	sub := -1
	for i := 0; i < len(args); i++ {
		a := args[i]
		switch {
		case a == "-c" && i+1 < len(args):
			value(args[i+1])
			i++
		case a == "-C" || a == "--git-dir" || a == "--work-tree" || a == "--namespace" || a == "--exec-path":
			i++
		case strings.HasPrefix(a, "-"):
		default:
			if sub < 0 {
				sub = i
			}
		}
		if sub >= 0 {
			break
		}
	}
	if sub >= 0 {
		rest := args[sub+1:]
		switch args[sub] {
		case "config":
			ops := operands(rest)
			if len(ops) >= 2 && gitRunKeys.MatchString(ops[0]) {
				cmds = append(cmds, strings.TrimPrefix(strings.TrimSpace(ops[1]), "!"))
			}
		case "clone", "fetch", "ls-remote", "pull", "push", "archive":
			uploadFlag := args[sub] != "push" && args[sub] != "archive" // push -u is --set-upstream
			for i, a := range rest {
				if (a == "--upload-pack" || a == "-u" && uploadFlag || a == "--receive-pack" || a == "--exec") && i+1 < len(rest) {
					cmds = append(cmds, rest[i+1])
				}
				for _, p := range []string{"--upload-pack=", "--receive-pack=", "--exec="} {
					if v, ok := strings.CutPrefix(a, p); ok {
						cmds = append(cmds, v)
					}
				}
				if strings.HasPrefix(a, "ext::") {
					cmds = append(cmds, strings.TrimPrefix(a, "ext::"))
				}
			}
		}
	}
	return strings.Join(cmds, "\n")
}

// tarCommand is the command tar runs while it works.
func tarCommand(args []string) string {
	var cmds []string
	for i, a := range args {
		next := ""
		if i+1 < len(args) {
			next = args[i+1]
		}
		switch {
		case strings.HasPrefix(a, "--checkpoint-action="):
			if v, ok := strings.CutPrefix(strings.TrimPrefix(a, "--checkpoint-action="), "exec="); ok {
				cmds = append(cmds, v)
			}
		case a == "--checkpoint-action":
			if v, ok := strings.CutPrefix(next, "exec="); ok {
				cmds = append(cmds, v)
			}
		case a == "--to-command" || a == "--use-compress-program" || a == "-I" || a == "--info-script" || a == "--new-volume-script" || a == "-F":
			if next != "" {
				cmds = append(cmds, next)
			}
		default:
			for _, p := range []string{"--to-command=", "--use-compress-program=", "--info-script=", "--new-volume-script="} {
				if v, ok := strings.CutPrefix(a, p); ok {
					cmds = append(cmds, v)
				}
			}
		}
	}
	return strings.Join(cmds, "\n")
}

// makeRecipes extracts the recipe commands of makefile text: lines after a tab, and what
// follows ";" on a rule line.
func makeRecipes(text string) string {
	var out []string
	for _, line := range strings.Split(text, "\n") {
		switch {
		case strings.HasPrefix(line, "\t"):
			out = append(out, strings.TrimLeft(strings.TrimSpace(line), "@-+"))
		case strings.Contains(line, ":") && strings.Contains(line, ";"):
			out = append(out, strings.TrimLeft(strings.TrimSpace(line[strings.Index(line, ";")+1:]), "@-+"))
		}
	}
	return strings.Join(out, "\n")
}

// sedExecutes reports whether a sed script uses GNU sed's e command or the e flag of s.
func sedExecutes(args []string) bool {
	var scripts []string
	expl := false
	for i, a := range args {
		if (a == "-e" || a == "--expression") && i+1 < len(args) {
			scripts = append(scripts, args[i+1])
			expl = true
		} else if v, ok := strings.CutPrefix(a, "--expression="); ok {
			scripts = append(scripts, v)
			expl = true
		}
	}
	if !expl {
		for _, a := range args {
			if !strings.HasPrefix(a, "-") {
				scripts = append(scripts, a)
				break
			}
		}
	}
	for _, sc := range scripts {
		if sedScriptExecutes(sc) {
			return true
		}
	}
	return false
}

// sedScriptExecutes reads a sed script command by command: after an address, "e" is the
// execute command; an s command whose flags hold "e" executes its result.
func sedScriptExecutes(sc string) bool {
	i := 0
	for i < len(sc) {
		for i < len(sc) && strings.ContainsRune(" \t\n;{}!", rune(sc[i])) {
			i++
		}
		// address: digits, $, /re/ or \cREc, optionally a range
		for range 2 {
			for i < len(sc) && (sc[i] >= '0' && sc[i] <= '9' || sc[i] == '$' || sc[i] == '~' || sc[i] == '+') {
				i++
			}
			if i < len(sc) && (sc[i] == '/' || sc[i] == '\\') {
				d := sc[i]
				if d == '\\' && i+1 < len(sc) {
					i++
					d = sc[i]
				}
				i = skipDelimited(sc, i+1, d)
			}
			for i < len(sc) && (sc[i] == 'I' || sc[i] == 'M') {
				i++
			}
			if i < len(sc) && sc[i] == ',' {
				i++
				continue
			}
			break
		}
		for i < len(sc) && (sc[i] == ' ' || sc[i] == '!') {
			i++
		}
		if i >= len(sc) {
			return false
		}
		switch sc[i] {
		case 'e':
			return true
		case 's', 'y':
			if i+1 >= len(sc) {
				return false
			}
			d := sc[i+1]
			j := skipDelimited(sc, i+2, d)
			j = skipDelimited(sc, j, d)
			for j < len(sc) && !strings.ContainsRune(";\n}", rune(sc[j])) {
				if sc[i] == 's' && sc[j] == 'e' {
					return true
				}
				if sc[j] == 'w' { // w FILE ends the command
					break
				}
				j++
			}
			i = j
		default:
			for i < len(sc) && sc[i] != ';' && sc[i] != '\n' {
				i++
			}
		}
	}
	return false
}

// skipDelimited returns the index after the next unescaped d at or after i.
func skipDelimited(s string, i int, d byte) int {
	for i < len(s) {
		switch s[i] {
		case '\\':
			i += 2
			continue
		case d:
			return i + 1
		}
		i++
	}
	return i
}

var (
	expectSpawn   = regexp.MustCompile(`\b(?:spawn|exec|system)\s+(.*)`)
	doShellScript = regexp.MustCompile(`(?i)do shell script\s+"((?:[^"\\]|\\.)*)"`)
)

// spawnCommands are the commands an expect script spawns or execs.
func spawnCommands(script string) []string {
	var out []string
	for _, line := range strings.FieldsFunc(script, func(r rune) bool { return r == '\n' || r == ';' }) {
		if m := expectSpawn.FindStringSubmatch(line); m != nil {
			out = append(out, m[1])
		}
	}
	return out
}
