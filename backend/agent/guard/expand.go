package guard

import (
	"encoding/base32"
	"encoding/base64"
	"encoding/hex"
	"path"
	"strconv"
	"strings"
	"unicode/utf8"

	"mvdan.cc/sh/v3/expand"
	"mvdan.cc/sh/v3/syntax"
)

// The expansion below imitates bash as far as it can without running anything: quotes and
// escapes are removed, known variables and $IFS are substituted and split, brace expansion is
// done, and command substitutions made of echo/printf/base64 -d are evaluated. Whatever is
// only known at run time becomes the dynamic marker.
//
// Escapes ($'…', echo -e) and printf formats are mvdan.cc/sh/v3/expand's (expand.Format).
// Words are not expanded with expand.Fields: it has no notion of a value known only at run
// time (an unset variable is empty to it, so `rm -rf $DIR/` would read as `rm -rf /`), and it
// expands {1..999999999} in full; here unknowns stay visible as the dynamic marker and a
// sequence stands for its ends.

// argv expands a simple command's words to the argument list of the command it runs, with
// the wrappers that change nothing about what it does (nice, timeout, stdbuf, ionice, nohup,
// setsid, command, builtin, a bare env, time) taken off: every rule then sees the command
// itself, however many of them are stacked before it and however their names are spelled.
func (s *scope) argv(c *syntax.CallExpr) []string {
	if v, ok := s.cache[c]; ok {
		return v
	}
	out := stripTransparent(s.words(c))
	s.cache[c] = out
	return out
}

// words expands a simple command's words as written (wrappers included).
func (s *scope) words(c *syntax.CallExpr) []string {
	var out []string
	for _, w := range c.Args {
		out = append(out, s.fields(w)...)
		if len(out) > 4*maxFields {
			break
		}
	}
	return out
}

// transparentOpts are the options with a value of the transparent wrappers.
var transparentOpts = map[string]map[string]bool{
	"nice":    set("-n", "--adjustment"),
	"timeout": set("-s", "--signal", "-k", "--kill-after"),
	"stdbuf":  set("-i", "-o", "-e", "--input", "--output", "--error"),
	"ionice":  set("-c", "--class", "-n", "--classdata"),
	"nohup":   {},
	"setsid":  {},
	"command": {},
	"builtin": {},
	"env":     {},
	"time":    set("-f", "--format", "-o", "--output"),
}

// stripTransparent takes the transparent wrappers off the front of argv (see argv). A
// wrapper whose options change what runs (command -v, env -S, env VAR=x, ionice -p) stays.
func stripTransparent(argv []string) []string {
	for range 8 {
		if len(argv) < 2 || strings.Contains(argv[0], dynamic) {
			return argv
		}
		name := cmdName(argv[0])
		opts, ok := transparentOpts[name]
		if !ok {
			return argv
		}
		i := 1
		for i < len(argv) && len(argv[i]) > 1 && argv[i][0] == '-' {
			a := argv[i]
			if a == "--" {
				i++
				break
			}
			switch name {
			case "command":
				if a != "-p" {
					return argv
				}
			case "env":
				if a != "-i" && a != "--ignore-environment" {
					return argv
				}
			case "ionice":
				if a == "-p" || a == "--pid" || a == "-P" || a == "--pgid" || a == "-u" || a == "--uid" {
					return argv
				}
			case "nice":
				if len(a) > 1 && a[1] >= '0' && a[1] <= '9' {
					i++ // nice -10 cmd
					continue
				}
			}
			if opts[a] {
				i++
			}
			i++
		}
		if name == "timeout" {
			i++ // the duration
		}
		if i >= len(argv) || strings.Contains(argv[i], dynamic) || name == "env" && strings.Contains(argv[i], "=") {
			return argv
		}
		argv = argv[i:]
	}
	return argv
}

// str expands w to one string, as in an assignment, a redirection or a here-string (no
// splitting; a backslash outside quotes escapes any character, as in 'a'\”b').
func (s *scope) str(w *syntax.Word) string {
	var b strings.Builder
	for _, p := range w.Parts {
		s.part(&b, p, false)
	}
	return b.String()
}

// hdoc expands the body of a here-document: a backslash escapes only $, `, \ and a newline,
// as inside double quotes.
func (s *scope) hdoc(w *syntax.Word) string {
	var b strings.Builder
	for _, p := range w.Parts {
		s.part(&b, p, true)
	}
	return b.String()
}

