package store

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"go.etcd.io/bbolt"

	"cubicle/backend/fault"
)

// Backups. Open takes a rolling backup of an existing file when the newest is older than
// Options.BackupEvery (the backend takes one on that interval too), into BackupDir, keeping
// the newest Options.KeepBackups. A backup is a consistent copy from a read transaction
// (bbolt's Tx.CopyFile) of a file that passed the checks, written to a temporary name, synced
// and renamed, so a backup on disk is always complete. Before a schema migration Open also
// keeps "<file>.bak-v<old version>" next to the file. Restore puts one back.

// Backup defaults.
const (
	DefaultKeepBackups = 5
	DefaultBackupEvery = 6 * time.Hour
	backupStamp        = "20060102T150405.000000000Z"
)

// Backup is a copy of a data file.
type Backup struct {
	Path      string    `json:"path"`
	Time      time.Time `json:"time"` // when it was taken
	Size      int64     `json:"size"`
	Migration bool      `json:"migration"` // taken before a schema migration (<file>.bak-v<N>)
}

// BackupDir is the directory of the rolling backups of the data file at path.
func BackupDir(path string) string { return filepath.Join(filepath.Dir(path), "backups") }

// Backups lists the backups of the data file at path, newest first. None is an empty list.
func Backups(path string) ([]Backup, error) {
	base := filepath.Base(path)
	var out []Backup
	ents, err := os.ReadDir(BackupDir(path))
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("list backups: %w", err)
	}
	for _, e := range ents {
		name := e.Name()
		stamp, ok := strings.CutPrefix(name, base+".")
		if !ok || !strings.HasSuffix(stamp, ".bak") || e.IsDir() {
			continue
		}
		t, err := time.Parse(backupStamp, strings.TrimSuffix(stamp, ".bak"))
		if err != nil {
			continue
		}
		fi, err := e.Info()
		if err != nil {
			continue
		}
		out = append(out, Backup{Path: filepath.Join(BackupDir(path), name), Time: t, Size: fi.Size()})
	}
	// Copies taken before migrations sit next to the file.
	side, _ := filepath.Glob(path + ".bak-v*")
	for _, p := range side {
		if _, err := strconv.Atoi(strings.TrimPrefix(p, path+".bak-v")); err != nil {
			continue
		}
		if fi, err := os.Stat(p); err == nil && fi.Mode().IsRegular() {
			out = append(out, Backup{Path: p, Time: fi.ModTime().UTC(), Size: fi.Size(), Migration: true})
		}
	}
	slices.SortFunc(out, func(a, b Backup) int { return b.Time.Compare(a.Time) })
	return out, nil
}

// NewestSoundBackup returns the newest backup of path that passes Check, or ok false.
func NewestSoundBackup(path string) (Backup, bool) {
	bs, _ := Backups(path)
	for _, b := range bs {
		if r, err := Check(b.Path, 100*time.Millisecond); err == nil && r.OK() {
			return b, true
		}
	}
	return Backup{}, false
}

// Backup writes a rolling backup of the file now and removes the oldest rolling backups
// beyond the number to keep. It fails with fault.ErrUnavailable when the copy cannot be
// written (a full disk, permissions); the data file is never changed.
func (s *Store) Backup() (Backup, error) {
	dir := BackupDir(s.path)
	now := time.Now().UTC()
	dst := filepath.Join(dir, filepath.Base(s.path)+"."+now.Format(backupStamp)+".bak")
	tmp := dst + ".tmp"
	fail := func(err error) (Backup, error) {
		os.Remove(tmp)
		return Backup{}, fault.Unavailable("store: back up %s to %s: %v; free some disk space or fix the "+
			"directory's permissions", s.path, dir, err)
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fail(err)
	}
	err := s.view("back up", func(tx *bbolt.Tx) error { return tx.CopyFile(tmp, 0o600) })
	if err != nil {
		return fail(err)
	}
	if err := syncFile(tmp); err != nil {
		return fail(err)
	}
	if err := os.Rename(tmp, dst); err != nil {
		return fail(err)
	}
	syncDir(dir)
	fi, err := os.Stat(dst)
	if err != nil {
		return fail(err)
	}
	s.pruneBackups()
	s.log.Info("data file backed up", "backup", dst)
	return Backup{Path: dst, Time: now, Size: fi.Size()}, nil
}

