package mcpclient

import (
	"fmt"
	"strings"

	"cubicle/backend/store"
)

// Effects of the access policy.
const (
	Allow = "allow"
	Ask   = "ask"
	Deny  = "deny"
)

// Subject is who makes a call: the person whose turn it is and the agent.
type Subject struct {
	User    string // the account's user name
	AgentID string
}

// Verdict is the policy's answer for one call, with the rule that decided it.
type Verdict struct {
	Effect string
	// Rule is the rule that decided (Tool "" for the server's; Subject "*" and Tool "" with
	// Default true for the server's default effect).
	Rule    store.MCPRule
	Default bool
}

// Decide applies policy p to a call of tool by sub. Precedence, highest first:
//
//  1. a rule for the exact tool beats the server's rules and its default effect;
//  2. among the server's rules the default effect is a rule for "*";
//  3. among the rules of that level the most specific subject wins: agent:ID, then
//     user:NAME, then *;
//  4. among rules of the same subject the strictest wins: deny > ask > allow.
//
// An unknown effect counts as deny (a bug fails closed); a policy with no default denies.
func Decide(p store.MCPPolicy, tool string, sub Subject) Verdict {
	var exact, server []store.MCPRule
	for _, r := range p.Rules {
		if !sub.matches(r.Subject) {
			continue
		}
		switch r.Tool {
		case tool:
			exact = append(exact, r)
		case "":
			server = append(server, r)
		}
	}
	if tool == "" {
		exact = nil // a call always names a tool; "" never matches as one
	}
	if len(exact) > 0 {
		return Verdict{Effect: effect(pick(exact).Effect), Rule: pick(exact)}
	}
	def := store.MCPRule{Subject: "*", Effect: p.Default}
	if def.Effect == "" {
		def.Effect = Deny
	}
	server = append(server, def)
	r := pick(server)
	return Verdict{Effect: effect(r.Effect), Rule: r, Default: r == def}
}

// pick chooses among rules of one level: the most specific subject, then the strictest effect.
func pick(rs []store.MCPRule) store.MCPRule {
	best := rs[0]
	for _, r := range rs[1:] {
		sr, sb := specificity(r.Subject), specificity(best.Subject)
		if sr > sb || (sr == sb && strictness(effect(r.Effect)) > strictness(effect(best.Effect))) {
			best = r
		}
	}
	return best
}

func (s Subject) matches(subject string) bool {
	switch {
	case subject == "*":
		return true
	case strings.HasPrefix(subject, "user:"):
		return s.User != "" && strings.EqualFold(strings.TrimPrefix(subject, "user:"), s.User)
	case strings.HasPrefix(subject, "agent:"):
		return s.AgentID != "" && strings.TrimPrefix(subject, "agent:") == s.AgentID
	}
	return false
}

func specificity(subject string) int {
	switch {
	case strings.HasPrefix(subject, "agent:"):
		return 2
	case strings.HasPrefix(subject, "user:"):
		return 1
	}
	return 0
}

func strictness(effect string) int {
	switch effect {
	case Allow:
		return 0
	case Ask:
		return 1
	}
	return 2
}

// effect is e when it is a known effect, else deny.
func effect(e string) string {
	switch e {
	case Allow, Ask, Deny:
		return e
	}
	return Deny
}

// String says which rule decided, for the person and the model.
func (v Verdict) String() string {
	if v.Default {
		return "the server's default effect (" + v.Effect + ")"
	}
	what := "the whole server"
	if v.Rule.Tool != "" {
		what = "tool " + v.Rule.Tool
	}
	return fmt.Sprintf("the rule %s for %s on %s", v.Effect, v.Rule.Subject, what)
}
