package runner_test

import (
	"bytes"
	"context"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"cubicle/backend/agent"
	"cubicle/backend/nodes"
	"cubicle/runner"
)

// runnerOnlyLinks is the shell that starts the runner in a mount namespace of its own with a
// tmpfs over $RG_MNT holding symbolic links the server's disk does not have: the runner's
// disk differs from the server's there, as a runner on another machine's does.
const runnerOnlyLinks = `set -e
mount -t tmpfs -o size=1m,mode=0755 cubicle-runnerguard "$RG_MNT"
ln -s "$RG_SSH" "$RG_MNT/notes"
ln -s "$RG_MNT/c2" "$RG_MNT/c1"
ln -s "$RG_SSH" "$RG_MNT/c2"
ln -s "$RG_SSH/d" "$RG_MNT/keysub"
ln -s "$HOME" "$RG_MNT/up"
ln -s "$RG_DATA" "$RG_MNT/db"
exec "$@"`

// TestRunnerChecksHostPaths: the runner checks host file paths itself, on its own disk. A
// `cubicle runner` process in its own network and mount namespace has symbolic links the
// server cannot see (~/mnt/… on a tmpfs only the runner's namespace mounts); through the chat
// with a scripted model, the agent's host_read_file through such a link into the runner's
// ~/.ssh (directly, through a chain of links, through a link to its parent, and with ".."
// after a link) is refused without the secret, host_write_file through a link into the
// runner's data directory is refused and changes nothing, the data directory named by its
// absolute path is refused (the runner told the server), and ordinary files next to them are
// read and written.
func TestRunnerChecksHostPaths(t *testing.T) {
	needRoot(t)
	if _, err := os.Stat("/usr/bin/unshare"); err != nil {
		t.Skip("needs unshare (util-linux)")
	}
	h := newHost(t)
	s := startServer(t, h.ServerAddr+":0")
	m := s.useModel(t)
	admin, err := s.b.Auth.Admin()
	if err != nil {
		t.Fatal(err)
	}
	// The tool guard OFF: the file guard alone decides (the tool guard would ask before some of
	// these paths, and nobody answers).
	s.do(t, "PUT", "/api/app/admin/security", map[string]any{"guardLevel": "OFF", "protectedPaths": []string{"~/.ssh"}}, http.StatusOK, nil)

	root := t.TempDir()
	home, data := filepath.Join(root, "home"), filepath.Join(root, "runner-data")
	keys, mnt := filepath.Join(home, ".ssh"), filepath.Join(home, "mnt")
	const secret = "RUNNER-ONLY-LINK-SECRET-51c9"
	for _, d := range []string{filepath.Join(keys, "d"), mnt, data} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	canary := filepath.Join(data, "canary")
	files := map[string]string{filepath.Join(keys, "id_rsa"): secret, filepath.Join(home, "plain.txt"): "plain-runner-file", canary: "CANARY-" + secret}
	for p, c := range files {
		if err := os.WriteFile(p, []byte(c), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	var c nodes.Created
	s.do(t, "POST", "/api/app/admin/runners", map[string]any{"name": "linked box"}, http.StatusCreated, &c)
	wrap := append(h.wrap(), "env", "HOME="+home, "RG_MNT="+mnt, "RG_SSH="+keys, "RG_DATA="+data,
		"unshare", "-m", "--propagation", "private", "sh", "-c", runnerOnlyLinks, "runnerguard")
	startRunner(t, wrap, "--server", s.url, "--token", c.Token, "--data-dir", data, "--engine", "none")
	s.waitStatus(t, c.ID, nodes.StatusConnected, 2*time.Minute)
	if v := s.runnerView(t, c.ID); !strings.Contains(strings.Join(v.Capabilities, ","), "host-guard-v1") {
		t.Fatalf("the runner does not advertise host-guard-v1: %v", v.Capabilities)
	}
	var ag struct{ ID string }
	s.do(t, "POST", "/api/app/agents", map[string]string{"name": "Ada"}, http.StatusCreated, &ag)
	s.do(t, "PUT", "/api/app/agents/"+ag.ID+"/node", map[string]string{"nodeId": c.ID}, http.StatusOK, nil)
	s.setComputer(t, ag.ID, "host", false)
	ctx := context.Background()

	// The links are the runner's alone: the server's disk has an empty ~/mnt.
	if entries, err := os.ReadDir(mnt); err != nil || len(entries) != 0 {
		t.Fatalf("the server sees %v in %s (%v): the runner's disk must differ here", entries, mnt, err)
	}
	state, text := s.call(ctx, t, m, admin.ID, ag.ID, "l0", "host_shell", map[string]any{"command": "readlink mnt/notes mnt/db"})
	if state != agent.StateSuccess || !strings.Contains(text, keys+"\n") || !strings.Contains(text, data+"\n") {
		t.Fatalf("the runner's links: %s %q", state, text)
	}
	dbFile := filepath.Join(data, runner.DBFile)
	// refused runs one call and wants it denied, without the secret, with every text of in.
	refused := func(session, tool string, args map[string]any, in ...string) {
		t.Helper()
		state, text := s.call(ctx, t, m, admin.ID, ag.ID, session, tool, args)
		t.Logf("%s %v: %s %q", tool, args, state, text)
		ok := state == agent.StateDenied && !strings.Contains(text, secret)
		for _, w := range in {
			ok = ok && strings.Contains(text, w)
		}
		if !ok {
			t.Errorf("%s %v on the runner: %s %q; want it refused with %q", tool, args, state, text, in)
		}
	}
	// The runner's own refusal, naming the protected location.
	const onRunner = "checked the path on its own disk (its symbolic links resolved): tools may not "
	refusedKeys := []string{onRunner, "protected location " + keys + ","}
	refused("l1", "host_read_file", map[string]any{"path": "~/mnt/notes/id_rsa"}, refusedKeys...)
	refused("l2", "host_read_file", map[string]any{"path": "mnt/c1/id_rsa"}, refusedKeys...)
	refused("l3", "host_read_file", map[string]any{"path": "~/mnt/up/.ssh/id_rsa"}, refusedKeys...)
	// ".." after a link: the server cleans it to ~/mnt/id_rsa, the kernel opens ~/.ssh/id_rsa.
	refused("l4", "host_read_file", map[string]any{"path": mnt + "/keysub/../id_rsa"}, refusedKeys...)
	refused("l5", "host_write_file", map[string]any{"path": mnt + "/keysub/../authorized_keys", "content": "ssh-ed25519 AAAA attacker"}, refusedKeys...)
	refused("l6", "host_write_file", map[string]any{"path": "~/mnt/notes/authorized_keys", "content": "ssh-ed25519 AAAA attacker"}, refusedKeys...)
	if _, err := os.Stat(filepath.Join(keys, "authorized_keys")); err == nil {
		t.Error("a refused write reached the runner's ~/.ssh")
	}
	// The runner's data directory: through a runner-only link (the runner refuses), by its
	// absolute path (the runner told the server, whose guard refuses first, host_shell too).
	before, err := os.ReadFile(canary)
	if err != nil {
		t.Fatal(err)
	}
	refused("d1", "host_write_file", map[string]any{"path": "~/mnt/db/canary", "content": "overwritten"}, "keeps host tools out of its own data directory "+data)
	refused("d2", "host_write_file", map[string]any{"path": "~/mnt/db/" + runner.DBFile, "content": "x"}, "keeps host tools out of its own data directory "+data)
	refused("d3", "host_read_file", map[string]any{"path": "~/mnt/db/canary"}, "keeps host tools out of its own data directory "+data)
	refused("d4", "host_read_file", map[string]any{"path": dbFile}, "protected location "+data)
	refused("d5", "host_read_file", map[string]any{"path": canary}, "protected location "+data)
	refused("d6", "host_shell", map[string]any{"command": "cat " + canary}, "protected location "+data)
	refused("d7", "host_shell", map[string]any{"command": "cd " + data + " && cat canary"}, "protected location "+data)
	refused("d8", "host_write_file", map[string]any{"path": mnt + "/keysub/../../../runner-data/canary", "content": "overwritten"}, "")
	if after, err := os.ReadFile(canary); err != nil || !bytes.Equal(after, before) {
		t.Fatalf("the runner's data file changed: %q, %v", after, err)
	}
	if fi, err := os.Stat(dbFile); err != nil || fi.Size() < 4096 {
		t.Fatalf("the runner's store after a refused overwrite: %v, %v", fi, err)
	}
	// Ordinary files next to them: read and written, through the runner's links too.
	state, text = s.call(ctx, t, m, admin.ID, ag.ID, "o1", "host_read_file", map[string]any{"path": "~/mnt/up/plain.txt"})
	if state != agent.StateSuccess || !strings.Contains(text, "plain-runner-file") {
		t.Errorf("an ordinary file through a runner-only link: %s %q", state, text)
	}
	state, text = s.call(ctx, t, m, admin.ID, ag.ID, "o2", "host_write_file", map[string]any{"path": "~/mnt/up/new.txt", "content": "written-through-link"})
	if raw, err := os.ReadFile(filepath.Join(home, "new.txt")); state != agent.StateSuccess || err != nil || string(raw) != "written-through-link" {
		t.Errorf("an ordinary write through a runner-only link: %s %q; file %q, %v", state, text, raw, err)
	}
	// An ordinary file with .. after a link into ~/.ssh (~/.ssh/.. is ~ on the runner): the
	// guard lets it through, but the kernel walks through ~/.ssh, which the host sandbox hides.
	state, text = s.call(ctx, t, m, admin.ID, ag.ID, "o3", "host_read_file", map[string]any{"path": mnt + "/notes/../plain.txt"})
	if state == agent.StateSuccess || !strings.Contains(text, "permission denied") || strings.Contains(text, "protected location") {
		t.Errorf("an ordinary file with .. after a link into ~/.ssh: %s %q (want the sandbox's refusal)", state, text)
	}
}
