package guard

import (
	"fmt"
	"maps"
	"strings"
	"sync"

	"mvdan.cc/sh/v3/syntax"
)

// dynamic stands for text only known when the command runs (an unknown variable, a command
// substitution the guard cannot evaluate, input read by xargs). It never occurs in real input:
// control characters are rejected before the shell analysis runs.
const dynamic = "\x00"

// dynamicVar replaces dynamic when text is handed to a nested parse, so that the nested
// analysis sees an unknown variable in its place.
const dynamicVar = "${__cubicle_dynamic__}"

const (
	maxScriptLen = 256 << 10 // longer commands are asked about without analysis
	maxDepth     = 6         // nested scripts (bash -c "eval '…'") deeper than this are asked about
	maxParses    = 48        // parses per Check, to bound the work of pathological input
	maxFields    = 64        // fields one word may expand to (brace expansion)
	maxStatic    = 64 << 10  // bytes of statically evaluated output
	maxWork      = 100_000   // syntax nodes looked at per Check (deeply nested $(…) is quadratic)
)

type scriptKind int

const (
	scriptCommand scriptKind = iota // a shell tool's command
	scriptTyped                     // text typed into the desktop, or literals in other code
)

// analysis collects the matches of one Check across nested scripts.
type analysis struct {
	matches []Match
	parses  int
	work    int        // nodes visited, across nested scripts; bounded by maxWork
	paths   []string   // words that name files, for the file guard
	parsers *sync.Pool // of *syntax.Parser, owned by the Guard; nil makes new ones
}

func (a *analysis) parse(src string) (*syntax.File, error) {
	var p *syntax.Parser
	if a.parsers != nil {
		p, _ = a.parsers.Get().(*syntax.Parser)
	}
	if p == nil {
		p = syntax.NewParser(syntax.Variant(syntax.LangBash))
	}
	f, err := p.Parse(strings.NewReader(src), "")
	if a.parsers != nil {
		a.parsers.Put(p)
	}
	return f, err
}

func (a *analysis) add(id string, fam Family, sev Severity, reason, ex string) {
	a.matches = append(a.matches, Match{RuleID: id, Family: fam, Severity: sev, Reason: reason, Excerpt: excerpt(ex)})
}

// scope is the state of one script: its source, the variables assigned so far and $IFS.
type scope struct {
	a     *analysis
	kind  scriptKind
	src   string
	depth int
	vars  map[string]string
	ifs   string
	skip  map[*syntax.BinaryCmd]bool // inner nodes of pipelines already analysed as a whole
	cache map[*syntax.CallExpr][]string
	// downloaded are files a downloader of this script wrote (curl -o f, wget -O f, curl > f).
	downloaded map[string]bool
	// written are scripts this script wrote with constant text (echo … > f, cat <<EOF > f).
	written map[string]string
}

// analyseScript runs every check on a command: text checks, the shell-aware analysis (also
// of the unicode-normalised text when that differs) and the regex net. It also returns the
// words of the command that name files.
func (g *Guard) analyseScript(src string, kind scriptKind) ([]Match, []string) {
	if len(src) > maxScriptLen {
		return []Match{{RuleID: "shell.too-long", Family: FamilyUnparsable, Severity: High,
			Reason: fmt.Sprintf("the command is longer than %d KiB and is not analysed", maxScriptLen>>10)}}, nil
	}
	a := &analysis{parsers: &g.parsers}
	a.matches = textMatches(src, kind)
	clean := !strings.ContainsFunc(src, isControl)
	if clean {
		a.script(src, kind, 0, nil)
	} else {
		// A control character can make a terminal hide what precedes it (echo ok\rrm -rf /);
		// analyse the text as if each started a new line, so nothing stays hidden.
		a.script(strings.Map(controlToNewline, src), kind, 0, nil)
	}
	if norm, changed := normalizeUnicode(src); changed {
		n := len(a.matches)
		a.script(strings.Map(controlToNewline, norm), scriptTyped, 0, nil)
		for i := n; i < len(a.matches); i++ {
			a.matches[i].Reason += " (once look-alike unicode characters are replaced)"
		}
	}
	have := make(map[Family]bool, len(a.matches))
	for _, m := range a.matches {
		have[m.Family] = true
	}
	ms := append(a.matches, g.regexNet(src, have)...)
	return dedupe(ms), a.paths
}

