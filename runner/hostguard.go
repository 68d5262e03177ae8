package runner

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"cubicle/backend/agent/guard"
	"cubicle/backend/fault"
)

// The runner's own check of host file paths (wire.CapHostGuard). The server decides first,
// but it resolves symbolic links on its own disk, not on this one, and it does not know this
// runner's data directory unless the runner says so (wire.OpHostInfo). So before a host file
// tool touches a path, the runner checks it here, on the disk where it acts:
//
//   - a path inside its own data directory (its token, its store) is always refused;
//   - a path inside one of the protected paths the server sent with the request
//     (wire.HostFileArgs.Protected) is refused, and writing onto a directory that contains one,
//     with the semantics of guard.FileGuard.Check;
//
// each for the path cleaned (".." taken lexically, then links resolved) and for the path as
// the kernel opens it (links resolved component by component, so ".." after a link goes to
// the parent of the link's target), which guard.FileGuard.Check does on this disk. The check
// runs before the operation: a link swapped in between is not seen.

// ownProtected is what this runner protects of its own: its data directory (absolute; New
// made it so). The managed runner, which has none of its own, protects nothing here: the
// server's guard protects the server's data directory.
func (r *Runner) ownProtected() []string {
	if r.cfg.DataDir == "" {
		return nil
	}
	return []string{r.cfg.DataDir}
}

// checkHostPath returns a fault.ErrForbidden error when a host tool may not read (write=false)
// or write p on this machine, given the paths the server protects here; nil when it may. A
// protected entry starting with "~" (not expanded) is fault.ErrInvalid (the call fails
// closed); one that is not absolute here (another OS family's form) names nothing here and is
// skipped.
func (r *Runner) checkHostPath(p string, write bool, protected []string) error {
	if p == "" || strings.ContainsRune(p, 0) {
		return fault.Invalid("a host file path must be a non-empty path without NUL bytes")
	}
	if !filepath.IsAbs(p) {
		wd, err := os.Getwd()
		if err != nil {
			return fault.Unavailable("runner %s cannot check the relative path %q: its working directory is unknown (%v); give an absolute path", r.cfg.Name, p, err)
		}
		p = wd + string(filepath.Separator) + p // not Join: ".." stays as the kernel takes it
	}
	if own := r.ownProtected(); len(own) > 0 {
		g, err := guard.NewFileGuard(own)
		if err != nil {
			return fmt.Errorf("runner data directory: %w", err)
		}
		if err := g.Check(p, write, false); errors.Is(err, fault.ErrForbidden) {
			return fault.Forbidden("runner %s keeps host tools out of its own data directory %s, which holds its token and its state: %v", r.cfg.Name, own[0], err)
		} else if err != nil {
			return err
		}
	}
	if len(protected) == 0 {
		return nil
	}
	var here []string
	for _, e := range protected {
		switch {
		case strings.HasPrefix(e, "~") || strings.ContainsRune(e, 0):
			return fault.Invalid("the server sent the protected path %q, which runner %s cannot check (a server sends absolute paths, ~ expanded): nothing was done", e, r.cfg.Name)
		case filepath.IsAbs(e):
			here = append(here, e)
		}
		// Any other entry is a path of another system's form (the server's own data directory
		// on a server of another OS family): it names nothing on this machine.
	}
	if len(here) == 0 {
		return nil
	}
	g, err := guard.NewFileGuard(here)
	if err != nil {
		return err
	}
	if err := g.Check(p, write, false); errors.Is(err, fault.ErrForbidden) {
		return fault.Forbidden("runner %s checked the path on its own disk (its symbolic links resolved): %v", r.cfg.Name, err)
	} else if err != nil {
		return err
	}
	return nil
}