// fields expands w as a command argument: possibly several fields, possibly none.
func (s *scope) fields(w *syntax.Word) []string {
	words := []*syntax.Word{w}
	if hasBraces(w) {
		cp := &syntax.Word{Parts: append([]syntax.WordPart(nil), w.Parts...)}
		if syntax.SplitBraces(cp) {
			words = expandBraces(cp)
		}
	}
	var out []string
	for _, w := range words {
		out = append(out, s.split(w)...)
	}
	return out
}

func hasBraces(w *syntax.Word) bool {
	for _, p := range w.Parts {
		if l, ok := p.(*syntax.Lit); ok && strings.Contains(l.Value, "{") {
			return true
		}
	}
	return false
}

// expandBraces returns the words a word with brace expressions stands for.
func expandBraces(w *syntax.Word) []*syntax.Word {
	for i, p := range w.Parts {
		be, ok := p.(*syntax.BraceExp)
		if !ok {
			continue
		}
		elems := be.Elems
		if be.Sequence && len(elems) > 2 {
			elems = elems[:2] // {a..z..2}: the ends are enough to judge
		}
		var out []*syntax.Word
		for _, e := range elems {
			parts := append(append(append([]syntax.WordPart(nil), w.Parts[:i]...), e.Parts...), w.Parts[i+1:]...)
			out = append(out, expandBraces(&syntax.Word{Parts: parts})...)
			if len(out) >= maxFields {
				return out[:maxFields]
			}
		}
		return out
	}
	return []*syntax.Word{w}
}

// split expands one brace-free word with field splitting of unquoted expansions.
func (s *scope) split(w *syntax.Word) []string {
	var out []string
	var cur strings.Builder
	started := false
	flush := func() {
		if started {
			out = append(out, cur.String())
		}
		cur.Reset()
		started = false
	}
	unquoted := func(v string) {
		for _, r := range v {
			if strings.ContainsRune(s.ifs, r) {
				flush()
				continue
			}
			cur.WriteRune(r)
			started = true
		}
	}
	for _, p := range w.Parts {
		switch p := p.(type) {
		case *syntax.Lit:
			cur.WriteString(unescape(p.Value, false))
			started = true
		case *syntax.ParamExp:
			unquoted(s.param(p))
		case *syntax.CmdSubst:
			unquoted(s.subst(p))
		case *syntax.DblQuoted:
			// "${a[@]}" is one field per element of the array a.
			if len(p.Parts) == 1 {
				if pe, ok := p.Parts[0].(*syntax.ParamExp); ok && (pe.Index != nil && isAllIndex(pe.Index) || pe.Index == nil && pe.Param != nil && pe.Param.Value == "@" && pe.Exp == nil && pe.Slice == nil && !pe.Length && !pe.Excl) {
					flush()
					for _, f := range strings.Fields(s.param(pe)) {
						out = append(out, f)
					}
					continue
				}
			}
			s.part(&cur, p, false)
			started = true
		default:
			s.part(&cur, p, false)
			started = true
		}
	}
	flush()
	return out
}

// isAllIndex reports whether an array index is @ or *.
func isAllIndex(e syntax.ArithmExpr) bool {
	w, ok := e.(*syntax.Word)
	return ok && (w.Lit() == "@" || w.Lit() == "*")
}

// part writes the expansion of one word part without field splitting.
func (s *scope) part(b *strings.Builder, p syntax.WordPart, inDouble bool) {
	switch p := p.(type) {
	case *syntax.Lit:
		b.WriteString(unescape(p.Value, inDouble))
	case *syntax.SglQuoted:
		if p.Dollar {
			b.WriteString(ansiC(p.Value))
		} else {
			b.WriteString(p.Value)
		}
	case *syntax.DblQuoted:
		for _, q := range p.Parts {
			s.part(b, q, true)
		}
	case *syntax.ParamExp:
		b.WriteString(s.param(p))
	case *syntax.CmdSubst:
		b.WriteString(s.subst(p))
	case *syntax.ArithmExp:
		b.WriteString("1")
	case *syntax.ProcSubst:
		b.WriteString("/dev/fd/63")
	case *syntax.ExtGlob:
		b.WriteString(p.Op.String())
		if p.Pattern != nil {
			b.WriteString(p.Pattern.Value)
		}
		b.WriteString(")")
	case *syntax.BraceExp:
		for i, e := range p.Elems {
			if i > 0 {
				b.WriteString(",")
			}
			b.WriteString(s.str(e))
		}
	default:
		b.WriteString(dynamic)
	}
}

// knownEnv are variables whose value is predictable enough to judge a command by.
var knownEnv = map[string]string{
	"HOME": "~",
	"PWD":  ".",
	"PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
	"0":    "bash",
}