// script parses src and walks it. vars are inherited variables (nil for none).
func (a *analysis) script(src string, kind scriptKind, depth int, vars map[string]string) {
	if depth > maxDepth {
		a.add("shell.too-deep", FamilyObfuscation, High, "the command nests scripts too deeply to be checked", src)
		return
	}
	if a.parses++; a.parses > maxParses {
		if a.parses == maxParses+1 {
			a.add("shell.too-complex", FamilyObfuscation, High, "the command has too many nested scripts to be checked", src)
		}
		return
	}
	f, err := a.parse(src)
	if err != nil {
		if kind == scriptCommand {
			a.add("shell.unparsable", FamilyUnparsable, High,
				"the command is not valid shell syntax, so it cannot be checked ("+err.Error()+")", src)
		}
		return
	}
	s := &scope{a: a, kind: kind, src: src, depth: depth, ifs: " \t\n",
		vars: maps.Clone(vars), skip: map[*syntax.BinaryCmd]bool{}, cache: map[*syntax.CallExpr][]string{},
		downloaded: map[string]bool{}, written: map[string]string{}}
	if s.vars == nil {
		s.vars = map[string]string{}
	}
	syntax.Walk(f, s.visit)
}

// nested analyses a script that the command hands to another shell (bash -c, eval, a decoded
// payload), with the variables known so far.
func (s *scope) nested(script string, kind scriptKind) {
	if strings.Trim(script, dynamic+" \t\n") == "" {
		return // nothing known to look at; the caller has flagged the dynamic script
	}
	s.a.script(strings.ReplaceAll(script, dynamic, dynamicVar), kind, s.depth+1, s.vars)
}

func (s *scope) text(n syntax.Node) string {
	i, j := int(n.Pos().Offset()), int(n.End().Offset())
	if i < 0 || j > len(s.src) || i >= j {
		return s.src
	}
	return s.src[i:j]
}

// path remembers a word that names a file (an absolute, home or relative path, also after
// "=" as in if=/dev/sda or --file=x), so the file guard can look at it.
func (a *analysis) path(w string) {
	if len(a.paths) >= 256 || strings.Contains(w, dynamic) {
		return
	}
	if i := strings.IndexByte(w, '='); i > 0 && strings.HasPrefix(w, "-") || i > 0 && !strings.ContainsAny(w[:i], "/~") {
		w = w[i+1:]
	}
	if strings.HasPrefix(w, "/") || strings.HasPrefix(w, "~") || strings.Contains(w, "/") || w == ".." || w == "." {
		a.paths = append(a.paths, w)
	}
}

// spend counts work and reports false (once flagging the command) when the budget is gone.
func (a *analysis) spend(n int) bool {
	a.work += n
	if a.work <= maxWork {
		return true
	}
	if a.work-n <= maxWork {
		a.add("shell.too-complex", FamilyObfuscation, High, "the command is too complex to be checked", "")
	}
	return false
}

func (s *scope) visit(node syntax.Node) bool {
	if !s.a.spend(1) {
		return false
	}
	switch n := node.(type) {
	case *syntax.Stmt:
		s.stmt(n)
	case *syntax.BinaryCmd:
		if (n.Op == syntax.Pipe || n.Op == syntax.PipeAll) && !s.skip[n] {
			s.pipeline(n)
		}
	case *syntax.CallExpr:
		s.call(n)
	case *syntax.DeclClause:
		for _, as := range n.Args {
			s.assign(as, true, n)
		}
	case *syntax.FuncDecl:
		s.funcDecl(n)
	case *syntax.WhileClause:
		s.whileLoop(n)
	case *syntax.ForClause:
		if it, ok := n.Loop.(*syntax.WordIter); ok && it.Name != nil && len(it.Items) > 0 {
			s.vars[it.Name.Value] = strings.Join(s.fields(it.Items[0]), " ")
		}
	case *syntax.ParamExp:
		if n.Param != nil && n.Param.Value == "IFS" {
			s.a.add("ifs.expansion", FamilyIFS, High, "uses $IFS to hide spaces (an evasion trick)", s.text(n))
		}
	}
	return true
}

