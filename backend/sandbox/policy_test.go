package sandbox

import (
	"slices"
	"strings"
	"testing"
)

// tree is a fake file system for LandlockPlan: directory → entries.
var tree = map[string][]Entry{
	"/":              {{Name: "usr", Dir: true}, {Name: "tmp", Dir: true}, {Name: "home", Dir: true}, {Name: "dev", Dir: true}, {Name: "vmlinuz", Link: true}},
	"/tmp":           {{Name: "x", Dir: true}, {Name: "data", Dir: true}, {Name: "note.txt"}, {Name: "sneaky", Link: true}},
	"/home":          {{Name: "u", Dir: true}},
	"/home/u":        {{Name: ".ssh", Dir: true}, {Name: "proj", Dir: true}, {Name: ".bashrc"}},
	"/home/u/.ssh":   {{Name: "id_rsa"}},
	"/tmp/data":      {{Name: "session.key"}},
	"/tmp/x":         {},
	"/usr":           {{Name: "bin", Dir: true}},
	"/home/u/proj":   {},
	"/dev":           {{Name: "sda"}, {Name: "null"}},
	"/home/u/.cache": {},
}

func readTree(dir string) ([]Entry, error) { return tree[dir], nil }

func grants(gs []Grant) map[string]Access {
	out := map[string]Access{}
	for _, g := range gs {
		out[g.Path] = max(out[g.Path], g.Access)
	}
	return out
}

// TestLandlockPlan: the hidden paths and /dev are never granted, nor anything below them;
// the directories on the way to them are listable only; their siblings are granted in full;
// links are never granted by name; the minimal /dev is.
func TestLandlockPlan(t *testing.T) {
	p := Policy{WorkDir: "/home/u", ReadWrite: []string{"/tmp"}, Hidden: []string{"/tmp/data", "/home/u/.ssh"}}.Clean()
	got := grants(LandlockPlan(p, readTree))
	want := map[string]Access{
		"/": ListOnly, "/usr": ReadOnly, "/tmp": ListOnly, "/tmp/x": ReadWrite, "/tmp/note.txt": ReadWrite,
		"/home": ListOnly, "/home/u": ListOnly, "/home/u/proj": ReadWrite, "/home/u/.bashrc": ReadWrite,
		"/dev/null": Device, "/dev/tty": Device, "/dev/pts": Device,
	}
	for path, acc := range want {
		if g, ok := got[path]; !ok || g != acc {
			t.Errorf("%s: got %v (granted %v), want %v", path, g, ok, acc)
		}
	}
	for path := range got {
		for _, bad := range []string{"/tmp/data", "/home/u/.ssh", "/dev/sda", "/tmp/sneaky", "/vmlinuz"} {
			if Within(path, bad) {
				t.Errorf("%s is granted (hidden, raw device or link)", path)
			}
		}
		if path == "/dev" {
			t.Error("/dev is granted as a whole")
		}
	}
}

// TestPolicyClean: relative and duplicate paths go; a read-write path inside a hidden one is
// not writable (hiding wins), nor is the work directory then.
func TestPolicyClean(t *testing.T) {
	p := Policy{WorkDir: "/data/cubicle/work", ReadWrite: []string{"rel", "/srv/", "/srv", "/data/cubicle"}, Hidden: []string{"/data/cubicle", "x"}}.Clean()
	if p.WorkDir != "" || !slices.Equal(p.ReadWrite, []string{"/srv"}) || !slices.Equal(p.Hidden, []string{"/data/cubicle"}) {
		t.Fatalf("clean: %+v", p)
	}
}

