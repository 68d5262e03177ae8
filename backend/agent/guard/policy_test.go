package guard

import (
	"errors"
	"testing"

	"cubicle/backend/fault"
)

func TestCombine(t *testing.T) {
	tests := []struct {
		name string
		in   []Decision
		want Decision
	}{
		{"none", nil, Allow},
		{"allow", []Decision{Allow, Allow}, Allow},
		{"ask beats allow", []Decision{Allow, Ask, Allow}, Ask},
		{"deny beats ask", []Decision{Ask, Deny, Allow}, Deny},
		{"deny first", []Decision{Deny, Ask}, Deny},
		{"unknown fails closed", []Decision{Allow, ""}, Deny},
		{"garbage fails closed", []Decision{"maybe"}, Deny},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := Combine(tt.in...); got != tt.want {
				t.Fatalf("Combine(%v) = %s, want %s", tt.in, got, tt.want)
			}
		})
	}
}

func TestPolicy(t *testing.T) {
	p, err := NewPolicy(PolicyConfig{
		Local: []string{"computer_shell", "computer_screenshot", "host_shell", "host_read_file", "computer_click"},
		Rules: map[string]Decision{
			"host_*":           Ask,
			"host_read_file":   Allow, // the more specific allow loses to the pattern's ask
			"computer_click":   Deny,
			"mcp_github_*":     Allow,
			"mcp_github_push":  Deny,
			"mcp_search_query": Ask,
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		tool string
		want Decision
	}{
		{"computer_shell", Allow},
		{"computer_screenshot", Allow},
		{"host_shell", Ask},
		{"host_read_file", Ask},
		{"computer_click", Deny},
		{"mcp_github_list_issues", Allow},
		{"mcp_github_push", Deny},
		{"mcp_search_query", Ask},
		{"mcp_unknown_tool", Deny},
		{"", Deny},
	}
	for _, tt := range tests {
		t.Run(tt.tool, func(t *testing.T) {
			if got := p.Decide(tt.tool); got != tt.want {
				t.Fatalf("Decide(%q) = %s, want %s", tt.tool, got, tt.want)
			}
		})
	}
	if err := p.Set("computer_shell", Ask); err != nil {
		t.Fatal(err)
	}
	if got := p.Decide("computer_shell"); got != Ask {
		t.Fatalf("after Set: %s", got)
	}
	def, err := NewPolicy(PolicyConfig{Local: []string{"computer_shell"}, Default: Ask})
	if err != nil {
		t.Fatal(err)
	}
	if got := def.Decide("computer_shell"); got != Ask {
		t.Fatalf("default ask: %s", got)
	}
	for _, bad := range []PolicyConfig{
		{Default: "sometimes"},
		{Rules: map[string]Decision{"x": "yes"}},
		{Rules: map[string]Decision{"[": Allow}},
		{Rules: map[string]Decision{" ": Allow}},
	} {
		if _, err := NewPolicy(bad); !errors.Is(err, fault.ErrInvalid) {
			t.Errorf("NewPolicy(%+v) = %v", bad, err)
		}
	}
}

// The three layers together: the runtime combines the policy, the tool guard and the file guard.
func TestLayersCombined(t *testing.T) {
	g := newGuard(t, Config{})
	p, err := NewPolicy(PolicyConfig{Local: []string{"computer_shell"}, Rules: map[string]Decision{"host_shell": Deny}})
	if err != nil {
		t.Fatal(err)
	}
	fg, err := NewLexicalFileGuard([]string{"/home/user/.cubicle"})
	if err != nil {
		t.Fatal(err)
	}
	fileDecision := func(path string) Decision {
		if err := fg.CheckPath(path, false); errors.Is(err, fault.ErrForbidden) {
			return Deny
		}
		return Allow
	}
	tests := []struct {
		name string
		tool string
		cmd  string
		path string
		want Decision
	}{
		{"all allow", "computer_shell", "ls", "/tmp", Allow},
		{"guard asks", "computer_shell", "sudo ls", "/tmp", Ask},
		{"file guard denies", "computer_shell", "sudo ls", "/home/user/.cubicle/key", Deny},
		{"policy denies", "host_shell", "ls", "/tmp", Deny},
		{"unknown remote tool", "mcp_x_shell", "ls", "/tmp", Deny},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			v := g.Check(ToolCall{Name: tt.tool, Args: map[string]any{"command": tt.cmd}})
			if got := Combine(p.Decide(tt.tool), v.Decision, fileDecision(tt.path)); got != tt.want {
				t.Fatalf("got %s, want %s", got, tt.want)
			}
		})
	}
}
