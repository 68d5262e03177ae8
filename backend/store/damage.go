package store

import (
	"context"
	"fmt"
	"math"
	"path/filepath"
	"strings"

	"cubicle/backend/fault"
)

// DamagedError is a data file Cubicle will not use as it is: what is wrong with it, and the
// newest sound backup to restore. Cubicle never changes a damaged file. It has the class
// fault.ErrUnavailable.
type DamagedError struct {
	Path    string
	Problem string
	// Backup is the newest backup that passed Check; nil when there is none.
	Backup *Backup
}

func (e *DamagedError) Error() string {
	dir := filepath.Dir(e.Path)
	var b strings.Builder
	fmt.Fprintf(&b, "the data file %s cannot be used: %s", e.Path, e.Problem)
	if strings.HasPrefix(e.Problem, "the file is empty") {
		b.WriteString(" (Cubicle never leaves it empty, so it was emptied from outside, e.g. by a full disk or an interrupted copy)")
	}
	b.WriteString(". Cubicle has not changed it. ")
	if e.Backup != nil {
		fmt.Fprintf(&b, "Restore the newest backup (%s, taken %s UTC) with:\n\n    cubicle restore-backup --data-dir %s\n\n"+
			"(the file it replaces is kept next to it as %s.replaced-<time>). ",
			e.Backup.Path, e.Backup.Time.UTC().Format("2006-01-02 15:04:05"), dir, filepath.Base(e.Path))
	} else {
		fmt.Fprintf(&b, "There is no backup of it. To start over with an empty data file (its agents, chats and "+
			"settings are then gone), move it away first:  mv %s %s.damaged  ", e.Path, e.Path)
	}
	fmt.Fprintf(&b, "To list every problem: cubicle doctor --check-store --data-dir %s", dir)
	return b.String()
}

// Unwrap gives the class.
func (e *DamagedError) Unwrap() error { return fault.ErrUnavailable }

// damaged builds the error for a file found damaged, naming its newest sound backup.
func damaged(path, problem string) *DamagedError {
	e := &DamagedError{Path: path, Problem: problem}
	if b, ok := NewestSoundBackup(path); ok {
		e.Backup = &b
	}
	return e
}

// crashed handles a panic (or memory fault) inside bbolt during op. If the file shows damage
// when looked at again, the store refuses writes from now on and op fails with the
// *DamagedError; otherwise the panic was a bug, not damage, and op fails with an internal
// error. Either way the process lives on and the file is as it was (bbolt rolled back).
func (s *Store) crashed(op string, pe *panicError) error {
	problem, err := checkFile(context.Background(), s.path, math.MaxInt64)
	if err == nil && problem == "" {
		problem = strings.Join(inspect(s.db), "; ")
	}
	if problem == "" {
		s.log.Error("store: internal error", "op", op, "panic", pe.value, "stack", string(pe.stack))
		return fmt.Errorf("store: %s: internal error: %v", op, pe.value)
	}
	d := damaged(s.path, fmt.Sprintf("%s (found while trying to %s: %v)", problem, op, pe.value))
	s.damage.CompareAndSwap(nil, d)
	s.log.Error("the data file is damaged; writes are refused until it is restored", "problem", problem, "op", op)
	return d
}

// Damaged returns the damage found while the store was open, or nil.
func (s *Store) Damaged() *DamagedError { return s.damage.Load() }
