// Package store is Cubicle's persistence: one bbolt file holding accounts, agents, node
// settings, desktops, conversations and the tool history as JSON records, behind typed methods that hide bbolt from the rest of the backend.
//
// The bucket tree of the current schema (version 5):
//
//	cubicle.db
//	├── meta
//	│   └── "version"          → schema version, decimal ASCII ("5")
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
//	│   └── <user id>\x00<session id>          → ChatSession JSON (messages, pending confirmations)
//	├── tool_runs
//	│   └── <session id>\x00<time>\x00<run id> → ToolRun JSON (execution history, SPEC §2.5)
//	├── app_settings
//	│   ├── "model"            → ModelSettings JSON (the API key sealed by package models)
//	│   └── "security"         → SecuritySettings JSON (Settings → Security)
//	├── session_revocations
//	│   └── <token nonce>      → expiry, unix seconds (a logged-out session token)
//	├── host_grants
//	│   └── <account id>\x00<node id>          → HostGrant JSON
//	├── allow_rules
//	│   └── <agent id or "">\x00<rule id>      → AllowRule JSON ("" = every agent)
//	└── confirmations
//	    └── <time>\x00<id>                     → Confirmation JSON (who confirmed what, when)
//
// Schema history. Version 1 (the legacy layout) had meta, accounts, account_usernames and
// agents; its agent records could say "computer": "hybrid", meaning a VM plus the host
// environment. Version 2 rewrites those to "computer": "vm" with "allowHostEnvironment": true
// (SPEC §1.11) and adds node_settings. Version 3 adds vm_images, vm_instances and vm_bindings (Local VM).
// Version 4 adds chat_sessions, tool_runs and app_settings (the agent runtime). Version 5 adds
// session_revocations, host_grants, allow_rules and confirmations (accounts and security).
//
// Open brings an older file up to date: it first copies the file to "<path>.bak-v<old version>"
// and then runs each migration (version N to N+1) in its own transaction, so a failure leaves
// the file at the last version that completed. A new file starts at the latest version. A file
// written by a newer Cubicle is refused and left untouched.
//
// Errors: misses wrap fault.ErrNotFound, duplicates fault.ErrExists, bad arguments
// fault.ErrInvalid, a file locked by another process fault.ErrUnavailable, a file from a newer
// Cubicle fault.ErrConflict. Errors without a class (I/O failures, corrupt records) are
// internal. A Store is safe for concurrent use; every UpdateX is one read-modify-write
// transaction, so concurrent updates are never lost.
package store

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
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
}

// Store is an open Cubicle data file. Create it with Open and release it with Close.
type Store struct {
	db   *bbolt.DB
	path string
	log  *slog.Logger
}

// Open opens (creating when missing) the data file at path, migrating it to the current
// schema. Only one process may have a file open; while another does, Open waits up to
// opts.LockTimeout and then fails with a fault.ErrUnavailable error.
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
	if path == "" {
		return nil, fault.Invalid("open store: no data file path given")
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, fault.Unavailable("open store: create data directory for %s: %v", path, err)
	}
	db, err := bbolt.Open(path, 0o600, &bbolt.Options{Timeout: opts.LockTimeout})
	if errors.Is(err, berrors.ErrTimeout) {
		return nil, fault.Unavailable("the data file %s is in use by another Cubicle process "+
			"(waited %s): stop that process, or pass a different --data-dir", path, opts.LockTimeout)
	}
	if err != nil {
		return nil, fault.Unavailable("open store: data file %s: %v", path, err)
	}
	s := &Store{db: db, path: path, log: log.With("store", path)}
	if err := s.prepare(migs); err != nil {
		db.Close()
		return nil, err
	}
	return s, nil
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
	err := s.db.View(func(tx *bbolt.Tx) error { fnErr = fn(tx); return fnErr })
	return s.txErr(op, err, fnErr)
}

// update runs fn in a write transaction. fn's error rolls the transaction back and is
// returned as is; bbolt's own errors (closed file, failed commit) are wrapped with op.
func (s *Store) update(op string, fn func(tx *bbolt.Tx) error) error {
	var fnErr error
	err := s.db.Update(func(tx *bbolt.Tx) error { fnErr = fn(tx); return fnErr })
	return s.txErr(op, err, fnErr)
}

func (s *Store) txErr(op string, err, fnErr error) error {
	switch {
	case err == nil || err == fnErr:
		return err
	case errors.Is(err, berrors.ErrDatabaseNotOpen):
		return fault.Unavailable("store: %s: the data file %s is closed", op, s.path)
	default:
		return fmt.Errorf("store: %s: %w", op, err)
	}
}
