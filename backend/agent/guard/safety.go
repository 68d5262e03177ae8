package guard

import (
	"encoding/json"
	"errors"
	"fmt"
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
	// HostHome and VMHome expand "~" in paths; when empty, paths under "~" are not checked by
	// the file guard (the tool guard still sees them).
	HostHome, VMHome string
}

// Decide runs the access policy, the tool guard and the file guard and combines their
// decisions (deny > ask > allow). It returns the decision, a reason people can read (empty on
// allow) and the tool guard's verdict, for the confirmation card and the history. workDir is
// the absolute directory relative paths of the call are resolved against ("" to not resolve
// them). For shell tools the file guard checks the paths the command names — a best effort:
// a shell can always compute a path the guard cannot see, which is why the VM is the boundary.
func (s *Safety) Decide(call ToolCall, workDir string) (Decision, string, Verdict) {
	pol := Allow
	if s.Policy != nil {
		pol = s.Policy.Decide(call.Name)
	}
	if pol == Deny {
		return Deny, fmt.Sprintf("the access policy does not allow the tool %s", call.Name), Verdict{Decision: Deny}
	}
	files, home := s.VMFiles, s.VMHome
	if strings.HasPrefix(call.Name, "host_") {
		files, home = s.HostFiles, s.HostHome
	}
	v, paths := s.Guard.inspect(call, files != nil)
	if v.Decision == Deny {
		return Deny, v.Reason(), v
	}
	if files != nil {
		if err := s.checkFiles(files, home, call, paths, workDir); err != nil {
			return Deny, err.Error(), v
		}
	}
	if pol == Ask && (v.AllowedBy != nil || s.Guard.allowedBy(call.Name, subjectsOf(call)) != nil) {
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

// checkFiles runs the file guard over the call's paths: the path arguments of file tools
// (targets of write and copy tools as writes) and, for shell tools, the working directory
// and the paths the command names.
func (s *Safety) checkFiles(files *FileGuard, home string, call ToolCall, paths []string, workDir string) error {
	abs := func(p string) string {
		switch {
		case p == "~" || strings.HasPrefix(p, "~/"):
			if home == "" {
				return ""
			}
			return filepath.Join(home, strings.TrimPrefix(p, "~"))
		case strings.HasPrefix(p, "~"):
			return "" // ~user: someone else's home, unknown here
		case filepath.IsAbs(p):
			return p
		case workDir != "" && filepath.IsAbs(workDir):
			return filepath.Join(workDir, p)
		}
		return ""
	}
	check := func(p string, write bool) error {
		a := abs(p)
		if a == "" {
			return nil
		}
		if err := files.CheckPath(a, write); errors.Is(err, fault.ErrForbidden) {
			return err
		}
		return nil
	}
	if strings.HasSuffix(call.Name, "_shell") {
		if workDir != "" {
			if err := check(workDir, false); err != nil {
				return err
			}
		}
		for _, p := range paths {
			// A wildcard stands for what it may match: check the directory it is in.
			if i := strings.IndexAny(p, "*?["); i >= 0 {
				p = filepath.Dir(p[:i] + "x")
			}
			if err := check(p, false); err != nil {
				return err
			}
		}
		return nil
	}
	write := strings.Contains(call.Name, "write") || strings.Contains(call.Name, "copy")
	for _, k := range pathKeys {
		if p, ok := call.Args[k].(string); ok && p != "" {
			if err := check(p, write && k != "source" && k != "src" && k != "from"); err != nil {
				return err
			}
		}
	}
	return nil
}

// subjectsOf returns what allow rules are matched against: the command of a shell tool, the
// text of a typing tool, the paths of a file tool.
func subjectsOf(call ToolCall) []string {
	switch {
	case strings.HasSuffix(call.Name, "_shell"):
		if c, ok := call.Args["command"].(string); ok {
			return []string{c}
		}
		return nil
	case strings.HasSuffix(call.Name, "_type"):
		if t, ok := call.Args["text"].(string); ok && t != "" {
			return []string{t}
		}
		return nil
	}
	var out []string
	for _, k := range pathKeys {
		if p, ok := call.Args[k].(string); ok {
			out = append(out, p)
		}
	}
	return out
}

// AllowRule adds the allow rule a person chose while confirming call; see ParseAllowRule.
func (s *Safety) AllowRule(call ToolCall, rule string) error {
	r, err := ParseAllowRule(call, rule)
	if err != nil {
		return err
	}
	return s.Guard.AddAllowRule(r)
}

// ParseAllowRule turns the rule text of a confirmation (USER_CONFIRM_RESULT rules) into an
// AllowRule for call's tool:
//
//   - "" or "exact": calls with exactly this command (or path);
//   - "tool" or "*": every call of the tool;
//   - "re:EXPR": calls whose command matches the RE2 expression EXPR as a whole;
//   - a JSON object: an AllowRule as it is ({"tool":…, "command":…, "pattern":…}), the tool
//     defaulting to call's;
//   - any other text: calls with exactly that command.
func ParseAllowRule(call ToolCall, rule string) (AllowRule, error) {
	rule = strings.TrimSpace(rule)
	r := AllowRule{Tool: call.Name}
	switch {
	case rule == "" || rule == "exact":
		subjects := subjectsOf(call)
		if len(subjects) != 1 {
			return r, fmt.Errorf("allow rule: %w", fault.Invalid("this call has no single command or path to allow; use \"tool\" to allow the whole tool"))
		}
		r.Command = strings.TrimSpace(subjects[0])
	case rule == "tool" || rule == "*":
	case strings.HasPrefix(rule, "re:"):
		r.Pattern = strings.TrimPrefix(rule, "re:")
	case strings.HasPrefix(rule, "{"):
		if err := json.Unmarshal([]byte(rule), &r); err != nil {
			return r, fmt.Errorf("allow rule: %w", fault.Invalid("cannot read the allow rule %q: %v", rule, err))
		}
		if r.Tool == "" {
			r.Tool = call.Name
		}
	default:
		r.Command = rule
	}
	return r, nil
}
