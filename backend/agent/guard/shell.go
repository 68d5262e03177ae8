package guard

import (
	"fmt"
	"maps"
	"path"
	"slices"
	"sort"
	"strconv"
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
	files   []FileRef  // files the command touches, for the file guard
	cmds    []string   // the simple commands seen, for allow rules
	cur     string     // the simple command being analysed; matches belong to it
	workDir string     // where the command starts ("" = unknown)
	parsers *sync.Pool // of *syntax.Parser, owned by the Guard; nil makes new ones
	// funcs are the bodies of the shell functions defined anywhere in the command, for their
	// calls (also from nested scripts, trap and xargs); funcCalls counts the calls analysed.
	funcs     map[string]string
	funcCalls int
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
	a.matches = append(a.matches, Match{RuleID: id, Family: fam, Severity: sev, Reason: reason, Excerpt: excerpt(ex), Command: a.cur})
}

// addMatch appends a prepared match, as belonging to the current simple command.
func (a *analysis) addMatch(m Match) {
	m.Command = a.cur
	a.matches = append(a.matches, m)
}

// scope is the state of one script: its source, the variables assigned so far and $IFS.
type scope struct {
	a     *analysis
	kind  scriptKind
	src   string
	depth int
	vars  map[string]string
	ifs   string
	// cwd is the directory the script is in ("" = unknown), following cd; moved is set once
	// it changed, so plain words may name files there.
	cwd   string
	moved bool
	// simple holds the rendering (words and redirections) of a statement's simple command.
	simple map[*syntax.CallExpr]string
	// hashed are command names remapped with hash -p PATH NAME; aliases those defined with
	// alias NAME=TEXT.
	hashed  map[string]string
	aliases map[string]string
	skip    map[*syntax.BinaryCmd]bool // inner nodes of pipelines already analysed as a whole
	cache   map[*syntax.CallExpr][]string
	// downloaded are files a downloader of this script wrote (curl -o f, wget -O f, curl > f).
	downloaded map[string]bool
	// written are scripts this script wrote with constant text (echo … > f, cat <<EOF > f).
	written map[string]string
	// decoded are files a decoder wrote (base64 -d > f); leaked are files that hold the
	// environment or a secret (env > f, cat ~/.ssh/id_rsa > f).
	decoded, leaked map[string]bool
	// root is the parsed script; fed are the xargs and parallel calls whose input feedArgs
	// already judged.
	root *syntax.File
	fed  map[*syntax.CallExpr]bool
}

// analyseScript runs every check on a command: text checks, the shell-aware analysis (also
// of the unicode-normalised text when that differs) and the regex net. It also returns the
// simple commands and the files the command touches. workDir is where it starts ("" when
// unknown).
func (g *Guard) analyseScript(src string, kind scriptKind, workDir string) ([]Match, Inspection) {
	if len(src) > maxScriptLen {
		return []Match{{RuleID: "shell.too-long", Family: FamilyUnparsable, Severity: High,
			Reason: fmt.Sprintf("the command is longer than %d KiB and is not analysed", maxScriptLen>>10)}}, Inspection{}
	}
	a := &analysis{parsers: &g.parsers, workDir: workDir}
	a.matches = textMatches(src, kind)
	clean := !strings.ContainsFunc(src, isControl)
	if clean {
		a.script(src, kind, 0, nil, workDir)
	} else {
		// A control character can make a terminal hide what precedes it (echo ok\rrm -rf /);
		// analyse the text as if each started a new line, so nothing stays hidden.
		a.script(strings.Map(controlToNewline, src), kind, 0, nil, workDir)
	}
	if norm, changed := normalizeUnicode(src); changed {
		n := len(a.matches)
		a.script(strings.Map(controlToNewline, norm), scriptTyped, 0, nil, workDir)
		for i := n; i < len(a.matches); i++ {
			a.matches[i].Reason += " (once look-alike unicode characters are replaced)"
			a.matches[i].Command = ""
		}
	}
	have := make(map[Family]bool, len(a.matches))
	for _, m := range a.matches {
		have[m.Family] = true
	}
	ms := append(a.matches, g.regexNet(src, have)...)
	return dedupe(ms), Inspection{Commands: uniq(a.cmds), Files: a.files}
}

func uniq(xs []string) []string {
	var out []string
	seen := map[string]bool{}
	for _, x := range xs {
		if !seen[x] {
			seen[x] = true
			out = append(out, x)
		}
	}
	return out
}