// assign records a variable and flags changes of IFS. standalone is false for prefix
// assignments (IFS= read …) that apply to one command only.
func (s *scope) assign(as *syntax.Assign, standalone bool, n syntax.Node) {
	if as.Name == nil {
		return
	}
	var val string
	switch {
	case as.Array != nil:
		var parts []string
		for _, e := range as.Array.Elems {
			if e.Value != nil {
				parts = append(parts, s.fields(e.Value)...)
			}
		}
		val = strings.Join(parts, " ")
	case as.Value != nil:
		val = s.str(as.Value)
	}
	name := as.Name.Value
	if name == "IFS" {
		if strings.Trim(val, " \t\n") != "" {
			s.a.add("ifs.assign", FamilyIFS, Medium, "changes $IFS (how words are split), a known evasion trick", s.text(n))
		}
		if standalone {
			s.ifs = val
		}
		return
	}
	if standalone {
		if as.Append {
			val = s.vars[name] + val
		}
		s.vars[name] = val
	}
}

func (s *scope) stmt(st *syntax.Stmt) {
	call, _ := st.Cmd.(*syntax.CallExpr)
	var final []string
	if call != nil {
		final = finalCommand(s.argv(call))
	}
	for _, r := range st.Redirs {
		switch r.Op {
		case syntax.Hdoc, syntax.DashHdoc, syntax.WordHdoc:
			body := r.Hdoc
			if r.Op == syntax.WordHdoc {
				body = r.Word
			}
			if body != nil && final != nil {
				s.fedToInterpreter(final, s.str(body), st)
			}
			continue
		}
		if r.Word == nil {
			continue
		}
		target := s.str(r.Word)
		s.a.path(target)
		for _, m := range wordMatches(target) {
			m.Excerpt = excerpt(s.text(st))
			s.a.matches = append(s.a.matches, m)
		}
		switch r.Op {
		case syntax.RdrOut, syntax.AppOut, syntax.RdrAll, syntax.AppAll, syntax.ClbOut, syntax.RdrInOut, syntax.DplOut:
			if r.Op == syntax.DplOut && isDigits(target) {
				break
			}
			s.writeTarget(target, "redirects output into", s.text(st))
			if final != nil && downloaders[cmdName(final[0])] {
				s.downloaded[cleanFile(target)] = true
			}
			if r.Op == syntax.RdrOut || r.Op == syntax.AppOut || r.Op == syntax.ClbOut {
				if out, ok := s.static(st, "", false); ok && len(s.written) < 16 {
					if r.Op != syntax.AppOut {
						s.written[cleanFile(target)] = ""
					}
					s.written[cleanFile(target)] += out
				}
			}
			interactive := final != nil && isShell(final[0]) && hasShortFlag(final[1:], 'i') && unwrap(final).kind == ""
			if interactive && r.Op != syntax.RdrOut && r.Op != syntax.AppOut && r.Op != syntax.ClbOut {
				s.a.add("reverse.interactive-shell", FamilyReverse, Critical,
					"redirects an interactive shell (typical of reverse shells)", s.text(st))
			}
		}
	}
}

// fedToInterpreter checks text that reaches an interpreter on its standard input.
func (s *scope) fedToInterpreter(final []string, body string, n syntax.Node) {
	if !readsProgramFromStdin(final) {
		return
	}
	if isShell(final[0]) || schedulers[cmdName(final[0])] {
		s.nested(body, scriptCommand)
		return
	}
	s.interpreterCode(body, s.text(n))
}

