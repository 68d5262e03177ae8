//go:build linux

package sandbox

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"cubicle/backend/fault"
	"cubicle/internal/testenv"
)

const secret = "SIGNING-KEY-5f1d0c"

// kinds are the sandboxes of this machine each test runs under; CI has both (bubblewrap is
// installed by .ci/install-deps.sh, Landlock is in the kernel).
func kinds(t *testing.T) []*Sandbox {
	t.Helper()
	var out []*Sandbox
	for _, k := range []Kind{Bwrap, Landlock} {
		s, err := New(k)
		if err != nil {
			if testenv.Required() {
				t.Fatalf("%s: %v (CUBICLE_REQUIRE_ALL=1)", k, err)
			}
			t.Logf("%s not available: %v", k, err)
			continue
		}
		out = append(out, s)
	}
	if len(out) == 0 {
		t.Skip("no sandbox on this machine")
	}
	return out
}

// layout is a data directory with a key, a work directory and a protected home folder.
func layout(t *testing.T) (data, work, ssh string, p Policy) {
	t.Helper()
	root := t.TempDir()
	data, work, ssh = filepath.Join(root, "data"), filepath.Join(root, "work"), filepath.Join(root, "home", ".ssh")
	for _, d := range []string{data, work, ssh} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	os.WriteFile(filepath.Join(data, "session.key"), []byte(secret), 0o600)
	os.WriteFile(filepath.Join(ssh, "id_ed25519"), []byte(secret), 0o600)
	os.WriteFile(filepath.Join(work, "notes.txt"), []byte("plain notes"), 0o644)
	return data, work, ssh, Policy{WorkDir: work, Hidden: []string{data, ssh}, Network: true}
}

func run(t *testing.T, s *Sandbox, p Policy, dir, script string) (string, int) {
	t.Helper()
	c, err := s.Wrap(context.Background(), p, []string{"/bin/sh", "-c", script})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Cleanup()
	cmd := exec.Command(c.Argv[0], c.Argv[1:]...)
	cmd.Env = append(os.Environ(), c.Env...)
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	var ee *exec.ExitError
	if err != nil && !errors.As(err, &ee) {
		t.Fatalf("%s: %v", script, err)
	}
	return string(out), cmd.ProcessState.ExitCode()
}

