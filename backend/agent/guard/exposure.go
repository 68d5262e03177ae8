package guard

import (
	"path"
	"regexp"
	"slices"
	"strings"

	"mvdan.cc/sh/v3/syntax"
)

// Secrets shown or exposed without a file copy: a .env file sent to the network, a variable
// named like a secret printed (the output goes to the model), keys made readable by others,
// the home or root directory served over HTTP, and tunnels that open this machine to the
// outside (ssh -R/-D, ngrok, cloudflared, chisel).

// shownSecretVar matches variable names whose value is a secret when printed. It is narrower
// than secretVar: $SSH_AUTH_SOCK and $XDG_SESSION_TYPE are not secrets.
var shownSecretVar = regexp.MustCompile(`(?i)(?:secret|token|passw|api_?key|private_?key|credential|access_?key)`)

// envSecretRead finds code that reads an environment variable by name; group 1 is the name.
var envSecretRead = regexp.MustCompile(`(?:os\.environ(?:\.get)?\s*[\[(]\s*|os\.getenv\(\s*|process\.env\.|process\.env\[\s*|ENV\[\s*|\$ENV\{\s*|getenv\(\s*)['"]?(\w+)`)

// tunnels are programs whose job is to expose this machine's ports elsewhere.
var tunnels = set("ngrok", "cloudflared", "chisel", "bore", "lt", "localtunnel", "frpc", "rathole", "sish", "pagekite", "pagekite.py", "zrok", "tailscale-funnel")

// isDotEnv reports whether a path names a .env file with real values (not an example).
func isDotEnv(p string) bool {
	b := path.Base(p)
	if b != ".env" && !strings.HasPrefix(b, ".env.") {
		return false
	}
	return !strings.Contains(b, "example") && !strings.Contains(b, "sample") && !strings.Contains(b, "template") && !strings.Contains(b, "dist")
}

// leaksFile reports whether sending the file a word names leaks a secret.
func leaksFile(form string) bool {
	if isDotEnv(form) {
		return true
	}
	for _, m := range wordMatches(form) {
		if m.Family == FamilySecrets || m.Family == FamilyCredentials {
			return true
		}
	}
	return false
}

// exposure applies the rules above to a command that is not a wrapper.
func (s *scope) exposure(name string, args []string, ex string) {
	switch {
	case name == "xdotool" || name == "ydotool" || name == "wtype" || name == "xte":
		// Typing into the desktop is the same as the computer_type tool: the text lands in
		// whatever has the focus, often a terminal.
		for i, a := range args {
			if a == "type" || name == "wtype" && i == 0 {
				start := i + 1
				if name == "wtype" {
					start = i
				}
				var text []string
				rest := args[start:]
				for j := 0; j < len(rest); j++ {
					t := rest[j]
					switch {
					case len(text) == 0 && typeArgOpts[t]:
						j++ // --delay 0
					case len(text) == 0 && strings.HasPrefix(t, "-"):
					default:
						text = append(text, t)
					}
				}
				s.nested(strings.Join(text, " "), scriptTyped)
				return
			}
		}
	case name == "rclone" || name == "gh" && len(args) > 1 && args[0] == "gist":
		ops := operands(args)
		if len(ops) < 2 || !slices.Contains([]string{"copy", "sync", "move", "copyto", "moveto", "create", "edit"}, ops[0]) && ops[0] != "gist" {
			return
		}
		for _, t := range ops[1:] {
			for _, f := range s.resolve(t) {
				if leaksFile(f) || secretDir.MatchString(strings.TrimRight(f, "/")) && !strings.HasSuffix(strings.TrimRight(f, "/"), "~") {
					s.a.add("exfiltration.upload", FamilyExfiltrate, Critical, name+" uploads secrets ("+f+")", ex)
					return
				}
			}
		}
	case name == "printenv":
		for _, a := range operands(args) {
			if shownSecretVar.MatchString(a) {
				s.a.add("credentials.show-var", FamilyCredentials, Medium, "prints the variable "+a+", named like a secret", ex)
				return
			}
		}
	case tunnels[name] && (name != "cloudflared" || slices.Contains(args, "tunnel")):
		s.a.add("exfiltration.tunnel", FamilyExfiltrate, Medium, "opens a tunnel that exposes this machine ("+name+")", ex)
	case name == "ssh" || name == "autossh":
		for _, a := range args {
			if a == "-R" || a == "-D" || strings.HasPrefix(a, "-R") && len(a) > 2 || strings.HasPrefix(a, "-D") && len(a) > 2 {
				s.a.add("exfiltration.tunnel", FamilyExfiltrate, Medium, "opens an SSH tunnel into this machine or through it ("+a+")", ex)
				return
			}
		}
	case strings.HasPrefix(name, "python") && len(args) > 1 && args[0] == "-m" && args[1] == "http.server":
		for i, a := range args {
			dir := ""
			if (a == "--directory" || a == "-d") && i+1 < len(args) {
				dir = args[i+1]
			} else if v, ok := strings.CutPrefix(a, "--directory="); ok {
				dir = v
			}
			if c, t := s.worst(dir); dir != "" && (c == pathRoot || c == pathHome || c == pathUserHome || c == pathSystemTop || c == pathSystemSub) {
				s.a.add("exfiltration.serve-dir", FamilyExfiltrate, High, "serves "+describe(t, c)+" over HTTP", ex)
				return
			}
		}
	case name == "php":
		for i, a := range args {
			if a == "-t" && i+1 < len(args) && slices.Contains(args, "-S") {
				if c, t := s.worst(args[i+1]); c == pathRoot || c == pathHome || c == pathUserHome || c == pathSystemTop {
					s.a.add("exfiltration.serve-dir", FamilyExfiltrate, High, "serves "+describe(t, c)+" over HTTP", ex)
				}
			}
		}
	case name == "chmod":
		ops := operands(args)
		if len(ops) < 2 {
			return
		}
		mode := ops[0]
		open := strings.Trim(mode, "01234567") == "" && mode[len(mode)-1] != '0' ||
			strings.Contains(mode, "o+") || strings.Contains(mode, "a+") || strings.HasPrefix(mode, "+")
		if !open {
			return
		}
		for _, t := range ops[1:] {
			for _, f := range s.resolve(t) {
				if secretDir.MatchString(strings.TrimRight(f, "/")) && !strings.HasSuffix(strings.TrimRight(f, "/"), "~") || leaksFile(f) {
					s.a.add("credentials.chmod-open", FamilyCredentials, High, "makes keys or credentials readable by others ("+f+")", ex)
					return
				}
			}
		}
	case name == "setfacl":
		if !hasShortFlag(args, 'R') && !hasAny(args, "--recursive") {
			return
		}
		for _, t := range operands(args) {
			if c, t := s.worst(t); c == pathRoot || c == pathHome || c == pathSystemTop || c == pathSystemSub || c == pathUserHome {
				s.a.add("setfacl.recursive-system", FamilyPermissions, High, "setfacl -R on "+describe(t, c), ex)
				return
			}
		}
	}
}

