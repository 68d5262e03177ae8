package tools_test

import (
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"cubicle/backend/agent"
	"cubicle/backend/agent/tools"
	"cubicle/backend/fault"
)

// homeGuard protects ".ssh" below whatever home it is given, and records each check.
type homeGuard struct {
	mu     sync.Mutex
	checks []string // "path|home"
}

func (g *homeGuard) CheckPath(path string, write bool, home string) error {
	g.mu.Lock()
	g.checks = append(g.checks, path+"|"+home)
	g.mu.Unlock()
	if home != "" && strings.HasPrefix(path+"/", filepath.Join(home, ".ssh")+"/") {
		return fault.Forbidden("%s is protected", path)
	}
	return nil
}

// The tools' own check of a host path gets the home of the host the turn's host tools run on
// (a runner's, from Environment.Host), never this process's when they run elsewhere.
func TestHostPathsCheckedWithTheHostsHome(t *testing.T) {
	runnerHome, localHome := t.TempDir(), t.TempDir()
	for _, h := range []string{runnerHome, localHome} {
		os.MkdirAll(filepath.Join(h, ".ssh"), 0o700)
		os.WriteFile(filepath.Join(h, ".ssh", "id_rsa"), []byte("KEY"), 0o600)
		os.WriteFile(filepath.Join(h, "plain.txt"), []byte("plain"), 0o644)
	}
	for _, tc := range []struct {
		name      string
		host      tools.Host // the turn's host (nil: Config.Host, this machine)
		home      string
		otherHome string
	}{
		{"runner", homeHost{home: runnerHome}, runnerHome, localHome},
		{"local", nil, localHome, runnerHome},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := &homeGuard{}
			e := &env{e: tools.Environment{Plan: vmPlan(true, true), Host: tc.host}}
			box, err := tools.New(tools.Config{Desktops: fixedDesktops{}, Environments: e, Host: homeHost{home: localHome}, Files: g})
			if err != nil {
				t.Fatal(err)
			}
			for _, p := range []string{"~/.ssh/id_rsa", ".ssh/id_rsa", filepath.Join(tc.home, ".ssh", "id_rsa")} {
				if r := call(t, box, "host_read_file", map[string]any{"path": p}); r.state != agent.StateDenied || strings.Contains(r.text, "KEY") {
					t.Errorf("host_read_file %s: %+v", p, r)
				}
			}
			if r := call(t, box, "host_write_file", map[string]any{"path": "~/.ssh/authorized_keys", "content": "x"}); r.state != agent.StateDenied {
				t.Errorf("host_write_file into ~/.ssh: %+v", r)
			}
			if _, err := os.Stat(filepath.Join(tc.home, ".ssh", "authorized_keys")); err == nil {
				t.Error("a refused write happened")
			}
			if r := call(t, box, "host_read_file", map[string]any{"path": "plain.txt"}); r.state != agent.StateSuccess || !strings.Contains(r.text, "plain") {
				t.Errorf("a plain file: %+v", r)
			}
			// The other machine's home is an ordinary path here.
			if r := call(t, box, "host_read_file", map[string]any{"path": filepath.Join(tc.otherHome, ".ssh", "id_rsa")}); r.state != agent.StateSuccess {
				t.Errorf("the other home's path: %+v", r)
			}
			g.mu.Lock()
			defer g.mu.Unlock()
			for _, c := range g.checks {
				if !strings.HasSuffix(c, "|"+tc.home) {
					t.Errorf("checked %q, want the home %s", c, tc.home)
				}
			}
		})
	}
}
