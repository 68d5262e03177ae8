package guard

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"cubicle/backend/fault"
)

// FileGuard keeps file tools away from sensitive paths: the app's own secrets directory and
// whatever else is configured. A protected directory is protected with everything below it.
// Paths are compared after cleaning (so "..", "//" and trailing slashes change nothing) and,
// for a guard made by NewFileGuard, after resolving symbolic links on this machine, also for
// files that do not exist yet and for dangling links. The check runs before the tool does, so
// a link swapped in between is not seen; the VM boundary covers that for computer_* tools.
//
// A FileGuard is immutable and safe for concurrent use.
type FileGuard struct {
	protected []string // cleaned absolute paths
	resolve   bool     // resolve symbolic links on this machine
}

// NewFileGuard protects the given absolute paths on this machine (the host), following
// symbolic links. Empty entries are ignored; relative ones are fault.ErrInvalid.
func NewFileGuard(protected []string) (*FileGuard, error) {
	return newFileGuard(protected, true)
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
		if !filepath.IsAbs(p) {
			return nil, fmt.Errorf("file guard: %w", fault.Invalid("protected path %q must be absolute", p))
		}
		g.protected = append(g.protected, filepath.Clean(p))
	}
	return g, nil
}

// Protected returns the protected paths.
func (g *FileGuard) Protected() []string { return append([]string(nil), g.protected...) }

// CheckPath returns a fault.ErrForbidden error when a tool may not read (write=false) or write
// path, nil when it may. path must be absolute (resolve it against the working directory
// first); a relative or malformed path is fault.ErrInvalid. Writing onto a directory that
// contains a protected path is refused as well, as it could replace it.
func (g *FileGuard) CheckPath(path string, write bool) error {
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
	candidates := []string{filepath.Clean(path)}
	if g.resolve {
		if r := resolvePath(candidates[0]); r != candidates[0] {
			candidates = append(candidates, r)
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
				if within(c, f) {
					return fault.Forbidden("tools may not %s %s: it is inside the protected location %s, which holds secrets", verb, path, prot)
				}
				if write && within(f, c) {
					return fault.Forbidden("tools may not write %s: it contains the protected location %s", path, prot)
				}
			}
		}
	}
	return nil
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
