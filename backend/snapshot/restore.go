package snapshot

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	"cubicle/backend/fault"
)

// RestoreResult answers a restore of a workspace (the API's restore route).
type RestoreResult struct {
	Restored Snapshot `json:"restored"`
	// Previous is the snapshot taken of the workspace just before the restore ("" when an
	// existing snapshot already had that content: Previous names it then).
	Previous string `json:"previous,omitempty"`
}

// stagingMark is in the names of the staging directories restores make beside their target.
const stagingMark = ".cubicle-restore-"

// Replace makes target's content snapshot id of owner: the snapshot is restored (and
// verified) into a staging directory beside target, which is then swapped with target in one
// rename, and the old content removed. Whatever happens, target holds the old content or the
// new one entirely. target's parent must be writable; nothing may hold target open as its
// working directory or mount (the desktop must be stopped).
func (s *Store) Replace(ctx context.Context, owner, id, target string, idBase int) error {
	m, err := s.Manifest(owner, id)
	if err != nil {
		return err
	}
	s.gc.RLock()
	defer s.gc.RUnlock()
	target = filepath.Clean(target)
	if st, err := os.Stat(target); err != nil || !st.IsDir() {
		return fault.Unavailable("restore: the workspace %s is not a directory here", target)
	}
	CleanStale(target)
	stage := target + stagingMark + newID(s.now())
	if err := s.restoreManifest(ctx, m, stage, idBase); err != nil {
		_ = os.RemoveAll(stage)
		return fmt.Errorf("restore snapshot %s: %w", id, err)
	}
	if err := exchange(stage, target); err != nil {
		_ = os.RemoveAll(stage)
		return fmt.Errorf("restore snapshot %s: swap: %w", id, err)
	}
	// stage now holds the old content.
	if err := os.RemoveAll(stage); err != nil {
		s.log.Warn("restore: old content not removed", "dir", stage, "err", err)
	}
	s.log.Info("snapshot restored", "agent", owner, "snapshot", id, "target", target)
	return nil
}

// RestoreTo restores snapshot id of owner into dir, which must not exist or be empty (a
// fork's new workspace).
func (s *Store) RestoreTo(ctx context.Context, owner, id, dir string, idBase int) error {
	m, err := s.Manifest(owner, id)
	if err != nil {
		return err
	}
	s.gc.RLock()
	defer s.gc.RUnlock()
	if ents, err := os.ReadDir(dir); err == nil {
		if len(ents) > 0 {
			return fault.Conflict("restore: %s is not empty", dir)
		}
		if err := os.Remove(dir); err != nil {
			return fmt.Errorf("restore: %w", err)
		}
	}
	if err := s.restoreManifest(ctx, m, dir, idBase); err != nil {
		return fmt.Errorf("restore snapshot %s: %w", id, err)
	}
	return nil
}

// CleanStale removes the staging directories that restores killed in the middle left beside
// target (they never held what target shows).
func CleanStale(target string) {
	target = filepath.Clean(target)
	if _, err := os.Lstat(target); errors.Is(err, fs.ErrNotExist) {
		// A two-rename swap (not Linux) killed between its renames: the old content is back.
		_ = os.Rename(target+stagingMark+"old", target)
	}
	matches, _ := filepath.Glob(target + stagingMark + "*")
	for _, m := range matches {
		_ = os.RemoveAll(m)
	}
}

