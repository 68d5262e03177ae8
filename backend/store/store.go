// Package store is Cubicle's persistence: one bbolt file holding accounts, agents, node
// settings, desktops, conversations and the tool history as JSON records, behind typed methods that hide bbolt from the rest of the backend.
//
// The bucket tree of the current schema (version 7):
//
//	cubicle.db
//	├── meta
//	│   ├── "version"          → schema version, decimal ASCII ("6")
//	│   ├── "store-id"         → the file's identity, 16 hex digits (identity.go)
//	│   ├── "store-path"       → where the file lived when last opened
//	│   └── "instance-ns"      → namespace of desktop instance ids ("" unless a copy)
//	├── accounts
//	│   └── <account id>       → Account JSON
//	├── account_usernames      (unique index; usernames compare case-insensitively)
//	│   └── <folded username>  → <account id>   (lower case, Unicode case folding)
//	├── agents
//	│   └── <agent id>         → Agent JSON (its optional "model" key sealed by package models)
//	├── node_settings
//	│   └── <node id>          → NodeSettings JSON (absent = defaults)
//	├── vm_images
//	│   └── <node id>/<key>    → VMImage JSON (a prepared, verified desktop image)
//	├── vm_instances
//	│   └── <instance id>      → VMInstance JSON (a desktop: container, volumes, state)
//	├── vm_bindings
//	│   └── <agent id>         → VMBinding JSON (an agent's chosen fixed Compose desktop)
//	├── chat_sessions
//	│   └── <user id>\x00<session id>          → ChatSession JSON (messages, pending confirmations,
//	│                                            the running turn's mark "activeTurn")
//	├── tool_runs
//	│   └── <session id>\x00<time>\x00<run id> → ToolRun JSON (execution history, SPEC §2.5; a
//	│                                            run a restart cut short is INTERRUPTED)
//	├── app_settings
//	│   ├── "model"            → ModelSettings JSON (the API key sealed by package models)
//	│   ├── "security"         → SecuritySettings JSON (Settings → Security)
//	│   ├── "runner-channels"  → RunnerChannels JSON (the runners' update channels)
//	│   ├── "embeddings"       → EmbeddingSettings JSON (the knowledge base's endpoint, key sealed)
//	│   └── "api-tokens"       → []APIToken JSON (personal API tokens: hashes, never secrets)
//	├── session_revocations
//	│   └── <token nonce>      → expiry, unix seconds (a logged-out session token)
//	├── host_grants
//	│   └── <account id>\x00<node id>          → HostGrant JSON
//	├── allow_rules
//	│   └── <agent id or "">\x00<rule id>      → AllowRule JSON ("" = every agent)
//	├── confirmations
//	│   └── <time>\x00<id>                     → Confirmation JSON (who confirmed what, when)
//	├── runners
//	│   └── <runner id>        → Runner JSON (an execution node: name, token hash, last hello)
//	└── knowledge
//	    └── <account id>\x00<time>-<request id> → KnowledgeRun JSON (a finished turn's outcome)
//
// Schema history. Version 1 (the legacy layout) had meta, accounts, account_usernames and
// agents; its agent records could say "computer": "hybrid", meaning a VM plus the host
// environment. Version 2 rewrites those to "computer": "vm" with "allowHostEnvironment": true
// (SPEC §1.11) and adds node_settings. Version 3 adds vm_images, vm_instances and vm_bindings (Local VM).
// Version 4 adds chat_sessions, tool_runs and app_settings (the agent runtime). Version 5 adds
// session_revocations, host_grants, allow_rules and confirmations (accounts and security).
// Version 6 adds runners (execution nodes registered on a server). Version 7 adds knowledge
// (the outcomes of past runs, package knowledge).
//
// Open brings an older file up to date: it first copies the file to "<path>.bak-v<old version>"
// and then runs each migration (version N to N+1) in its own transaction, so a failure leaves
// the file at the last version that completed. A new file starts at the latest version. A file
// written by a newer Cubicle is refused and left untouched.
//
// A file is checked before bbolt opens it and bbolt never crashes the process on a damaged
// one (verify.go, damage.go); rolling backups and their restore are in backup.go.
//
// Errors: misses wrap fault.ErrNotFound, duplicates fault.ErrExists, bad arguments
// fault.ErrInvalid, a file locked by another process fault.ErrUnavailable, a file from a newer
// Cubicle fault.ErrConflict. Errors without a class (I/O failures, corrupt records) are
// internal. A Store is safe for concurrent use; every UpdateX is one read-modify-write
// transaction, so concurrent updates are never lost.
package store

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"time"

	"go.etcd.io/bbolt"
	berrors "go.etcd.io/bbolt/errors"

	"cubicle/backend/fault"
)

