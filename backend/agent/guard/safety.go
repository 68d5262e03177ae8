package guard

import (
	"encoding/json"
	"errors"
	"fmt"
	"path"
	"path/filepath"
	"strings"

	"cubicle/backend/fault"
)

// Safety is the three layers together, as the agent runtime consults them before each tool
// call. Guard is required; the other layers are optional. A Safety is safe for concurrent use
// when its layers are (they are).
type Safety struct {
	Guard  *Guard  // the tool guard (required)
	Policy *Policy // the access policy; nil lets every tool run
	// HostFiles guards the paths of host_* tools and VMFiles those of the other tools (the
	// computer_* tools work inside the VM). nil protects nothing on that side.
	HostFiles, VMFiles *FileGuard
	// HostHome and VMHome are the home directories "~" (and protected paths given as "~/…")
	// stand for on this machine's host and in a desktop, unless the call's Place names
	// another. When empty, paths under "~" are not checked by the file guard (the tool guard
	// still sees them).
	HostHome, VMHome string
	// LookupHome returns the home directory of account name on this machine ("" when there is
	// none), for "~name" in host tools run here; nil looks nothing up (a "~name" path is then
	// taken to be next to HostHome only).
	LookupHome func(name string) string
}

// Place is where a call acts: the machine its tool runs on, as far as its paths are concerned.
// The zero Place resolves nothing relative and uses the Safety's own homes.
type Place struct {
	// WorkDir is the absolute directory relative paths start from ("" leaves them unresolved).
	WorkDir string
	// Home is the home directory of the machine the tool acts on, when it is not the one of
	// the Safety (HostHome or VMHome): a runner's host for host tools that run there.
	Home string
	// NoHome, when not empty, says why the home directory of that machine is not known (a
	// runner that did not say): every path under "~" is then denied with it, and so is every
	// relative path when WorkDir is empty — they are never checked against another machine's
	// home.
	NoHome string
	// Remote says the tool acts on another machine than this one (a runner's host): "~user"
	// (another account's home there) cannot be looked up, so it is denied. Symbolic links are
	// still resolved on this machine — right when the runner shares it, and otherwise only
	// ever an extra refusal (a runner with wire.CapHostGuard resolves them on its own disk too).
	Remote bool
	// Protected are further absolute paths protected on that machine for host tools (a
	// runner's own data directory, as it said); entries that are not absolute are ignored.
	Protected []string
}

// Rules are allow rules of one agent, compiled for Decide (see CompileRules).
type Rules struct{ rules []allowRule }

// CompileRules checks and compiles allow rules (an agent's saved ones). Invalid rules are
// fault.ErrInvalid.
func CompileRules(rs []AllowRule) (Rules, error) {
	out := Rules{rules: make([]allowRule, 0, len(rs))}
	for _, r := range rs {
		c, err := compileAllowRule(r)
		if err != nil {
			return Rules{}, err
		}
		out.rules = append(out.rules, c)
	}
	return out, nil
}

// Decide runs the access policy, the tool guard and the file guard and combines their
// decisions (deny > ask > allow). It returns the decision, a reason people can read (empty on
// allow) and the tool guard's verdict, for the confirmation card and the history. at is where
// the call acts: its working directory and, for a runner's host, that machine's home (see
// Place); rules are further allow rules (the agent's own). For shell tools the file guard
// checks the paths the command names, following cd — a best effort: a shell can always
// compute a path the guard cannot see, which is why the VM is the boundary.
func (s *Safety) Decide(call ToolCall, at Place, rules Rules) (Decision, string, Verdict) {
	pol := Allow
	if s.Policy != nil {
		pol = s.Policy.Decide(call.Name)
	}
	if pol == Deny {
		return Deny, fmt.Sprintf("the access policy does not allow the tool %s", call.Name), Verdict{Decision: Deny}
	}
	host := strings.HasPrefix(call.Name, "host_")
	files, home := s.VMFiles, s.VMHome
	if host {
		files, home = s.HostFiles, s.HostHome
	}
	if at.Remote && at.Home == "" && at.NoHome == "" {
		at.NoHome = "the home directory of the execution node is not known"
	}
	switch {
	case at.NoHome != "":
		home = "" // never another machine's home in its place
	case at.Home != "":
		home = at.Home
	}
	at.WorkDir = shellDir(call, at.WorkDir, home, host)
	v, in := s.Guard.inspect(call, files != nil, at.WorkDir, rules.rules)
	if v.Decision == Deny {
		return Deny, v.Reason(), v
	}
	if files != nil {
		if host {
			files = files.With(at.Protected...)
		}
		if err := s.checkFiles(files.ForHome(home), home, call, in, at); err != nil {
			return Deny, err.Error(), v
		}
	}
	if pol == Ask && (v.AllowedBy != nil || (len(v.Matches) == 0 && s.Guard.allowedBy(call.Name, nil, in.Commands, rules.rules) != nil)) {
		pol = Allow // the person said "always allow" for calls like this one
	}
	switch d := Combine(pol, v.Decision); d {
	case Ask:
		if v.Decision == Ask {
			if r := v.Reason(); r != "" {
				return Ask, r, v
			}
			return Ask, "every tool call needs confirmation at the STRICT level", v
		}
		return Ask, fmt.Sprintf("the access policy asks before the tool %s runs", call.Name), v
	default:
		return d, "", v
	}
}

