package guard

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"cubicle/backend/fault"
)

func TestSafetyDecide(t *testing.T) {
	home := t.TempDir()
	secrets := filepath.Join(home, ".config", "cubicle", "secrets")
	project := filepath.Join(home, "project")
	for _, d := range []string{secrets, project} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	hostFiles, err := NewFileGuard([]string{secrets})
	if err != nil {
		t.Fatal(err)
	}
	vmFiles, err := NewLexicalFileGuard([]string{"/home/user/.cubicle"})
	if err != nil {
		t.Fatal(err)
	}
	policy, err := NewPolicy(PolicyConfig{
		Local: []string{"host_shell", "host_read_file", "host_write_file", "computer_shell", "computer_read_file", "computer_screenshot"},
		Rules: map[string]Decision{"host_*": Ask, "host_read_file": Allow, "computer_read_file": Allow},
	})
	if err != nil {
		t.Fatal(err)
	}
	s := &Safety{Guard: newGuard(t, Config{}), Policy: policy, HostFiles: hostFiles, VMFiles: vmFiles,
		HostHome: home, VMHome: "/home/user"}
	hostShell := func(cmd string) ToolCall {
		return ToolCall{Name: "host_shell", Args: map[string]any{"command": cmd}}
	}
	tests := []struct {
		name    string
		call    ToolCall
		workDir string
		want    Decision
		reason  string // part of the reason
	}{
		{"vm shell plain", shell("ls -la"), "/home/user/project", Allow, ""},
		{"vm shell dangerous", shell("rm -rf /"), "/home/user", Ask, "root directory"},
		{"vm screenshot", ToolCall{Name: "computer_screenshot"}, "", Allow, ""},
		{"unknown remote tool", ToolCall{Name: "mcp_db_drop"}, "", Deny, "access policy"},
		{"policy asks", hostShell("ls"), project, Ask, "access policy asks"},
		{"vm read secrets", ToolCall{Name: "computer_read_file", Args: map[string]any{"path": "/home/user/.cubicle/token"}}, "", Deny, "protected"},
		{"vm read relative secrets", ToolCall{Name: "computer_read_file", Args: map[string]any{"path": "../.cubicle/token"}}, "/home/user/project", Deny, "protected"},
		{"vm shell secrets", shell("cat ~/.cubicle/token"), "/home/user", Deny, "protected"},
		{"host read secrets", ToolCall{Name: "host_read_file", Args: map[string]any{"path": filepath.Join(secrets, "token")}}, "", Deny, "protected"},
		{"host read project", ToolCall{Name: "host_read_file", Args: map[string]any{"path": filepath.Join(project, "a.go")}}, "", Ask, "access policy"}, // host_* ask beats the allow
		{"host write parent of secrets", ToolCall{Name: "host_write_file", Args: map[string]any{"path": filepath.Join(home, ".config", "cubicle")}}, "", Deny, "contains the protected"},
		{"host shell home secrets", hostShell("cat ~/.config/cubicle/secrets/token"), project, Deny, "protected"},
		{"host shell relative", hostShell("cat ../.config/cubicle/secrets/token"), project, Deny, "protected"},
		{"host shell cd", hostShell("cd " + secrets + " && cat token"), project, Deny, "protected"},
		{"host shell nested", hostShell("bash -c 'cat " + secrets + "/token'"), project, Deny, "protected"},
		{"host shell glob", hostShell("cat " + secrets + "/*"), project, Deny, "protected"},
		{"host shell dd", hostShell("dd if=" + secrets + "/token of=/tmp/x"), project, Deny, "protected"},
		{"host shell redirect", hostShell("echo x > " + secrets + "/token"), project, Deny, "protected"},
		{"host shell inside secrets", hostShell("ls"), secrets, Deny, "protected"},
		{"host shell project", hostShell("cat ./a.go ../project/b.go"), project, Ask, "access policy"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d, reason, _ := s.Decide(tt.call, tt.workDir)
			if d != tt.want || !strings.Contains(reason, tt.reason) || (d == Allow) != (reason == "") {
				t.Fatalf("got %s %q, want %s with %q", d, reason, tt.want, tt.reason)
			}
		})
	}

	// "Always allow" satisfies the policy's ask, but never the file guard.
	if err := s.AllowRule(hostShell("ls"), "tool"); err != nil {
		t.Fatal(err)
	}
	if d, r, _ := s.Decide(hostShell("ls"), project); d != Allow {
		t.Fatalf("after allow rule: %s %q", d, r)
	}
	if d, _, _ := s.Decide(hostShell("cat "+secrets+"/token"), project); d != Deny {
		t.Fatalf("allow rule beat the file guard: %s", d)
	}

	strict := &Safety{Guard: newGuard(t, Config{Level: Strict})}
	if d, r, _ := strict.Decide(ToolCall{Name: "computer_screenshot"}, ""); d != Ask || !strings.Contains(r, "STRICT") {
		t.Fatalf("strict: %s %q", d, r)
	}
	denied := &Safety{Guard: newGuard(t, Config{DeniedTools: []string{"computer_shell"}})}
	if d, r, _ := denied.Decide(shell("ls"), ""); d != Deny || !strings.Contains(r, "denied") {
		t.Fatalf("denied tool: %s %q", d, r)
	}
	// The file guard also works when the tool guard is OFF.
	off := &Safety{Guard: newGuard(t, Config{Level: Off}), HostFiles: hostFiles}
	if d, _, _ := off.Decide(hostShell("cat "+secrets+"/token"), ""); d != Deny {
		t.Fatalf("OFF skipped the file guard: %s", d)
	}
	if d, _, _ := off.Decide(hostShell("rm -rf /"), ""); d != Allow {
		t.Fatalf("OFF asked: %s", d)
	}
}

func TestParseAllowRule(t *testing.T) {
	call := shell("  npm test ")
	tests := []struct {
		rule string
		want AllowRule
	}{
		{"", AllowRule{Tool: "computer_shell", Command: "npm test"}},
		{"exact", AllowRule{Tool: "computer_shell", Command: "npm test"}},
		{"tool", AllowRule{Tool: "computer_shell"}},
		{"*", AllowRule{Tool: "computer_shell"}},
		{"re:npm (test|run .*)", AllowRule{Tool: "computer_shell", Pattern: "npm (test|run .*)"}},
		{`{"pattern":"git .*"}`, AllowRule{Tool: "computer_shell", Pattern: "git .*"}},
		{`{"tool":"host_shell","command":"make"}`, AllowRule{Tool: "host_shell", Command: "make"}},
		{"make build", AllowRule{Tool: "computer_shell", Command: "make build"}},
	}
	for _, tt := range tests {
		t.Run(tt.rule, func(t *testing.T) {
			got, err := ParseAllowRule(call, tt.rule)
			if err != nil || got != tt.want {
				t.Fatalf("got %+v, %v; want %+v", got, err, tt.want)
			}
		})
	}
	if _, err := ParseAllowRule(call, "{bad json"); !errors.Is(err, fault.ErrInvalid) {
		t.Fatalf("bad json: %v", err)
	}
	if _, err := ParseAllowRule(ToolCall{Name: "computer_screenshot"}, ""); !errors.Is(err, fault.ErrInvalid) {
		t.Fatalf("exact without subject: %v", err)
	}
	s := &Safety{Guard: newGuard(t, Config{})}
	if err := s.AllowRule(call, "re:("); !errors.Is(err, fault.ErrInvalid) {
		t.Fatalf("bad pattern: %v", err)
	}
}