// restoreManifest writes m's tree into dir (created here; it must not exist).
func (s *Store) restoreManifest(ctx context.Context, m *Manifest, dir string, idBase int) error {
	if len(m.Entries) == 0 || m.Entries[0].Path != "" || m.Entries[0].Type != TypeDir {
		return fmt.Errorf("%w: the manifest has no root", ErrCorrupt)
	}
	if err := os.Mkdir(dir, 0o700); err != nil {
		return err
	}
	var files []int
	for i := range m.Entries {
		e := &m.Entries[i]
		p, err := entryPath(dir, e.Path)
		if err != nil {
			return err
		}
		switch e.Type {
		case TypeDir:
			if e.Path != "" {
				if err := os.Mkdir(p, 0o700); err != nil {
					return err
				}
			}
		case TypeSymlink:
			if err := os.Symlink(e.Target, p); err != nil {
				return err
			}
			if err := chown(p, toHost(e.UID, idBase), toHost(e.GID, idBase)); err != nil {
				return err
			}
		case TypeFile:
			files = append(files, i)
		default:
			return fmt.Errorf("%w: entry %q has unknown type %q", ErrCorrupt, e.Path, e.Type)
		}
	}
	err := s.runWorkers(ctx, len(files), func() func(int) error {
		var buf []byte
		return func(j int) error {
			e := &m.Entries[files[j]]
			p, _ := entryPath(dir, e.Path)
			var err error
			buf, err = s.restoreFile(p, e, buf, idBase)
			if err != nil {
				return fmt.Errorf("%s: %w", e.Path, err)
			}
			return nil
		}
	})
	if err != nil {
		return err
	}
	// Directories last, deepest first: a read-only directory is filled before it is closed.
	for i := len(m.Entries) - 1; i >= 0; i-- {
		e := &m.Entries[i]
		if e.Type != TypeDir {
			continue
		}
		p, _ := entryPath(dir, e.Path)
		if err := setMeta(p, e, idBase); err != nil {
			return err
		}
	}
	return nil
}

// entryPath joins a manifest path to dir, refusing paths that would leave it.
func entryPath(dir, rel string) (string, error) {
	if rel == "" {
		return dir, nil
	}
	clean := filepath.Clean(filepath.FromSlash(rel))
	if filepath.IsAbs(clean) || clean == ".." || strings.HasPrefix(clean, ".."+string(filepath.Separator)) || filepath.ToSlash(clean) != rel {
		return "", fmt.Errorf("%w: entry %q leaves the tree", ErrCorrupt, rel)
	}
	return filepath.Join(dir, clean), nil
}

func (s *Store) restoreFile(p string, e *Entry, buf []byte, idBase int) ([]byte, error) {
	f, err := os.OpenFile(p, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
	if err != nil {
		return buf, err
	}
	h := sha256.New()
	var size int64
	for _, id := range e.Chunks {
		plain, err := s.readChunk(id, buf)
		if err != nil {
			f.Close()
			return buf, err
		}
		buf = plain
		h.Write(plain)
		size += int64(len(plain))
		if _, err := f.Write(plain); err != nil {
			f.Close()
			return buf, err
		}
	}
	if err := f.Close(); err != nil {
		return buf, err
	}
	if sum := hex.EncodeToString(h.Sum(nil)); sum != e.SHA256 || size != e.Size {
		return buf, fmt.Errorf("%w: the restored content does not match the file's hash", ErrCorrupt)
	}
	return buf, setMeta(p, e, idBase)
}

// setMeta sets owner, mode (after the owner: chown clears setuid) and modification time.
func setMeta(p string, e *Entry, idBase int) error {
	if err := chown(p, toHost(e.UID, idBase), toHost(e.GID, idBase)); err != nil {
		return err
	}
	if err := os.Chmod(p, fileMode(e.Mode)); err != nil {
		return err
	}
	if e.MTime != 0 {
		t := time.Unix(0, e.MTime)
		if err := os.Chtimes(p, t, t); err != nil {
			return err
		}
	}
	return nil
}

func fileMode(m uint32) fs.FileMode {
	return fs.FileMode(m) & (fs.ModePerm | fs.ModeSetuid | fs.ModeSetgid | fs.ModeSticky)
}

// Verify reads every chunk of snapshot id and checks it and every file's hash, writing
// nothing: the error names the first damaged file.
func (s *Store) Verify(ctx context.Context, owner, id string) error {
	m, err := s.Manifest(owner, id)
	if err != nil {
		return err
	}
	s.gc.RLock()
	defer s.gc.RUnlock()
	var buf []byte
	for _, e := range m.Entries {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if e.Type != TypeFile {
			continue
		}
		h := sha256.New()
		for _, c := range e.Chunks {
			if buf, err = s.readChunk(c, buf); err != nil {
				return fmt.Errorf("snapshot %s: %s: %w", id, e.Path, err)
			}
			h.Write(buf)
		}
		if hex.EncodeToString(h.Sum(nil)) != e.SHA256 {
			return fmt.Errorf("snapshot %s: %s: %w", id, e.Path, ErrCorrupt)
		}
	}
	return nil
}

var errNoExchange = errors.New("this system cannot swap two directories in one step")