// shellDir is the directory a shell call starts in, as the tool resolves it: its "cwd"
// argument against workDir ("", ".", "auto" and "cwd" are workDir itself; on the host "~/…" is
// below home, left as written when home is not known). Other tools start in workDir.
func shellDir(call ToolCall, workDir, home string, host bool) string {
	c, _ := call.Args["cwd"].(string)
	if !strings.HasSuffix(call.Name, "_shell") {
		return workDir
	}
	switch strings.TrimSpace(c) {
	case "", ".", "auto", "cwd":
		return workDir
	}
	switch {
	case host && strings.HasPrefix(c, "~/"):
		if home == "" {
			return c
		}
		return filepath.Join(home, c[2:])
	case !host && strings.HasPrefix(c, "/"):
		return path.Clean(c)
	case !host && workDir != "":
		return path.Join(workDir, c)
	case filepath.IsAbs(c):
		return filepath.Clean(c)
	case workDir != "":
		return filepath.Join(workDir, c)
	}
	return c
}

// checkFiles runs the file guard over what the call touches: the path arguments of file
// tools (targets of write and copy tools as writes) and, for shell tools, the working
// directory and the files the command names (archives and recursive copies or searches of a
// parent of a protected path count as touching it).
func (s *Safety) checkFiles(files *FileGuard, home string, call ToolCall, in Inspection, at Place) error {
	workDir := at.WorkDir
	// unknown says why p cannot be checked on the tool's machine ("" when it can, or when
	// it needs no checking).
	unknown := func(p string) string {
		switch {
		case p == "~-" || strings.HasPrefix(p, "~-/"):
			return "" // the previous directory: the tool guard treats it as dynamic
		case (p == "~+" || strings.HasPrefix(p, "~+/")) && workDir != "":
			return ""
		case strings.HasPrefix(p, "~") && at.NoHome != "":
			return fmt.Sprintf("cannot check %s: %s", p, at.NoHome)
		case strings.HasPrefix(p, "~") && !strings.HasPrefix(p, "~/") && p != "~" && at.Remote:
			return fmt.Sprintf("cannot check %s: it names another account's home directory on the execution node, which this server cannot look up; use the full path", p)
		case !strings.HasPrefix(p, "~") && !filepath.IsAbs(p) && !filepath.IsAbs(workDir) && at.NoHome != "":
			return fmt.Sprintf("cannot check %s: %s", p, at.NoHome)
		}
		return ""
	}
	// forms are the absolute paths p may name on the tool's machine (none: not checked).
	forms := func(p string) []string {
		switch {
		case p == "~" || strings.HasPrefix(p, "~/"):
			if home == "" {
				return nil
			}
			return []string{filepath.Join(home, strings.TrimPrefix(p, "~"))}
		case p == "~+" || strings.HasPrefix(p, "~+/"):
			// The current directory: where the call starts (a best effort after cd).
			if !filepath.IsAbs(workDir) {
				return nil
			}
			return []string{filepath.Join(workDir, strings.TrimPrefix(p, "~+"))}
		case p == "~-" || strings.HasPrefix(p, "~-/"):
			return nil
		case strings.HasPrefix(p, "~"):
			// ~user: another account's home — on this machine where the accounts say, and
			// next to the home directory, as homes usually are.
			name, rest, _ := strings.Cut(strings.TrimPrefix(p, "~"), "/")
			var out []string
			if home != "" {
				out = append(out, filepath.Join(filepath.Dir(home), name, rest))
			}
			if s.LookupHome != nil && !at.Remote && strings.HasPrefix(call.Name, "host_") {
				if h := s.LookupHome(name); filepath.IsAbs(h) {
					out = append(out, filepath.Join(h, rest))
				}
			}
			return out
		case filepath.IsAbs(p):
			return []string{p}
		case workDir != "" && filepath.IsAbs(workDir):
			return []string{filepath.Join(workDir, p)}
		}
		return nil
	}
	check := func(p string, write, recursive bool) error {
		if why := unknown(p); why != "" {
			return fault.Forbidden("%s", why)
		}
		for _, a := range forms(p) {
			if err := files.Check(a, write, recursive); errors.Is(err, fault.ErrForbidden) {
				return err
			}
		}
		return nil
	}
	if strings.HasSuffix(call.Name, "_shell") {
		if workDir != "" {
			if err := check(workDir, false, false); err != nil {
				return err
			}
		}
		for _, f := range in.Files {
			if err := check(f.Path, f.Write, f.Recursive); err != nil {
				return err
			}
		}
		return nil
	}
	write := strings.Contains(call.Name, "write") || strings.Contains(call.Name, "copy")
	for _, k := range pathKeys {
		if p, ok := call.Args[k].(string); ok && p != "" {
			if err := check(p, write && !isSourceKey(k), false); err != nil {
				return err
			}
		}
	}
	return nil
}

