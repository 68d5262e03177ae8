package guard

import (
	"regexp"
	"strings"
)

// Editors, pagers and shells of other languages that run a command line on request: less's
// and more's "!" command given as a start-up command (+!cmd), emacs's shell-command in
// --eval, ed's "!" lines read from its input, and PowerShell's -Command (whose commands map
// onto their shell counterparts so they meet the same rules).

var (
	// elispShell finds the shell commands an Emacs Lisp expression runs; group 1 is the
	// command line (a string literal).
	elispShell = regexp.MustCompile(`\((?:shell-command(?:-to-string)?|async-shell-command|call-process-shell-command|start-process-shell-command\s+"[^"]*"\s+\S+)\s+"((?:[^"\\]|\\.)*)"`)
	// elispDelete finds Emacs Lisp deletions; group 1 is the function, 2 the path.
	elispDelete = regexp.MustCompile(`\((delete-directory|delete-file)\s+"((?:[^"\\]|\\.)*)"\s*(t\b)?`)
	// psWords maps PowerShell cmdlets and their aliases onto the shell commands they match.
	psWords = []struct {
		re   *regexp.Regexp
		with string
	}{
		{regexp.MustCompile(`(?i)(^|[\s;|&({])(?:Remove-Item|ri|del|erase|rd|rmdir)(\s)`), "${1}rm${2}"},
		{regexp.MustCompile(`(?i)(^|[\s;|&({])(?:Invoke-WebRequest|iwr|Invoke-RestMethod|irm)(\s)`), "${1}curl${2}"},
		{regexp.MustCompile(`(?i)(^|[\s;|&({])(?:Invoke-Expression|iex)(\s|$)`), "${1}sh${2}"},
		{regexp.MustCompile(`(?i)(^|[\s;|&({])(?:Start-Process|saps)(\s)`), "${1}exec${2}"},
		{regexp.MustCompile(`(?i)(^|[\s;|&({])(?:Get-Content|gc)(\s)`), "${1}cat${2}"},
		{regexp.MustCompile(`(?i)(^|[\s;|&({])(?:Clear-Content|clc)(\s)`), "${1}truncate -s0${2}"},
		{regexp.MustCompile(`(?i)(?:^|\s)-(?:Recurse|r)\b`), " -r"},
		{regexp.MustCompile(`(?i)(?:^|\s)-(?:Force|fo)\b`), " -f"},
		{regexp.MustCompile(`(?i)(?:^|\s)-(?:Path|LiteralPath|FilePath|Uri)\b`), ""},
		{regexp.MustCompile(`\$(?:HOME|env:(?:HOME|USERPROFILE))\b`), "~"},
	}
)

// unwrapEditor looks through the editors and pagers that run a command line for you.
func unwrapEditor(name string, args []string) (step, bool) {
	switch name {
	case "less":
		var cmds []string
		for _, a := range args {
			if c, ok := strings.CutPrefix(a, "+"); ok {
				for _, part := range strings.Split(c, "\n") {
					if rest, ok := strings.CutPrefix(strings.TrimLeft(part, "+"), "!"); ok && strings.TrimSpace(rest) != "" {
						cmds = append(cmds, rest)
					}
				}
			}
		}
		if len(cmds) > 0 {
			return step{script: strings.Join(cmds, "\n"), kind: "runner", note: name + " runs a shell command given as a start-up command"}, true
		}
	case "emacs", "emacsclient", "xemacs":
		var cmds []string
		for i, a := range args {
			expr := ""
			if (a == "--eval" || a == "-eval" || a == "--execute") && i+1 < len(args) {
				expr = args[i+1]
			} else if v, ok := strings.CutPrefix(a, "--eval="); ok {
				expr = v
			}
			for _, m := range elispShell.FindAllStringSubmatch(expr, 8) {
				cmds = append(cmds, unescapeLiteral(m[1]))
			}
			for _, m := range elispDelete.FindAllStringSubmatch(expr, 8) {
				rm := "rm -f " + quoteWord(unescapeLiteral(m[2]))
				if m[1] == "delete-directory" && m[3] != "" {
					rm = "rm -rf " + quoteWord(unescapeLiteral(m[2]))
				}
				cmds = append(cmds, rm)
			}
		}
		if len(cmds) > 0 {
			return step{script: strings.Join(cmds, "\n"), kind: "runner", note: name + " runs shell commands or deletes files from --eval"}, true
		}
	case "pwsh", "powershell", "powershell.exe", "pwsh.exe":
		for i, a := range args {
			l := strings.ToLower(a)
			if (l == "-c" || l == "-command" || l == "-commandwithargs" || l == "-cwa") && i+1 < len(args) {
				return step{script: psScript(strings.Join(args[i+1:], " ")), kind: "runner"}, true
			}
			if (l == "-e" || l == "-ec" || l == "-encodedcommand") && i+1 < len(args) {
				return step{kind: "runner", note: "PowerShell runs an encoded command (hidden text)", severity: High}, true
			}
		}
	}
	return step{}, false
}

// psScript rewrites a PowerShell command line into the shell commands it amounts to, as far
// as the rules care: deletions, downloads, Invoke-Expression, reading files.
func psScript(script string) string {
	for _, w := range psWords {
		script = w.re.ReplaceAllString(script, w.with)
	}
	return script
}

// edCommands are the shell commands in an ed script: its "!" lines.
func edCommands(body string) []string {
	var cmds []string
	for _, line := range strings.Split(body, "\n") {
		if rest, ok := strings.CutPrefix(strings.TrimSpace(line), "!"); ok && strings.TrimSpace(rest) != "" {
			cmds = append(cmds, rest)
		}
	}
	return cmds
}

// edScript checks a script that reaches ed (or ex) on its standard input: its "!" lines run
// in a shell.
func (s *scope) edScript(final []string, body string, ex string) {
	if n := cmdName(final[0]); n != "ed" && n != "red" && n != "ex" && n != "vim" && n != "vi" {
		return
	}
	if cmds := edCommands(body); len(cmds) > 0 {
		s.a.add("indirect.ed-shell", FamilyIndirect, Medium, cmdName(final[0])+" runs a shell command from the script it reads", ex)
		for _, c := range cmds {
			s.nested(c, scriptCommand)
		}
	}
}