// TestSandboxKeepsSecrets: under each sandbox, ordinary work in the working directory goes
// on while every way tried to the hidden data directory and ~/.ssh is refused by the kernel.
func TestSandboxKeepsSecrets(t *testing.T) {
	for _, s := range kinds(t) {
		t.Run(string(s.Kind()), func(t *testing.T) {
			data, work, ssh, p := layout(t)
			out, code := run(t, s, p, work, "cat notes.txt && echo made > new.txt && cat new.txt && ls /usr/bin | head -1 >/dev/null && echo ok")
			if code != 0 || !strings.Contains(out, "plain notes") || !strings.Contains(out, "made") {
				t.Fatalf("ordinary work in the sandbox: %d %q", code, out)
			}
			key := filepath.Join(data, "session.key")
			none, _ := New(None)
			for _, attack := range []string{
				"cat " + key,
				"cat " + filepath.Join(ssh, "id_ed25519"),
				"cd " + data + " && cat session.key",
				"ln -s " + key + " " + work + "/l && cat " + work + "/l",
				"ln " + key + " " + work + "/h && cat " + work + "/h",
				"cat /proc/self/root" + key,
				"cat /proc/1/root" + key,
				"tar -cf - -C " + filepath.Dir(data) + " data | tar -xOf -",
				"cp -r " + data + " " + work + "/copy && cat " + work + "/copy/*",
				"python3 -c \"import os;print(open(os.path.join('" + filepath.Dir(data) + "','da'+'ta','session'+'.key')).read())\"",
				"echo " + b64(key) + " | base64 -d | xargs cat",
			} {
				clean := func() {
					os.Remove(filepath.Join(work, "l"))
					os.Remove(filepath.Join(work, "h"))
					os.RemoveAll(filepath.Join(work, "copy"))
				}
				clean()
				out, _ := run(t, s, p, work, attack)
				clean()
				if strings.Contains(out, secret) {
					t.Errorf("%s: the secret was read: %q", attack, out)
				}
				// The control: without the sandbox the same command reads it (the attack is real).
				open := p
				open.AllowNone = true
				if out, _ := run(t, none, open, work, attack); !strings.Contains(out, secret) && !strings.Contains(attack, "/proc/1/root") {
					t.Errorf("%s: without the sandbox the attack does not read the key either, so it tests nothing: %q", attack, out)
				}
				clean()
			}
			if raw, _ := os.ReadFile(key); string(raw) != secret {
				t.Errorf("the key changed: %q", raw)
			}
			// Writes outside the working directory and the scratch directories are refused.
			out, code = run(t, s, p, work, "echo x > /etc/cubicle-sandbox-test")
			if code == 0 {
				os.Remove("/etc/cubicle-sandbox-test")
				t.Fatalf("a write to /etc was allowed: %q", out)
			}
			// The file helper: a plain file reads, a hidden one is refused as forbidden.
			got, err := s.ReadFile(context.Background(), p, filepath.Join(work, "notes.txt"), 1<<20)
			if err != nil || string(got) != "plain notes" {
				t.Fatalf("sandboxed read: %q %v", got, err)
			}
			got, err = s.ReadFile(context.Background(), p, key, 1<<20)
			if !errors.Is(err, fault.ErrForbidden) || strings.Contains(string(got), secret) {
				t.Fatalf("sandboxed read of the key: %q %v", got, err)
			}
			if err := s.WriteFile(context.Background(), p, filepath.Join(work, "w", "x.txt"), []byte("hi")); err != nil {
				t.Fatalf("sandboxed write: %v", err)
			}
			if err := s.WriteFile(context.Background(), p, key, []byte("overwritten")); !errors.Is(err, fault.ErrForbidden) {
				t.Fatalf("sandboxed write of the key: %v", err)
			}
			if raw, _ := os.ReadFile(key); string(raw) != secret {
				t.Errorf("the key changed: %q", raw)
			}
		})
	}
}

// TestSandboxNetworkOff: a node without network: a TCP connection from the sandbox fails.
func TestSandboxNetworkOff(t *testing.T) {
	for _, s := range kinds(t) {
		t.Run(string(s.Kind()), func(t *testing.T) {
			_, work, _, p := layout(t)
			ln, err := netListen()
			if err != nil {
				t.Fatal(err)
			}
			defer ln.Close()
			script := "python3 -c \"import socket;socket.create_connection(('127.0.0.1'," + ln.port + "),3);print('connected')\""
			out, _ := run(t, s, p, work, script)
			if !strings.Contains(out, "connected") {
				t.Fatalf("network on: %q", out)
			}
			p.Network = false
			out, _ = run(t, s, p, work, script)
			if strings.Contains(out, "connected") {
				t.Fatalf("network off, yet connected: %q", out)
			}
		})
	}
}

// TestNoSandboxRefuses: without a sandbox a command is refused, saying what to install,
// unless the node allows running without one.
func TestNoSandboxRefuses(t *testing.T) {
	s, err := New(None)
	if err != nil {
		t.Fatal(err)
	}
	_, err = s.Wrap(context.Background(), Policy{}, []string{"/bin/true"})
	if !errors.Is(err, fault.ErrUnavailable) || !strings.Contains(err.Error(), "no sandbox") && !strings.Contains(err.Error(), "there is none") {
		t.Fatalf("no sandbox: %v", err)
	}
	c, err := s.Wrap(context.Background(), Policy{AllowNone: true}, []string{"/bin/true"})
	if err != nil || c.Sandboxed || c.Argv[0] != "/bin/true" {
		t.Fatalf("allowed without a sandbox: %+v %v", c, err)
	}
}