// param expands a parameter expansion, or returns dynamic.
func (s *scope) param(p *syntax.ParamExp) string {
	if p.Param == nil || p.Excl || p.Length || p.Names != 0 || p.NestedParam != nil {
		return dynamic
	}
	name := p.Param.Value
	val, known := s.vars[name]
	if !known && name == "IFS" {
		val, known = s.ifs, true
	}
	if !known {
		val, known = knownEnv[name]
	}
	switch {
	case p.Exp != nil:
		switch p.Exp.Op {
		case syntax.DefaultUnset, syntax.DefaultUnsetOrNull, syntax.AssignUnset, syntax.AssignUnsetOrNull:
			if !known || (val == "" && (p.Exp.Op == syntax.DefaultUnsetOrNull || p.Exp.Op == syntax.AssignUnsetOrNull)) {
				if p.Exp.Word == nil {
					return ""
				}
				return s.str(p.Exp.Word)
			}
			return val
		case syntax.UpperAll:
			if known {
				return strings.ToUpper(val)
			}
		case syntax.LowerAll:
			if known {
				return strings.ToLower(val)
			}
		case syntax.RemSmallPrefix, syntax.RemLargePrefix:
			if known && p.Exp.Word != nil {
				return strings.TrimPrefix(val, s.str(p.Exp.Word))
			}
		case syntax.RemSmallSuffix, syntax.RemLargeSuffix:
			if known && p.Exp.Word != nil {
				return strings.TrimSuffix(val, s.str(p.Exp.Word))
			}
		}
		return dynamic
	case p.Slice != nil:
		if !known {
			return dynamic
		}
		off, ok1 := arithLit(p.Slice.Offset)
		length, ok2 := len(val), true
		if p.Slice.Length != nil {
			length, ok2 = arithLit(p.Slice.Length)
		}
		if !ok1 || !ok2 || off < 0 || length < 0 {
			return dynamic
		}
		off = min(off, len(val))
		return val[off:min(off+length, len(val))]
	case p.Repl != nil:
		if !known || p.Repl.Orig == nil {
			return dynamic
		}
		with := ""
		if p.Repl.With != nil {
			with = s.str(p.Repl.With)
		}
		n := 1
		if p.Repl.All {
			n = -1
		}
		return strings.Replace(val, s.str(p.Repl.Orig), with, n)
	}
	if !known {
		return dynamic
	}
	return val
}

func arithLit(e syntax.ArithmExpr) (int, bool) {
	w, ok := e.(*syntax.Word)
	if !ok {
		return 0, false
	}
	n, err := strconv.Atoi(w.Lit())
	return n, err == nil
}

// subst evaluates a command substitution when it only prints constants.
func (s *scope) subst(c *syntax.CmdSubst) string {
	if len(c.Stmts) != 1 {
		return dynamic
	}
	out, ok := s.static(c.Stmts[0], "", false)
	if !ok {
		return dynamic
	}
	return strings.TrimRight(out, "\n")
}

// static evaluates a statement whose output is fixed: echo, printf, and filters such as
// base64 -d applied to in (when piped, hasInput). It reports false for anything else.
func (s *scope) static(st *syntax.Stmt, in string, hasInput bool) (string, bool) {
	switch c := st.Cmd.(type) {
	case *syntax.BinaryCmd:
		if c.Op != syntax.Pipe && c.Op != syntax.PipeAll {
			return "", false
		}
		left, ok := s.static(c.X, in, hasInput)
		if !ok {
			return "", false
		}
		return s.static(c.Y, left, true)
	case *syntax.CallExpr:
		for _, r := range st.Redirs {
			if r.Op == syntax.WordHdoc && r.Word != nil {
				in, hasInput = s.str(r.Word)+"\n", true
			} else if (r.Op == syntax.Hdoc || r.Op == syntax.DashHdoc) && r.Hdoc != nil {
				in, hasInput = s.hdoc(r.Hdoc), true
			}
		}
		argv := s.argv(c)
		if len(argv) == 0 || strings.Contains(strings.Join(argv, " "), dynamic) {
			return "", false
		}
		out, ok := evalFilter(argv, in, hasInput)
		if len(out) > maxStatic {
			return "", false
		}
		return out, ok
	}
	return "", false
}

