package guard

import (
	"encoding/json"
	"path"
	"regexp"
	"strings"
)

// Build and task files that carry the command: a command line that writes a Makefile,
// package.json scripts, a justfile, a Taskfile, a Rakefile, setup.py, conftest.py, tox.ini or
// CMakeLists.txt with constant text and then runs the tool that reads it is judged by the
// recipes it wrote, as if they were on the command line. So are npm's script setters
// (npm pkg set scripts.x=…, npm set-script) and a makefile given on standard input.

// taskFiles maps a runner to the files it reads by default and how their text holds commands.
var taskFiles = map[string]struct {
	files []string
	kind  string // "make", "scripts" (package.json), "indented", "yaml", "ruby", "python", "ini", "cmake"
}{
	"make":    {[]string{"Makefile", "makefile", "GNUmakefile"}, "make"},
	"gmake":   {[]string{"Makefile", "makefile", "GNUmakefile"}, "make"},
	"bmake":   {[]string{"Makefile", "makefile", "BSDmakefile"}, "make"},
	"npm":     {[]string{"package.json"}, "scripts"},
	"yarn":    {[]string{"package.json"}, "scripts"},
	"pnpm":    {[]string{"package.json"}, "scripts"},
	"bun":     {[]string{"package.json"}, "scripts"},
	"just":    {[]string{"justfile", "Justfile", ".justfile"}, "indented"},
	"task":    {[]string{"Taskfile.yml", "Taskfile.yaml", "taskfile.yml", "taskfile.yaml"}, "yaml"},
	"go-task": {[]string{"Taskfile.yml", "Taskfile.yaml", "taskfile.yml", "taskfile.yaml"}, "yaml"},
	"rake":    {[]string{"Rakefile", "rakefile", "Rakefile.rb"}, "ruby"},
	"pip":     {[]string{"setup.py"}, "python"},
	"pip3":    {[]string{"setup.py"}, "python"},
	"pytest":  {[]string{"conftest.py", "tests/conftest.py"}, "python"},
	"tox":     {[]string{"tox.ini"}, "ini"},
	"nox":     {[]string{"noxfile.py"}, "python"},
	"invoke":  {[]string{"tasks.py"}, "python"},
	"inv":     {[]string{"tasks.py"}, "python"},
	"fab":     {[]string{"fabfile.py"}, "python"},
	"cmake":   {[]string{"CMakeLists.txt"}, "cmake"},
	"pipenv":  {[]string{"Pipfile"}, "toml-scripts"},
	"pdm":     {[]string{"pyproject.toml"}, "toml-scripts"},
	"poe":     {[]string{"pyproject.toml"}, "toml-scripts"},
}

var (
	makeShell   = regexp.MustCompile(`\$[({]shell\s+([^)}]*)[)}]`)
	makeVar     = regexp.MustCompile(`\$[({][A-Za-z_][A-Za-z0-9_.]*[)}]|\$[@<^?*%+|]`)
	makeAssign  = regexp.MustCompile(`(?m)^([A-Za-z_][A-Za-z0-9_]*)\s*(?:[:?+!]|::)?=[ \t]*(.*)$`)
	tomlScript  = regexp.MustCompile(`(?m)^\s*[\w.-]+\s*=\s*(?:\{\s*(?:cmd|shell)\s*=\s*)?["'](.+?)["']\s*\}?\s*$`)
	cmakeCmd    = regexp.MustCompile(`\bCOMMAND\s+([^)\n]*)`)
	yamlCmd     = regexp.MustCompile(`^\s*(?:-\s+(?:(?:cmd|sh|run|command)\s*:\s*)?|(?:cmd|sh|run|command|script)\s*:\s*)(.+)$`)
	rakeShell   = regexp.MustCompile(`\b(?:sh|ruby)\s+(['"])`)
	iniCommands = regexp.MustCompile(`(?m)^\s*commands(?:_pre|_post)?\s*=\s*(.*)$((?:\n[ \t]+.*)*)`)
)

// taskRunner judges the task files this command line wrote for the runner about to read them.
func (s *scope) taskRunner(name string, args []string, ex string) {
	if name == "npm" || name == "pnpm" || name == "yarn" {
		s.scriptSetters(args)
	}
	tf, ok := taskFiles[name]
	if !ok || len(s.written) == 0 {
		return
	}
	dir := ""
	files := tf.files
	for i, a := range args {
		switch {
		case (a == "-C" || a == "--directory" || a == "--cwd" || a == "--prefix" || a == "-d" && name == "task") && i+1 < len(args):
			dir = args[i+1]
		case (a == "-f" || a == "--file" || a == "--makefile" || a == "--justfile" || a == "--taskfile" || a == "-t" && name == "task" || a == "-c" && name == "tox") && i+1 < len(args):
			files = []string{args[i+1]}
		case strings.HasPrefix(a, "--file=") || strings.HasPrefix(a, "--makefile=") || strings.HasPrefix(a, "--justfile="):
			files = []string{a[strings.Index(a, "=")+1:]}
		}
	}
	for _, f := range files {
		if dir != "" {
			f = path.Join(dir, f)
		}
		text, ok := s.written[cleanFile(f)]
		if !ok || strings.TrimSpace(text) == "" {
			continue
		}
		s.taskText(tf.kind, text, ex)
	}
}

