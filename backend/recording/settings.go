package recording

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"time"

	"cubicle/backend/fault"
)

// Settings are the administrator's recording settings (Settings → Local VM → Recordings).
type Settings struct {
	// NeverRecord lists the nodes whose desktops are never recorded; every other node
	// records (the default).
	NeverRecord []string `json:"neverRecord"`
	// KeepDays: recordings that ended longer ago are deleted (0: kept whatever their age).
	KeepDays int `json:"keepDays"`
	// MaxBytes: beyond this total the oldest ended recordings are deleted (0: no limit).
	MaxBytes int64 `json:"maxBytes"`
}

// Defaults.
const (
	DefaultKeepDays = 14
	DefaultMaxBytes = 10 << 30
)

const settingsFile = "settings.json"

func (st Settings) off(node string) bool {
	return slices.Contains(st.NeverRecord, node) || (node == "" && slices.Contains(st.NeverRecord, "local"))
}

// Records reports whether node's desktops are recorded.
func (st Settings) Records(node string) bool { return !st.off(node) }

func loadSettings(dir string) (Settings, error) {
	st := Settings{KeepDays: DefaultKeepDays, MaxBytes: DefaultMaxBytes, NeverRecord: []string{}}
	raw, err := os.ReadFile(filepath.Join(dir, settingsFile))
	if errors.Is(err, fs.ErrNotExist) {
		return st, nil
	}
	if err != nil {
		return st, fmt.Errorf("recording: read settings: %w", err)
	}
	if err := json.Unmarshal(raw, &st); err != nil {
		return st, fmt.Errorf("recording: read settings %s: %w", filepath.Join(dir, settingsFile), err)
	}
	if st.NeverRecord == nil {
		st.NeverRecord = []string{}
	}
	return st, nil
}

// Validate checks an administrator's settings.
func (st Settings) Validate() error {
	if st.KeepDays < 0 || st.KeepDays > 3650 {
		return fault.Invalid("keepDays must be between 0 (keep whatever their age) and 3650")
	}
	if st.MaxBytes < 0 {
		return fault.Invalid("maxBytes must be 0 (no limit) or a positive number of bytes")
	}
	if st.MaxBytes > 0 && st.MaxBytes < 64<<20 {
		return fault.Invalid("maxBytes must be at least 64 MiB (67108864), or 0 for no limit")
	}
	for _, n := range st.NeverRecord {
		if n == "" || len(n) > 128 {
			return fault.Invalid("neverRecord lists node ids (\"local\" or a runner's id)")
		}
	}
	return nil
}

// Settings returns the current settings.
func (s *Service) Settings() Settings {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.settings
	st.NeverRecord = slices.Clone(st.NeverRecord)
	return st
}

// Usage returns how many recordings there are and their bytes.
func (s *Service) Usage() (count int, bytes int64) {
	for _, i := range s.cat.list(func(Info) bool { return true }) {
		count++
		bytes += i.Bytes
	}
	return count, bytes
}

// SetSettings saves st: a node switched to "never record" stops its recordings now, one
// switched back on starts recording its running desktops, and retention runs at once.
func (s *Service) SetSettings(st Settings) (Settings, error) {
	if err := st.Validate(); err != nil {
		return Settings{}, err
	}
	if st.NeverRecord == nil {
		st.NeverRecord = []string{}
	}
	slices.Sort(st.NeverRecord)
	st.NeverRecord = slices.Compact(st.NeverRecord)
	raw, _ := json.MarshalIndent(st, "", "  ")
	tmp := filepath.Join(s.cfg.Dir, settingsFile+".tmp")
	if err := os.WriteFile(tmp, raw, 0o600); err != nil {
		return Settings{}, fmt.Errorf("recording: save settings: %w", err)
	}
	if err := os.Rename(tmp, filepath.Join(s.cfg.Dir, settingsFile)); err != nil {
		return Settings{}, fmt.Errorf("recording: save settings: %w", err)
	}
	s.mu.Lock()
	s.settings = st
	var stop []*session
	for _, ss := range s.active {
		if i, ok := s.cat.get(ss.id); ok && st.off(i.Node) {
			stop = append(stop, ss)
		}
	}
	s.mu.Unlock()
	for _, ss := range stop {
		ss.stop("recording was switched off for this node")
	}
	s.startRunning(s.ctx)
	if s.cfg.Remotes != nil {
		for _, n := range s.cfg.Remotes() {
			s.push(n)
		}
	}
	s.Sweep()
	return s.Settings(), nil
}

// Sweep applies retention: ended recordings older than KeepDays go, then the oldest ended
// ones while all of them together are larger than MaxBytes. Recordings being written stay.
func (s *Service) Sweep() (removed int) {
	st := s.Settings()
	all := s.cat.list(func(Info) bool { return true }) // newest first
	var total int64
	for _, i := range all {
		total += i.Bytes
	}
	now := time.Now()
	for k := len(all) - 1; k >= 0; k-- { // oldest first
		i := all[k]
		if i.Live || i.EndedAt.IsZero() {
			continue
		}
		old := st.KeepDays > 0 && now.Sub(i.EndedAt) > time.Duration(st.KeepDays)*24*time.Hour
		big := st.MaxBytes > 0 && total > st.MaxBytes
		if !old && !big {
			continue
		}
		if err := s.cat.remove(i.ID); err != nil {
			if !errors.Is(err, fault.ErrConflict) {
				s.log.Warn("recording retention", "recording", i.ID, "err", err)
			}
			continue
		}
		total -= i.Bytes
		removed++
		s.log.Info("recording removed by retention", "recording", i.ID, "old", old, "overQuota", big)
	}
	return removed
}