// Inspect returns the tool guard's verdict and what the call touches, without the other
// layers (for rules made from a confirmed call).
func (s *Safety) Inspect(call ToolCall, workDir string) (Verdict, Inspection) {
	return s.Guard.inspect(call, true, workDir, nil)
}

// ParseAllowRules turns the rule text of a confirmation (USER_CONFIRM_RESULT rules) into
// allow rules for call's tool; v and in are the call's verdict and inspection (Inspect):
//
//   - "" or "exact": the simple commands (or paths) of the call the guard flagged, exactly —
//     one rule each; without findings, every simple command of the call;
//   - "tool" or "*": every call of the tool (still never a CRITICAL finding);
//   - "re:EXPR": simple commands that match the RE2 expression EXPR as a whole;
//   - a JSON object: an AllowRule as it is ({"tool":…, "command":…, "pattern":…}), the tool
//     defaulting to call's;
//   - any other text: simple commands equal to that text.
//
// A finding that belongs to no simple command (hidden characters, a pipeline into a shell)
// cannot be allowed by an exact rule: that is a fault.ErrInvalid error.
func ParseAllowRules(call ToolCall, rule string, v Verdict, in Inspection) ([]AllowRule, error) {
	rule = strings.TrimSpace(rule)
	r := AllowRule{Tool: call.Name}
	switch {
	case rule == "" || rule == "exact":
		var subjects []string
		for _, m := range v.Matches {
			if m.Severity == Critical {
				return nil, fmt.Errorf("allow rule: %w", fault.Invalid("%s is CRITICAL and can only be confirmed one call at a time", m.Reason))
			}
			if m.Command == "" {
				return nil, fmt.Errorf("allow rule: %w", fault.Invalid("%q cannot be allowed for good: it concerns the command as a whole, not one command in it", m.Reason))
			}
			subjects = append(subjects, m.Command)
		}
		if len(v.Matches) == 0 {
			subjects = in.Commands
		}
		subjects = uniq(subjects)
		if len(subjects) == 0 {
			return nil, fmt.Errorf("allow rule: %w", fault.Invalid("this call has no command or path to allow; use \"tool\" to allow the whole tool"))
		}
		out := make([]AllowRule, 0, len(subjects))
		for _, sub := range subjects {
			out = append(out, AllowRule{Tool: call.Name, Command: sub})
		}
		return out, nil
	case rule == "tool" || rule == "*":
	case strings.HasPrefix(rule, "re:"):
		r.Pattern = strings.TrimPrefix(rule, "re:")
	case strings.HasPrefix(rule, "{"):
		if err := json.Unmarshal([]byte(rule), &r); err != nil {
			return nil, fmt.Errorf("allow rule: %w", fault.Invalid("cannot read the allow rule %q: %v", rule, err))
		}
		if r.Tool == "" {
			r.Tool = call.Name
		}
	default:
		r.Command = rule
	}
	if err := CheckAllowRule(r); err != nil {
		return nil, err
	}
	return []AllowRule{r}, nil
}
