// Package snapshot keeps snapshots of directory trees — an agent's workspace volume — in a
// content-addressed, deduplicated store (issue 25: every turn undoable; seed 000's execution
// snapshots).
//
// Layout of a store (Dir, normally <DataDir>/snapshots):
//
//	chunks/<2 hex>/<sha256 hex>     one chunk, zstd-compressed; its name is the SHA-256 of its plaintext
//	owners/<owner>/<id>.json        a snapshot's record (Snapshot): what the lists show
//	owners/<owner>/<id>.tree.zst    its manifest (Manifest): every entry of the tree
//	owners/<owner>/policy.json      the owner's retention policy, when set
//
// An owner is an agent id. Files are cut into chunks with content-defined chunking (restic's
// Rabin chunker, a fixed polynomial so equal content gives equal chunks in every snapshot and
// every owner), each chunk is stored once, compressed with zstd. A snapshot whose parent (the
// owner's newest snapshot) has a file with the same size, modification time, change time and
// inode reuses that file's chunks without reading it, so a snapshot costs what changed.
//
// The manifest records, for each path: its type (file, directory, symlink), permission bits
// (with setuid/setgid/sticky), owner and group, size, modification time, the SHA-256 of a
// file's content and its chunks, a symlink's target. The tree's SHA-256 (TreeSHA256) is the
// SHA-256 of a canonical listing of those (paths, types, modes, owners, sizes, content hashes,
// link targets; not times): equal trees have equal hashes. Sockets, FIFOs and devices are
// skipped (counted in Snapshot.Skipped); hard links are stored as separate files.
//
// Restores verify every chunk (its SHA-256 against its name) and every file (its content's
// SHA-256 against the manifest) before anything the user sees changes: a corrupted chunk is
// an error (ErrCorrupt) naming the file, never restored silently. Replace restores into a
// staging directory beside the target and swaps the two in one rename (renameat2
// RENAME_EXCHANGE on Linux), so a process killed in the middle leaves the old content or the
// new, never half of each; the staging directory a killed restore leaves is removed by the
// next operation on that target (CleanStale).
//
// Retention (Policy: count, age, bytes per owner) removes the oldest snapshots past the limits
// after each snapshot; GC removes chunks no manifest references. Snapshots and restores take
// the store's lock shared, GC takes it exclusively, so a chunk written for a snapshot in
// progress is never collected.
//
// Durability: manifests and records are written to a temporary file, synced and renamed;
// chunks are not synced one by one (a power loss can truncate the last chunks written; the
// restore's hash checks then report them). Methods are safe for concurrent use.
package snapshot

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"sync"
	"time"

	"github.com/klauspost/compress/zstd"

	"cubicle/backend/fault"
)

// ErrCorrupt is wrapped by errors about stored data whose hash does not match (a damaged
// chunk or manifest). It is not a fault class: it is the store's damage, not the caller's
// mistake.
var ErrCorrupt = errors.New("snapshot data is corrupt")

// Kinds of snapshot (Snapshot.Kind).
const (
	KindManual = "manual" // asked for by a person
	KindTurn   = "turn"   // taken at the end of an agent turn that changed the workspace
	KindFork   = "fork"   // the starting point of a forked agent
	KindSafety = "before-restore"
)