// taskText judges the commands a task file's text holds.
func (s *scope) taskText(kind, text, ex string) {
	var cmds []string
	switch kind {
	case "make":
		for _, m := range makeShell.FindAllStringSubmatch(text, 8) {
			cmds = append(cmds, m[1])
		}
		vars := map[string]string{"RM": "rm -f", "MAKE": "make", "SHELL": "/bin/sh", "CP": "cp", "MV": "mv"}
		for _, m := range makeAssign.FindAllStringSubmatch(text, 32) {
			vars[m[1]] = strings.TrimSpace(m[2])
		}
		for _, line := range strings.Split(makeRecipes(text), "\n") {
			line = makeVar.ReplaceAllStringFunc(line, func(v string) string {
				if len(v) > 3 {
					if val, ok := vars[v[2:len(v)-1]]; ok && !strings.Contains(val, "$") {
						return val
					}
				}
				return "x"
			})
			cmds = append(cmds, strings.ReplaceAll(line, "$$", "$"))
		}
	case "scripts":
		var pkg struct {
			Scripts map[string]string `json:"scripts"`
		}
		if json.Unmarshal([]byte(text), &pkg) == nil {
			for _, c := range pkg.Scripts {
				cmds = append(cmds, c)
			}
		}
	case "indented":
		for _, line := range strings.Split(text, "\n") {
			if strings.HasPrefix(line, " ") || strings.HasPrefix(line, "\t") {
				cmds = append(cmds, strings.TrimLeft(strings.TrimSpace(line), "@-"))
			}
		}
	case "yaml":
		for _, line := range strings.Split(text, "\n") {
			if m := yamlCmd.FindStringSubmatch(line); m != nil {
				c := strings.TrimSpace(m[1])
				if len(c) > 1 && (c[0] == '\'' || c[0] == '"') && c[len(c)-1] == c[0] {
					c = c[1 : len(c)-1]
				}
				cmds = append(cmds, c)
			}
		}
	case "ruby":
		s.interpreterCode(rakeShell.ReplaceAllString(text, "system $1"), ex)
	case "python":
		s.interpreterCode(text, ex)
	case "ini":
		for _, m := range iniCommands.FindAllStringSubmatch(text, 4) {
			cmds = append(cmds, m[1])
			cmds = append(cmds, strings.Split(m[2], "\n")...)
		}
	case "toml-scripts":
		for _, m := range tomlScript.FindAllStringSubmatch(text, 16) {
			cmds = append(cmds, m[1])
		}
	case "cmake":
		for _, m := range cmakeCmd.FindAllStringSubmatch(text, 8) {
			cmds = append(cmds, m[1])
		}
	}
	var script []string
	for _, c := range cmds {
		if c = strings.TrimSpace(c); c != "" {
			script = append(script, c)
		}
	}
	if len(script) > 0 {
		s.nested(strings.Join(script, "\n"), scriptTyped)
	}
}

// scriptSetters judges the scripts npm pkg set scripts.x=… and npm set-script x … store.
func (s *scope) scriptSetters(args []string) {
	ops := operands(args)
	switch {
	case len(ops) >= 3 && ops[0] == "pkg" && ops[1] == "set":
		for _, o := range ops[2:] {
			if k, v, ok := strings.Cut(o, "="); ok && strings.HasPrefix(k, "scripts.") {
				s.nested(v, scriptCommand)
			}
		}
	case len(ops) >= 3 && ops[0] == "set-script":
		s.nested(ops[2], scriptCommand)
	}
}

// taskStdin judges a makefile (or justfile) a runner reads from its standard input.
func (s *scope) taskStdin(final []string, in, ex string) {
	if len(final) == 0 {
		return
	}
	name := cmdName(final[0])
	tf, ok := taskFiles[name]
	if !ok {
		return
	}
	for i, a := range final[1:] {
		if (a == "-f" || a == "--file" || a == "--makefile" || a == "--justfile") && i+2 < len(final) {
			if f := final[i+2]; f == "-" || f == "/dev/stdin" {
				s.taskText(tf.kind, in, ex)
				return
			}
		}
	}
}
