// Package guard holds the agent's safety layers (SPEC §2.4), which the agent runtime consults
// before every tool call:
//
//   - the tool guard ([Guard]) inspects a call's arguments — above all the command of a shell
//     tool — against rule families (destructive rm/mv, chmod/chown of system paths, disk
//     wiping, fork bombs, power and service control, kill, curl|sh, encoded payloads, $IFS and
//     unicode evasions, secrets in /proc, privilege escalation, persistence, reverse shells,
//     resource exhaustion, in-place edits, archives extracted over system roots, task files)
//     and turns the matches into allow, ask or deny according to the configured [Level];
//   - the file guard ([FileGuard]) keeps tools away from sensitive paths such as the app's own
//     secrets directory, on the host and in the VM;
//   - the access policy ([Policy]) says per tool whether it may run at all.
//
// [Combine] merges the layers' decisions with deny > ask > allow, and [Safety] runs the three
// layers together the way the runtime needs them (decision, reason for people, verdict), and
// turns a person's "always allow" answer into an [AllowRule].
//
// Shell commands are parsed with mvdan.cc/sh (a well-kept, pure-Go bash parser) rather than
// matched as text only: quoting (r""m), escapes (\rm), command paths (/bin/rm), wrappers (env,
// sudo, nohup, xargs, find -exec), nested scripts (bash -c, eval, here-strings) and command
// substitutions are resolved before the rules look at a command, so an evasion has to defeat
// a shell parser and not just a regular expression. Values that reach a command other than
// through its words — a function's arguments, set --, sh -c's positional parameters, the
// input of xargs, parallel and while-read, scripts written with tee, source <(…) — are put in
// place when they can be known without running anything (dataflow.go). Regular expressions
// over the raw text stay as a second net, and text that does not parse is itself treated as
// suspicious.
//
// A Guard, a FileGuard and a Policy are safe for concurrent use.
package guard

import (
	"fmt"
	"path"
	"regexp"
	"slices"
	"strings"
	"sync"

	"cubicle/backend/fault"
)

// Decision is what a safety layer says about a tool call.
type Decision string

// The decisions, from the weakest to the strongest; see [Combine].
const (
	// Allow lets the call run.
	Allow Decision = "allow"
	// Ask pauses the run until the user confirms (REQUIRE_USER_CONFIRM).
	Ask Decision = "ask"
	// Deny refuses the call.
	Deny Decision = "deny"
)

// Level is how eagerly the tool guard asks.
type Level string

// The levels. The zero value behaves as AUTO.
const (
	// Strict asks before every call that is not denied.
	Strict Level = "STRICT"
	// Smart asks only when a HIGH or CRITICAL rule matches.
	Smart Level = "SMART"
	// Auto asks when any rule matches. It is the default.
	Auto Level = "AUTO"
	// Off allows every call except those of denied tools.
	Off Level = "OFF"
)

// ParseLevel reads a level from settings text (case-insensitive; empty means AUTO).
func ParseLevel(s string) (Level, error) {
	switch l := Level(strings.ToUpper(strings.TrimSpace(s))); l {
	case "":
		return Auto, nil
	case Strict, Smart, Auto, Off:
		return l, nil
	}
	return "", fault.Invalid("unknown tool guard level %q: use STRICT, SMART, AUTO or OFF", s)
}

// Severity ranks a match.
type Severity string

// The severities, from the least to the most serious.
const (
	Low      Severity = "LOW"
	Medium   Severity = "MEDIUM"
	High     Severity = "HIGH"
	Critical Severity = "CRITICAL"
)

// Rank orders severities: LOW=1 … CRITICAL=4, anything else 0.
func (s Severity) Rank() int {
	switch s {
	case Low:
		return 1
	case Medium:
		return 2
	case High:
		return 3
	case Critical:
		return 4
	}
	return 0
}

// Family groups rules by the harm they guard against.
type Family string

