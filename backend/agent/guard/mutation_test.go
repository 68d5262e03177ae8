package guard

import (
	"bytes"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"sort"
	"strings"
	"sync"
	"testing"

	"mvdan.cc/sh/v3/syntax"
)

// The mutation suite (issue 26, item 4): every dangerous case of the table rewritten by
// semantics-preserving transforms — the evasions a model (or a person steering it) reaches for
// first. Whole-text transforms wrap the command (eval, bash -c, a subshell, a here-string, a
// function, base64 or hex decoded into bash); name transforms rewrite the name of every
// simple command the parser finds (quoting, a variable, ANSI-C $'…', an alias, the env,
// command, nice, timeout and stdbuf wrappers, the absolute path of the binary). A mutant
// counts as caught when AUTO asks or denies. TestMutations logs the rate per transform and
// holds the whole suite to ≥ 99%; `go test -run TestMutations -v ./backend/agent/guard/`
// prints the table.

// mutation is one semantics-preserving rewrite; ok is false when it does not apply to cmd.
type mutation struct {
	name  string
	apply func(cmd string) (mutant string, ok bool)
}

// hiding are the rewrites that hide the command (decoded at run time): those are asked about
// whatever they hide, so their mutants of ordinary commands are asked too.
var hiding = set("base64 | bash", "hex | bash")

var mutations = []mutation{
	{"eval", func(c string) (string, bool) { return "eval " + shellQuote(c), true }},
	{"bash -c", func(c string) (string, bool) { return "bash -c " + shellQuote(c), true }},
	{"subshell", func(c string) (string, bool) { return "(\n" + c + "\n)", true }},
	{"here-string", func(c string) (string, bool) { return "bash <<< " + shellQuote(c), true }},
	{"function", func(c string) (string, bool) { return "__m() {\n" + c + "\n}\n__m", true }},
	{"base64 | bash", func(c string) (string, bool) {
		return "echo " + base64.StdEncoding.EncodeToString([]byte(c)) + " | base64 -d | bash", true
	}},
	{"hex | bash", func(c string) (string, bool) {
		return "echo " + hex.EncodeToString([]byte(c)) + " | xxd -r -p | bash", true
	}},
	{"quoted name", nameMutation(func(n string, _ int) (string, string) { return `"` + n[:1] + `"` + n[1:], "" })},
	{"variable name", nameMutation(func(n string, i int) (string, string) {
		v := fmt.Sprintf("__v%d", i)
		return `"$` + v + `"`, v + "=" + shellQuote(n)
	})},
	{"ANSI-C name", nameMutation(func(n string, _ int) (string, string) {
		var b strings.Builder
		b.WriteString("$'")
		for _, c := range []byte(n) {
			fmt.Fprintf(&b, `\x%02x`, c)
		}
		b.WriteString("'")
		return b.String(), ""
	})},
	{"alias", nameMutation(func(n string, i int) (string, string) {
		a := fmt.Sprintf("__a%d", i)
		return a, "alias " + a + "=" + shellQuote(n)
	})},
	{"continued name", nameMutation(func(n string, _ int) (string, string) {
		if len(n) < 2 {
			return n, ""
		}
		return n[:1] + "\\\n" + n[1:], ""
	})},
	{"quoted args", quoteArgs},
	{"env", externalMutation(func(n string) string { return "env " + n })},
	{"command", externalMutation(func(n string) string { return "command " + n })},
	{"nice", externalMutation(func(n string) string { return "nice " + n })},
	{"timeout", externalMutation(func(n string) string { return "timeout 600 " + n })},
	{"stdbuf", externalMutation(func(n string) string { return "stdbuf -o0 " + n })},
	{"stacked wrappers", externalMutation(func(n string) string {
		if !strings.Contains(n, "/") {
			n = "/usr/bin/" + n
		}
		return "env nice -n 5 timeout -k 5 600 stdbuf -oL command " + n
	})},
	{"absolute path", externalMutation(func(n string) string {
		if strings.Contains(n, "/") {
			return n
		}
		return "/usr/bin/" + n
	})},
}

