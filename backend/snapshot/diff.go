package snapshot

import (
	"context"
	"path/filepath"
	"sort"

	"cubicle/backend/fault"
)

// MaxDiffPaths bounds each list of a Diff (the counts stay exact).
const MaxDiffPaths = 500

// Diff is what restoring a snapshot would change in a tree: paths the restore adds (they are
// in the snapshot, not in the tree), removes (in the tree, not in the snapshot) and changes
// (type, content, mode, owner or link target differ). Directories are listed like files.
type Diff struct {
	Added        []string `json:"added"`
	Removed      []string `json:"removed"`
	Changed      []string `json:"changed"`
	AddedCount   int      `json:"addedCount"`
	RemovedCount int      `json:"removedCount"`
	ChangedCount int      `json:"changedCount"`
	// Truncated: a list holds only its first MaxDiffPaths paths.
	Truncated bool `json:"truncated"`
}

// Diff compares the tree under dir with owner's snapshot id. A file whose size and
// modification time equal the snapshot's is taken as equal; others are read and hashed.
func (s *Store) Diff(ctx context.Context, owner, id, dir string, idBase int) (Diff, error) {
	m, err := s.Manifest(owner, id)
	if err != nil {
		return Diff{}, err
	}
	cur, _, err := scan(ctx, dir, idBase)
	if err != nil {
		return Diff{}, fault.Unavailable("diff: the workspace cannot be read: %v", err)
	}
	snap := make(map[string]*Entry, len(m.Entries))
	for i := range m.Entries {
		snap[m.Entries[i].Path] = &m.Entries[i]
	}
	d := Diff{Added: []string{}, Removed: []string{}, Changed: []string{}}
	add := func(list *[]string, n *int, p string) {
		*n++
		if len(*list) < MaxDiffPaths {
			*list = append(*list, p)
		} else {
			d.Truncated = true
		}
	}
	seen := make(map[string]bool, len(cur))
	for i := range cur {
		c := &cur[i]
		seen[c.Path] = true
		e := snap[c.Path]
		if c.Path == "" {
			continue // the root itself
		}
		if e == nil {
			add(&d.Removed, &d.RemovedCount, c.Path)
			continue
		}
		if ctx.Err() != nil {
			return Diff{}, ctx.Err()
		}
		if !sameEntry(dir, c, e) {
			add(&d.Changed, &d.ChangedCount, c.Path)
		}
	}
	for _, e := range m.Entries {
		if e.Path != "" && !seen[e.Path] {
			add(&d.Added, &d.AddedCount, e.Path)
		}
	}
	sort.Strings(d.Added)
	return d, nil
}

func sameEntry(dir string, c, e *Entry) bool {
	if c.Type != e.Type || c.Mode != e.Mode || c.UID != e.UID || c.GID != e.GID {
		return false
	}
	switch c.Type {
	case TypeSymlink:
		return c.Target == e.Target
	case TypeFile:
		if c.Size != e.Size {
			return false
		}
		if c.MTime == e.MTime {
			return true
		}
		sum, err := fileSHA256(filepath.Join(dir, filepath.FromSlash(c.Path)))
		return err == nil && sum == e.SHA256
	}
	return true
}