// pipeline looks at a | b | c as a whole: what flows into a shell, and from where.
func (s *scope) pipeline(n *syntax.BinaryCmd) {
	var stages []*syntax.Stmt
	var flatten func(st *syntax.Stmt)
	flatten = func(st *syntax.Stmt) {
		if b, ok := st.Cmd.(*syntax.BinaryCmd); ok && (b.Op == syntax.Pipe || b.Op == syntax.PipeAll) {
			s.skip[b] = true
			flatten(b.X)
			flatten(b.Y)
			return
		}
		stages = append(stages, st)
	}
	flatten(n.X)
	flatten(n.Y)
	names := make([]string, len(stages))
	finals := make([][]string, len(stages))
	for i, st := range stages {
		if c, ok := st.Cmd.(*syntax.CallExpr); ok {
			finals[i] = finalCommand(s.argv(c))
			if len(finals[i]) > 0 {
				names[i] = cmdName(finals[i][0])
			}
		}
	}
	ex := s.text(n)
	for j := 1; j < len(stages); j++ {
		if finals[j] == nil || !readsProgramFromStdin(finals[j]) {
			continue
		}
		var download, decode bool
		for _, nm := range names[:j] {
			download = download || downloaders[nm] || networkTools[nm]
			decode = decode || decoders[nm]
		}
		network := false
		for _, nm := range names[j+1:] {
			network = network || networkTools[nm]
		}
		switch {
		case network:
			s.a.add("reverse.pipe-shell", FamilyReverse, Critical, "connects a shell's input and output to the network (reverse shell)", ex)
		case download:
			s.a.add("remote-exec.pipe", FamilyRemoteExec, Critical, "downloads code and runs it ("+names[j]+" reads it from a pipe)", ex)
		case decode:
			s.a.add("encoded-exec.pipe", FamilyEncodedExec, Critical, "decodes hidden code and runs it", ex)
		default:
			s.a.add("pipe-to-shell", FamilyRemoteExec, Medium, "pipes generated text into "+names[j]+" to run it", ex)
		}
		// Whatever the guard can evaluate upstream is analysed as the program it is.
		out, ok := "", true
		for i := 0; i < j && ok; i++ {
			out, ok = s.static(stages[i], out, i > 0)
		}
		if ok {
			s.fedToInterpreter(finals[j], out, n)
		}
	}
}

func (s *scope) funcDecl(f *syntax.FuncDecl) {
	if f.Name == nil || f.Body == nil {
		return
	}
	name := f.Name.Value
	calls, spawns := 0, false
	syntax.Walk(f.Body, func(node syntax.Node) bool {
		switch n := node.(type) {
		case *syntax.CallExpr:
			if len(n.Args) > 0 && n.Args[0].Lit() == name {
				calls++
			}
		case *syntax.Stmt:
			spawns = spawns || n.Background
		case *syntax.BinaryCmd:
			spawns = spawns || n.Op == syntax.Pipe || n.Op == syntax.PipeAll
		}
		return true
	})
	if calls > 0 && spawns {
		s.a.add("fork-bomb.function", FamilyForkBomb, Critical,
			"defines a function that keeps starting copies of itself (fork bomb)", s.text(f))
	}
}

func (s *scope) whileLoop(w *syntax.WhileClause) {
	if w.Until || len(w.Cond) != 1 {
		return
	}
	c, ok := w.Cond[0].Cmd.(*syntax.CallExpr)
	if !ok || len(c.Args) == 0 {
		return
	}
	if n := c.Args[0].Lit(); n != "true" && n != ":" {
		return
	}
	for _, st := range w.Do {
		if st.Background {
			s.a.add("fork-bomb.loop", FamilyForkBomb, High, "starts background processes in an endless loop", s.text(w))
			return
		}
	}
}

// interpreterCode checks a program for python, perl, ruby, node or php: a socket wired to a
// shell, and string literals handed to system()/subprocess, analysed as shell commands.
func (s *scope) interpreterCode(code, ex string) {
	lower := strings.ToLower(code)
	if strings.Contains(lower, "socket") && containsAny(lower, "subprocess", "pty", "dup2", "exec", "spawn", "popen", "/bin/sh", "/bin/bash", "system(") {
		s.a.add("reverse.script-socket", FamilyReverse, Critical, "opens a network socket and runs a shell through it", ex)
	}
	if !containsAny(lower, "system", "popen", "subprocess", "exec", "spawn", "`", "shell") {
		return
	}
	for i, lit := range quotedLiterals(code) {
		if i >= 16 {
			break
		}
		s.nested(lit, scriptTyped)
	}
}

// quotedLiterals returns the contents of '…' and "…" literals in program text.
func quotedLiterals(code string) []string {
	var out []string
	for i := 0; i < len(code); i++ {
		q := code[i]
		if q != '\'' && q != '"' {
			continue
		}
		j := i + 1
		for j < len(code) && code[j] != q {
			if code[j] == '\\' {
				j++
			}
			j++
		}
		if j >= len(code) {
			break
		}
		if lit := code[i+1 : j]; strings.TrimSpace(lit) != "" {
			out = append(out, lit)
		}
		i = j
	}
	return out
}

func containsAny(s string, subs ...string) bool {
	for _, sub := range subs {
		if strings.Contains(s, sub) {
			return true
		}
	}
	return false
}

func isDigits(s string) bool {
	if s == "" || s == "-" {
		return s == "-"
	}
	for _, r := range s {
		if r < '0' || r > '9' {
			return false
		}
	}
	return true
}