// quoteArgs puts every plain argument in double quotes ("-rf" "/"); words the quotes would
// change (~, wildcards, expansions, assignments, braces) stay as they are.
func quoteArgs(c string) (string, bool) {
	if strings.ContainsFunc(c, isControl) {
		return "", false
	}
	f, err := syntax.NewParser(syntax.Variant(syntax.LangBash)).Parse(strings.NewReader(c), "")
	if err != nil {
		return "", false
	}
	changed := 0
	syntax.Walk(f, func(n syntax.Node) bool {
		x, ok := n.(*syntax.CallExpr)
		if !ok {
			return true
		}
		for i, w := range x.Args {
			l := w.Lit()
			if i == 0 || l == "" || len(w.Parts) != 1 || strings.ContainsAny(l, "~*?[]{}$\\'\"=!`") {
				continue
			}
			x.Args[i] = &syntax.Word{Parts: []syntax.WordPart{&syntax.DblQuoted{Parts: []syntax.WordPart{&syntax.Lit{Value: l}}}}}
			changed++
		}
		return true
	})
	if changed == 0 {
		return "", false
	}
	var buf bytes.Buffer
	if err := syntax.NewPrinter().Print(&buf, f); err != nil {
		return "", false
	}
	return buf.String(), true
}

// builtinOnly are names with no program of their own on disk: a wrapper or a path cannot
// run them.
var builtinOnly = set("cd", "eval", "export", "alias", "unalias", "set", "unset", "source", ".", "exec", "command", "builtin",
	"trap", "read", "mapfile", "readarray", "declare", "typeset", "local", "history", "hash", "shopt", "pushd", "popd", "dirs",
	"wait", "jobs", "disown", "fg", "bg", "let", "ulimit", "umask", "getopts", "shift", "return", "exit", "break", "continue",
	"readonly", "enable", "complete", "compgen", "caller", "times", "suspend", "logout", "fc", "bind", "help", ":", "coproc")

// nameMutation rewrites the name of every simple command with a literal name (not a function
// or an alias of the command itself); rename returns the new word and a line to put first.
func nameMutation(rename func(name string, i int) (word, prelude string)) func(string) (string, bool) {
	return func(c string) (string, bool) {
		return rewriteNames(c, false, func(n string, i int) (string, string) { return rename(n, i) })
	}
}

// externalMutation puts a wrapper (or a path) before every simple command that runs a
// program on disk: not a builtin, a function or an alias of the command itself.
func externalMutation(wrap func(name string) string) func(string) (string, bool) {
	return func(c string) (string, bool) {
		return rewriteNames(c, true, func(n string, _ int) (string, string) { return wrap(n), "" })
	}
}

// rewriteNames parses c and rewrites the literal names of its simple commands. The rewritten
// word is inserted as raw text, so it may be several words (a wrapper and the name).
func rewriteNames(c string, external bool, rename func(name string, i int) (string, string)) (string, bool) {
	if strings.ContainsFunc(c, isControl) {
		return "", false // the printer cannot keep control characters as they are
	}
	f, err := syntax.NewParser(syntax.Variant(syntax.LangBash)).Parse(strings.NewReader(c), "")
	if err != nil {
		return "", false
	}
	local := map[string]bool{}
	syntax.Walk(f, func(n syntax.Node) bool {
		switch x := n.(type) {
		case *syntax.FuncDecl:
			local[x.Name.Value] = true
		case *syntax.CallExpr:
			if len(x.Args) > 1 && x.Args[0].Lit() == "alias" {
				for _, a := range x.Args[1:] {
					if l, ok := a.Parts[0].(*syntax.Lit); ok {
						if k, _, ok := strings.Cut(l.Value, "="); ok {
							local[k] = true
						}
					}
				}
			}
		}
		return true
	})
	var preludes []string
	changed := 0
	syntax.Walk(f, func(n syntax.Node) bool {
		x, ok := n.(*syntax.CallExpr)
		if !ok || len(x.Args) == 0 {
			return true
		}
		w := x.Args[0]
		name := w.Lit()
		if name == "" || len(w.Parts) != 1 || strings.ContainsAny(name, "*?[]{}~$\\'\"=") || local[name] || strings.HasPrefix(name, "-") {
			return true
		}
		if external && (builtinOnly[name] || name == "printf" && len(x.Args) > 1 && x.Args[1].Lit() == "-v") {
			return true
		}
		word, prelude := rename(name, changed)
		if prelude != "" {
			preludes = append(preludes, prelude)
		}
		x.Args[0] = &syntax.Word{Parts: []syntax.WordPart{&syntax.Lit{Value: word}}}
		changed++
		return true
	})
	if changed == 0 {
		return "", false
	}
	var buf bytes.Buffer
	if err := syntax.NewPrinter().Print(&buf, f); err != nil {
		return "", false
	}
	out := buf.String()
	if len(preludes) > 0 {
		head := strings.Join(preludes, "\n")
		if strings.HasPrefix(preludes[0], "alias ") {
			head = "shopt -s expand_aliases\n" + head
		}
		out = head + "\n" + out
	}
	return out, true
}