// BackupIfDue takes a backup when the newest rolling backup is older than every (or there is
// none); taken reports whether it did.
func (s *Store) BackupIfDue(every time.Duration) (b Backup, taken bool, err error) {
	if s.keep < 0 {
		return Backup{}, false, nil
	}
	bs, err := Backups(s.path)
	if err != nil {
		return Backup{}, false, err
	}
	for _, b := range bs {
		if !b.Migration && time.Since(b.Time) < every {
			return b, false, nil
		}
	}
	b, err = s.Backup()
	return b, err == nil, err
}

// pruneBackups removes the oldest rolling backups beyond s.keep (and temporary files of
// backups that were interrupted).
func (s *Store) pruneBackups() {
	bs, err := Backups(s.path)
	if err != nil {
		return
	}
	kept := 0
	for _, b := range bs {
		if b.Migration {
			continue
		}
		if kept++; kept > s.keep {
			if err := os.Remove(b.Path); err != nil {
				s.log.Warn("remove an old backup", "backup", b.Path, "err", err)
			}
		}
	}
	tmps, _ := filepath.Glob(filepath.Join(BackupDir(s.path), filepath.Base(s.path)+".*.bak.tmp"))
	for _, t := range tmps {
		if fi, err := os.Stat(t); err == nil && time.Since(fi.ModTime()) > time.Hour {
			os.Remove(t)
		}
	}
}

// Restore replaces the data file at path with the backup from, after checking the backup
// fully (Check). The file it replaces is never deleted: it is moved to
// "<path>.replaced-<time>", whose path Restore returns ("" when there was no file). It
// refuses with fault.ErrConflict while a Cubicle process has the file open, with
// fault.ErrInvalid when from is not a sound data file, and with fault.ErrNotFound when from
// does not exist.
func Restore(path, from string) (replaced string, err error) {
	if path == "" || from == "" {
		return "", fault.Invalid("restore: name the data file and the backup")
	}
	if same(path, from) {
		return "", fault.Invalid("restore: %s is the data file itself, not a backup", from)
	}
	r, err := Check(from, 100*time.Millisecond)
	if err != nil {
		return "", fmt.Errorf("restore from %s: %w", from, err)
	}
	if !r.OK() {
		return "", fault.Invalid("the backup %s is damaged too (%s); choose another one (cubicle restore-backup --list)",
			from, strings.Join(r.Problems, "; "))
	}
	if _, err := os.Stat(path); err == nil {
		busy, err := inUse(path)
		if err != nil {
			return "", fault.Unavailable("restore: check whether %s is in use: %v", path, err)
		}
		if busy {
			return "", fault.Conflict("the data file %s is in use by a running Cubicle: stop it, then restore", path)
		}
		replaced = path + ".replaced-" + time.Now().UTC().Format(backupStamp)
		if err := os.Rename(path, replaced); err != nil {
			return "", fault.Unavailable("restore: move %s aside: %v", path, err)
		}
	} else if !errors.Is(err, os.ErrNotExist) {
		return "", fault.Unavailable("restore: %v", err)
	}
	tmp := path + ".restore.tmp"
	os.Remove(tmp)
	if err := copyFile(from, tmp, 0o600); err != nil {
		if replaced != "" {
			os.Rename(replaced, path)
		}
		return "", fault.Unavailable("restore: copy %s: %v; nothing was changed", from, err)
	}
	if err := os.Rename(tmp, path); err != nil {
		os.Remove(tmp)
		if replaced != "" {
			os.Rename(replaced, path)
		}
		return "", fault.Unavailable("restore: %v; nothing was changed", err)
	}
	syncDir(filepath.Dir(path))
	return replaced, nil
}

func same(a, b string) bool {
	fa, err1 := os.Stat(a)
	fb, err2 := os.Stat(b)
	return err1 == nil && err2 == nil && os.SameFile(fa, fb)
}

func syncFile(p string) error {
	f, err := os.Open(p)
	if err != nil {
		return err
	}
	err = f.Sync()
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// syncDir makes a rename in dir durable (best effort: not every OS can sync a directory).
func syncDir(dir string) {
	if d, err := os.Open(dir); err == nil {
		d.Sync()
		d.Close()
	}
}
