package runner_test

import (
	"context"
	"encoding/base64"
	"encoding/hex"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"cubicle/backend"
	"cubicle/backend/agent"
	"cubicle/backend/auth"
	"cubicle/backend/hostaccess"
	"cubicle/backend/nodes"
	"cubicle/backend/sandbox"
	"cubicle/backend/security"
	"cubicle/backend/store"
)

// attacks are the ways a member's host_shell tried to read a secret file at path (issue 26):
// the two that worked against the parsing guard — an interpreter building the path from
// pieces, a base64-decoded path fed to xargs — and six more. Each prints the file's bytes
// as hex (the session key is binary).
func attacks(path string) map[string]string {
	dir, base := filepath.Dir(path), filepath.Base(path)
	cut := func(x, q, plus string) string { return q + x[:len(x)/2] + q + plus + q + x[len(x)/2:] + q }
	// The other commands read the path at run time from .target in the working directory
	// (written there beforehand, as a model could with host_write_file), so no parser sees it.
	p, d := `"$(cat .target)"`, `"$(dirname "$(cat .target)")"`
	return map[string]string{
		"python-pieces": `python3 -c "print(open(` + cut(dir, "'", "+") + `+'/'+` + cut(base, "'", "+") + `,'rb').read().hex())"`,
		"base64-xargs":  "echo " + base64.StdEncoding.EncodeToString([]byte(path)) + " | base64 -d | xargs xxd -p",
		"symlink":       "ln -sf " + p + " ./peek-" + base + " && xxd -p ./peek-" + base,
		"cd-relative":   "cd " + d + " && xxd -p " + base,
		"proc-root":     "xxd -p /proc/self/root" + p + "; xxd -p /proc/1/root" + p,
		"hard-link":     "ln -f " + p + " ./hard-" + base + " && xxd -p ./hard-" + base,
		"tar":           "tar -C " + d + " -cf - . | tar -xOf - | xxd -p",
		"cp":            "rm -rf ./copy-" + base + " && cp -r " + d + " ./copy-" + base + " && xxd -p ./copy-" + base + "/" + base,
	}
}