// TestMutations runs every mutant of every dangerous case at AUTO and logs the rate caught
// per transform; the whole suite must catch at least 99%.
func TestMutations(t *testing.T) {
	g := newGuard(t, Config{Level: Auto})
	seen := map[string]bool{}
	var cases []string
	for _, cat := range sortedKeys(dangerTable) {
		for _, c := range dangerTable[cat] {
			if !seen[c] {
				seen[c] = true
				cases = append(cases, c)
			}
		}
	}
	if raceDetector {
		var sample []string
		for i := 0; i < len(cases); i += 10 {
			sample = append(sample, cases[i])
		}
		t.Logf("race detector on: every tenth of the %d cases (the full suite runs without it)", len(cases))
		cases = sample
	}
	var ordinary []string
	for _, cat := range sortedKeys(ordinaryTable) {
		for i, c := range ordinaryTable[cat] {
			if !raceDetector || i%10 == 0 {
				ordinary = append(ordinary, c)
			}
		}
	}
	type count struct{ total, caught, ordinary, asked int }
	counts := make([]count, len(mutations))
	missed := make([][]string, len(mutations))
	asked := make([][]string, len(mutations))
	var mu sync.Mutex
	var wg sync.WaitGroup
	work := make(chan int)
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range work {
				m := mutations[i]
				var c count
				var miss []string
				for _, cmd := range cases {
					mutant, ok := m.apply(cmd)
					if !ok {
						continue
					}
					c.total++
					if g.Check(shell(mutant)).Decision != Allow {
						c.caught++
					} else {
						miss = append(miss, fmt.Sprintf("%q → %q", cmd, mutant))
					}
				}
				// The transforms that do not hide the command must not make an ordinary
				// command look dangerous.
				var fp []string
				for _, cmd := range ordinary {
					mutant, ok := m.apply(cmd)
					if !ok {
						continue
					}
					c.ordinary++
					if v := g.Check(shell(mutant)); v.Decision != Allow {
						c.asked++
						fp = append(fp, fmt.Sprintf("%q → %q (%s)", cmd, mutant, v.Reason()))
					}
				}
				mu.Lock()
				counts[i], missed[i], asked[i] = c, miss, fp
				mu.Unlock()
			}
		}()
	}
	for i := range mutations {
		work <- i
	}
	close(work)
	wg.Wait()

	var lines []string
	var total count
	for i, m := range mutations {
		c := counts[i]
		total.total += c.total
		total.caught += c.caught
		total.ordinary += c.ordinary
		total.asked += c.asked
		lines = append(lines, fmt.Sprintf("%-16s %7d %7d %7.2f%% | %8d %6d", m.name, c.total, c.caught, pct(c.caught, c.total), c.ordinary, c.asked))
	}
	lines = append(lines, fmt.Sprintf("%-16s %7d %7d %7.2f%% | %8d %6d", "TOTAL", total.total, total.caught, pct(total.caught, total.total), total.ordinary, total.asked))
	t.Logf("mutants of %d dangerous and %d ordinary cases at AUTO per transform (dangerous caught; ordinary asked):\n%-16s %7s %7s %8s | %8s %6s\n%s",
		len(cases), len(ordinary), "transform", "mutants", "caught", "rate", "ordinary", "asked", strings.Join(lines, "\n"))
	for i, m := range mutations {
		if !hiding[m.name] && len(asked[i]) > 0 {
			t.Errorf("%s makes %d ordinary commands asked about:\n%s", m.name, len(asked[i]), strings.Join(asked[i], "\n"))
		}
	}
	var all []string
	for i, m := range mutations {
		for _, s := range missed[i] {
			all = append(all, m.name+": "+s)
		}
	}
	sort.Strings(all)
	if len(all) > 0 {
		t.Logf("%d mutants pass unasked:\n%s", len(all), strings.Join(all, "\n"))
	}
	if len(mutations) < 10 || total.total < 10*len(cases) {
		t.Fatalf("the suite is too small: %d transforms, %d mutants of %d cases", len(mutations), total.total, len(cases))
	}
	if pct(total.caught, total.total) < 99 {
		t.Errorf("%.2f%% of the mutants caught, want ≥ 99%%", pct(total.caught, total.total))
	}
}

func pct(a, b int) float64 {
	if b == 0 {
		return 100
	}
	return 100 * float64(a) / float64(b)
}
