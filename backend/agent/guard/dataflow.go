package guard

import (
	"maps"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"mvdan.cc/sh/v3/syntax"
)

// Values that reach a command other than through its words: a shell function's arguments
// ("$1", "$@"), set --, sh -c's positional parameters, the lines xargs and parallel turn
// into arguments, the lines read, mapfile and a while-read loop read, the text tee writes
// into a script, the program source <(…) reads, and text written into a start-up file. Where the guard can know
// them without running anything, the command is judged with them in place, so
// f(){ rm -rf "$1"; }; f ~ is judged as rm -rf ~ rather than as a delete of unknown paths.

// maxFuncCalls bounds how many calls of defined functions one script has analysed.
const maxFuncCalls = 16

// defineFunc remembers a function's body for its calls.
func (s *scope) defineFunc(f *syntax.FuncDecl) {
	if f.Name == nil || f.Body == nil {
		return
	}
	if s.a.funcs == nil {
		s.a.funcs = map[string]string{}
	}
	if len(s.a.funcs) < 32 {
		s.a.funcs[f.Name.Value] = s.text(f.Body)
	}
}

// callFunc analyses a call of a function defined earlier in the script, with its arguments
// as the positional parameters. It reports false when name is no such function.
func (s *scope) callFunc(argv []string) bool {
	body, ok := s.a.funcs[argv[0]]
	if !ok {
		return false
	}
	if s.a.funcCalls >= maxFuncCalls {
		// Its body was not judged at its definition either (onlyCalledDirectly), so a call
		// that cannot be judged is asked about.
		if s.a.funcCalls == maxFuncCalls {
			s.a.add("shell.too-many-calls", FamilyObfuscation, High, "the command calls its functions too often for each call to be checked", s.a.cur)
		}
		s.a.funcCalls++
		return true
	}
	s.a.funcCalls++
	s.a.script(strings.ReplaceAll(body, dynamic, dynamicVar), scriptCommand, s.depth+1, withPositional(s.vars, argv[1:]), s.cwd)
	return true
}

// onlyCalledDirectly reports whether a function is called by name, outside its own body, and
// named nowhere else in the script (not in trap, xargs, a string, or its own body): then
// judging its body at each call sees everything it will do.
func (s *scope) onlyCalledDirectly(f *syntax.FuncDecl) bool {
	if f.Name == nil || f.Body == nil || s.root == nil {
		return false
	}
	name := f.Name.Value
	calls, inside := 0, 0
	syntax.Walk(s.root, func(n syntax.Node) bool {
		if c, ok := n.(*syntax.CallExpr); ok && len(c.Args) > 0 && c.Args[0].Lit() == name {
			calls++
			if c.Pos().After(f.Body.Pos()) && f.Body.End().After(c.Pos()) {
				inside++
			}
		}
		return true
	})
	if calls == 0 || inside > 0 {
		return false
	}
	re, err := regexp.Compile(`(?:^|[^\w.:-])` + regexp.QuoteMeta(name) + `(?:[^\w.:-]|$)`)
	if err != nil {
		return false
	}
	return len(re.FindAllStringIndex(s.src, -1)) == calls+1
}

// nestedArgs analyses a script run as sh -c SCRIPT NAME ARGS…, with $0 and the positional
// parameters set (without them it is nested).
func (s *scope) nestedArgs(script string, params []string) {
	if len(params) == 0 {
		s.nested(script, scriptCommand)
		return
	}
	if strings.Trim(script, dynamic+" \t\n") == "" {
		return
	}
	vars := withPositional(s.vars, params[1:])
	vars["0"] = params[0]
	s.a.script(strings.ReplaceAll(script, dynamic, dynamicVar), scriptCommand, s.depth+1, vars, s.cwd)
}

// withPositional is vars with the positional parameters set to args.
func withPositional(vars map[string]string, args []string) map[string]string {
	out := maps.Clone(vars)
	if out == nil {
		out = map[string]string{}
	}
	for k := range out {
		if isDigits(k) && k != "0" {
			delete(out, k)
		}
	}
	for i, a := range args {
		out[strconv.Itoa(i+1)] = a
	}
	out["@"] = strings.Join(args, " ")
	out["*"] = out["@"]
	out["#"] = strconv.Itoa(len(args))
	return out
}

