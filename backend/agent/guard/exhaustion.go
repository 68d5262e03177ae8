package guard

import (
	"regexp"
	"slices"
	"strconv"
	"strings"

	"mvdan.cc/sh/v3/syntax"
)

// Resource exhaustion: programs that start processes or take memory without end — fork
// loops in interpreters, endless shell loops that start background jobs, xargs and parallel
// with no limit on their processes, memory bombs and stress tools. The desktop's process and
// memory limits are the boundary; the guard asks so that a person sees it first.

var (
	// codeLoop finds an endless loop in program text (python, perl, ruby, node, php, lua).
	codeLoop = regexp.MustCompile(`\bwhile\s*\(?\s*(?:1|true|True|TRUE|!0|:)\s*\)?|\bfor\s*\(\s*;\s*;\s*\)|\bloop\s*(?:do\b|\{)|\buntil\s*\(?\s*(?:false|False|0)\b|iter\(\s*int\s*,\s*1\s*\)|itertools\.(?:count|repeat|cycle)\(|\bwhile\s+fork\b|\bsetInterval\s*\(|\bforever\b`)
	// codeSpawn finds a call that starts a process (or thread) without waiting for it.
	codeSpawn = regexp.MustCompile(`\bfork\b|pcntl_fork|\bspawn\w*\s*\(|\bPopen\s*\(|\bProcess\s*\(|\bThread\s*\(|\bWorker\s*\(|&\s*['"]|\bexec\w*\s*\(\s*\$0|\bsystem\s*\(\s*\$0|__filename|sys\.argv\[0\]|\$PROGRAM_NAME|\$0\b`)
	// codeGrow finds a container growing.
	codeGrow = regexp.MustCompile(`\.append\s*\(|\.push\s*\(|\.extend\s*\(|\s<<\s|\.concat\s*\(|\bpush\s*\(?\s*@|\+=\s*(?:['"\[]|\w+\s*\*)`)
	// forkCall is one fork.
	forkCall = regexp.MustCompile(`\b(?:os\.)?fork\s*(?:\(\s*\))?|pcntl_fork\s*\(`)
	// hugeAlloc finds an allocation of a gigabyte or more in one expression: a string or list
	// repeated, a buffer or array of that size.
	hugeAlloc = regexp.MustCompile(`(?:['"][^'"\n]*['"]|\])\s*\*\s*\(?\s*` + hugeNum + `|` + hugeNum + `\s*\)?\s*\*\s*(?:['"]|\[)|\sx\s*\(?\s*` + hugeNum +
		`|\.repeat\s*\(\s*` + hugeNum + `|\b(?:bytearray|bytes|Array|alloc|allocUnsafe|calloc|malloc|zeros|ones|empty|Buffer\.alloc)\s*\(\s*\(?\s*` + hugeNum)
	// stressTools load a machine on purpose.
	stressTools = set("stress", "stress-ng", "memtester", "cpuburn", "burnP6", "fork-bomb")
)

// hugeNum is a number of a billion or more as programs spell it.
const hugeNum = `(?:\d{10,}|\d+\s*\*\*\s*(?:9|[1-9]\d)|\d+(?:\.\d+)?[eE]\+?(?:9|[1-9]\d)|1\s*<<\s*(?:3\d|[4-9]\d)|\(\s*1\s*<<\s*(?:3\d|[4-9]\d)\s*\))`

// exhaustionCode judges program text for fork loops and memory bombs.
func (s *scope) exhaustionCode(code, ex string) {
	loop := codeLoop.MatchString(code)
	switch {
	case loop && codeSpawn.MatchString(code):
		s.a.add("fork-bomb.code", FamilyForkBomb, Critical, "the program starts processes in an endless loop (fork bomb)", ex)
	case len(forkCall.FindAllStringIndex(code, 8)) >= 4:
		s.a.add("fork-bomb.code-forks", FamilyForkBomb, High, "the program forks again and again, doubling its processes each time", ex)
	}
	if loop && codeGrow.MatchString(code) {
		s.a.add("exhaustion.memory-loop", FamilyExhaustion, Medium, "the program grows its memory in an endless loop", ex)
	}
	if hugeAlloc.MatchString(code) {
		s.a.add("exhaustion.memory", FamilyExhaustion, Medium, "the program allocates a gigabyte or more at once", ex)
	}
}

// endlessShellLoop flags a loop that never ends and starts background processes: while
// true, until false, for ((;;)), whose body puts anything in the background.
func (s *scope) endlessShellLoop(n syntax.Node, body []*syntax.Stmt) {
	bg := false
	for _, st := range body {
		syntax.Walk(st, func(node syntax.Node) bool {
			if x, ok := node.(*syntax.Stmt); ok && x.Background {
				bg = true
			}
			if c, ok := node.(*syntax.CallExpr); ok && len(s.argv(c)) > 0 && stressTools[cmdName(s.argv(c)[0])] {
				bg = true
			}
			return !bg
		})
	}
	if bg {
		s.a.add("fork-bomb.loop", FamilyForkBomb, High, "starts background processes in an endless loop", s.text(n))
	}
	// a=$a$a: a variable that doubles itself on every round fills the memory.
	for _, st := range body {
		grows := false
		syntax.Walk(st, func(node syntax.Node) bool {
			if as, ok := node.(*syntax.Assign); ok && as.Name != nil && as.Value != nil {
				v, name := s.text(as.Value), as.Name.Value
				refs := strings.Count(v, "$"+name) + strings.Count(v, "${"+name+"}")
				grows = grows || refs >= 2 || as.Append && refs >= 1
			}
			return !grows
		})
		if grows {
			s.a.add("exhaustion.memory-loop", FamilyExhaustion, Medium, "a variable doubles itself in an endless loop, filling the memory", s.text(n))
			return
		}
	}
}