// defaultLockTimeout is how long Open waits for another process to release the data file.
const defaultLockTimeout = time.Second

// Options tunes Open. The zero value is usable.
type Options struct {
	// LockTimeout bounds the wait for a file lock held by another process; ≤0 means 1s.
	LockTimeout time.Duration
	// Logger receives migration and backup notices; nil discards them.
	Logger *slog.Logger
	// KeepBackups is how many rolling backups to keep (see Backup); 0 means
	// DefaultKeepBackups, a negative number turns rolling backups off.
	KeepBackups int
	// BackupEvery: Open backs an existing file up when its newest rolling backup is older
	// than this (or there is none); 0 means DefaultBackupEvery.
	BackupEvery time.Duration

	walkLimit int64 // tests: the largest file Open walks (0: defaultWalkLimit, < 0: none)
}

// Store is an open Cubicle data file. Create it with Open and release it with Close.
type Store struct {
	db    *bbolt.DB
	path  string
	log   *slog.Logger
	keep  int      // rolling backups to keep; < 0: none
	ident Identity // set by Open

	damage atomic.Pointer[DamagedError] // set once bbolt crashed on damage: writes are refused
}

// Open opens (creating when missing) the data file at path, migrating it to the current
// schema. Only one process may have a file open; while another does, Open waits up to
// opts.LockTimeout and then fails with a fault.ErrUnavailable error.
//
// Open never creates a file over one that exists: a new file is made under a temporary name
// and renamed into place, so an empty file at path was emptied from outside and is refused.
// An existing file is checked first (see verify.go); a damaged one is refused, untouched,
// with a *DamagedError naming the newest sound backup and the command that restores it.
func Open(path string, opts Options) (*Store, error) {
	return open(path, opts, migrations)
}

// open is Open with an explicit migration list, so tests can exercise the framework.
func open(path string, opts Options, migs []migration) (*Store, error) {
	if opts.LockTimeout <= 0 {
		opts.LockTimeout = defaultLockTimeout
	}
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if opts.KeepBackups == 0 {
		opts.KeepBackups = DefaultKeepBackups
	}
	if opts.walkLimit == 0 {
		opts.walkLimit = defaultWalkLimit
	}
	if opts.BackupEvery <= 0 {
		opts.BackupEvery = DefaultBackupEvery
	}
	if path == "" {
		return nil, fault.Invalid("open store: no data file path given")
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, fault.Unavailable("open store: create data directory for %s: %v", path, err)
	}
	inUseErr := fault.Unavailable("the data file %s is in use by another Cubicle process "+
		"(waited %s): stop that process, or pass a different --data-dir", path, opts.LockTimeout)
	fi, err := os.Stat(path)
	existed := err == nil
	switch {
	case errors.Is(err, os.ErrNotExist):
		if err := createFile(path); err != nil {
			return nil, fault.Unavailable("open store: create data file %s: %v", path, err)
		}
	case err != nil:
		return nil, fault.Unavailable("open store: data file %s: %v", path, err)
	case fi.IsDir():
		return nil, fault.Unavailable("open store: data file %s is a directory", path)
	default:
		// Another process writing the file could make it look damaged for a moment: wait
		// for its lock first, then look.
		if busy := waitUnlocked(path, opts.LockTimeout); busy {
			return nil, inUseErr
		}
		if problem, err := checkFile(context.Background(), path, opts.walkLimit); err != nil {
			return nil, fault.Unavailable("open store: data file %s: %v", path, err)
		} else if problem != "" {
			return nil, damaged(path, problem)
		}
	}
	var db *bbolt.DB
	err = safely(func() error {
		db, err = bbolt.Open(path, 0o600, &bbolt.Options{Timeout: opts.LockTimeout})
		return err
	})
	var pe *panicError
	switch {
	case errors.Is(err, berrors.ErrTimeout):
		return nil, inUseErr
	case errors.As(err, &pe), errors.Is(err, berrors.ErrInvalid), errors.Is(err, berrors.ErrChecksum),
		errors.Is(err, berrors.ErrVersionMismatch):
		return nil, damaged(path, "bbolt cannot read it ("+err.Error()+")")
	case err != nil:
		return nil, fault.Unavailable("open store: data file %s: %v", path, err)
	}
	s := &Store{db: db, path: path, log: log.With("store", path), keep: opts.KeepBackups}
	if existed && fi.Size() <= opts.walkLimit {
		if problems := inspect(db); len(problems) > 0 {
			safely(db.Close)
			return nil, damaged(path, strings.Join(problems, "; "))
		}
	}
	if err := s.prepare(migs); err != nil {
		db.Close()
		return nil, err
	}
	if err := s.identify(); err != nil {
		db.Close()
		return nil, err
	}
	if existed && s.keep > 0 {
		if _, _, err := s.BackupIfDue(opts.BackupEvery); err != nil {
			s.log.Warn("no backup taken at start", "err", err)
		}
	}
	return s, nil
}