func TestBwrapArgs(t *testing.T) {
	exists := map[string]bool{"/home/u": true, "/tmp": true, "/tmp/data": true, "/home/u/.netrc": false, "/home/u/.ssh": true, "/home/u/.ssh/keys": true}
	kind := func(p string) (bool, bool) {
		dir, ok := exists[p]
		return ok, dir
	}
	p := Policy{WorkDir: "/home/u", ReadWrite: []string{"/tmp"}, Hidden: []string{"/tmp/data", "/home/u/.netrc", "/home/u/.ssh", "/home/u/.ssh/keys", "/missing"}}.Clean()
	a := strings.Join(BwrapArgs(p, kind, "/run/deny", "/home/u"), " ")
	for _, want := range []string{
		"--cap-drop ALL", "--unshare-pid", "--unshare-net", "--die-with-parent", "--new-session",
		"--ro-bind / / --dev /dev --proc /proc",
		"--bind /tmp /tmp --bind /home/u /home/u",
		"--perms 0000 --tmpfs /tmp/data --remount-ro /tmp/data",
		"--perms 0000 --tmpfs /home/u/.ssh --remount-ro /home/u/.ssh",
		"--ro-bind /run/deny /home/u/.netrc",
		"--chdir /home/u",
	} {
		if !strings.Contains(a, want) {
			t.Errorf("bwrap arguments lack %q:\n%s", want, a)
		}
	}
	// The hidden paths come after the read-write binds (a later mount covers an earlier one);
	// a missing path and one inside another hidden directory are left out.
	if strings.Index(a, "--tmpfs /tmp/data") < strings.Index(a, "--bind /tmp /tmp") {
		t.Errorf("a hidden path is mounted before the bind that would uncover it:\n%s", a)
	}
	if strings.Contains(a, "/missing") || strings.Contains(a, ".ssh/keys") {
		t.Errorf("a missing or covered path is mounted:\n%s", a)
	}
	p.Network = true
	if a := strings.Join(BwrapArgs(p, kind, "/run/deny", ""), " "); strings.Contains(a, "--unshare-net") || strings.Contains(a, "--chdir") {
		t.Errorf("network on / no chdir: %s", a)
	}
}

func TestSBPL(t *testing.T) {
	p := Policy{WorkDir: "/Users/u/proj", Hidden: []string{"/Users/u/Library/Application Support/Cubicle", `/Users/u/we"ird`}}.Clean()
	prof := SBPL(p)
	for _, want := range []string{
		"(version 1)", "(deny file-write*)", `(subpath "/Users/u/proj")`, "(deny file-read* file-write*",
		`(subpath "/Users/u/Library/Application Support/Cubicle")`, `(subpath "/Users/u/we\"ird")`, "(deny network*)",
	} {
		if !strings.Contains(prof, want) {
			t.Errorf("profile lacks %q:\n%s", want, prof)
		}
	}
	// The hidden rule comes after the write allowance: in SBPL the last matching rule wins.
	if strings.Index(prof, "(deny file-read*") < strings.Index(prof, "(allow file-write*") {
		t.Errorf("hidden paths are denied before the write allowance:\n%s", prof)
	}
	p.Network = true
	if strings.Contains(SBPL(p), "(deny network*)") {
		t.Error("network on, yet denied")
	}
}

func TestWindowsPolicy(t *testing.T) {
	p := Policy{WorkDir: `C:\Users\u\proj`, ReadWrite: []string{`C:\Users\u\PROJ`, `D:\scratch`}, Hidden: []string{`C:\Users\u\AppData\Roaming\Cubicle`}}
	got := WindowsPolicy(p)
	want := []WindowsRule{{Path: `C:\Users\u\PROJ`, Write: true}, {Path: `D:\scratch`, Write: true}, {Path: `C:\Users\u\AppData\Roaming\Cubicle`, Deny: true}}
	if !slices.Equal(got, want) {
		t.Fatalf("windows rules: %+v, want %+v", got, want)
	}
}

func TestExplain(t *testing.T) {
	p := Policy{WorkDir: "/w", Hidden: []string{"/srv/cubicle"}}
	out := []byte("cat: /srv/cubicle/secrets/session.key: Permission denied\n" +
		"PermissionError: [Errno 13] Permission denied: '/srv/cubicle/secrets/session.key'\n" +
		"sh: 1: cannot create /etc/x: Read-only file system\nall fine\ncat: session.key: Permission denied\n")
	got := Explain(p, out)
	if len(got) != 3 || !strings.Contains(got[0], "refused access to /srv/cubicle/secrets/session.key") || !strings.Contains(got[0], "/srv/cubicle is hidden") ||
		!strings.Contains(got[1], "refused write access to /etc/x") || !strings.Contains(got[2], "cat: session.key: Permission denied") {
		t.Fatalf("explain: %q", got)
	}
	if got := Explain(p, []byte("exit 1\n")); len(got) != 0 {
		t.Fatalf("nothing refused: %q", got)
	}
}

