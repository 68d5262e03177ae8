package mcpclient

import (
	"testing"

	"cubicle/backend/store"
)

func TestDecidePrecedence(t *testing.T) {
	ada := Subject{User: "ada", AgentID: "a1"}
	r := func(tool, subject, effect string) store.MCPRule {
		return store.MCPRule{Tool: tool, Subject: subject, Effect: effect}
	}
	cases := []struct {
		name    string
		policy  store.MCPPolicy
		tool    string
		sub     Subject
		want    string
		wantDef bool // decided by the server's default effect
	}{
		{"a new server denies", store.MCPPolicy{Default: Deny}, "read", ada, Deny, true},
		{"no default denies (fails closed)", store.MCPPolicy{}, "read", ada, Deny, true},
		{"an opened server allows", store.MCPPolicy{Default: Allow}, "read", ada, Allow, true},
		{"default ask", store.MCPPolicy{Default: Ask}, "read", ada, Ask, true},
		{"unknown effect counts as deny", store.MCPPolicy{Default: "maybe"}, "read", ada, Deny, true},

		// exact tool > server default
		{"tool rule beats the default", store.MCPPolicy{Default: Deny, Rules: []store.MCPRule{r("read", "*", Allow)}}, "read", ada, Allow, false},
		{"tool deny beats an allowing default", store.MCPPolicy{Default: Allow, Rules: []store.MCPRule{r("rm", "*", Deny)}}, "rm", ada, Deny, false},
		{"a tool rule only covers its tool", store.MCPPolicy{Default: Allow, Rules: []store.MCPRule{r("rm", "*", Deny)}}, "read", ada, Allow, true},
		{"tool rule for * beats a server rule for the user", store.MCPPolicy{Default: Deny,
			Rules: []store.MCPRule{r("", "user:ada", Allow), r("rm", "*", Ask)}}, "rm", ada, Ask, false},
		{"tool rule for * beats a server rule for the agent", store.MCPPolicy{Default: Allow,
			Rules: []store.MCPRule{r("", "agent:a1", Deny), r("read", "*", Allow)}}, "read", ada, Allow, false},

		// server level: subject specificity over the default
		{"server rule for the user beats the default", store.MCPPolicy{Default: Deny, Rules: []store.MCPRule{r("", "user:ada", Allow)}}, "read", ada, Allow, false},
		{"server rule for another user does not apply", store.MCPPolicy{Default: Deny, Rules: []store.MCPRule{r("", "user:bob", Allow)}}, "read", ada, Deny, true},
		{"server rule for another agent does not apply", store.MCPPolicy{Default: Ask, Rules: []store.MCPRule{r("", "agent:a2", Allow)}}, "read", ada, Ask, true},
		{"user names match without case", store.MCPPolicy{Default: Deny, Rules: []store.MCPRule{r("", "user:Ada", Allow)}}, "read", ada, Allow, false},
		{"agent beats user at server level", store.MCPPolicy{Default: Deny,
			Rules: []store.MCPRule{r("", "user:ada", Deny), r("", "agent:a1", Allow)}}, "read", ada, Allow, false},
		{"user beats * at server level (a * rule and the default)", store.MCPPolicy{Default: Allow,
			Rules: []store.MCPRule{r("", "*", Allow), r("", "user:ada", Ask)}}, "read", ada, Ask, false},
		{"a server * rule and the default conflict: strictest", store.MCPPolicy{Default: Allow,
			Rules: []store.MCPRule{r("", "*", Deny)}}, "read", ada, Deny, false},

		// tool level: specificity, then strictness
		{"agent beats user for a tool", store.MCPPolicy{Default: Deny,
			Rules: []store.MCPRule{r("rm", "user:ada", Deny), r("rm", "agent:a1", Allow)}}, "rm", ada, Allow, false},
		{"user beats * for a tool", store.MCPPolicy{Default: Deny,
			Rules: []store.MCPRule{r("rm", "*", Deny), r("rm", "user:ada", Allow)}}, "rm", ada, Allow, false},
		{"same subject, conflicting: deny > ask > allow", store.MCPPolicy{Default: Allow,
			Rules: []store.MCPRule{r("rm", "user:ada", Allow), r("rm", "user:ada", Deny), r("rm", "user:ada", Ask)}}, "rm", ada, Deny, false},
		{"same subject, conflicting: ask > allow", store.MCPPolicy{Default: Deny,
			Rules: []store.MCPRule{r("rm", "*", Allow), r("rm", "*", Ask)}}, "rm", ada, Ask, false},
		{"conflicting * rules at server level", store.MCPPolicy{Default: Deny,
			Rules: []store.MCPRule{r("", "user:ada", Allow), r("", "user:ada", Ask)}}, "read", ada, Ask, false},
		{"a more specific allow beats a less specific deny", store.MCPPolicy{Default: Deny,
			Rules: []store.MCPRule{r("rm", "*", Deny), r("rm", "user:ada", Deny), r("rm", "agent:a1", Allow)}}, "rm", ada, Allow, false},
		{"tool rules of others fall back to the server level", store.MCPPolicy{Default: Deny,
			Rules: []store.MCPRule{r("rm", "user:bob", Allow), r("", "user:ada", Ask)}}, "rm", ada, Ask, false},
		{"no user known: user rules never match", store.MCPPolicy{Default: Deny,
			Rules: []store.MCPRule{r("", "user:", Allow)}}, "read", Subject{AgentID: "a1"}, Deny, true},
		{"a bad subject never matches", store.MCPPolicy{Default: Deny,
			Rules: []store.MCPRule{r("", "group:x", Allow)}}, "read", ada, Deny, true},
		{"a bad effect in a tool rule denies", store.MCPPolicy{Default: Allow,
			Rules: []store.MCPRule{r("rm", "*", "yes")}}, "rm", ada, Deny, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			v := Decide(c.policy, c.tool, c.sub)
			if v.Effect != c.want || v.Default != c.wantDef {
				t.Fatalf("Decide = %s (default %v, by %s), want %s (default %v)", v.Effect, v.Default, v, c.want, c.wantDef)
			}
		})
	}
}

func TestExposedNames(t *testing.T) {
	seen := map[string]string{}
	for _, tool := range []string{"read_file", "read.file", "read file", "读", "x-y", "a" + string(make([]byte, 0)) + "b",
		"very_long_tool_name_that_goes_on_and_on_and_on_and_on_beyond_sixty_four", "very_long_tool_name_that_goes_on_and_on_and_on_and_on_beyond_sixty_five"} {
		n := exposed("files", tool)
		if len(n) > maxName || n[:len("mcp_files_")] != "mcp_files_" {
			t.Fatalf("exposed(%q) = %q: too long or wrong prefix", tool, n)
		}
		for _, r := range n {
			if !(r == '_' || r == '-' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9') {
				t.Fatalf("exposed(%q) = %q holds %q", tool, n, r)
			}
		}
		if prev, dup := seen[n]; dup {
			t.Fatalf("%q and %q both become %q", prev, tool, n)
		}
		seen[n] = tool
	}
	if got := exposed("files", "read_file"); got != "mcp_files_read_file" {
		t.Fatalf("a clean name is kept as it is, got %q", got)
	}
}