func evalFilter(argv []string, in string, hasInput bool) (string, bool) {
	args := argv[1:]
	switch cmdName(argv[0]) {
	case "echo":
		nl, esc := true, false
		for len(args) > 0 && len(args[0]) > 1 && args[0][0] == '-' && strings.Trim(args[0][1:], "neE") == "" {
			nl = nl && !strings.Contains(args[0], "n")
			esc = esc || strings.Contains(args[0], "e")
			args = args[1:]
		}
		out := strings.Join(args, " ")
		if esc {
			out = ansiC(out)
		}
		if nl {
			out += "\n"
		}
		return out, true
	case "printf":
		if len(args) == 0 {
			return "", false
		}
		// printf(1) as the shell library formats it; the format is reused while arguments
		// remain.
		format, rest := args[0], append([]string{}, args[1:]...)
		var b strings.Builder
		for {
			out, n, err := expand.Format(&expand.Config{}, format, rest) // a config of its own: see ansiC
			if err != nil {
				return "", false
			}
			b.WriteString(out)
			rest = rest[n:]
			if n == 0 || len(rest) == 0 || b.Len() > maxStatic {
				return b.String(), true
			}
		}
	case "cat", "tee":
		if len(args) == 0 && hasInput {
			return in, true
		}
	case "dirname", "basename", "realpath":
		// Pure functions of an absolute path (or one under ~).
		ops := operands(args)
		if len(ops) != 1 || !(strings.HasPrefix(ops[0], "/") || ops[0] == "~" || strings.HasPrefix(ops[0], "~/")) {
			return "", false
		}
		switch p := path.Clean(ops[0]); cmdName(argv[0]) {
		case "dirname":
			return path.Dir(p) + "\n", true
		case "basename":
			return path.Base(p) + "\n", true
		default:
			return p + "\n", true
		}
	case "mktemp":
		// A fresh name under the temporary directory (or the one given).
		dir := "/tmp"
		for i, a := range args {
			if (a == "-p" || a == "--tmpdir") && i+1 < len(args) {
				dir = args[i+1]
			} else if v, ok := strings.CutPrefix(a, "--tmpdir="); ok {
				dir = v
			}
		}
		if !strings.HasPrefix(dir, "/") {
			return "", false
		}
		return strings.TrimRight(dir, "/") + "/tmp.cubicle-guard\n", true
	case "base64", "base32":
		if !hasInput || !hasAny(args, "-d", "--decode", "-D", "-di", "-id") {
			return "", false
		}
		clean := strings.Join(strings.Fields(in), "")
		var b []byte
		var err error
		if cmdName(argv[0]) == "base32" {
			b, err = base32.StdEncoding.DecodeString(clean)
		} else if b, err = base64.StdEncoding.DecodeString(clean); err != nil {
			b, err = base64.RawStdEncoding.DecodeString(strings.TrimRight(clean, "="))
		}
		if err != nil || !utf8.Valid(b) {
			return "", false
		}
		return string(b), true
	case "xxd":
		if hasInput && hasAny(args, "-r") && hasAny(args, "-p", "-ps", "-rp", "-pr") {
			b, err := hex.DecodeString(strings.Join(strings.Fields(in), ""))
			return string(b), err == nil
		}
	case "rev":
		if hasInput && len(args) == 0 {
			lines := strings.Split(strings.TrimSuffix(in, "\n"), "\n")
			for i, l := range lines {
				r := []rune(l)
				for a, b := 0, len(r)-1; a < b; a, b = a+1, b-1 {
					r[a], r[b] = r[b], r[a]
				}
				lines[i] = string(r)
			}
			return strings.Join(lines, "\n") + "\n", true
		}
	}
	return "", false
}

func hasAny(args []string, opts ...string) bool {
	for _, a := range args {
		for _, o := range opts {
			if a == o {
				return true
			}
		}
	}
	return false
}

// unescape removes the backslashes of an unquoted (or double-quoted) literal.
func unescape(v string, inDouble bool) string {
	if !strings.Contains(v, `\`) {
		return v
	}
	var b strings.Builder
	for i := 0; i < len(v); i++ {
		c := v[i]
		if c != '\\' || i+1 >= len(v) {
			b.WriteByte(c)
			continue
		}
		next := v[i+1]
		switch {
		case next == '\n':
			i++
		case !inDouble || strings.IndexByte("$`\"\\", next) >= 0:
			b.WriteByte(next)
			i++
		default:
			b.WriteByte(c)
		}
	}
	return b.String()
}

// ansiC decodes the escapes of $'…' strings (and of echo -e, awk strings) as the shell
// library does for $'…': printf's escapes without its % directives, cut at a NUL.
func ansiC(v string) string {
	if !strings.Contains(v, `\`) {
		return v
	}
	// A config of its own for each call: Format(nil, …) prepares (writes) the library's one
	// shared zero config and its buffer, a data race between concurrent checks that let one
	// check read another's text.
	out, _, err := expand.Format(&expand.Config{}, v, nil)
	if err != nil {
		return v
	}
	out, _, _ = strings.Cut(out, "\x00")
	return out
}