// alwaysTrue reports whether a loop condition is a constant true (or, for until, false).
func (s *scope) alwaysTrue(cond []*syntax.Stmt, until bool) bool {
	if len(cond) != 1 {
		return false
	}
	switch c := cond[0].Cmd.(type) {
	case *syntax.CallExpr:
		argv := s.argv(c)
		if len(argv) == 0 {
			return false
		}
		n := cmdName(argv[0])
		if until {
			return n == "false" && len(argv) == 1
		}
		return (n == "true" || n == ":") && len(argv) == 1 || (n == "[" || n == "test") && len(argv) <= 3 && len(argv) >= 2 && argv[1] != "]" && argv[1] != "" && !strings.Contains(argv[1], dynamic)
	case *syntax.ArithmCmd:
		if w, ok := c.X.(*syntax.Word); ok && !until {
			v, err := strconv.Atoi(w.Lit())
			return err == nil && v != 0
		}
	}
	return false
}

// parallelism flags xargs and parallel without a limit on the processes they start (-P 0,
// -j 0) or with hundreds of them.
func (s *scope) parallelism(name string, args []string, ex string) {
	limit := ""
	for i, a := range args {
		if a == "--" || !strings.HasPrefix(a, "-") {
			if name == "xargs" {
				break
			}
			continue
		}
		switch {
		case name == "xargs" && (a == "-P" || a == "--max-procs") && i+1 < len(args):
			limit = args[i+1]
		case name == "xargs" && strings.HasPrefix(a, "-P"):
			limit = a[2:]
		case name == "xargs" && strings.HasPrefix(a, "--max-procs="):
			limit = strings.TrimPrefix(a, "--max-procs=")
		case name == "parallel" && (a == "-j" || a == "--jobs" || a == "-P" || a == "--max-procs") && i+1 < len(args):
			limit = args[i+1]
		case name == "parallel" && (strings.HasPrefix(a, "-j") || strings.HasPrefix(a, "-P")):
			limit = a[2:]
		case name == "parallel" && strings.HasPrefix(a, "--jobs="):
			limit = strings.TrimPrefix(a, "--jobs=")
		}
	}
	if limit == "" {
		return
	}
	n, err := strconv.Atoi(strings.TrimSuffix(strings.TrimPrefix(limit, "+"), "%"))
	if err != nil {
		return
	}
	if strings.HasSuffix(limit, "%") {
		n = n / 100 * 64 // a percentage of the cores; count a big machine's
	}
	if n == 0 || n >= 256 {
		s.a.add("exhaustion.parallel", FamilyExhaustion, Medium, name+" starts processes without a limit ("+limit+"), which can exhaust the machine", ex)
	}
}

// exhaustionCommand flags stress tools and programs that read an endless device into memory.
func (s *scope) exhaustionCommand(name string, args []string, ex string) {
	if stressTools[name] {
		s.a.add("exhaustion.stress", FamilyExhaustion, Medium, name+" loads the machine's processors or memory on purpose", ex)
		return
	}
	switch name {
	case "tail", "sort", "tac", "shuf", "uniq":
		for _, a := range args {
			if a == "/dev/zero" || a == "/dev/urandom" || a == "/dev/random" {
				s.a.add("exhaustion.endless-read", FamilyExhaustion, Medium, name+" reads an endless device ("+a+") into memory", ex)
				return
			}
		}
	}
}

// endlessIntoMemory flags a pipeline whose endless source (yes, /dev/zero, /dev/urandom)
// reaches a program that keeps all of its input in memory (sort, tail, tac, shuf) with no
// stage that stops it (head) in between.
func (s *scope) endlessIntoMemory(finals [][]string, ex string) {
	endless := false
	for _, f := range finals {
		if len(f) == 0 {
			endless = false
			continue
		}
		n := cmdName(f[0])
		switch {
		case n == "yes" || n == "cat" && slices.ContainsFunc(f[1:], isEndlessDevice):
			endless = true
		case n == "head" || n == "dd" || n == "timeout":
			endless = false
		case endless && (n == "sort" || n == "tail" || n == "tac" || n == "shuf"):
			s.a.add("exhaustion.endless-pipe", FamilyExhaustion, Medium, n+" keeps endless input in memory", ex)
			return
		}
	}
}

func isEndlessDevice(a string) bool {
	return a == "/dev/zero" || a == "/dev/urandom" || a == "/dev/random"
}