// createFile makes a new, empty bbolt file at path: under a temporary name first, renamed
// into place once complete, so that path never holds a half-made (or empty) file.
func createFile(path string) error {
	tmp := path + ".new"
	if err := os.Remove(tmp); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	db, err := bbolt.Open(tmp, 0o600, &bbolt.Options{Timeout: time.Second})
	if err != nil {
		os.Remove(tmp)
		return err
	}
	if err := db.Close(); err != nil {
		os.Remove(tmp)
		return err
	}
	// Link rather than rename: it fails instead of replacing a file another process created
	// at path in the meantime.
	if err := os.Link(tmp, path); errors.Is(err, os.ErrExist) {
		os.Remove(tmp)
		return err
	} else if err != nil {
		// A file system without hard links.
		if err := os.Rename(tmp, path); err != nil {
			os.Remove(tmp)
			return err
		}
	}
	os.Remove(tmp)
	syncDir(filepath.Dir(path))
	return nil
}

// waitUnlocked waits up to d while another process holds the file's lock; it reports whether
// the file is still locked.
func waitUnlocked(path string, d time.Duration) bool {
	deadline := time.Now().Add(d)
	for {
		busy, err := inUse(path)
		if err != nil || !busy {
			return false
		}
		if time.Now().After(deadline) {
			return true
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// Close releases the data file. It is safe to call more than once.
func (s *Store) Close() error {
	if err := s.db.Close(); err != nil {
		return fmt.Errorf("close store %s: %w", s.path, err)
	}
	return nil
}

// Path returns the data file's path.
func (s *Store) Path() string { return s.path }

// SchemaVersion returns the schema version recorded in the file.
func (s *Store) SchemaVersion() (int, error) {
	var v int
	err := s.view("read schema version", func(tx *bbolt.Tx) error {
		var err error
		v, err = readVersion(tx)
		return err
	})
	return v, err
}

// view runs fn in a read transaction; see update for errors.
func (s *Store) view(op string, fn func(tx *bbolt.Tx) error) error {
	var fnErr error
	err := safely(func() error {
		return s.db.View(func(tx *bbolt.Tx) error { fnErr = fn(tx); return fnErr })
	})
	return s.txErr(op, err, fnErr)
}

// update runs fn in a write transaction. fn's error rolls the transaction back and is
// returned as is; bbolt's own errors (closed file, failed commit) are wrapped with op. Once
// the file was found damaged, every update is refused with the *DamagedError.
func (s *Store) update(op string, fn func(tx *bbolt.Tx) error) error {
	if d := s.damage.Load(); d != nil {
		return d
	}
	var fnErr error
	err := safely(func() error {
		return s.db.Update(func(tx *bbolt.Tx) error { fnErr = fn(tx); return fnErr })
	})
	return s.txErr(op, err, fnErr)
}

func (s *Store) txErr(op string, err, fnErr error) error {
	var pe *panicError
	switch {
	case err == nil || err == fnErr:
		return err
	case errors.As(err, &pe):
		return s.crashed(op, pe)
	case errors.Is(err, berrors.ErrDatabaseNotOpen):
		return fault.Unavailable("store: %s: the data file %s is closed", op, s.path)
	default:
		return fmt.Errorf("store: %s: %w", op, err)
	}
}