// TestRefusals: each refusal line becomes a structured refusal: a hidden path touched (read),
// a write outside the writable paths (a read-only file system under bubblewrap, a denied
// create under Landlock), or an unexplained denial without a path.
func TestRefusals(t *testing.T) {
	p := Policy{WorkDir: "/w", Hidden: []string{"/srv/cubicle", "/home/u/.kube"}}
	cases := []struct {
		name, line string
		want       []Refusal
	}{
		{"hidden file", "cat: /srv/cubicle/secrets/session.key: Permission denied",
			[]Refusal{{Path: "/srv/cubicle/secrets/session.key", Hidden: "/srv/cubicle"}}},
		{"credentials", "cat: /home/u/.kube/config: Permission denied", []Refusal{{Path: "/home/u/.kube/config", Hidden: "/home/u/.kube"}}},
		{"bwrap write", "sh: 1: cannot create /srv/out/x.txt: Read-only file system", []Refusal{{Path: "/srv/out/x.txt", Write: true}}},
		{"landlock write", "/bin/sh: 1: cannot create /srv/out/x.txt: Permission denied", []Refusal{{Path: "/srv/out/x.txt", Write: true}}},
		{"landlock touch", "touch: cannot touch '/srv/out/y': Permission denied", []Refusal{{Path: "/srv/out/y", Write: true}}},
		{"node read (an MCP server's result)", "Error: EACCES: permission denied, open '/srv/cubicle/secrets/session.key'",
			[]Refusal{{Path: "/srv/cubicle/secrets/session.key", Hidden: "/srv/cubicle"}}},
		{"node write", "Error: EROFS: read-only file system, open '/srv/out/z'", []Refusal{{Path: "/srv/out/z", Write: true}}},
		{"a read denied by the file's mode", "cat: /etc/shadow: Permission denied", []Refusal{{}}},
		{"no path", "cat: session.key: Permission denied", []Refusal{{}}},
		{"twice", "cat: /srv/cubicle/k: Permission denied\ncat: /srv/cubicle/k: Permission denied",
			[]Refusal{{Path: "/srv/cubicle/k", Hidden: "/srv/cubicle"}}},
		{"nothing", "exit 1", nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got := Refusals(p, []byte(c.line+"\n"))
			if len(got) != len(c.want) {
				t.Fatalf("%+v, want %+v", got, c.want)
			}
			for i := range got {
				got[i].Line = ""
				if got[i] != c.want[i] {
					t.Fatalf("%+v, want %+v", got[i], c.want[i])
				}
			}
		})
	}
}

// TestSetupRaced: only bubblewrap's own failure to remount a vanished host mount is run
// again; a command's failure, even one that prints a line like bubblewrap's, is not.
func TestSetupRaced(t *testing.T) {
	const raced = `bwrap: Can't bind mount /oldroot/ on /newroot/: Unable to apply mount flags: remount "/newroot/run/netns/netns-8850d63c": No such file or directory`
	for _, c := range []struct {
		code   int
		stderr string
		want   bool
	}{
		{1, raced, true},
		{1, raced + "\n", true},
		{1, strings.Replace(raced, "No such file or directory", "Invalid argument", 1), true},
		{2, raced, false},
		{1, raced + "\nmore output", false},
		{1, "output first\n" + raced, false},
		{1, "bwrap: Can't mount tmpfs on /newroot/x: No such file or directory", false},
		{1, `bwrap: Can't bind mount /oldroot/ on /newroot/: Unable to apply mount flags: remount "/newroot/x": Permission denied`, false},
		{1, "", false},
	} {
		if got := SetupRaced(c.code, []byte(c.stderr)); got != c.want {
			t.Errorf("SetupRaced(%d, %q) = %v, want %v", c.code, c.stderr, got, c.want)
		}
	}
}