// showsSecretVar flags echo and printf of a variable named like a secret: its value goes
// into the command's output, which the model reads.
func (s *scope) showsSecretVar(c *syntax.CallExpr, final []string, ex string) {
	if len(final) == 0 {
		return
	}
	if n := cmdName(final[0]); n != "echo" && n != "printf" {
		return
	}
	for _, w := range c.Args[1:] {
		found := ""
		syntax.Walk(w, func(n syntax.Node) bool {
			if p, ok := n.(*syntax.ParamExp); ok && p.Param != nil && found == "" && shownSecretVar.MatchString(p.Param.Value) && !p.Length &&
				(p.Exp == nil || p.Exp.Op != syntax.AlternateUnset && p.Exp.Op != syntax.AlternateUnsetOrNull) {
				// ${#TOKEN} and ${TOKEN:+set} tell whether it is set, not what it is.
				found = p.Param.Value
			}
			return found == ""
		})
		if found != "" {
			s.a.add("credentials.show-var", FamilyCredentials, Medium, "prints the variable $"+found+", named like a secret", ex)
			return
		}
	}
}

// codeShowsSecretVar flags a program that reads an environment variable named like a secret
// and prints.
func (s *scope) codeShowsSecretVar(code, ex string) {
	if !containsAny(code, "print", "console.log", "puts", "echo", "write", "say ") {
		return
	}
	for _, m := range envSecretRead.FindAllStringSubmatch(code, 8) {
		if shownSecretVar.MatchString(m[1]) {
			s.a.add("credentials.show-var", FamilyCredentials, Medium, "the program prints the variable "+m[1]+", named like a secret", ex)
			return
		}
	}
}

// typeArgOpts are the options of xdotool/ydotool/wtype type that take an argument.
var typeArgOpts = set("--delay", "--window", "--terminator", "--file", "--args", "--key-delay", "--key-hold", "-d", "-H", "-D", "-s", "-k", "-P", "-p")

// The options of read and mapfile that take an argument.
var (
	readArgOpts    = set("-a", "-d", "-i", "-n", "-N", "-p", "-t", "-u")
	mapfileArgOpts = set("-d", "-n", "-O", "-s", "-u", "-C", "-c")
)

// readVars sets the variables of read VAR… or mapfile VAR from text known to reach them.
func (s *scope) readVars(argv []string, in string) {
	if len(argv) < 2 {
		return
	}
	var names []string
	for i := 1; i < len(argv); i++ {
		a := argv[i]
		if strings.HasPrefix(a, "-") {
			withArg := readArgOpts
			if cmdName(argv[0]) != "read" {
				withArg = mapfileArgOpts
			}
			if withArg[a] {
				if a == "-a" && i+1 < len(argv) {
					names = append(names, argv[i+1]) // read -a NAME
				}
				i++
			}
			continue
		}
		names = append(names, a)
	}
	switch cmdName(argv[0]) {
	case "mapfile", "readarray":
		name := "MAPFILE"
		if len(names) > 0 {
			name = names[0]
		}
		s.vars[name] = strings.Join(strings.Fields(in), " ")
	case "read":
		if len(names) == 0 {
			names = []string{"REPLY"}
		}
		s.readLine(names, in)
	}
}
