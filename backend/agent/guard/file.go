package guard

import (
	"fmt"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"

	"cubicle/backend/fault"
)

// FileGuard keeps file tools away from sensitive paths: the app's own secrets directory and
// whatever else is configured. A protected directory is protected with everything below it.
// Paths are compared after cleaning (so "..", "//" and trailing slashes change nothing) and,
// for a guard made by NewFileGuard, after resolving symbolic links on this machine, also for
// files that do not exist yet and for dangling links, and as the kernel opens the path as
// written ("link/../x" is next to the link's target, not to the link). The check runs before the tool does, so
// a link swapped in between is not seen; the VM boundary covers that for computer_* tools.
//
// A protected path may also be given relative to a home directory ("~/.ssh"): which home that
// is depends on the machine a tool acts on (this server's host or a runner's), so such entries
// count only in a guard made for that machine's home with ForHome.
//
// A FileGuard is immutable and safe for concurrent use.
type FileGuard struct {
	protected []string // cleaned absolute paths
	inHome    []string // cleaned paths below a home directory ("." = the home itself), for ForHome
	resolve   bool     // resolve symbolic links on this machine
}

// NewFileGuard protects the given paths on this machine (the host), following symbolic links.
// Entries are absolute, or "~" and "~/…" for paths in the home directory of the machine the
// guard is later made for (ForHome). Empty entries are ignored; relative ones, "~user" and ".."
// below "~" are fault.ErrInvalid.
func NewFileGuard(protected []string) (*FileGuard, error) {
	return newFileGuard(protected, true)
}

// ForHome returns the guard for a machine whose home directory is home: the "~/…" entries
// become paths below it. An empty or relative home applies none of them (the caller refuses
// paths under "~" when it does not know the home, see Safety.Decide).
func (g *FileGuard) ForHome(home string) *FileGuard {
	out := &FileGuard{protected: slices.Clone(g.protected), inHome: g.inHome, resolve: g.resolve}
	if home == "" || !filepath.IsAbs(home) {
		return out
	}
	for _, rel := range g.inHome {
		if p := filepath.Join(home, rel); !slices.Contains(out.protected, p) {
			out.protected = append(out.protected, p)
		}
	}
	return out
}

// With returns the guard with the absolute paths extra protected as well (a runner's own data
// directory); entries that are not absolute paths are ignored.
func (g *FileGuard) With(extra ...string) *FileGuard {
	out := &FileGuard{protected: slices.Clone(g.protected), inHome: g.inHome, resolve: g.resolve}
	for _, p := range extra {
		if !filepath.IsAbs(p) || strings.ContainsRune(p, 0) {
			continue
		}
		if p = filepath.Clean(p); !slices.Contains(out.protected, p) {
			out.protected = append(out.protected, p)
		}
	}
	return out
}

// NewLexicalFileGuard protects paths of another machine (a VM): links are not resolved here,
// because this machine's links say nothing about the VM's files.
func NewLexicalFileGuard(protected []string) (*FileGuard, error) {
	return newFileGuard(protected, false)
}

func newFileGuard(protected []string, resolve bool) (*FileGuard, error) {
	g := &FileGuard{resolve: resolve}
	for _, p := range protected {
		if strings.TrimSpace(p) == "" {
			continue
		}
		if strings.HasPrefix(p, "~") {
			rel, ok := HomeRelative(p)
			if !ok {
				return nil, fmt.Errorf("file guard: %w", fault.Invalid("protected path %q: only ~ and ~/… (without ..) name a home directory; give other paths in full", p))
			}
			if !slices.Contains(g.inHome, rel) {
				g.inHome = append(g.inHome, rel)
			}
			continue
		}
		if !filepath.IsAbs(p) {
			return nil, fmt.Errorf("file guard: %w", fault.Invalid("protected path %q must be absolute (or start with ~/)", p))
		}
		g.protected = append(g.protected, filepath.Clean(p))
	}
	return g, nil
}

// Protected returns the protected absolute paths (for a guard made by ForHome, those below
// the home included).
func (g *FileGuard) Protected() []string { return append([]string(nil), g.protected...) }

// HomeRelative reports whether p names a path in a home directory ("~" or "~/…", with "/" as
// the separator on every system) and returns it cleaned relative to the home ("." for the home
// itself). "~user", "~+" and paths that climb out of the home with ".." are not.
func HomeRelative(p string) (string, bool) {
	if p != "~" && !strings.HasPrefix(p, "~/") {
		return "", false
	}
	rest := strings.Trim(strings.TrimPrefix(p, "~"), "/")
	for _, part := range strings.Split(rest, "/") {
		if part == ".." {
			return "", false
		}
	}
	if rest == "" {
		return ".", true
	}
	return filepath.Clean(filepath.FromSlash(rest)), true
}

// CheckPath returns a fault.ErrForbidden error when a tool may not read (write=false) or write
// path, nil when it may. path must be absolute (resolve it against the working directory
// first); a relative or malformed path is fault.ErrInvalid. Writing onto a directory that
// contains a protected path is refused as well, as it could replace it.
func (g *FileGuard) CheckPath(path string, write bool) error {
	return g.Check(path, write, false)
}

