package snapshot

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"unicode/utf8"

	"github.com/restic/chunker"

	"cubicle/backend/fault"
)

// Options describe a snapshot to take.
type Options struct {
	Name      string // shown in lists; "" = a name from the kind and time
	Kind      string // KindManual when ""
	SessionID string
	TurnID    string
	ReplyID   string
	Before    string
	// IDBase is the host id of the desktop's user 0 when it has its own user namespace:
	// owners are recorded relative to it, so a snapshot restores into another namespace.
	IDBase int
	// SkipUnchanged: when the tree equals the owner's newest snapshot's, take none and return
	// that one (taken = false).
	SkipUnchanged bool
}

// MaxNameLen bounds a snapshot's name (in characters).
const MaxNameLen = 200

// ValidName checks a snapshot name a person gave.
func ValidName(name string) error {
	if !utf8.ValidString(name) || utf8.RuneCountInString(name) > MaxNameLen {
		return fault.Invalid("a snapshot name is at most %d characters of text", MaxNameLen)
	}
	if strings.ContainsFunc(name, func(r rune) bool { return r < 0x20 || r == 0x7f }) {
		return fault.Invalid("a snapshot name cannot contain control characters")
	}
	return nil
}

// Take snapshots the tree under dir as a new snapshot of owner and applies owner's retention
// policy. taken is false when SkipUnchanged found the tree unchanged (sn is then the newest
// snapshot, unchanged).
func (s *Store) Take(ctx context.Context, owner, dir string, o Options) (sn Snapshot, taken bool, err error) {
	if err := validID("agent", owner); err != nil {
		return Snapshot{}, false, err
	}
	if err := ValidName(o.Name); err != nil {
		return Snapshot{}, false, err
	}
	if o.Kind == "" {
		o.Kind = KindManual
	}
	mu := s.ownerLock(owner)
	mu.Lock()
	sn, taken, err = s.take(ctx, owner, dir, o)
	var pruned int
	if err == nil && taken {
		pruned, err = s.applyPolicyLocked(owner)
		if err != nil {
			err = fmt.Errorf("snapshot %s taken; retention: %w", sn.ID, err)
		}
	}
	mu.Unlock()
	if err == nil && pruned > 0 {
		if _, gerr := s.GC(ctx); gerr != nil {
			s.log.Warn("snapshot gc", "err", gerr)
		}
	}
	return sn, taken, err
}

func (s *Store) take(ctx context.Context, owner, dir string, o Options) (Snapshot, bool, error) {
	s.gc.RLock()
	defer s.gc.RUnlock()
	start := s.now()
	CleanStale(dir)
	var parent *Snapshot
	var prev map[string]*Entry
	if list, err := s.List(owner); err != nil {
		return Snapshot{}, false, err
	} else if len(list) > 0 {
		parent = &list[0]
		m, err := s.readManifest(owner, parent.ID)
		if err != nil {
			// A damaged parent only costs reading everything.
			s.log.Warn("snapshot parent unreadable; reading every file", "agent", owner, "snapshot", parent.ID, "err", err)
		} else {
			prev = make(map[string]*Entry, len(m.Entries))
			for i := range m.Entries {
				prev[m.Entries[i].Path] = &m.Entries[i]
			}
		}
	}
	entries, skipped, err := scan(ctx, dir, o.IDBase)
	if err != nil {
		return Snapshot{}, false, fault.Unavailable("snapshot: the workspace cannot be read: %v", err)
	}
	var jobs []int
	for i := range entries {
		e := &entries[i]
		if e.Type != TypeFile {
			continue
		}
		if p := prev[e.Path]; p != nil && p.Type == TypeFile && p.Size == e.Size && p.MTime == e.MTime &&
			p.CTime == e.CTime && p.Ino == e.Ino && p.SHA256 != "" && (e.Size == 0 || len(p.Chunks) > 0) {
			e.SHA256, e.Chunks = p.SHA256, p.Chunks
			continue
		}
		jobs = append(jobs, i)
	}
	var (
		stats   takeStats
		statsMu sync.Mutex
	)
	err = s.runWorkers(ctx, len(jobs), func() func(int) error {
		ch := chunker.NewWithBoundaries(nil, chunkPol, chunkMin, chunkMax)
		data := make([]byte, chunkMax)
		var cbuf []byte
		return func(j int) error {
			e := &entries[jobs[j]]
			var st takeStats
			var err error
			cbuf, err = s.chunkFile(filepath.Join(dir, filepath.FromSlash(e.Path)), e, ch, data, cbuf, &st)
			if err != nil {
				return fault.Unavailable("snapshot: %s: %v", e.Path, err)
			}
			statsMu.Lock()
			stats.add(st)
			statsMu.Unlock()
			return nil
		}
	})
	if err != nil {
		return Snapshot{}, false, err
	}
	m := Manifest{Entries: entries}
	m.TreeSHA256 = m.TreeHash()
	if o.SkipUnchanged && parent != nil && parent.TreeSHA256 == m.TreeSHA256 {
		return *parent, false, nil
	}
	now := s.now().UTC()
	sn := Snapshot{ID: newID(now), Owner: owner, Name: o.Name, Kind: o.Kind, SessionID: o.SessionID, TurnID: o.TurnID,
		ReplyID: o.ReplyID, Before: o.Before,
		CreatedAt: now, TreeSHA256: m.TreeSHA256, Skipped: skipped, NewChunks: stats.newChunks, NewBytes: stats.newBytes, ReadBytes: stats.read}
	if parent != nil {
		sn.Parent = parent.ID
	}
	if sn.Name == "" {
		sn.Name = defaultName(o.Kind, now)
	}
	for _, e := range entries {
		switch e.Type {
		case TypeFile:
			sn.Files++
			sn.Bytes += e.Size
			sn.Chunks += len(e.Chunks)
		case TypeDir:
			sn.Dirs++
		case TypeSymlink:
			sn.Symlinks++
		}
	}
	if err := os.MkdirAll(s.ownerDir(owner), 0o700); err != nil {
		return Snapshot{}, false, fmt.Errorf("snapshot: %w", err)
	}
	var buf bytes.Buffer
	if err := json.NewEncoder(&buf).Encode(&m); err != nil {
		return Snapshot{}, false, fmt.Errorf("snapshot: manifest: %w", err)
	}
	if err := writeFileAtomic(filepath.Join(s.ownerDir(owner), sn.ID+".tree.zst"), s.enc.EncodeAll(buf.Bytes(), nil)); err != nil {
		return Snapshot{}, false, fmt.Errorf("snapshot: manifest: %w", err)
	}
	sn.DurationMs = s.now().Sub(start).Milliseconds()
	raw, err := json.MarshalIndent(sn, "", "  ")
	if err != nil {
		return Snapshot{}, false, fmt.Errorf("snapshot: record: %w", err)
	}
	// The record last: a snapshot exists once its record does, and its manifest is there then.
	if err := writeFileAtomic(filepath.Join(s.ownerDir(owner), sn.ID+".json"), raw); err != nil {
		return Snapshot{}, false, fmt.Errorf("snapshot: record: %w", err)
	}
	s.log.Info("snapshot taken", "agent", owner, "snapshot", sn.ID, "kind", sn.Kind, "files", sn.Files,
		"bytes", sn.Bytes, "read", sn.ReadBytes, "new_bytes", sn.NewBytes, "ms", sn.DurationMs)
	return sn, true, nil
}

