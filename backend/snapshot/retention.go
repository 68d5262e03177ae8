package snapshot

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"cubicle/backend/fault"
)

// Policy returns owner's retention policy (DefaultPolicy when it set none).
func (s *Store) Policy(owner string) (Policy, error) {
	if err := validID("agent", owner); err != nil {
		return Policy{}, err
	}
	raw, err := os.ReadFile(filepath.Join(s.ownerDir(owner), "policy.json"))
	if errors.Is(err, fs.ErrNotExist) {
		return DefaultPolicy, nil
	}
	if err != nil {
		return Policy{}, fmt.Errorf("snapshot policy: %w", err)
	}
	var p Policy
	if err := json.Unmarshal(raw, &p); err != nil {
		return Policy{}, fmt.Errorf("snapshot policy: %w: %v", ErrCorrupt, err)
	}
	return p, nil
}

// Validate refuses negative limits.
func (p Policy) Validate() error {
	if p.KeepCount < 0 || p.MaxAgeDay < 0 || p.MaxBytes < 0 {
		return fault.Invalid("retention limits cannot be negative (0 = no limit)")
	}
	return nil
}

// SetPolicy stores owner's retention policy and applies it at once; it returns how many
// snapshots that removed.
func (s *Store) SetPolicy(ctx context.Context, owner string, p Policy) (int, error) {
	if err := validID("agent", owner); err != nil {
		return 0, err
	}
	if err := p.Validate(); err != nil {
		return 0, err
	}
	mu := s.ownerLock(owner)
	mu.Lock()
	raw, _ := json.Marshal(p)
	err := os.MkdirAll(s.ownerDir(owner), 0o700)
	if err == nil {
		err = writeFileAtomic(filepath.Join(s.ownerDir(owner), "policy.json"), raw)
	}
	var n int
	if err == nil {
		n, err = s.applyPolicyLocked(owner)
	}
	mu.Unlock()
	if err != nil {
		return n, fmt.Errorf("snapshot policy: %w", err)
	}
	if n > 0 {
		if _, err := s.GC(ctx); err != nil {
			s.log.Warn("snapshot gc", "err", err)
		}
	}
	return n, nil
}

// applyPolicyLocked removes owner's snapshots past its policy (the owner lock held): beyond
// KeepCount, older than MaxAgeDay, then the oldest while the chunks they reference take more
// than MaxBytes. The newest snapshot is always kept.
func (s *Store) applyPolicyLocked(owner string) (int, error) {
	p, err := s.Policy(owner)
	if err != nil {
		return 0, err
	}
	list, err := s.List(owner)
	if err != nil || len(list) <= 1 {
		return 0, err
	}
	keep := list[:1]
	var drop []Snapshot
	cutoff := time.Time{}
	if p.MaxAgeDay > 0 {
		cutoff = s.now().Add(-time.Duration(p.MaxAgeDay) * 24 * time.Hour)
	}
	for _, sn := range list[1:] {
		if (p.KeepCount > 0 && len(keep) >= p.KeepCount) || (!cutoff.IsZero() && sn.CreatedAt.Before(cutoff)) {
			drop = append(drop, sn)
			continue
		}
		keep = append(keep, sn)
	}
	if p.MaxBytes > 0 {
		// Add snapshots newest first; the first that takes the total past the limit and every
		// older one go.
		seen := map[string]bool{}
		var total int64
		for i, sn := range keep {
			m, err := s.readManifest(owner, sn.ID)
			if err != nil {
				return 0, err
			}
			var add int64
			for _, e := range m.Entries {
				for _, c := range e.Chunks {
					if !seen[c] {
						seen[c] = true
						add += s.chunkSize(c)
					}
				}
			}
			if i > 0 && total+add > p.MaxBytes {
				drop = append(drop, keep[i:]...)
				keep = keep[:i]
				break
			}
			total += add
		}
	}
	for _, sn := range drop {
		if err := s.deleteLocked(owner, sn.ID); err != nil {
			return 0, err
		}
	}
	if len(drop) > 0 {
		s.log.Info("snapshots pruned", "agent", owner, "removed", len(drop), "kept", len(keep))
	}
	return len(drop), nil
}

// GCStats says what a collection found.
type GCStats struct {
	Chunks       int   `json:"chunks"` // chunks kept
	Removed      int   `json:"removed"`
	RemovedBytes int64 `json:"removedBytes"`
}

// GC removes the chunks no snapshot's manifest references (and temporary files left by a
// killed write). It waits for snapshots and restores in progress and holds them off while it
// runs. An unreadable manifest stops it: its chunks might be collected otherwise.
func (s *Store) GC(ctx context.Context) (GCStats, error) {
	s.gc.Lock()
	defer s.gc.Unlock()
	live := map[string]bool{}
	owners, err := os.ReadDir(filepath.Join(s.dir, "owners"))
	if err != nil {
		return GCStats{}, fmt.Errorf("snapshot gc: %w", err)
	}
	for _, o := range owners {
		if !o.IsDir() {
			continue
		}
		files, err := filepath.Glob(filepath.Join(s.dir, "owners", o.Name(), "*.tree.zst"))
		if err != nil {
			return GCStats{}, fmt.Errorf("snapshot gc: %w", err)
		}
		for _, f := range files {
			id := filepath.Base(f)
			id = id[:len(id)-len(".tree.zst")]
			m, err := s.readManifest(o.Name(), id)
			if err != nil {
				return GCStats{}, fmt.Errorf("snapshot gc: %w", err)
			}
			for _, e := range m.Entries {
				for _, c := range e.Chunks {
					live[c] = true
				}
			}
		}
	}
	var st GCStats
	err = filepath.WalkDir(filepath.Join(s.dir, "chunks"), func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if d.IsDir() {
			return nil
		}
		if live[d.Name()] {
			st.Chunks++
			return nil
		}
		info, err := d.Info()
		if err == nil {
			st.RemovedBytes += info.Size()
		}
		st.Removed++
		return os.Remove(p)
	})
	if err != nil {
		return st, fmt.Errorf("snapshot gc: %w", err)
	}
	if st.Removed > 0 {
		s.log.Info("snapshot chunks collected", "removed", st.Removed, "bytes", st.RemovedBytes, "kept", st.Chunks)
	}
	return st, nil
}

// DiskUsage returns the bytes the store's chunks take on disk.
func (s *Store) DiskUsage() (int64, error) {
	var n int64
	err := filepath.WalkDir(filepath.Join(s.dir, "chunks"), func(_ string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() {
			if info, err := d.Info(); err == nil {
				n += info.Size()
			}
		}
		return nil
	})
	return n, err
}