// setPositional handles set -- ARGS (and set ARGS after options), which replaces the
// positional parameters.
func (s *scope) setPositional(args []string) {
	for i, a := range args {
		if a == "--" || a == "-" {
			s.vars = withPositional(s.vars, args[i+1:])
			return
		}
		if !strings.HasPrefix(a, "-") && !strings.HasPrefix(a, "+") {
			if i > 0 && (args[i-1] == "-o" || args[i-1] == "+o") {
				continue
			}
			s.vars = withPositional(s.vars, args[i:])
			return
		}
	}
}

// feedArgs judges xargs and parallel with the input they are known to get (in: a
// here-string, a here-document or a constant pipe; parallel's ::: arguments), as the commands
// they will run. It reports whether it did (then the call need not be judged with unknown
// arguments as well).
func (s *scope) feedArgs(raw []string, in string, hasInput bool, ex string) bool {
	argv := raw
	for range 16 {
		if len(argv) == 0 {
			return false
		}
		if n := cmdName(argv[0]); n == "xargs" || n == "parallel" {
			break
		}
		st := unwrap(argv)
		if st.kind == "" || st.next == nil {
			return false
		}
		argv = st.next
	}
	if len(argv) == 0 {
		return false
	}
	name, args := cmdName(argv[0]), argv[1:]
	var items []string
	if i := slices.Index(args, ":::"); name == "parallel" && i >= 0 {
		items, args = args[i+1:], args[:i]
	} else if !hasInput {
		return false
	} else if hasAny(args, "-0", "--null") {
		for _, it := range strings.Split(in, "\x00") {
			if it = strings.TrimRight(it, "\n"); it != "" {
				items = append(items, it)
			}
		}
	} else {
		items = strings.Fields(in)
	}
	if len(items) == 0 || len(items) > 64 {
		return false
	}
	rest := skipOptions(args, simpleWrappers[name])
	repl := replaceString(args)
	if name == "parallel" && slices.ContainsFunc(rest, func(a string) bool { return strings.Contains(a, "{}") }) {
		repl = "{}"
	}
	if len(rest) == 0 {
		return false // xargs alone runs echo
	}
	if name == "parallel" && len(rest) == 1 && strings.ContainsAny(rest[0], " \t;|&") {
		// parallel 'cmd {}' ::: …: each line is a shell command line.
		for _, it := range items[:min(len(items), 8)] {
			if strings.Contains(rest[0], "{}") {
				s.nested(strings.ReplaceAll(rest[0], "{}", quoteWord(it)), scriptCommand)
			} else {
				s.nested(rest[0]+" "+quoteWord(it), scriptCommand)
			}
		}
		return true
	}
	if repl == "" {
		if name == "parallel" {
			for _, it := range items[:min(len(items), 8)] {
				s.exec(append(slices.Clone(rest), it), ex)
			}
			return true
		}
		s.exec(append(slices.Clone(rest), items...), ex)
		return true
	}
	for _, it := range items[:min(len(items), 8)] {
		cmd := slices.Clone(rest)
		for i := range cmd {
			cmd[i] = strings.ReplaceAll(cmd[i], repl, it)
		}
		s.exec(cmd, ex)
	}
	return true
}

// readLine sets names as `read NAME…` does from the first line of in: a field each, the last
// name taking the rest of the line.
func (s *scope) readLine(names []string, in string) {
	line, _, _ := strings.Cut(strings.TrimLeft(in, "\n"), "\n")
	fields := strings.Fields(line)
	for i, n := range names {
		switch {
		case i == len(names)-1:
			s.vars[n] = strings.Join(fields[min(i, len(fields)):], " ")
		case i < len(fields):
			s.vars[n] = fields[i]
		default:
			s.vars[n] = ""
		}
	}
}

