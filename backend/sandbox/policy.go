package sandbox

import (
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
)

// The policy compilers are pure functions of the Policy (and, for Landlock, of the directory
// listings they are handed), so every platform's is tested on every platform.

// Entry is a directory entry as the Landlock compiler needs it.
type Entry struct {
	Name string
	Dir  bool
	Link bool // a symbolic link: never granted by its name (its target is checked where it is)
}

// Access is what a Landlock grant allows beneath its path.
type Access int

// The accesses.
const (
	ListOnly  Access = iota // list the directory (on the way to a hidden path)
	ReadOnly                // read, list, execute
	ReadWrite               // everything a file owner does
	Device                  // read and write a device file, with its ioctls
)

// Grant is one Landlock rule: Access beneath Path (Dir: a directory).
type Grant struct {
	Path   string
	Access Access
	Dir    bool
}

// MinimalDev are the device files a sandboxed command gets (everything else of /dev is
// out of reach: no raw disks, no memory devices).
var MinimalDev = []string{"/dev/null", "/dev/zero", "/dev/full", "/dev/random", "/dev/urandom", "/dev/tty", "/dev/ptmx", "/dev/pts"}

// LandlockPlan compiles p (clean) into Landlock grants for a Unix file system: the whole tree
// read-only and the read-write paths read-write, each split around the hidden paths and
// /dev — a directory on the way to one is listable only, its other entries (read with
// readDir; links are never granted by name) granted in full — then the minimal /dev.
// Landlock cannot take a right away below a granted directory, so this split is how a hidden
// path is left out: entries created later in a listable-only directory are out of reach too.
func LandlockPlan(p Policy, readDir func(dir string) ([]Entry, error)) []Grant {
	var out []Grant
	ex := append(slices.Clone(p.Hidden), "/dev")
	var walk func(dir string, acc Access, isDir bool)
	walk = func(dir string, acc Access, isDir bool) {
		var inner []string
		for _, e := range ex {
			if Within(dir, e) {
				return // hidden (or /dev), or below it
			}
			if Within(e, dir) {
				inner = append(inner, e)
			}
		}
		if len(inner) == 0 || !isDir {
			out = append(out, Grant{Path: dir, Access: acc, Dir: isDir})
			return
		}
		out = append(out, Grant{Path: dir, Access: ListOnly, Dir: true})
		ents, err := readDir(dir)
		if err != nil {
			return // unreadable: nothing below it is granted
		}
		for _, en := range ents {
			if en.Link || en.Name == "" || strings.ContainsRune(en.Name, '/') {
				continue
			}
			walk(path.Join(dir, en.Name), acc, en.Dir)
		}
	}
	walk("/", ReadOnly, true)
	for _, rw := range p.ReadWrite {
		walk(rw, ReadWrite, true)
	}
	for _, d := range MinimalDev {
		out = append(out, Grant{Path: d, Access: Device, Dir: d == "/dev/pts"})
	}
	return out
}

// BwrapArgs compiles p (clean) into bubblewrap's arguments before the command: the root
// read-only, a minimal /dev, a /proc of its own PID namespace, the read-write paths bound
// read-write, every hidden directory covered by an empty tmpfs of mode 000 (read-only) and
// every hidden file by denyFile (an empty file of mode 000), capabilities dropped, a new
// session, the network unshared unless p.Network. kind says whether a path exists as a
// directory (dir) or a file; a path that does not exist is left out. chdir is the command's
// directory ("" = none).
func BwrapArgs(p Policy, kind func(path string) (exists, dir bool), denyFile, chdir string) []string {
	a := []string{"--die-with-parent", "--new-session", "--unshare-pid", "--unshare-ipc", "--unshare-uts", "--cap-drop", "ALL"}
	if !p.Network {
		a = append(a, "--unshare-net")
	}
	a = append(a, "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc")
	rw := slices.Clone(p.ReadWrite)
	slices.SortFunc(rw, func(x, y string) int { return len(x) - len(y) }) // parents first
	for _, d := range rw {
		if ok, _ := kind(d); ok {
			a = append(a, "--bind", d, d)
		}
	}
	hidden := slices.Clone(p.Hidden)
	slices.SortFunc(hidden, func(x, y string) int { return len(x) - len(y) })
	for _, h := range hidden {
		covered := false
		for _, o := range hidden {
			if o != h && Within(h, o) {
				covered = true // already inside a hidden directory
			}
		}
		ok, dir := kind(h)
		switch {
		case covered || !ok:
		case dir:
			a = append(a, "--perms", "0000", "--tmpfs", h, "--remount-ro", h)
		default:
			a = append(a, "--ro-bind", denyFile, h)
		}
	}
	if chdir != "" {
		a = append(a, "--chdir", chdir)
	}
	return a
}

// SBPL compiles p (clean) into a Seatbelt profile for sandbox-exec (macOS): everything
// allowed but writes outside the read-write paths, any access to the hidden paths and, when
// p.Network is off, the network. Paths are matched as given and below (subpath).
func SBPL(p Policy) string {
	var b strings.Builder
	b.WriteString("(version 1)\n(allow default)\n")
	b.WriteString("(deny file-write*)\n(allow file-write*\n")
	for _, d := range append(slices.Clone(p.ReadWrite), "/private/tmp", "/private/var/folders", "/dev/null", "/dev/tty") {
		b.WriteString("  (subpath " + sbplString(d) + ")\n")
	}
	b.WriteString(")\n")
	if len(p.Hidden) > 0 {
		b.WriteString("(deny file-read* file-write*\n")
		for _, h := range p.Hidden {
			b.WriteString("  (subpath " + sbplString(h) + ")\n")
		}
		b.WriteString(")\n")
	}
	if !p.Network {
		b.WriteString("(deny network*)\n(allow network* (remote unix-socket))\n")
	}
	b.WriteString("(deny process-info* (target others))\n")
	return b.String()
}

// sbplString quotes s as an SBPL string literal.
func sbplString(s string) string { return strconv.Quote(s) }

// WindowsRule is one access-control entry for the AppContainer's SID on Path (and, for a
// directory, what it holds): denied everything (Deny), else granted read, write, execute and
// delete (Write), else read and execute.
type WindowsRule struct {
	Path  string `json:"path"`
	Deny  bool   `json:"deny,omitempty"`
	Write bool   `json:"write,omitempty"`
}

// WindowsPolicy compiles p into the access entries of the command's AppContainer: write
// access to the read-write paths (the container is granted nothing else to write) and full
// denial of the hidden paths (which wins over a grant it inherits from a read-write parent).
// Paths are compared without case, as Windows does.
func WindowsPolicy(p Policy) []WindowsRule {
	var out []WindowsRule
	seen := map[string]bool{}
	for _, d := range p.ReadWrite {
		if k := strings.ToLower(filepath.Clean(d)); !seen[k] {
			seen[k] = true
			out = append(out, WindowsRule{Path: d, Write: true})
		}
	}
	for _, h := range p.Hidden {
		out = append(out, WindowsRule{Path: h, Deny: true})
	}
	return out
}
