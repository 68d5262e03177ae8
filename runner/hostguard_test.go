package runner

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"cubicle/backend/fault"
	"cubicle/runner/wire"
)

// guardDisk is a runner's disk for the host path checks: a home with ~/.ssh, a data directory
// and symbolic links into both, made under a temporary directory.
type guardDisk struct {
	root, home, ssh, data, db string
}

func newGuardDisk(t *testing.T) guardDisk {
	t.Helper()
	root, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	d := guardDisk{root: root, home: filepath.Join(root, "home"), data: filepath.Join(root, "data")}
	d.ssh, d.db = filepath.Join(d.home, ".ssh"), filepath.Join(d.data, DBFile)
	for _, dir := range []string{filepath.Join(d.ssh, "d"), d.data, filepath.Join(d.home, "work")} {
		if err := os.MkdirAll(dir, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	files := map[string]string{filepath.Join(d.ssh, "id_rsa"): "KEY", d.db: "DB", filepath.Join(d.home, "plain.txt"): "plain"}
	for p, s := range files {
		if err := os.WriteFile(p, []byte(s), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	links := map[string]string{
		"notes":    d.ssh,                             // a link to the protected directory
		"db":       d.data,                            // a link to the data directory
		"c1":       filepath.Join(d.home, "c2"),       // a chain: c1 → c2 → ~/.ssh
		"c2":       d.ssh,                             //
		"up":       d.home,                            // a link to the parent of the protected directory
		"rel":      ".ssh",                            // a relative link
		"keysub":   filepath.Join(d.ssh, "d"),         // keysub/.. is ~/.ssh for the kernel, ~ for Clean
		"dangling": filepath.Join(d.ssh, "new-key"),   // a dangling link into ~/.ssh
		"dbfile":   d.db,                              // a link to the data file itself
		"workdir":  filepath.Join(d.home, "work"),     // an ordinary link
		"dbchain":  filepath.Join(d.home, "workdir2"), // dbchain → workdir2 → data
		"workdir2": d.data,                            //
	}
	for name, target := range links {
		if err := os.Symlink(target, filepath.Join(d.home, name)); err != nil {
			t.Fatal(err)
		}
	}
	return d
}

// TestCheckHostPath: the runner's own check refuses paths that resolve on its disk into a
// protected path the server sent or into its data directory — through links, chains of links,
// a link to a parent, relative links, dangling links, ".." after a link, trailing slashes,
// relative paths and files that do not exist yet — with the semantics of FileGuard.Check
// (writing onto a directory that contains a protected path is refused too); ordinary paths
// pass, and a protected entry it cannot use fails the call.
func TestCheckHostPath(t *testing.T) {
	d := newGuardDisk(t)
	r := &Runner{cfg: Config{Name: "box", DataDir: d.data}, log: slog.New(slog.DiscardHandler), sandbox: testSandbox()}
	prot := []string{d.ssh}
	t.Chdir(d.home)
	wd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	relTo := func(p string) string {
		rel, err := filepath.Rel(wd, p)
		if err != nil {
			t.Fatal(err)
		}
		return rel
	}
	h := func(p string) string { return d.home + "/" + p } // as written: not cleaned
	const ok, ssh, data = "", "protected location " + "SSH", "data directory"
	for _, c := range []struct {
		path  string
		write bool
		prot  []string
		want  string // "" allowed; else a text of the refusal
	}{
		{h(".ssh/id_rsa"), false, prot, ssh},
		{h(".ssh") + "/", false, prot, ssh},
		{h(".ssh/sub/new-file"), true, prot, ssh}, // does not exist yet, below the protected dir
		{h("notes/id_rsa"), false, prot, ssh},
		{h("notes/id_rsa"), true, prot, ssh},
		{h("notes") + "/", false, prot, ssh},
		{h("notes/new-file"), true, prot, ssh},
		{h("c1/id_rsa"), false, prot, ssh},
		{h("up/.ssh/id_rsa"), false, prot, ssh},
		{h("up/notes/id_rsa"), false, prot, ssh},
		{h("rel/id_rsa"), false, prot, ssh},
		{h("keysub/../id_rsa"), false, prot, ssh}, // Clean says ~/id_rsa; the kernel opens ~/.ssh/id_rsa
		{h("dangling"), true, prot, ssh},
		{h("./notes//id_rsa"), false, prot, ssh},
		{relTo(h("notes/id_rsa")), false, prot, ssh},
		{relTo(h(".ssh/id_rsa")), false, prot, ssh},
		{d.home, true, prot, "contains the protected location"}, // writing onto a parent
		{h("up"), true, prot, "contains the protected location"},
		{d.db, false, nil, data},
		{d.db, true, prot, data},
		{d.data, false, nil, data},
		{d.data + "/", false, nil, data},
		{filepath.Join(d.data, "new.db"), true, nil, data},
		{h("db/" + DBFile), false, nil, data},
		{h("db/" + DBFile), true, prot, data},
		{h("dbfile"), true, nil, data},
		{h("dbchain/" + DBFile), false, nil, data},
		{h("work/../db/" + DBFile), false, nil, data},
		{relTo(d.db), false, nil, data},
		{d.root, true, nil, data}, // contains the data directory
		// Ordinary paths next to them.
		{h("plain.txt"), false, prot, ok},
		{h("plain.txt"), true, prot, ok},
		{h("work/new.txt"), true, prot, ok},
		{h("workdir/new.txt"), true, prot, ok},
		{h("notes/../plain.txt"), false, prot, ok}, // ~/.ssh/.. is ~ for the kernel
		{h("keysub/../../plain.txt"), false, prot, ok},
		{h("up/plain.txt"), false, prot, ok},
		{relTo(h("plain.txt")), false, prot, ok},
		{d.home, false, prot, ok}, // reading a directory's name is not reading the tree
		// Other names of the same files: /proc/self/root, the process's working directory.
		{"/proc/self/root" + d.db, false, nil, data},
		{"/proc/self/root" + h("notes/id_rsa"), false, prot, ssh},
		{"/proc/self/cwd/notes/id_rsa", false, prot, ssh}, // the test runs in ~ (below)
		{"/proc/thread-self/cwd/db/" + DBFile, true, nil, data},
		// An older server sends no protected paths: only the data directory is the runner's own.
		{h("notes/id_rsa"), false, nil, ok},
	} {
		err := r.checkHostPath(c.path, c.write, c.prot)
		want := strings.ReplaceAll(c.want, "SSH", d.ssh)
		switch {
		case want == "" && err != nil:
			t.Errorf("%q (write %v): refused: %v", c.path, c.write, err)
		case want != "" && (!errors.Is(err, fault.ErrForbidden) || !strings.Contains(err.Error(), want)):
			t.Errorf("%q (write %v): %v; want it refused (%s)", c.path, c.write, err, want)
		}
		if want == data && err != nil && !strings.Contains(err.Error(), "token") {
			t.Errorf("%q: the refusal does not say why: %v", c.path, err)
		}
	}
	for _, bad := range [][]string{{"~/.ssh"}, {"~"}, {d.ssh, "~root/.ssh"}, {"/x\x00y"}} {
		if err := r.checkHostPath(h("plain.txt"), false, bad); !errors.Is(err, fault.ErrInvalid) {
			t.Errorf("protected %q: %v; want the call failed as invalid", bad, err)
		}
	}
	// Entries of another system's form (a Windows server's data directory) name nothing here;
	// the others still count.
	other := []string{`C:\Users\op\AppData\cubicle`, "relative", d.ssh}
	if err := r.checkHostPath(h("plain.txt"), false, other); err != nil {
		t.Errorf("protected %q: %v", other, err)
	}
	if err := r.checkHostPath(h("notes/id_rsa"), false, other); !errors.Is(err, fault.ErrForbidden) {
		t.Errorf("protected %q, read through a link: %v", other, err)
	}
	for _, bad := range []string{"", "a\x00b"} {
		if err := r.checkHostPath(bad, false, prot); !errors.Is(err, fault.ErrInvalid) {
			t.Errorf("path %q: %v", bad, err)
		}
	}
}

// TestServeHostFileGuard: serveHost refuses reads and writes the check refuses before it
// touches anything — the data file is unchanged byte for byte, nothing is created in ~/.ssh —
// and still serves an ordinary file; the runner reports its data directory in OpHostInfo.
func TestServeHostFileGuard(t *testing.T) {
	d := newGuardDisk(t)
	t.Setenv("HOME", d.home)
	r := &Runner{cfg: Config{Name: "box", DataDir: d.data}, log: slog.New(slog.DiscardHandler), sandbox: testSandbox()}
	before, _ := os.ReadFile(d.db)
	write := func(path string, data []byte, prot []string) wire.Response {
		srv, cli := net.Pipe()
		defer cli.Close()
		raw, _ := json.Marshal(wire.HostFileArgs{Path: path, Size: int64(len(data)), Protected: prot})
		go func() {
			defer srv.Close()
			r.serveHost(context.Background(), srv, wire.Request{Op: wire.OpHostWriteFile, Args: raw})
		}()
		cli.Write(data)
		var resp wire.Response
		if err := wire.ReadFrame(cli, &resp); err != nil {
			t.Fatalf("write %s: %v", path, err)
		}
		return resp
	}
	for _, p := range []string{filepath.Join(d.home, "db", DBFile), filepath.Join(d.home, "dbfile"), d.db} {
		if resp := write(p, []byte("overwritten"), nil); resp.Error == nil || fault.Class(resp.Error.Err()) != fault.ErrForbidden {
			t.Errorf("write %s: %+v", p, resp)
		}
	}
	if after, _ := os.ReadFile(d.db); !bytes.Equal(after, before) {
		t.Fatalf("the data file changed: %q", after)
	}
	if resp := write(filepath.Join(d.home, "notes", "authorized_keys"), []byte("attacker"), []string{d.ssh}); resp.Error == nil ||
		!strings.Contains(resp.Error.Message, "protected location "+d.ssh) {
		t.Errorf("write through a link into ~/.ssh: %+v", resp)
	}
	if _, err := os.Stat(filepath.Join(d.ssh, "authorized_keys")); err == nil {
		t.Fatal("a refused write reached ~/.ssh")
	}
	resp, cli, done := hostCall(t, r, wire.OpHostReadFile, wire.HostFileArgs{Path: filepath.Join(d.home, "c1", "id_rsa"), Max: 100, Protected: []string{d.ssh}})
	<-done
	cli.Close()
	if resp.Error == nil || fault.Class(resp.Error.Err()) != fault.ErrForbidden {
		t.Errorf("read through a chain of links into ~/.ssh: %+v", resp)
	}
	if resp := write(filepath.Join(d.home, "workdir", "ok.txt"), []byte("fine"), []string{d.ssh}); resp.Error != nil {
		t.Errorf("an ordinary write: %+v", resp)
	}
	resp, cli, _ = hostCall(t, r, wire.OpHostReadFile, wire.HostFileArgs{Path: filepath.Join(d.home, "work", "ok.txt"), Max: 100, Protected: []string{d.ssh}})
	var f wire.HostFile
	json.Unmarshal(resp.Result, &f)
	got := make([]byte, f.Size)
	if _, err := cli.Read(got); resp.Error != nil || err != nil || string(got) != "fine" {
		t.Errorf("an ordinary read: %+v %q %v", resp, got, err)
	}
	cli.Close()
	// A shell started in the data directory is refused too (its cwd argument).
	resp, cli, done = hostCall(t, r, wire.OpHostShell, wire.HostShellArgs{Command: "touch ran", Dir: filepath.Join(d.home, "db")})
	<-done
	cli.Close()
	if resp.Error == nil || fault.Class(resp.Error.Err()) != fault.ErrForbidden {
		t.Errorf("a shell in the data directory: %+v", resp)
	}
	if _, err := os.Stat(filepath.Join(d.data, "ran")); err == nil {
		t.Fatal("a refused shell ran in the data directory")
	}
	resp, cli, done = hostCall(t, r, wire.OpHostInfo, nil)
	<-done
	cli.Close()
	var info wire.HostInfo
	if resp.Error != nil || json.Unmarshal(resp.Result, &info) != nil || info.Home != d.home || len(info.Protected) != 1 || info.Protected[0] != d.data {
		t.Fatalf("host info: %+v %+v", resp, info)
	}
	t.Setenv("HOME", "")
	resp, cli, done = hostCall(t, r, wire.OpHostInfo, nil)
	<-done
	cli.Close()
	info = wire.HostInfo{}
	if resp.Error != nil || json.Unmarshal(resp.Result, &info) != nil || info.Home != "" || !strings.Contains(info.HomeProblem, "no home directory") || len(info.Protected) != 1 {
		t.Fatalf("host info without a home: %+v %+v", resp, info)
	}
}

// TestDataDirAbsolute: New makes a relative --data-dir absolute, so the host path check
// protects it whatever directory a host tool names it from; the hello advertises the check.
func TestDataDirAbsolute(t *testing.T) {
	t.Chdir(t.TempDir())
	r, err := New(Config{Server: "http://127.0.0.1:1", Token: "r-1.secret", DataDir: "rel-data", Engine: "none"})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	wd, _ := os.Getwd()
	if own := r.ownProtected(); len(own) != 1 || own[0] != filepath.Join(wd, "rel-data") {
		t.Fatalf("own protected paths: %q", own)
	}
	if err := r.checkHostPath(filepath.Join(wd, "rel-data", DBFile), false, nil); !errors.Is(err, fault.ErrForbidden) {
		t.Fatalf("the data file by absolute path: %v", err)
	}
	if !strings.Contains(strings.Join(r.hello.Capabilities, ","), wire.CapHostGuard) {
		t.Fatalf("hello: %v", r.hello.Capabilities)
	}
}