// readLoop sets the variable of while read VAR to the first line the loop is known to read,
// so the loop's body is judged with it.
func (s *scope) readLoop(st *syntax.Stmt, in string) {
	w, ok := st.Cmd.(*syntax.WhileClause)
	if !ok || w.Until || len(w.Cond) != 1 {
		return
	}
	c, ok := w.Cond[0].Cmd.(*syntax.CallExpr)
	if !ok || len(c.Args) < 2 || c.Args[0].Lit() != "read" {
		return
	}
	var names []string
	for _, a := range c.Args[1:] {
		if l := a.Lit(); l != "" && !strings.HasPrefix(l, "-") {
			names = append(names, l)
		}
	}
	if len(names) == 0 {
		return
	}
	s.readLine(names, in)
}

// startupText analyses text written into a file that runs at login or start-up as the
// commands it will run there.
func (s *scope) startupText(target, text string) {
	for _, f := range s.resolve(target) {
		if persistenceFile.MatchString(f) {
			s.nested(text, scriptTyped)
			return
		}
	}
}

// sessionProcs are the processes the agent's desktop lives on: killing one ends the session.
var sessionProcs = set("Xvfb", "Xorg", "X", "xfce4-session", "xfwm4", "xfdesktop", "xfce4-panel", "cubicle-guest", "dbus-daemon",
	"systemd", "init", "sshd", "x11vnc", "Xvnc", "websockify", "pulseaudio", "pipewire", "lightdm", "gdm", "sddm")

// killsSession reports whether pkill/killall arguments name a process of the desktop session.
func killsSession(args []string) bool {
	for _, a := range operands(args) {
		for _, w := range strings.Fields(a) {
			if sessionProcs[cmdName(w)] {
				return true
			}
		}
	}
	return false
}

// staticUpTo is the constant output of the pipeline stages before j, when there is one.
func (s *scope) staticUpTo(stages []*syntax.Stmt, j int) (string, bool) {
	out, ok := "", true
	for i := 0; i < j && ok; i++ {
		out, ok = s.static(stages[i], out, i > 0)
	}
	return out, ok
}

// markFed records that feedArgs judged a call.
func (s *scope) markFed(n syntax.Node, judged bool) {
	c, ok := n.(*syntax.CallExpr)
	if !ok || !judged {
		return
	}
	if s.fed == nil {
		s.fed = map[*syntax.CallExpr]bool{}
	}
	s.fed[c] = true
}

// procSubstFiles analyses source <(cmd) and bash <(cmd): the output of the process
// substitution is the program, so a constant one is judged as the script it is.
func (s *scope) procSubstFiles(c *syntax.CallExpr, final []string, ex string) {
	if c == nil || len(final) == 0 || !isInterpreter(final[0]) || cmdName(final[0]) == "eval" {
		return
	}
	for _, w := range c.Args[1:] {
		if len(w.Parts) != 1 {
			continue
		}
		ps, ok := w.Parts[0].(*syntax.ProcSubst)
		if !ok || ps.Op != syntax.CmdIn || len(ps.Stmts) != 1 {
			continue
		}
		if out, ok := s.static(ps.Stmts[0], "", false); ok {
			if n := cmdName(final[0]); isShell(final[0]) || n == "source" || n == "." {
				s.nested(out, scriptCommand)
			} else {
				s.interpreterCode(out, ex)
			}
		}
		return // the first file operand is the program
	}
}

// teeWrites records what tee writes into each file it names, so a script that runs one of
// those files later is analysed as the text written into it.
func (s *scope) teeWrites(final []string, out string) {
	if len(final) == 0 || cmdName(final[0]) != "tee" {
		return
	}
	appendMode := hasAny(final[1:], "-a", "--append")
	for _, f := range operands(final[1:]) {
		if len(s.written) >= 16 {
			return
		}
		f = cleanFile(f)
		if !appendMode {
			s.written[f] = ""
		}
		s.written[f] += out
		s.startupText(f, out)
	}
}

// stdinText is the text a statement's here-document or here-string gives it.
func (s *scope) stdinText(st *syntax.Stmt) (string, bool) {
	in, ok := "", false
	for _, r := range st.Redirs {
		if r.Op == syntax.WordHdoc && r.Word != nil {
			in, ok = s.str(r.Word)+"\n", true
		} else if (r.Op == syntax.Hdoc || r.Op == syntax.DashHdoc) && r.Hdoc != nil {
			in, ok = s.hdoc(r.Hdoc), true
		}
	}
	return in, ok
}