// The rule families of SPEC §2.4, plus the guard's own.
const (
	FamilyDestructive Family = "destructive-fs"      // rm/mv of /, ~, *, system dirs; writes into them
	FamilyPermissions Family = "permissions"         // chmod -R 777, chown -R, setuid
	FamilyDisk        Family = "disk"                // mkfs, dd / redirection to block devices
	FamilyForkBomb    Family = "fork-bomb"           // self-replicating processes
	FamilyExhaustion  Family = "resource-exhaustion" // memory bombs, unlimited parallelism, stress tools
	FamilyPower       Family = "power"               // reboot, shutdown, halt, poweroff, init 0/6
	FamilyService     Family = "service"             // systemctl restart/stop, service x restart
	FamilyKill        Family = "kill"                // kill, pkill, killall
	FamilyRemoteExec  Family = "remote-exec"         // curl | sh, bash <(wget …), eval "$(curl …)"
	FamilyEncodedExec Family = "encoded-exec"        // base64 -d | sh and other decoded payloads
	FamilyIFS         Family = "ifs"                 // $IFS word-splitting tricks
	FamilyControl     Family = "control-char"        // control characters, escape sequences
	FamilyUnicode     Family = "unicode"             // unicode spaces, zero-width chars, homoglyphs
	FamilySecrets     Family = "secrets"             // /proc/*/environ, shadow, private keys
	FamilyPrivilege   Family = "privilege"           // sudo, su, doas, pkexec, account changes
	FamilyPersistence Family = "persistence"         // crontab, authorized_keys, sudoers
	FamilyReverse     Family = "reverse-shell"       // /dev/tcp, nc -e, socat EXEC, bash -i >&
	FamilyCredentials Family = "credentials"         // cloud, kube, docker, git, gh, netrc, gpg secrets
	FamilyExfiltrate  Family = "exfiltration"        // environment or secrets sent to the network
	FamilyLogWipe     Family = "log-wipe"            // shell history and system log wiping
	FamilyFirewall    Family = "firewall"            // flushing or disabling the firewall
	FamilyGit         Family = "git-destructive"
	FamilyContainer   Family = "container"     // destructive engine commands, host-root mounts
	FamilyIndirect    Family = "indirect-exec" // programs that run a command for you
	FamilyObfuscation Family = "obfuscation"   // dynamic command names, eval of unknown text
	FamilyUnparsable  Family = "unparsable"    // input the shell parser rejects
	FamilyDeniedTool  Family = "denied-tool"   // the tool is in denied_tools
	FamilyCustom      Family = "custom"        // ExtraRules without a family
	FamilyInvalidArgs Family = "invalid-arguments"
	FamilyHostDesktop Family = "host-desktop" // sees or drives the person's real screen (host_screenshot, host input)
)

// ToolCall is one call the model asked for.
type ToolCall struct {
	Name string
	Args map[string]any
}

// Match is one rule that fired.
type Match struct {
	RuleID   string   `json:"ruleId"`
	Family   Family   `json:"family"`
	Severity Severity `json:"severity"`
	Reason   string   `json:"reason"`
	Excerpt  string   `json:"excerpt,omitempty"`
	// Command is the simple command (expanded words, with its redirections) or the path the
	// match belongs to; "" when it belongs to the text as a whole (hidden characters, the
	// regular-expression net, a pipeline). Allow rules are matched against it.
	Command string `json:"command,omitempty"`
}

// Verdict is the tool guard's answer for one call.
type Verdict struct {
	Decision Decision `json:"decision"`
	Matches  []Match  `json:"matches,omitempty"`
	// AllowedBy is the allow rule that turned an ask into allow, if any.
	AllowedBy *AllowRule `json:"allowedBy,omitempty"`
}

// MaxSeverity is the highest severity among the matches ("" when none matched).
func (v Verdict) MaxSeverity() Severity {
	var best Severity
	for _, m := range v.Matches {
		if m.Severity.Rank() > best.Rank() {
			best = m.Severity
		}
	}
	return best
}

// Reason is a one-line summary of the matches for a confirmation card or a log.
func (v Verdict) Reason() string {
	if len(v.Matches) == 0 {
		return ""
	}
	seen := map[string]bool{}
	var parts []string
	for _, m := range v.Matches {
		if !seen[m.Reason] {
			seen[m.Reason] = true
			parts = append(parts, m.Reason)
		}
	}
	return strings.Join(parts, "; ")
}