// script parses src and walks it. vars are inherited variables (nil for none), cwd the
// directory it starts in ("" = unknown).
func (a *analysis) script(src string, kind scriptKind, depth int, vars map[string]string, cwd string) {
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
	s := &scope{a: a, kind: kind, src: src, depth: depth, ifs: " \t\n", cwd: cwd,
		vars: maps.Clone(vars), skip: map[*syntax.BinaryCmd]bool{}, cache: map[*syntax.CallExpr][]string{},
		downloaded: map[string]bool{}, written: map[string]string{}, simple: map[*syntax.CallExpr]string{},
		hashed: map[string]string{}, aliases: map[string]string{}, decoded: map[string]bool{}, leaked: map[string]bool{}}
	if s.vars == nil {
		s.vars = map[string]string{}
	}
	if src2, ok := s.expandAliases(f); ok && a.parses < maxParses {
		if f2, err := a.parse(src2); err == nil {
			a.parses++
			s.src, f = src2, f2
		}
	}
	s.root = f
	syntax.Walk(f, s.visit)
}

// expandAliases returns the script with the aliases it defines (alias NAME=TEXT) put in place
// of the command names they stand for, as the shell reads them: every rule then sees the
// command an alias runs, in its pipeline, with its redirections and its input. It reports
// false when the script defines no alias that it uses.
func (s *scope) expandAliases(f *syntax.File) (string, bool) {
	type def struct {
		text string
		end  uint
	}
	defs := map[string]def{}
	syntax.Walk(f, func(n syntax.Node) bool {
		if c, ok := n.(*syntax.CallExpr); ok && len(c.Args) > 1 && cmdName(c.Args[0].Lit()) == "alias" {
			for _, w := range c.Args[1:] {
				if k, v, ok := strings.Cut(s.str(w), "="); ok && !strings.Contains(v, dynamic) && len(defs) < 32 {
					defs[k] = def{v, c.End().Offset()}
				}
			}
		}
		return true
	})
	if len(defs) == 0 {
		return "", false
	}
	type rep struct {
		i, j int
		text string
	}
	var reps []rep
	syntax.Walk(f, func(n syntax.Node) bool {
		c, ok := n.(*syntax.CallExpr)
		if !ok || len(c.Args) == 0 || len(c.Args[0].Parts) != 1 {
			return true
		}
		lit, ok := c.Args[0].Parts[0].(*syntax.Lit)
		if !ok {
			return true
		}
		if d, ok := defs[lit.Value]; ok && lit.Pos().Offset() > d.end && len(reps) < 64 {
			reps = append(reps, rep{int(lit.Pos().Offset()), int(lit.End().Offset()), d.text})
		}
		return true
	})
	if len(reps) == 0 {
		return "", false
	}
	sort.Slice(reps, func(x, y int) bool { return reps[x].i < reps[y].i })
	out := s.src
	for k := len(reps) - 1; k >= 0; k-- {
		r := reps[k]
		if r.i < 0 || r.j > len(out) || r.i > r.j {
			return "", false
		}
		out = out[:r.i] + r.text + out[r.j:]
	}
	return out, true
}

// nested analyses a script that the command hands to another shell (bash -c, eval, a decoded
// payload), with the variables known so far.
func (s *scope) nested(script string, kind scriptKind) {
	if strings.Trim(script, dynamic+" \t\n") == "" {
		return // nothing known to look at; the caller has flagged the dynamic script
	}
	s.a.script(strings.ReplaceAll(script, dynamic, dynamicVar), kind, s.depth+1, s.vars, s.cwd)
}

func (s *scope) text(n syntax.Node) string {
	i, j := int(n.Pos().Offset()), int(n.End().Offset())
	if i < 0 || j > len(s.src) || i >= j {
		return s.src
	}
	return s.src[i:j]
}

// fileWord returns the part of a word that names a file, if any: an absolute, home or
// relative path, also after "=" as in if=/dev/sda or --file=x, and — once the script changed
// directory — a plain name (cd ~/.ssh && cat id_rsa).
func (s *scope) fileWord(w string) (string, bool) {
	if strings.Contains(w, dynamic) || w == "" {
		return "", false
	}
	if i := strings.IndexByte(w, '='); i > 0 && strings.HasPrefix(w, "-") || i > 0 && !strings.ContainsAny(w[:i], "/~") {
		w = w[i+1:]
	} else if strings.HasPrefix(w, "-") {
		return "", false
	}
	if strings.HasPrefix(w, "/") || strings.HasPrefix(w, "~") || strings.Contains(w, "/") || w == ".." || w == "." {
		return w, true
	}
	return w, s.moved && w != ""
}

