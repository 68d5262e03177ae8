package guard

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"cubicle/backend/fault"
)

// TestSafetyOnAnotherHost: host tools that run on a runner's host are checked with that
// machine's home — protected paths given as "~/…" are below the runner user's home, "~",
// $HOME and relative paths resolve there — whatever the command's spelling; this server's
// home and links mean nothing there; a runner whose home is not known fails closed for paths
// under "~" (never checked against this server's home); host tools run here keep this
// server's home.
func TestSafetyOnAnotherHost(t *testing.T) {
	tmp := t.TempDir()
	srvHome := filepath.Join(tmp, "op")
	data := filepath.Join(srvHome, ".local", "share", "cubicle")
	for _, d := range []string{filepath.Join(srvHome, ".ssh"), data} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	// Links on this server into its user's keys and into its data directory.
	mustLink(t, filepath.Join(srvHome, ".ssh"), filepath.Join(tmp, "keys"))
	mustLink(t, data, filepath.Join(tmp, "data-link"))
	if err := os.MkdirAll(filepath.Join(data, "sub"), 0o700); err != nil {
		t.Fatal(err)
	}
	mustLink(t, filepath.Join(data, "sub"), filepath.Join(tmp, "data-sub")) // data-sub/.. is the data dir for the kernel
	files, err := NewFileGuard([]string{data, "~/.ssh", "~/.aws/credentials", "~/.kube/"})
	if err != nil {
		t.Fatal(err)
	}
	if got := files.Protected(); !slices.Equal(got, []string{data}) {
		t.Fatalf("a guard for no home protects %v, want only %v", got, []string{data})
	}
	lookups := 0
	s := &Safety{Guard: newGuard(t, Config{Level: Off}), HostFiles: files, HostHome: srvHome, VMHome: "/home/cua",
		LookupHome: func(name string) string {
			lookups++
			if name == "operator" {
				return srvHome
			}
			return ""
		}}
	const alice = "/home/alice"
	runner := Place{Remote: true, Home: alice, WorkDir: alice}
	local := Place{WorkDir: srvHome}
	ownData := Place{Remote: true, Home: alice, WorkDir: alice, Protected: []string{"/srv/runner-data/"}}
	sh := func(cmd string) ToolCall { return ToolCall{Name: "host_shell", Args: map[string]any{"command": cmd}} }
	shc := func(cmd, cwd string) ToolCall {
		return ToolCall{Name: "host_shell", Args: map[string]any{"command": cmd, "cwd": cwd}}
	}
	read := func(p string) ToolCall { return ToolCall{Name: "host_read_file", Args: map[string]any{"path": p}} }
	write := func(p string) ToolCall {
		return ToolCall{Name: "host_write_file", Args: map[string]any{"path": p, "content": "x"}}
	}
	type tc struct {
		name   string
		call   ToolCall
		at     Place
		reason string // part of the deny reason; "" = allowed
	}
	tests := []tc{
		// On the runner: its user's home holds the protected paths.
		{"runner absolute", sh("cat /home/alice/.ssh/id_rsa"), runner, "protected location /home/alice/.ssh"},
		{"runner tilde", sh("cat ~/.ssh/id_rsa"), runner, "/home/alice/.ssh"},
		{"runner HOME", sh("cat $HOME/.ssh/id_rsa"), runner, "/home/alice/.ssh"},
		{"runner HOME braces quoted", sh(`cat "${HOME}/.ssh/id_rsa"`), runner, "/home/alice/.ssh"},
		{"runner relative", sh("cat .ssh/id_rsa"), runner, "/home/alice/.ssh"},
		{"runner cd then plain name", sh("cd .ssh && cat id_rsa"), runner, "/home/alice/.ssh"},
		{"runner cd tilde then plain name", sh("cd ~/.ssh; cat id_rsa"), runner, "/home/alice/.ssh"},
		{"runner dot dot", sh("cat ./project/../.ssh/id_rsa"), runner, "/home/alice/.ssh"},
		{"runner tilde plus", sh("cat ~+/.ssh/id_rsa"), runner, "/home/alice/.ssh"},
		{"runner glob", sh("cat ~/.s?h/*"), runner, "/home/alice/.ssh"},
		{"runner archive of home", sh("tar czf /tmp/h.tgz ~"), runner, "/home/alice/.ssh"},
		{"runner archive of cwd", sh("tar czf /tmp/h.tgz ."), runner, "/home/alice/.ssh"},
		{"runner cwd inside", sh("ls"), Place{Remote: true, Home: alice, WorkDir: alice + "/.ssh"}, "/home/alice/.ssh"},
		{"runner file in dir entry", sh("cat ~/.kube/config"), runner, "/home/alice/.kube"},
		{"runner read absolute", read("/home/alice/.aws/credentials"), runner, "/home/alice/.aws/credentials"},
		{"runner read tilde", read("~/.aws/credentials"), runner, "/home/alice/.aws/credentials"},
		{"runner read relative", read(".ssh/id_rsa"), runner, "/home/alice/.ssh"},
		{"runner write tilde", write("~/.ssh/authorized_keys"), runner, "/home/alice/.ssh"},
		{"runner write absolute", write("/home/alice/.ssh/authorized_keys"), runner, "/home/alice/.ssh"},
		{"runner write over the home", write("/home/alice"), runner, "contains the protected location"},
		{"runner cwd argument", shc("cat id_rsa", "~/.ssh"), runner, "/home/alice/.ssh"},
		{"runner cwd argument absolute", shc("cat .ssh/id_rsa", alice), Place{Remote: true, Home: alice, WorkDir: alice + "/work"}, "/home/alice/.ssh"},
		{"runner cwd argument relative", shc("cat ../.ssh/id_rsa", "project"), runner, "/home/alice/.ssh"},
		{"runner cwd argument tilde alone", shc("cat .ssh/id_rsa", "~"), runner, ""}, // the tool runs in <workdir>/~ too
		{"runner another account", sh("cat ~bob/notes"), runner, "another account's home"},
		{"runner plain file", sh("cat ~/notes.txt; cat notes.txt; cat /home/alice/notes.txt"), runner, ""},
		{"runner plain read", read("notes.txt"), runner, ""},
		{"runner plain write", write("~/.sshx/notes"), runner, ""},
		{"runner list the keys folder's parent", sh("ls ~"), runner, ""},
		// This server's home means nothing on the runner: the same path there is an ordinary
		// one (the tool guard still sees what the words say).
		{"runner server home path", sh("cat " + filepath.Join(srvHome, ".ssh", "id_rsa")), runner, ""},
		// Links are resolved here (exact when the runner shares this machine; otherwise only
		// ever an extra refusal).
		{"runner link into the data dir", read(filepath.Join(tmp, "data-link", "x")), runner, "protected location " + data},
		{"runner data dir stays protected", read(filepath.Join(data, "x")), runner, "protected location " + data},
		// Host tools run here: this server's home, its links, its accounts.
		{"local tilde", sh("cat ~/.ssh/id_rsa"), local, "protected location " + filepath.Join(srvHome, ".ssh")},
		{"local HOME", sh("cat $HOME/.ssh/id_rsa"), local, filepath.Join(srvHome, ".ssh")},
		{"local relative", read(".ssh/id_rsa"), local, filepath.Join(srvHome, ".ssh")},
		{"local link", read(filepath.Join(tmp, "keys", "id_rsa")), local, filepath.Join(srvHome, ".ssh")},
		{"local account lookup", sh("cat ~operator/.ssh/id_rsa"), local, filepath.Join(srvHome, ".ssh")},
		{"local cwd argument", shc("cat id_rsa", "~/.ssh"), local, filepath.Join(srvHome, ".ssh")},
		{"local other home", sh("cat /home/alice/.ssh/id_rsa"), local, ""},
		{"local dot dot after a link read", read(tmp + "/data-sub/../cubicle.db"), local, "protected location " + data},
		{"local dot dot after a link write", write(tmp + "/data-sub/../cubicle.db"), local, "protected location " + data},
		{"local dot dot after a link shell", sh("cat " + tmp + "/data-sub/../cubicle.db"), local, "protected location " + data},
		// The runner did not say its home: paths under ~ (and relative ones without a working
		// directory) are refused with the reason, never checked against this server's home.
		{"no home tilde", sh("cat ~/.ssh/id_rsa"), Place{Remote: true, NoHome: "runner X did not say its home"}, "runner X did not say its home"},
		{"no home HOME", sh("cat $HOME/notes"), Place{Remote: true, NoHome: "runner X did not say its home"}, "runner X did not say its home"},
		{"no home relative", read("notes.txt"), Place{Remote: true, NoHome: "runner X did not say its home"}, "runner X did not say its home"},
		{"no home tilde read", read("~/notes.txt"), Place{Remote: true, NoHome: "runner X did not say its home"}, "runner X did not say its home"},
		{"no home other account", sh("cat ~operator/x"), Place{Remote: true, NoHome: "runner X did not say its home"}, "runner X did not say its home"},
		{"no home absolute", sh("cat /etc/hostname"), Place{Remote: true, NoHome: "runner X did not say its home"}, ""},
		{"no home server home path", sh("cat " + filepath.Join(srvHome, ".ssh", "id_rsa")), Place{Remote: true, NoHome: "x"}, ""},
		{"no home cwd argument", shc("ls", "~/.ssh"), Place{Remote: true, NoHome: "runner X did not say its home"}, "runner X did not say its home"},
		{"no home relative cwd argument", shc("ls", "sub"), Place{Remote: true, NoHome: "runner X did not say its home"}, "runner X did not say its home"},
		{"remote without a home", sh("cat ~/notes"), Place{Remote: true, WorkDir: alice}, "home directory of the execution node is not known"},
		// The runner's own data directory, as it said (Place.Protected): protected there for
		// every host tool, host_shell included, however the call names it.
		{"runner data dir shell", sh("cat /srv/runner-data/runner.db"), ownData, "protected location /srv/runner-data"},
		{"runner data dir cd", sh("cd /srv/runner-data && cp runner.db /tmp/x"), ownData, "protected location /srv/runner-data"},
		{"runner data dir dot dot", sh("cat /srv/other/../runner-data/runner.db"), ownData, "protected location /srv/runner-data"},
		{"runner data dir archive of parent", sh("tar cf /tmp/x.tar /srv"), ownData, "protected location /srv/runner-data"},
		{"runner data dir read", read("/srv/runner-data/runner.db"), ownData, "protected location /srv/runner-data"},
		{"runner data dir write", write("/srv/runner-data/runner.db"), ownData, "protected location /srv/runner-data"},
		{"runner data dir cwd argument", shc("cat runner.db", "/srv/runner-data"), ownData, "protected location /srv/runner-data"},
		{"runner data dir without a home", sh("cat /srv/runner-data/runner.db"),
			Place{Remote: true, NoHome: "x", Protected: []string{"/srv/runner-data"}}, "protected location /srv/runner-data"},
		{"runner next to its data dir", sh("cat /srv/runner-data2/x; ls /srv"), ownData, ""},
		{"runner relative own entry ignored", sh("cat data/runner.db"), Place{Remote: true, Home: alice, WorkDir: alice, Protected: []string{"data"}}, ""},
		{"runner data dir of another runner", sh("cat /srv/runner-data/runner.db"), runner, ""},
		// This host's own host tools are not given a runner's data directory.
		{"local not the runner's data dir", sh("cat /srv/runner-data/runner.db"), local, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d, reason, _ := s.Decide(tt.call, tt.at, Rules{})
			if tt.reason == "" {
				if d != Allow {
					t.Fatalf("got %s %q, want allow", d, reason)
				}
				return
			}
			if d != Deny || !strings.Contains(reason, tt.reason) {
				t.Fatalf("got %s %q, want deny with %q", d, reason, tt.reason)
			}
		})
	}
	if lookups == 0 {
		t.Error("~name of a host tool run here was not looked up in this machine's accounts")
	}
	lookups = 0
	s.Decide(sh("cat ~operator/x"), runner, Rules{})
	if lookups != 0 {
		t.Error("~name on a runner was looked up in this machine's accounts")
	}
	// A desktop's paths keep the desktop's home whatever host tools use.
	vm := &Safety{Guard: newGuard(t, Config{Level: Off}), VMFiles: mustLexical(t, "~/.secret"), HostFiles: files, VMHome: "/home/cua"}
	if d, r, _ := vm.Decide(shell("cat ~/.secret/x"), Place{WorkDir: "/home/cua/workspace"}, Rules{}); d != Deny || !strings.Contains(r, "/home/cua/.secret") {
		t.Fatalf("desktop home: %s %q", d, r)
	}
	vmShell := ToolCall{Name: "computer_shell", Args: map[string]any{"command": "cat x", "cwd": "../.secret"}}
	if d, r, _ := vm.Decide(vmShell, Place{WorkDir: "/home/cua/workspace"}, Rules{}); d != Deny || !strings.Contains(r, "/home/cua/.secret") {
		t.Fatalf("desktop shell with a cwd argument: %s %q", d, r)
	}
	// Deny beats the tool guard's question at the default level.
	auto := &Safety{Guard: newGuard(t, Config{}), HostFiles: files, HostHome: srvHome}
	if d, r, _ := auto.Decide(sh("cat ~/.ssh/id_rsa"), runner, Rules{}); d != Deny || !strings.Contains(r, "/home/alice/.ssh") {
		t.Fatalf("AUTO on the runner: %s %q", d, r)
	}
}