// AllowRule lets matching calls run without asking. The user adds one when confirming a call
// ("always allow"). Tool is a tool name or a path.Match pattern ("host_*"). Command, when set,
// must equal a simple command of the call exactly, as the shell parser sees it (words
// expanded and unquoted, one space between them, redirections after them); Pattern, when set,
// is an RE2 expression that must match such a simple command as a whole. For file tools the
// "simple command" is a path. A rule with neither allows every call of the tool.
//
// Rules never launder: a call is allowed only when every finding belongs to a simple command
// a rule matches (a finding about the text as a whole — hidden characters, a pipeline into a
// shell — is never covered by a command rule), and no rule ever allows a CRITICAL finding.
// So "re:git .*" allows "git push --force" but not "git status && rm -rf ~".
type AllowRule struct {
	Tool    string `json:"tool"`
	Command string `json:"command,omitempty"`
	Pattern string `json:"pattern,omitempty"`
}

type allowRule struct {
	AllowRule
	re *regexp.Regexp
}

// Config configures a Guard.
type Config struct {
	// Level is how eagerly to ask; empty means AUTO.
	Level Level
	// DeniedTools are tool names (or path.Match patterns) that are always denied.
	DeniedTools []string
	// AllowRules turn an ask into allow; see AllowRule.
	AllowRules []AllowRule
	// ExtraRules are regular-expression rules added to the built-in ones.
	ExtraRules []Rule
}

// Guard is the tool guard. Create it with New; it is safe for concurrent use.
type Guard struct {
	level  Level
	denied []string
	rules  []Rule // built-in regex net followed by ExtraRules, all compiled

	// parsers reuses shell parsers between checks: a parser is large and Check is hot.
	parsers sync.Pool

	mu    sync.RWMutex
	allow []allowRule // guarded by mu
}

// New checks cfg and returns a Guard. Invalid levels, patterns and rules are fault.ErrInvalid.
func New(cfg Config) (*Guard, error) {
	level, err := ParseLevel(string(cfg.Level))
	if err != nil {
		return nil, fmt.Errorf("guard: %w", err)
	}
	g := &Guard{level: level, rules: builtinRules()}
	for _, d := range cfg.DeniedTools {
		d = strings.TrimSpace(d)
		if d == "" {
			continue
		}
		if _, err := path.Match(d, ""); err != nil {
			return nil, fmt.Errorf("guard: denied tool pattern %q: %w", d, fault.Invalid("bad pattern %q", d))
		}
		g.denied = append(g.denied, d)
	}
	for _, r := range cfg.ExtraRules {
		c, err := r.compile()
		if err != nil {
			return nil, fmt.Errorf("guard: %w", err)
		}
		g.rules = append(g.rules, c)
	}
	for _, a := range cfg.AllowRules {
		if err := g.AddAllowRule(a); err != nil {
			return nil, err
		}
	}
	return g, nil
}

// Level is the guard's level.
func (g *Guard) Level() Level { return g.level }

// AddAllowRule adds an allow rule, as when the user confirms a call with "always allow".
func (g *Guard) AddAllowRule(a AllowRule) error {
	r, err := compileAllowRule(a)
	if err != nil {
		return err
	}
	g.mu.Lock()
	g.allow = append(g.allow, r)
	g.mu.Unlock()
	return nil
}

// CheckAllowRule returns a fault.ErrInvalid error when a is not a valid allow rule.
func CheckAllowRule(a AllowRule) error {
	_, err := compileAllowRule(a)
	return err
}

func compileAllowRule(a AllowRule) (allowRule, error) {
	a.Tool = strings.TrimSpace(a.Tool)
	if a.Tool == "" {
		return allowRule{}, fmt.Errorf("guard: allow rule: %w", fault.Invalid("an allow rule needs a tool name"))
	}
	if _, err := path.Match(a.Tool, ""); err != nil {
		return allowRule{}, fmt.Errorf("guard: allow rule: %w", fault.Invalid("bad tool pattern %q", a.Tool))
	}
	if a.Command != "" {
		a.Command = NormalizeCommand(a.Command)
	}
	r := allowRule{AllowRule: a}
	if a.Pattern != "" {
		re, err := regexp.Compile(`^(?:` + a.Pattern + `)$`)
		if err != nil {
			return allowRule{}, fmt.Errorf("guard: allow rule: %w", fault.Invalid("bad command pattern %q: %v", a.Pattern, err))
		}
		r.re = re
	}
	return r, nil
}