func defaultName(kind string, t interface{ Format(string) string }) string {
	switch kind {
	case KindTurn:
		return "After a turn, " + t.Format("2006-01-02 15:04:05")
	case KindSafety:
		return "Before a restore, " + t.Format("2006-01-02 15:04:05")
	case KindFork:
		return "Forked, " + t.Format("2006-01-02 15:04:05")
	}
	return "Snapshot " + t.Format("2006-01-02 15:04:05")
}

type takeStats struct {
	read      int64
	newChunks int
	newBytes  int64
}

func (a *takeStats) add(b takeStats) {
	a.read += b.read
	a.newChunks += b.newChunks
	a.newBytes += b.newBytes
}

// chunkFile cuts path's content into chunks, stores the new ones and fills e's hash, size and
// chunks.
func (s *Store) chunkFile(path string, e *Entry, ch *chunker.Chunker, data, cbuf []byte, st *takeStats) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return cbuf, err
	}
	defer f.Close()
	h := sha256.New()
	ch.ResetWithBoundaries(io.TeeReader(f, h), chunkPol, chunkMin, chunkMax)
	ch.SetAverageBits(chunkAverageBits)
	e.Chunks = e.Chunks[:0:0]
	var size int64
	for {
		c, err := ch.Next(data)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return cbuf, err
		}
		var id string
		var n int64
		id, n, cbuf, err = s.putChunk(c.Data, cbuf)
		if err != nil {
			return cbuf, err
		}
		if n > 0 {
			st.newChunks++
			st.newBytes += n
		}
		e.Chunks = append(e.Chunks, id)
		size += int64(c.Length)
	}
	st.read += size
	e.Size = size
	e.SHA256 = hex.EncodeToString(h.Sum(nil))
	return cbuf, nil
}

// runWorkers runs n jobs on up to s.workers goroutines, each with its own state made by
// mk; it returns the first error (and stops handing out jobs then) or ctx's.
func (s *Store) runWorkers(ctx context.Context, n int, mk func() func(int) error) error {
	if n == 0 {
		return ctx.Err()
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	next := make(chan int)
	var wg sync.WaitGroup
	var once sync.Once
	var first error
	for range min(s.workers, n) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			do := mk()
			for j := range next {
				if err := do(j); err != nil {
					once.Do(func() { first = err; cancel() })
				}
			}
		}()
	}
feed:
	for j := range n {
		select {
		case next <- j:
		case <-ctx.Done():
			break feed
		}
	}
	close(next)
	wg.Wait()
	if first != nil {
		return first
	}
	return ctx.Err()
}
