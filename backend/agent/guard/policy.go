package guard

import (
	"fmt"
	"path"
	"strings"
	"sync"

	"cubicle/backend/fault"
)

// Combine merges decisions of the safety layers: deny beats ask, ask beats allow. No
// decisions means allow; an unknown decision counts as deny, so a bug fails closed.
func Combine(ds ...Decision) Decision {
	out := Allow
	for _, d := range ds {
		switch d {
		case Allow:
		case Ask:
			if out == Allow {
				out = Ask
			}
		default:
			return Deny
		}
	}
	return out
}

// PolicyConfig configures a Policy.
type PolicyConfig struct {
	// Rules map tool names, or path.Match patterns ("host_*"), to a decision. When several
	// rules match a tool the strongest wins (deny > ask > allow).
	Rules map[string]Decision
	// Local are the tools this app provides itself. A tool that is neither local nor named by
	// a rule (a remote tool, e.g. from an MCP server) is denied.
	Local []string
	// Default is the decision for local tools that no rule names (empty means allow).
	Default Decision
}

// Policy is the per-tool access policy. It is safe for concurrent use.
type Policy struct {
	local map[string]bool
	def   Decision

	mu    sync.RWMutex
	rules map[string]Decision // guarded by mu
}

// NewPolicy checks cfg and returns a Policy; bad decisions or patterns are fault.ErrInvalid.
func NewPolicy(cfg PolicyConfig) (*Policy, error) {
	p := &Policy{local: map[string]bool{}, def: cfg.Default, rules: map[string]Decision{}}
	if p.def == "" {
		p.def = Allow
	}
	if !validDecision(p.def) {
		return nil, fmt.Errorf("policy: %w", fault.Invalid("unknown default decision %q: use allow, ask or deny", p.def))
	}
	for _, t := range cfg.Local {
		p.local[t] = true
	}
	for tool, d := range cfg.Rules {
		if err := p.Set(tool, d); err != nil {
			return nil, err
		}
	}
	return p, nil
}

func validDecision(d Decision) bool { return d == Allow || d == Ask || d == Deny }

// Set adds or replaces the rule for a tool name or pattern.
func (p *Policy) Set(tool string, d Decision) error {
	tool = strings.TrimSpace(tool)
	if tool == "" {
		return fmt.Errorf("policy: %w", fault.Invalid("a policy rule needs a tool name"))
	}
	if !validDecision(d) {
		return fmt.Errorf("policy: %w", fault.Invalid("unknown decision %q for %s: use allow, ask or deny", d, tool))
	}
	if _, err := path.Match(tool, ""); err != nil {
		return fmt.Errorf("policy: %w", fault.Invalid("bad tool pattern %q", tool))
	}
	p.mu.Lock()
	p.rules[tool] = d
	p.mu.Unlock()
	return nil
}

// Explicit returns the decision of the rules that name tool (by name or pattern), and false
// when none does: for tools whose own policy decides (an MCP server's), only what an
// administrator wrote here for them applies.
func (p *Policy) Explicit(tool string) (Decision, bool) {
	p.mu.RLock()
	var found []Decision
	for pattern, d := range p.rules {
		if toolMatches(pattern, tool) {
			found = append(found, d)
		}
	}
	p.mu.RUnlock()
	if len(found) == 0 {
		return "", false
	}
	return Combine(found...), true
}

// Decide returns the decision for a tool.
func (p *Policy) Decide(tool string) Decision {
	p.mu.RLock()
	var found []Decision
	for pattern, d := range p.rules {
		if toolMatches(pattern, tool) {
			found = append(found, d)
		}
	}
	p.mu.RUnlock()
	if len(found) > 0 {
		return Combine(found...)
	}
	if p.local[tool] {
		return p.def
	}
	return Deny
}