// resolve returns the forms of a file word worth checking: as written and, for a relative
// one, joined to the directory the script changed to and to where it started.
func (s *scope) resolve(w string) []string {
	out := []string{w}
	if strings.HasPrefix(w, "/") || strings.HasPrefix(w, "~") {
		return out
	}
	for _, dir := range []string{s.cwd, s.a.workDir} {
		if dir != "" {
			if j := joinPath(dir, w); !slices.Contains(out, j) {
				out = append(out, j)
			}
		}
	}
	return out
}

// file remembers a file the script touches, in every resolved form, for the file guard.
func (s *scope) file(w string, write, recursive bool) {
	p, ok := s.fileWord(w)
	if !ok {
		return
	}
	for _, r := range s.resolve(p) {
		if len(s.a.files) >= 256 {
			return
		}
		s.a.files = append(s.a.files, FileRef{Path: r, Write: write, Recursive: recursive})
	}
}

// wordRules applies the sensitive-word rules to a word in every resolved form.
func (s *scope) wordRules(w, ex string) {
	forms := []string{w}
	if p, ok := s.fileWord(w); ok {
		forms = s.resolve(p)
	}
	for _, f := range forms {
		for _, m := range wordMatches(f) {
			m.Excerpt = excerpt(ex)
			s.a.addMatch(m)
		}
	}
}