// AllowRules returns a copy of the current allow rules.
func (g *Guard) AllowRules() []AllowRule {
	g.mu.RLock()
	defer g.mu.RUnlock()
	out := make([]AllowRule, len(g.allow))
	for i, r := range g.allow {
		out[i] = r.AllowRule
	}
	return out
}

// Check decides about one tool call. It never blocks and never fails: whatever it cannot
// understand becomes a match of its own, so the call is asked about rather than let through.
func (g *Guard) Check(call ToolCall) Verdict {
	v, _ := g.inspect(call, false, "", nil)
	return v
}

// Inspection is what the analysis of one call found besides the verdict.
type Inspection struct {
	// Commands are the call's simple commands (or paths, for file tools), as allow rules see
	// them.
	Commands []string
	// Files are the files the call touches, for the file guard.
	Files []FileRef
}

// FileRef is a file a call touches. Path is as written, or resolved against the working
// directory the command changed to; Write marks writes, Recursive a read of a whole tree
// (an archive, a recursive copy or search).
type FileRef struct {
	Path      string
	Write     bool
	Recursive bool
}

// inspect is Check that also returns what the call touches (for the file guard), analysing
// the call even under OFF when wantPaths is set. workDir is the directory relative paths of a
// shell command start from ("" when unknown); extra are further allow rules (an agent's own).
func (g *Guard) inspect(call ToolCall, wantPaths bool, workDir string, extra []allowRule) (Verdict, Inspection) {
	if g.isDenied(call.Name) {
		return Verdict{Decision: Deny, Matches: []Match{{
			RuleID: "tool.denied", Family: FamilyDeniedTool, Severity: Critical,
			Reason: fmt.Sprintf("the tool %s is denied by settings", call.Name),
		}}}, Inspection{}
	}
	if g.level == Off && !wantPaths {
		return Verdict{Decision: Allow}, Inspection{}
	}
	matches, in := g.analyse(call, workDir)
	if g.level == Off {
		return Verdict{Decision: Allow}, in
	}
	ask := false
	switch g.level {
	case Strict:
		ask = true
	case Smart:
		for _, m := range matches {
			if m.Severity.Rank() >= High.Rank() {
				ask = true
			}
		}
	default:
		ask = len(matches) > 0
	}
	v := Verdict{Decision: Allow, Matches: matches}
	if ask {
		v.Decision = Ask
		if r := g.allowedBy(call.Name, matches, in.Commands, extra); r != nil {
			v.Decision = Allow
			v.AllowedBy = r
		}
	}
	return v, in
}

func (g *Guard) isDenied(tool string) bool {
	return slices.ContainsFunc(g.denied, func(p string) bool { return toolMatches(p, tool) })
}

func toolMatches(pattern, tool string) bool {
	if pattern == tool {
		return true
	}
	ok, _ := path.Match(pattern, tool)
	return ok
}

// allowedBy returns the allow rule that lets a call of tool run despite its matches, or nil.
// No rule covers a CRITICAL match. A rule for the whole tool covers every other match; a
// command rule covers a match whose simple command it matches, and never a match that belongs
// to the text as a whole. Every match must be covered. A call without matches (asked under
// STRICT or by the access policy) needs every one of its simple commands covered.
func (g *Guard) allowedBy(tool string, matches []Match, commands []string, extra []allowRule) *AllowRule {
	for _, m := range matches {
		if m.Severity == Critical {
			return nil
		}
	}
	g.mu.RLock()
	rules := append(slices.Clip(g.allow), extra...)
	g.mu.RUnlock()
	var first *AllowRule
	covered := func(subject string) bool {
		for i := range rules {
			r := &rules[i]
			if !toolMatches(r.Tool, tool) {
				continue
			}
			whole := r.Command == "" && r.re == nil
			if whole || (subject != "" && r.covers(subject)) {
				if first == nil {
					a := r.AllowRule
					first = &a
				}
				return true
			}
		}
		return false
	}
	if len(matches) > 0 {
		for _, m := range matches {
			if !covered(m.Command) {
				return nil
			}
		}
		return first
	}
	if len(commands) == 0 {
		if covered("") {
			return first
		}
		return nil
	}
	for _, c := range commands {
		if !covered(c) {
			return nil
		}
	}
	return first
}