// Snapshot is a snapshot's record: what the lists show. Its manifest is read with Manifest.
type Snapshot struct {
	ID        string `json:"id"`
	Owner     string `json:"agentId"`
	Name      string `json:"name"`
	Kind      string `json:"kind"`
	SessionID string `json:"sessionId,omitempty"`
	TurnID    string `json:"turnId,omitempty"`
	// ReplyID is the chat message of the turn's reply (KindTurn): the chat offers "Restore the
	// workspace to before this turn" on it, restoring Before.
	ReplyID string `json:"replyId,omitempty"`
	// Before is the snapshot of the workspace as the turn found it (KindTurn; "" unknown).
	Before    string    `json:"before,omitempty"`
	CreatedAt time.Time `json:"createdAt"`
	// TreeSHA256 is the SHA-256 of the tree (see the package doc).
	TreeSHA256 string `json:"treeSha256"`
	// Parent is the snapshot whose unchanged files were reused ("" for a first one).
	Parent   string `json:"parent,omitempty"`
	Files    int    `json:"files"`
	Dirs     int    `json:"dirs"`
	Symlinks int    `json:"symlinks"`
	Skipped  int    `json:"skipped,omitempty"`
	// Bytes is the size of the files' content; Chunks how many chunk references it has.
	Bytes  int64 `json:"bytes"`
	Chunks int   `json:"chunks"`
	// NewChunks and NewBytes (compressed, on disk) are what this snapshot added to the store.
	NewChunks  int   `json:"newChunks"`
	NewBytes   int64 `json:"newBytes"`
	ReadBytes  int64 `json:"readBytes"` // content read (files that changed since the parent)
	DurationMs int64 `json:"durationMs"`
}

// Policy bounds an owner's snapshots; a zero field is no limit. The newest snapshot is always
// kept.
type Policy struct {
	KeepCount int   `json:"keepCount"`
	MaxAgeDay int   `json:"maxAgeDays"`
	MaxBytes  int64 `json:"maxBytes"` // bytes on disk of the chunks the owner's snapshots reference
}

// DefaultPolicy is used for owners that set none: the last 100 snapshots of the last 30 days.
var DefaultPolicy = Policy{KeepCount: 100, MaxAgeDay: 30}

// Config configures a Store. Dir is required.
type Config struct {
	Dir    string
	Logger *slog.Logger
	// Workers bounds the files read or written at once; 0 = 4.
	Workers int
	Now     func() time.Time // nil = time.Now
}

// Store is a snapshot store in one directory.
type Store struct {
	dir     string
	log     *slog.Logger
	workers int
	now     func() time.Time
	enc     *zstd.Encoder // EncodeAll is safe for concurrent use
	dec     *zstd.Decoder // DecodeAll is safe for concurrent use

	gc     sync.RWMutex // snapshots and restores hold it shared, GC exclusively
	ownMu  sync.Mutex   // guards owners
	owners map[string]*sync.Mutex
}

// Open opens (creating it if needed) the store in cfg.Dir.
func Open(cfg Config) (*Store, error) {
	if cfg.Dir == "" {
		return nil, fault.Invalid("snapshot store: no directory")
	}
	if err := os.MkdirAll(filepath.Join(cfg.Dir, "chunks"), 0o700); err != nil {
		return nil, fmt.Errorf("snapshot store: %w", err)
	}
	if err := os.MkdirAll(filepath.Join(cfg.Dir, "owners"), 0o700); err != nil {
		return nil, fmt.Errorf("snapshot store: %w", err)
	}
	enc, err := zstd.NewWriter(nil, zstd.WithEncoderLevel(zstd.SpeedDefault), zstd.WithEncoderConcurrency(1))
	if err != nil {
		return nil, fmt.Errorf("snapshot store: zstd: %w", err)
	}
	dec, err := zstd.NewReader(nil, zstd.WithDecoderConcurrency(0))
	if err != nil {
		return nil, fmt.Errorf("snapshot store: zstd: %w", err)
	}
	s := &Store{dir: cfg.Dir, log: cfg.Logger, workers: cfg.Workers, now: cfg.Now, enc: enc, dec: dec, owners: map[string]*sync.Mutex{}}
	if s.log == nil {
		s.log = slog.New(slog.DiscardHandler)
	}
	if s.workers <= 0 {
		s.workers = 4
	}
	if s.now == nil {
		s.now = time.Now
	}
	return s, nil
}

// Close releases the store's decoders.
func (s *Store) Close() error {
	s.dec.Close()
	return s.enc.Close()
}

// Dir returns the store's directory.
func (s *Store) Dir() string { return s.dir }

var idRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$`)

// validID refuses ids that could name a path outside the store.
func validID(kind, id string) error {
	if !idRE.MatchString(id) || id == "." || id == ".." {
		return fault.Invalid("%s %q is not a valid id", kind, id)
	}
	return nil
}

func newID(now time.Time) string {
	var b [4]byte
	_, _ = rand.Read(b[:])
	return now.UTC().Format("20060102T150405.000") + "-" + hex.EncodeToString(b[:])
}

// ownerLock serialises snapshots, deletions and retention of one owner.
func (s *Store) ownerLock(owner string) *sync.Mutex {
	s.ownMu.Lock()
	defer s.ownMu.Unlock()
	m := s.owners[owner]
	if m == nil {
		m = new(sync.Mutex)
		s.owners[owner] = m
	}
	return m
}

func (s *Store) ownerDir(owner string) string { return filepath.Join(s.dir, "owners", owner) }

// List returns owner's snapshots, newest first (none: an empty list).
func (s *Store) List(owner string) ([]Snapshot, error) {
	if err := validID("agent", owner); err != nil {
		return nil, err
	}
	ents, err := os.ReadDir(s.ownerDir(owner))
	if errors.Is(err, fs.ErrNotExist) {
		return []Snapshot{}, nil
	}
	if err != nil {
		return nil, fmt.Errorf("list snapshots: %w", err)
	}
	out := []Snapshot{}
	for _, e := range ents {
		name := e.Name()
		if filepath.Ext(name) != ".json" || name == "policy.json" {
			continue
		}
		sn, err := s.readRecord(owner, name[:len(name)-len(".json")])
		if err != nil {
			s.log.Warn("snapshot record unreadable", "agent", owner, "file", name, "err", err)
			continue
		}
		out = append(out, sn)
	}
	sort.Slice(out, func(i, j int) bool {
		if !out[i].CreatedAt.Equal(out[j].CreatedAt) {
			return out[i].CreatedAt.After(out[j].CreatedAt)
		}
		return out[i].ID > out[j].ID
	})
	return out, nil
}

// Get returns owner's snapshot id: fault.ErrNotFound when it has none of that id.
func (s *Store) Get(owner, id string) (Snapshot, error) {
	if err := validID("agent", owner); err != nil {
		return Snapshot{}, err
	}
	if err := validID("snapshot", id); err != nil {
		return Snapshot{}, fault.NotFound("snapshot %q not found", id)
	}
	return s.readRecord(owner, id)
}

func (s *Store) readRecord(owner, id string) (Snapshot, error) {
	raw, err := os.ReadFile(filepath.Join(s.ownerDir(owner), id+".json"))
	if errors.Is(err, fs.ErrNotExist) {
		return Snapshot{}, fault.NotFound("snapshot %q not found", id)
	}
	if err != nil {
		return Snapshot{}, fmt.Errorf("snapshot %s: %w", id, err)
	}
	var sn Snapshot
	if err := json.Unmarshal(raw, &sn); err != nil {
		return Snapshot{}, fmt.Errorf("snapshot %s: record: %w: %v", id, ErrCorrupt, err)
	}
	return sn, nil
}

// Manifest returns the manifest of owner's snapshot id.
func (s *Store) Manifest(owner, id string) (*Manifest, error) {
	if _, err := s.Get(owner, id); err != nil {
		return nil, err
	}
	return s.readManifest(owner, id)
}

func (s *Store) readManifest(owner, id string) (*Manifest, error) {
	raw, err := os.ReadFile(filepath.Join(s.ownerDir(owner), id+".tree.zst"))
	if err != nil {
		return nil, fmt.Errorf("snapshot %s: manifest: %w", id, err)
	}
	plain, err := s.dec.DecodeAll(raw, nil)
	if err != nil {
		return nil, fmt.Errorf("snapshot %s: manifest: %w: %v", id, ErrCorrupt, err)
	}
	var m Manifest
	if err := json.NewDecoder(bytes.NewReader(plain)).Decode(&m); err != nil {
		return nil, fmt.Errorf("snapshot %s: manifest: %w: %v", id, ErrCorrupt, err)
	}
	if got := m.TreeHash(); got != m.TreeSHA256 {
		return nil, fmt.Errorf("snapshot %s: manifest: %w: its tree hash is %s, recorded %s", id, ErrCorrupt, got, m.TreeSHA256)
	}
	return &m, nil
}

// Delete removes owner's snapshot id (its chunks stay until GC).
func (s *Store) Delete(owner, id string) error {
	if _, err := s.Get(owner, id); err != nil {
		return err
	}
	mu := s.ownerLock(owner)
	mu.Lock()
	defer mu.Unlock()
	return s.deleteLocked(owner, id)
}

func (s *Store) deleteLocked(owner, id string) error {
	// The record goes first: without it the snapshot does not exist, whatever is left.
	if err := os.Remove(filepath.Join(s.ownerDir(owner), id+".json")); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("delete snapshot %s: %w", id, err)
	}
	if err := os.Remove(filepath.Join(s.ownerDir(owner), id+".tree.zst")); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("delete snapshot %s: %w", id, err)
	}
	return nil
}

// DeleteOwner removes all of owner's snapshots (an agent removed); GC frees their chunks.
func (s *Store) DeleteOwner(owner string) error {
	if err := validID("agent", owner); err != nil {
		return err
	}
	mu := s.ownerLock(owner)
	mu.Lock()
	defer mu.Unlock()
	if err := os.RemoveAll(s.ownerDir(owner)); err != nil {
		return fmt.Errorf("delete snapshots of %s: %w", owner, err)
	}
	return nil
}

// writeFileAtomic writes data to path through a synced temporary file and a rename.
func writeFileAtomic(path string, data []byte) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), ".tmp-*")
	if err != nil {
		return err
	}
	_, err = tmp.Write(data)
	if err == nil {
		err = tmp.Sync()
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp.Name(), path)
	}
	if err != nil {
		_ = os.Remove(tmp.Name())
	}
	return err
}

// Copy makes snapshot id of owner a snapshot of toOwner too (a fork's starting point), under
// a new id and with kind and name: the manifest is copied, the chunks are shared.
func (s *Store) Copy(owner, id, toOwner, kind, name string) (Snapshot, error) {
	if err := validID("agent", toOwner); err != nil {
		return Snapshot{}, err
	}
	sn, err := s.Get(owner, id)
	if err != nil {
		return Snapshot{}, err
	}
	raw, err := os.ReadFile(filepath.Join(s.ownerDir(owner), id+".tree.zst"))
	if err != nil {
		return Snapshot{}, fmt.Errorf("copy snapshot %s: %w", id, err)
	}
	mu := s.ownerLock(toOwner)
	mu.Lock()
	defer mu.Unlock()
	s.gc.RLock() // the chunks must not be collected between the read and the write
	defer s.gc.RUnlock()
	if _, err := s.Get(owner, id); err != nil {
		return Snapshot{}, err
	}
	now := s.now().UTC()
	cp := sn
	cp.ID, cp.Owner, cp.Kind, cp.CreatedAt, cp.Parent = newID(now), toOwner, kind, now, ""
	cp.SessionID, cp.TurnID, cp.ReplyID, cp.Before, cp.NewChunks, cp.NewBytes, cp.ReadBytes = "", "", "", "", 0, 0, 0
	cp.Name = name
	if cp.Name == "" {
		cp.Name = defaultName(kind, now)
	}
	if err := os.MkdirAll(s.ownerDir(toOwner), 0o700); err != nil {
		return Snapshot{}, fmt.Errorf("copy snapshot: %w", err)
	}
	if err := writeFileAtomic(filepath.Join(s.ownerDir(toOwner), cp.ID+".tree.zst"), raw); err != nil {
		return Snapshot{}, fmt.Errorf("copy snapshot: %w", err)
	}
	rec, _ := json.MarshalIndent(cp, "", "  ")
	if err := writeFileAtomic(filepath.Join(s.ownerDir(toOwner), cp.ID+".json"), rec); err != nil {
		return Snapshot{}, fmt.Errorf("copy snapshot: %w", err)
	}
	return cp, nil
}