// Check is CheckPath for a path that may also be read as a whole tree (recursive: an archive,
// a recursive copy or search), which touches a protected path below it. Wildcards anywhere in
// path stand for whatever they may match; /var/run is /run, and /proc/self/root (or that of
// any process) is the root directory.
func (g *FileGuard) Check(path string, write, recursive bool) error {
	verb := "read"
	if write {
		verb = "write"
	}
	if path == "" || strings.ContainsRune(path, 0) {
		return fmt.Errorf("file guard: %w", fault.Invalid("cannot %s an empty or malformed path", verb))
	}
	if !filepath.IsAbs(path) {
		return fmt.Errorf("file guard: %w", fault.Invalid("cannot check %q: the path must be absolute", path))
	}
	candidates := aliases(filepath.Clean(path))
	if g.resolve && !strings.ContainsAny(path, "*?[") {
		// The kernel's name for path: Clean takes ".." lexically, the kernel after the link
		// before it ("link/../x" is next to the link's target).
		if k := kernelPath(path); !slices.Contains(candidates, k) {
			candidates = append(candidates, aliases(k)...)
		}
	}
	if g.resolve {
		for _, c := range candidates {
			if strings.ContainsAny(c, "*?[") {
				continue
			}
			if r := resolvePath(c); !slices.Contains(candidates, r) {
				candidates = append(candidates, aliases(r)...)
			}
		}
	}
	for _, prot := range g.protected {
		forms := []string{prot}
		if g.resolve {
			if r := resolvePath(prot); r != prot {
				forms = append(forms, r)
			}
		}
		for _, c := range candidates {
			for _, f := range forms {
				inside, ancestor := relation(c, f)
				if inside {
					return fault.Forbidden("tools may not %s %s: it is inside the protected location %s, which holds secrets", verb, path, prot)
				}
				if ancestor && write {
					return fault.Forbidden("tools may not write %s: it contains the protected location %s", path, prot)
				}
				if ancestor && recursive {
					return fault.Forbidden("tools may not read all of %s: it contains the protected location %s, which holds secrets", path, prot)
				}
			}
		}
	}
	return nil
}

// aliases returns p and the other names of the same file this guard knows: /var/run/x is
// /run/x (and back), /proc/<self|thread-self|pid>/root/x is /x.
func aliases(p string) []string {
	out := []string{p}
	parts := strings.Split(strings.TrimPrefix(p, "/"), "/")
	for len(parts) >= 3 && parts[0] == "proc" && parts[2] == "root" {
		parts = parts[3:]
		out = append(out, "/"+strings.Join(parts, "/"))
	}
	for _, q := range slices.Clone(out) {
		switch {
		case q == "/var/run" || strings.HasPrefix(q, "/var/run/"):
			out = append(out, strings.TrimPrefix(q, "/var"))
		case q == "/run" || strings.HasPrefix(q, "/run/"):
			out = append(out, "/var"+q)
		}
	}
	return out
}

// relation says whether the files p may name lie inside dir (inside), or whether p may name
// a directory that contains dir (ancestor). p may hold wildcards in any segment ("**" and a
// lone "*" segment standing for any number of segments).
func relation(p, dir string) (inside, ancestor bool) {
	if !strings.ContainsAny(p, "*?[") {
		return within(p, dir), within(dir, p) && p != dir
	}
	ps := splitPath(p)
	ds := splitPath(dir)
	return globWithin(ps, ds), globAncestor(ps, ds)
}

func splitPath(p string) []string {
	p = strings.Trim(p, "/")
	if p == "" {
		return nil
	}
	return strings.Split(p, "/")
}

// globWithin reports whether a path matched by pattern segments ps can lie in or below the
// directory with segments ds.
func globWithin(ps, ds []string) bool {
	if len(ds) == 0 {
		return true
	}
	if len(ps) == 0 {
		return false
	}
	if ps[0] == "**" {
		return true // may match any depth, so also reach into ds
	}
	if ok, _ := path.Match(ps[0], ds[0]); !ok {
		return false
	}
	return globWithin(ps[1:], ds[1:])
}

// globAncestor reports whether pattern segments ps can match a strict ancestor of ds.
func globAncestor(ps, ds []string) bool {
	if len(ps) == 0 {
		return len(ds) > 0
	}
	if len(ds) == 0 {
		return false
	}
	if ps[0] == "**" {
		return true
	}
	if ok, _ := path.Match(ps[0], ds[0]); !ok {
		return false
	}
	return globAncestor(ps[1:], ds[1:])
}

// within reports whether p is dir or lies below it.
func within(p, dir string) bool {
	if p == dir {
		return true
	}
	if dir == string(filepath.Separator) {
		return true
	}
	return strings.HasPrefix(p, dir+string(filepath.Separator))
}

// kernelPath is where the kernel takes the absolute path p as written: its longest existing
// prefix with every symbolic link resolved component by component (".." after a link going to
// the parent of the link's target), and the rest, which does not exist, cleaned.
func kernelPath(p string) string {
	sep := string(filepath.Separator)
	parts := strings.Split(p, sep)
	for i := len(parts); i > 0; i-- {
		prefix := strings.Join(parts[:i], sep)
		if prefix == "" || prefix == filepath.VolumeName(p) {
			prefix += sep
		}
		if r, err := filepath.EvalSymlinks(prefix); err == nil {
			return filepath.Join(append([]string{r}, parts[i:]...)...)
		}
	}
	return filepath.Clean(p)
}

// resolvePath resolves symbolic links in the existing part of p, including dangling links,
// and keeps the part that does not exist yet as it is.
func resolvePath(p string) string {
	return resolveDepth(p, 0)
}

func resolveDepth(p string, depth int) string {
	if depth > 40 {
		return p
	}
	if r, err := filepath.EvalSymlinks(p); err == nil {
		return r
	}
	if fi, err := os.Lstat(p); err == nil && fi.Mode()&os.ModeSymlink != 0 {
		t, err := os.Readlink(p)
		if err != nil {
			return p
		}
		if !filepath.IsAbs(t) {
			t = filepath.Join(filepath.Dir(p), t)
		}
		return resolveDepth(filepath.Clean(t), depth+1)
	}
	dir, base := filepath.Split(p)
	dir = filepath.Clean(dir)
	if dir == p || base == "" {
		return p
	}
	return filepath.Join(resolveDepth(dir, depth+1), base)
}