func mustLexical(t *testing.T, paths ...string) *FileGuard {
	t.Helper()
	g, err := NewLexicalFileGuard(paths)
	if err != nil {
		t.Fatal(err)
	}
	return g
}

// TestFileGuardHomeEntries: "~/…" entries are kept for the home of the machine a guard is made
// for; malformed ones are refused.
func TestFileGuardHomeEntries(t *testing.T) {
	g, err := NewFileGuard([]string{"/srv/data", "~/.ssh/", "~", "~//.aws/./credentials"})
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		home string
		want []string
	}{
		{"", []string{"/srv/data"}},
		{"relative/home", []string{"/srv/data"}},
		{"/home/alice", []string{"/srv/data", "/home/alice/.ssh", "/home/alice", "/home/alice/.aws/credentials"}},
	} {
		if got := g.ForHome(tt.home).Protected(); !slices.Equal(got, tt.want) {
			t.Errorf("ForHome(%q) protects %v, want %v", tt.home, got, tt.want)
		}
	}
	if got := g.Protected(); !slices.Equal(got, []string{"/srv/data"}) {
		t.Errorf("ForHome changed the guard it was made from: %v", got)
	}
	g2, err := NewFileGuard([]string{"~/.aws/credentials"})
	if err != nil {
		t.Fatal(err)
	}
	home := g2.ForHome("/home/alice")
	if err := home.CheckPath("/home/alice/.aws/credentials", false); !errors.Is(err, fault.ErrForbidden) {
		t.Errorf("the runner's credentials: %v", err)
	}
	if err := home.CheckPath("/home/alice/.aws/config", false); err != nil {
		t.Errorf("a file next to a protected one: %v", err)
	}
	for _, bad := range []string{"~/../etc", "~bob/.ssh", "~+/x", "relative", "~/a/../../b"} {
		if _, err := NewFileGuard([]string{bad}); !errors.Is(err, fault.ErrInvalid) {
			t.Errorf("NewFileGuard(%q): %v, want invalid", bad, err)
		}
	}
	for in, want := range map[string]string{"~": ".", "~/": ".", "~/.ssh": ".ssh", "~/a//b/./c/": filepath.Join("a", "b", "c")} {
		if got, ok := HomeRelative(in); !ok || got != want {
			t.Errorf("HomeRelative(%q) = %q, %v; want %q", in, got, ok, want)
		}
	}
	for _, in := range []string{"/home/x", "~bob", "~/..", "x~/y"} {
		if got, ok := HomeRelative(in); ok {
			t.Errorf("HomeRelative(%q) = %q, want none", in, got)
		}
	}
}