// TestHostSandboxRefusesSecrets is issue 26's attack as a test, under bubblewrap and under
// Landlock: a member an administrator granted host tools (on this server and on a runner)
// runs each attack through the chat with a scripted model. The guard is OFF, so every
// command reaches the kernel: the sandbox refuses, the chat and the saved history say so, and
// the server's session-signing key (and the runner's own store) never appear in any output.
// The same commands against a decoy file outside the data directories print its bytes: the
// attacks work, only the hidden paths are refused.
func TestHostSandboxRefusesSecrets(t *testing.T) {
	needRoot(t)
	for _, kind := range []sandbox.Kind{sandbox.Bwrap, sandbox.Landlock} {
		t.Run(string(kind), func(t *testing.T) {
			t.Setenv(sandbox.EnvMode, string(kind)) // the server's and the runner's
			h := newHost(t)
			var dataDir string
			s := startServerWith(t, h.ServerAddr+":0", func(c *backend.Config) { dataDir = c.DataDir })
			m := s.useModel(t)
			admin, err := s.b.Auth.Admin()
			if err != nil {
				t.Fatal(err)
			}
			off := "OFF"
			if _, err := s.b.Security.Update(admin.ID, security.Update{GuardLevel: &off}); err != nil {
				t.Fatal(err)
			}
			if v := s.b.Security.View(); v.LocalSandbox != string(kind) {
				t.Fatalf("the server's sandbox: %q (%s), want %s", v.LocalSandbox, v.LocalSandboxProblem, kind)
			}
			key, err := os.ReadFile(filepath.Join(dataDir, "secrets", "session.key"))
			if err != nil {
				t.Fatal(err)
			}

			acct, err := s.b.Auth.CreateAccount(auth.Principal{AccountID: admin.ID, Role: store.RoleAdmin},
				auth.NewAccount{Username: "mallory", Password: "a-long-pass-word-9"})
			if err != nil {
				t.Fatal(err)
			}
			// A runner in its own network namespace, on this machine's file system.
			var rc nodes.Created
			s.do(t, "POST", "/api/app/admin/runners", map[string]any{"name": "sandboxed box"}, http.StatusCreated, &rc)
			runnerHome := filepath.Join(t.TempDir(), "runner-home")
			os.MkdirAll(filepath.Join(runnerHome, ".aws"), 0o755)
			os.WriteFile(filepath.Join(runnerHome, ".aws", "credentials"), []byte("aws-secret"), 0o600)
			runnerData := t.TempDir()
			startRunner(t, append(h.wrap(), "env", "HOME="+runnerHome), "--server", s.url, "--token", rc.Token, "--data-dir", runnerData, "--engine", "none")
			s.waitStatus(t, rc.ID, nodes.StatusConnected, 2*time.Minute)
			runnerDB, err := os.ReadFile(filepath.Join(runnerData, "runner.db"))
			if err != nil {
				t.Fatal(err)
			}
			for _, node := range []string{nodes.LocalID, rc.ID} {
				if err := s.b.HostAccess.Grant(admin.ID, acct.ID, node, hostaccess.Access{HostTools: true}); err != nil {
					t.Fatal(err)
				}
			}
			ctx := context.Background()
			for _, node := range []string{nodes.LocalID, rc.ID} {
				t.Run(node, func(t *testing.T) {
					ag, err := s.b.Profiles.Create(acct.ID, "Mallory's "+node)
					if err != nil {
						t.Fatal(err)
					}
					work := t.TempDir()
					if _, err := s.b.Store.UpdateAgent(ag.ID, func(a *store.Agent) error {
						a.NodeID, a.Computer, a.AllowHostEnvironment, a.WorkDir = node, "host", false, work
						return nil
					}); err != nil {
						t.Fatal(err)
					}
					session := "attack-" + node
					decoy := filepath.Join(work, "decoy", "decoy.key")
					os.MkdirAll(filepath.Dir(decoy), 0o700)
					os.WriteFile(decoy, []byte("decoy-bytes-0123"), 0o600)
					targets := []string{filepath.Join(dataDir, "secrets", "session.key")}
					if node != nodes.LocalID {
						targets = append(targets, filepath.Join(runnerData, "runner.db"))
					}
					guarded, kernel := 0, 0
					for _, target := range targets {
						if err := os.WriteFile(filepath.Join(work, ".target"), []byte(target), 0o644); err != nil {
							t.Fatal(err)
						}
						for name, cmd := range attacks(target) {
							clean(work)
							state, text := s.call(ctx, t, m, acct.ID, ag.ID, session, "host_shell", map[string]any{"command": cmd})
							t.Logf("%s %s: %s %q", filepath.Base(target), name, state, text)
							if leaks(text, key) || leaks(text, runnerDB[:64]) {
								t.Errorf("%s against %s: the secret was read: %q", name, target, text)
							}
							if !strings.Contains(text, "Refused by the safety policy") && !refused.MatchString(text) {
								t.Errorf("%s against %s: neither the guard nor the kernel refused: %s %q", name, target, state, text)
							}
							if strings.Contains(text, "Refused by the safety policy") {
								guarded++
							} else {
								kernel++
							}
						}
					}
					t.Logf("%s: %d attacks refused by the kernel, %d by the guard first", node, kernel, guarded)
					if kernel < 6 {
						t.Errorf("only %d attacks reached the sandbox (the test must exercise the kernel)", kernel)
					}
					// The refusal comes back as what it is.
					_, text := s.call(ctx, t, m, acct.ID, ag.ID, session, "host_shell", map[string]any{"command": attacks(targets[0])["base64-xargs"]})
					if !strings.Contains(text, "sandbox: the sandbox refused access to "+targets[0]) {
						t.Errorf("the refusal does not say what it is: %q", text)
					}
					// The decoy: the same commands read a file outside the hidden paths.
					os.WriteFile(filepath.Join(work, ".target"), []byte(decoy), 0o644)
					for name, cmd := range attacks(decoy) {
						clean(work)
						state, text := s.call(ctx, t, m, acct.ID, ag.ID, session, "host_shell", map[string]any{"command": cmd})
						if !strings.Contains(text, hex.EncodeToString([]byte("decoy-bytes-0123"))) {
							t.Errorf("%s against the decoy (the attack itself must work): %s %q", name, state, text)
						}
					}
					// host_read_file: the guard refuses the data directory; the sandbox refuses a
					// credential folder the guard's settings do not name.
					state, text := s.call(ctx, t, m, acct.ID, ag.ID, session, "host_read_file", map[string]any{"path": targets[0]})
					if state == agent.StateSuccess || leaks(text, key) {
						t.Errorf("host_read_file of the key: %s %q", state, text)
					}
					if node != nodes.LocalID {
						state, text = s.call(ctx, t, m, acct.ID, ag.ID, session, "host_read_file", map[string]any{"path": filepath.Join(runnerHome, ".aws", "credentials")})
						if state == agent.StateSuccess || strings.Contains(text, "aws-secret") || !strings.Contains(text, "permission denied") {
							t.Errorf("host_read_file of ~/.aws/credentials on the runner: %s %q", state, text)
						}
						state, text = s.call(ctx, t, m, acct.ID, ag.ID, session, "host_read_file", map[string]any{"path": decoy})
						if state != agent.StateSuccess || !strings.Contains(text, "decoy-bytes-0123") {
							t.Errorf("host_read_file of a plain file on the runner: %s %q", state, text)
						}
					}
					// The saved history has the refusals and never the key.
					cs, err := s.b.Store.ChatSession(acct.ID, session)
					if err != nil {
						t.Fatal(err)
					}
					if !strings.Contains(string(cs.History), "the sandbox refused access to") || leaks(string(cs.History), key) {
						t.Errorf("history: refusal recorded %v, key leaked %v", strings.Contains(string(cs.History), "the sandbox refused access to"), leaks(string(cs.History), key))
					}
				})
			}
			if raw, _ := os.ReadFile(filepath.Join(dataDir, "secrets", "session.key")); string(raw) != string(key) {
				t.Error("the session key changed")
			}
		})
	}
}

// clean removes what an attack left in the working directory.
func clean(work string) {
	for _, pat := range []string{"peek-*", "hard-*", "copy-*"} {
		ms, _ := filepath.Glob(filepath.Join(work, pat))
		for _, m := range ms {
			os.RemoveAll(m)
		}
	}
}

// refused matches a refusal in a command's output ("Invalid cross-device link" is how
// Landlock refuses a link out of a tree the command has no rights in).
var refused = regexp.MustCompile(`Permission denied|Operation not permitted|No such file|Cannot open|cannot stat|can't cd|Invalid cross-device link|sandbox refused`)

// leaks reports whether text carries secret raw, as hex or as base64.
func leaks(text string, secret []byte) bool {
	return strings.Contains(text, string(secret)) || strings.Contains(strings.ReplaceAll(text, "\n", ""), hex.EncodeToString(secret)) ||
		strings.Contains(text, base64.StdEncoding.EncodeToString(secret))
}