// joinPath joins a relative path to a directory ("~"-relative or absolute), keeping a "~"
// prefix; ".." steps stay in a "~" path so that the home directory's parents stay visible.
func joinPath(dir, rel string) string {
	switch {
	case strings.HasPrefix(rel, "/"):
		return path.Clean(rel)
	case rel == "~" || strings.HasPrefix(rel, "~/"):
		return rel
	case dir == "~" || strings.HasPrefix(dir, "~/"):
		j := dir + "/" + rel
		if strings.Contains(j, "..") {
			return j
		}
		return "~" + path.Clean("/"+strings.TrimPrefix(j, "~"))
	}
	return path.Join(dir, rel)
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
		nameref := false
		for _, as := range n.Args {
			if as.Naked && as.Name == nil && as.Value != nil {
				if f := s.str(as.Value); len(f) > 1 && f[0] == '-' && strings.ContainsRune(f, 'n') {
					nameref = true // declare -n r=v: $r is whatever v holds when it is used
				}
			}
		}
		for _, as := range n.Args {
			s.assign(as, true, n)
			if nameref && as.Name != nil {
				s.vars[as.Name.Value] = dynamic
			}
		}
	case *syntax.FuncDecl:
		s.funcDecl(n)
		s.defineFunc(n)
		if s.onlyCalledDirectly(n) {
			return false // its body is judged at each call, with the call's arguments
		}
	case *syntax.WhileClause:
		s.whileLoop(n)
	case *syntax.ForClause:
		if c, ok := n.Loop.(*syntax.CStyleLoop); ok && c.Cond == nil {
			s.endlessShellLoop(n, n.Do)
		}
		if it, ok := n.Loop.(*syntax.WordIter); ok && it.Name != nil && len(it.Items) > 0 {
			s.vars[it.Name.Value] = strings.Join(s.fields(it.Items[0]), " ")
			s.forLoop(n, it)
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
	s.envVar(name, val, s.text(n))
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
	var final, raw []string
	prev := s.a.cur
	defer func() { s.a.cur = prev }()
	if call != nil {
		argv := s.argv(call)
		raw = argv
		final = finalCommand(argv)
		simple := render(s.words(call), s.redirs(st))
		s.simple[call] = simple
		s.a.cur = simple
	} else {
		s.a.cur = ""
	}
	s.procSubstFiles(call, final, s.text(st))
	if in, ok := s.stdinText(st); ok {
		if final != nil {
			s.teeWrites(final, in)
			s.taskStdin(final, in, s.text(st))
		}
		s.markFed(st.Cmd, s.feedArgs(raw, in, true, s.text(st)))
		s.readLoop(st, in)
		if len(raw) > 0 {
			s.readVars(raw, in)
		}
	} else if len(raw) > 0 && cmdName(raw[0]) == "parallel" {
		s.markFed(st.Cmd, s.feedArgs(raw, "", false, s.text(st)))
	}
	for _, r := range st.Redirs {
		switch r.Op {
		case syntax.Hdoc, syntax.DashHdoc, syntax.WordHdoc:
			body, text := r.Hdoc, ""
			if r.Op == syntax.WordHdoc {
				body = r.Word
			}
			if body != nil && r.Op == syntax.WordHdoc {
				text = s.str(body)
			} else if body != nil {
				text = s.hdoc(body)
			}
			if body != nil && final != nil {
				s.edScript(final, text, s.text(st))
				s.fedToInterpreter(final, text, st)
				s.hdocSources(final, body, st)
			}
			continue
		}
		if r.Word == nil {
			continue
		}
		if r.Op == syntax.RdrIn && final != nil && len(r.Word.Parts) == 1 {
			// sh < <(cmd): the process substitution's output is the program.
			if ps, ok := r.Word.Parts[0].(*syntax.ProcSubst); ok && readsProgramFromStdin(final) {
				s.procSubstProgram(final, ps, st)
			}
		}
		target := s.str(r.Word)
		s.wordRules(target, s.text(st))
		switch r.Op {
		case syntax.RdrOut, syntax.AppOut, syntax.RdrAll, syntax.AppAll, syntax.ClbOut, syntax.RdrInOut, syntax.DplOut:
			if r.Op == syntax.DplOut && isDigits(target) {
				break
			}
			s.file(target, true, false)
			s.writeTarget(target, "redirects output into", s.text(st))
			s.endlessInto(final, target, s.text(st))
			if final != nil && downloaders[cmdName(final[0])] {
				s.downloaded[cleanFile(target)] = true
			}
			if final != nil && decoders[cmdName(final[0])] {
				s.decoded[cleanFile(target)] = true
			}
			if len(raw) > 0 && (envDumpers[cmdName(raw[0])] || s.readsSecret(raw)) {
				s.leaked[cleanFile(target)] = true
			}
			if r.Op == syntax.RdrOut || r.Op == syntax.AppOut || r.Op == syntax.ClbOut {
				if out, ok := s.static(st, "", false); ok && len(s.written) < 16 {
					if r.Op != syntax.AppOut {
						s.written[cleanFile(target)] = ""
					}
					s.written[cleanFile(target)] += out
					s.startupText(target, out)
				}
			}
			interactive := final != nil && isShell(final[0]) && hasShortFlag(final[1:], 'i') && unwrap(final).kind == ""
			if interactive && r.Op != syntax.RdrOut && r.Op != syntax.AppOut && r.Op != syntax.ClbOut {
				s.a.add("reverse.interactive-shell", FamilyReverse, Critical,
					"redirects an interactive shell (typical of reverse shells)", s.text(st))
			}
		default:
			s.file(target, false, false)
			if final != nil && networkCommand(final) {
				for _, f := range s.wordForms(target) {
					for _, m := range wordMatches(f) {
						if m.Family == FamilySecrets || m.Family == FamilyCredentials {
							s.a.add("exfiltration.redirect", FamilyExfiltrate, Critical, "sends a secret file to the network ("+m.Reason+")", s.text(st))
						}
					}
				}
			}
		}
	}
}

// redirs renders a statement's redirections ("> /etc/hosts") for its simple command.
func (s *scope) redirs(st *syntax.Stmt) string {
	var parts []string
	for _, r := range st.Redirs {
		op := r.Op.String()
		if r.N != nil {
			op = r.N.Value + op
		}
		switch {
		case r.Op == syntax.Hdoc || r.Op == syntax.DashHdoc:
			parts = append(parts, op)
		case r.Word != nil:
			parts = append(parts, op+" "+quoteWord(s.str(r.Word)))
		}
	}
	return strings.Join(parts, " ")
}

// render is the text of a simple command as allow rules see it: its expanded words, quoted
// where the shell would need it, one space apart, then its redirections.
func render(argv []string, redirs string) string {
	parts := make([]string, 0, len(argv)+1)
	for _, a := range argv {
		parts = append(parts, quoteWord(a))
	}
	if redirs != "" {
		parts = append(parts, redirs)
	}
	return strings.Join(parts, " ")
}

func quoteWord(w string) string {
	w = strings.ReplaceAll(w, dynamic, "${?}")
	if w == "" {
		return "''"
	}
	if strings.ContainsAny(w, " \t\n'\"\\$`;&|<>(){}*?[]#!") {
		if q, err := syntax.Quote(w, syntax.LangBash); err == nil {
			return q
		}
		return strconv.Quote(w)
	}
	return w
}

// NormalizeCommand renders command text the way allow rules compare simple commands: the
// first simple command it parses to, or the trimmed text when it does not parse to one.
func NormalizeCommand(text string) string {
	text = strings.TrimSpace(text)
	f, err := syntax.NewParser(syntax.Variant(syntax.LangBash)).Parse(strings.NewReader(text), "")
	if err != nil || len(f.Stmts) != 1 {
		return text
	}
	call, ok := f.Stmts[0].Cmd.(*syntax.CallExpr)
	if !ok {
		return text
	}
	s := &scope{a: &analysis{}, src: text, ifs: " \t\n", vars: map[string]string{}, cache: map[*syntax.CallExpr][]string{},
		simple: map[*syntax.CallExpr]string{}, hashed: map[string]string{}, aliases: map[string]string{}}
	return render(s.words(call), s.redirs(f.Stmts[0]))
}

// fedToInterpreter checks text that reaches an interpreter on its standard input.
func (s *scope) fedToInterpreter(final []string, body string, n syntax.Node) {
	if !readsProgramFromStdin(final) {
		return
	}
	if n := cmdName(final[0]); isShell(final[0]) || schedulers[n] || n == "source" || n == "." {
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
	inputs := make([]string, len(stages))
	raws := make([][]string, len(stages))
	for i, st := range stages {
		if c, ok := st.Cmd.(*syntax.CallExpr); ok {
			raws[i] = s.argv(c)
			finals[i] = finalCommand(raws[i])
			if len(finals[i]) > 0 {
				names[i] = cmdName(finals[i][0])
			}
		}
		if d, ok := st.Cmd.(*syntax.DeclClause); ok {
			raws[i] = []string{d.Variant.Value}
			for _, as := range d.Args {
				switch {
				case as.Name != nil:
					raws[i] = append(raws[i], as.Name.Value)
				case as.Value != nil:
					raws[i] = append(raws[i], s.str(as.Value))
				}
			}
		}
		for _, r := range st.Redirs {
			if r.Op == syntax.RdrIn && r.Word != nil {
				inputs[i] = s.str(r.Word)
			}
		}
	}
	ex := s.text(n)
	prev := s.a.cur
	s.a.cur = ""
	defer func() { s.a.cur = prev }()
	s.pipeExfil(finals, raws, inputs, ex)
	if finals[0] != nil && isShell(finals[0][0]) && unwrap(finals[0]).kind == "" && inputs[0] != "" {
		for _, nm := range names[1:] {
			if networkTools[nm] {
				s.a.add("reverse.fifo-shell", FamilyReverse, Critical, "runs a shell fed from a pipe file and sends its output to the network (reverse shell)", ex)
				break
			}
		}
	}
	s.sessionToNetwork(stages, finals, names, ex)
	s.endlessIntoMemory(finals, ex)
	if last := stages[len(stages)-1]; len(last.Redirs) > 0 {
		out, ok := "", true
		for i := 0; i < len(stages) && ok; i++ {
			out, ok = s.static(stages[i], out, i > 0)
		}
		for _, r := range last.Redirs {
			if (r.Op == syntax.RdrOut || r.Op == syntax.ClbOut) && r.Word != nil && ok && len(s.written) < 16 {
				s.written[cleanFile(s.str(r.Word))] = out
			}
		}
	}
	for j := 1; j < len(stages); j++ {
		if out, ok := s.staticUpTo(stages, j); ok {
			if finals[j] != nil {
				s.teeWrites(finals[j], out)
				s.taskStdin(finals[j], out, ex)
				s.edScript(finals[j], out, ex)
			}
			s.markFed(stages[j].Cmd, s.feedArgs(raws[j], out, true, ex))
			s.readLoop(stages[j], out)
		}
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

// sessionToNetwork flags a pipeline that sends an interactive session to the network: a
// shell without a script (sh | nc host port), script(1), or a program that spawns a
// terminal (pty.spawn), upstream of a network tool.
func (s *scope) sessionToNetwork(stages []*syntax.Stmt, finals [][]string, names []string, ex string) {
	for i := 0; i < len(stages)-1; i++ {
		f := finals[i]
		session := strings.Contains(s.text(stages[i]), "pty.spawn") || f != nil && shellSession(f)
		if !session {
			continue
		}
		for _, nm := range names[i+1:] {
			if networkTools[nm] {
				s.a.add("reverse.session-pipe", FamilyReverse, Critical, "sends an interactive shell session to the network ("+names[i]+" | "+nm+")", ex)
				return
			}
		}
	}
}

// shellSession reports whether argv starts a shell that reads its commands from its input:
// sh, bash -i, or a shell whose script is just another shell (script -qc /bin/bash).
func shellSession(argv []string) bool {
	if !isShell(argv[0]) || cmdName(argv[0]) == "busybox" {
		return false
	}
	st := unwrap(argv)
	switch st.kind {
	case "":
		return len(operands(argv[1:])) == 0
	case "shell":
		f := strings.Fields(st.script)
		return len(f) > 0 && isShell(f[0]) && len(operands(f[1:])) == 0
	}
	return false
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
			if argv := s.argv(n); len(argv) > 0 && argv[0] == name {
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
	if s.alwaysTrue(w.Cond, w.Until) {
		s.endlessShellLoop(w, w.Do)
	}
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