// covers reports whether a command rule matches one simple command.
func (r *allowRule) covers(subject string) bool {
	switch {
	case r.Command != "":
		return r.Command == subject
	case r.re != nil:
		return r.re.MatchString(subject)
	}
	return false
}

// pathKeys are the argument names that carry a path in file tools.
var pathKeys = []string{"path", "source", "target", "destination", "src", "dst", "from", "to"}

// isSourceKey reports whether a path argument is read (the other ones of a write or copy tool
// are written).
func isSourceKey(k string) bool { return k == "source" || k == "src" || k == "from" }

// hostDesktopTools see or drive the execution node's own screen.
var hostDesktopTools = []string{"host_screenshot", "host_click", "host_type", "host_key", "host_scroll"}

// analyse returns every rule match of a call and what it touches. A host desktop action
// always matches a HIGH rule: it sees or drives the person's real screen, so SMART and STRICT
// (and AUTO) ask unless a person allowed the tool.
func (g *Guard) analyse(call ToolCall, workDir string) ([]Match, Inspection) {
	matches, in := g.analyseArgs(call, workDir)
	if slices.Contains(hostDesktopTools, call.Name) {
		matches = append(matches, Match{RuleID: "host.desktop", Family: FamilyHostDesktop, Severity: High,
			Reason: "this acts on the host's own screen (the person's real desktop), not on the agent's VM"})
	}
	return matches, in
}

func (g *Guard) analyseArgs(call ToolCall, workDir string) ([]Match, Inspection) {
	name := call.Name
	switch {
	case strings.HasSuffix(name, "_shell"):
		cmd, ok := call.Args["command"].(string)
		if !ok {
			return []Match{{RuleID: "args.command", Family: FamilyInvalidArgs, Severity: High,
				Reason: "the shell tool was called without a command string"}}, Inspection{}
		}
		return g.analyseScript(cmd, scriptCommand, workDir)
	case strings.HasSuffix(name, "_type"):
		// Typed text may land in a terminal, so it gets the command rules too; prose that is
		// not shell is normal here and is not held against it.
		text, _ := call.Args["text"].(string)
		if text == "" {
			return nil, Inspection{}
		}
		ms, in := g.analyseScript(text, scriptTyped, "")
		in.Files = nil
		return ms, in
	}
	var in Inspection
	var matches []Match
	write := strings.Contains(name, "write") || strings.Contains(name, "copy")
	for _, k := range pathKeys {
		v, ok := call.Args[k]
		if !ok {
			continue
		}
		p, ok := v.(string)
		if !ok {
			matches = append(matches, Match{RuleID: "args.path", Family: FamilyInvalidArgs, Severity: High,
				Reason: fmt.Sprintf("the argument %q is not a string", k)})
			continue
		}
		isTarget := write && !isSourceKey(k)
		in.Commands = append(in.Commands, p)
		in.Files = append(in.Files, FileRef{Path: p, Write: isTarget})
		matches = append(matches, g.analysePath(p, isTarget)...)
	}
	return dedupe(matches), in
}

func dedupe(ms []Match) []Match {
	if len(ms) < 2 {
		return ms
	}
	type key struct{ id, ex, cmd string }
	seen := make(map[key]bool, len(ms))
	out := ms[:0]
	for _, m := range ms {
		k := key{m.RuleID, m.Excerpt, m.Command}
		if !seen[k] {
			seen[k] = true
			out = append(out, m)
		}
	}
	return out
}
