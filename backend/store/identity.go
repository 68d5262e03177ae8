package store

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"time"

	"go.etcd.io/bbolt"
	berrors "go.etcd.io/bbolt/errors"
)

// Store identity. Every data file has a random id, created once and kept in the meta bucket;
// the desktops it creates carry it as a label, so a data file adopts only its own containers
// and never lists another's as strays. The file also records where it lives. When Open finds
// the file somewhere else, it asks whether the file at the recorded place is still a live
// store with the same id (a Cubicle holds it open, or it opens with that id): then this file
// is a copy (cp -a of a data directory), and the copy takes a new id and a new instance
// namespace, and forgets the desktop records it copied (they name the original's containers
// and volumes, which stay the original's). A file whose recorded place is gone or holds
// another store was moved, and keeps its id.

// Meta keys of the identity.
var (
	keyStoreID   = []byte("store-id")
	keyStorePath = []byte("store-path")
	keyNamespace = []byte("instance-ns")
)

// Identity is who a data file is.
type Identity struct {
	// ID is the data file's random id (16 hex digits); its desktops' containers and volumes
	// carry it.
	ID string
	// Namespace is mixed into desktop instance ids: "" for a data file that was never found
	// to be a copy (so ids stay what they always were), the copy's own id for a copy.
	Namespace string
	// CopiedFrom is the data file this one was found, at this Open, to be a copy of ("" when
	// it was not).
	CopiedFrom string
}

// Identity returns the data file's identity.
func (s *Store) Identity() Identity { return s.ident }

func newStoreID() string {
	b := make([]byte, 8)
	rand.Read(b)
	return hex.EncodeToString(b)
}

// canonical is path made absolute with its directory's symbolic links resolved.
func canonical(path string) string {
	abs, err := filepath.Abs(path)
	if err != nil {
		return path
	}
	if dir, err := filepath.EvalSymlinks(filepath.Dir(abs)); err == nil {
		return filepath.Join(dir, filepath.Base(abs))
	}
	return abs
}

// identify reads (creating it on first use) the file's identity and detects a copy.
func (s *Store) identify() error {
	here := canonical(s.path)
	var id Identity
	var recorded string
	err := s.view("read identity", func(tx *bbolt.Tx) error {
		m := tx.Bucket(bucketMeta)
		id.ID, id.Namespace, recorded = string(m.Get(keyStoreID)), string(m.Get(keyNamespace)), string(m.Get(keyStorePath))
		return nil
	})
	if err != nil {
		return err
	}
	if id.ID != "" && recorded == here {
		s.ident = id
		return nil
	}
	copied := id.ID != "" && liveCopy(recorded, here, id.ID)
	if id.ID == "" || copied {
		id.ID = newStoreID()
	}
	if copied {
		id.Namespace, id.CopiedFrom = id.ID, recorded
	}
	err = s.update("record identity", func(tx *bbolt.Tx) error {
		m := tx.Bucket(bucketMeta)
		for k, v := range map[string]string{string(keyStoreID): id.ID, string(keyStorePath): here, string(keyNamespace): id.Namespace} {
			if err := m.Put([]byte(k), []byte(v)); err != nil {
				return err
			}
		}
		if copied {
			return forgetCopiedDesktops(tx)
		}
		return nil
	})
	if err != nil {
		return err
	}
	if copied {
		s.log.Warn("this data file is a copy of another that is still in use: it gets its own identity, so it never "+
			"adopts that one's desktops; its desktop records were reset (agents, chats and settings are kept)",
			"original", recorded, "id", id.ID)
	} else if recorded != "" && recorded != here {
		s.log.Info("data file moved; it keeps its identity", "from", recorded, "to", here)
	}
	s.ident = id
	return nil
}

// liveCopy reports whether the data file recorded (where a file with id last lived) still
// is a store with that id, so that the file at here is a copy of it.
func liveCopy(recorded, here, id string) bool {
	if recorded == "" {
		return false
	}
	fr, err := os.Stat(recorded)
	if err != nil || !fr.Mode().IsRegular() {
		return false
	}
	if fh, err := os.Stat(here); err == nil && os.SameFile(fr, fh) {
		return false // the same file reached through another path
	}
	if busy, err := inUse(recorded); err == nil && busy {
		return true // a running Cubicle holds it: never share its desktops
	}
	if problem, err := checkFile(context.Background(), recorded, 0); err != nil || problem != "" {
		return false
	}
	var other string
	err = safely(func() error {
		db, err := bbolt.Open(recorded, 0o600, &bbolt.Options{ReadOnly: true, Timeout: 100 * time.Millisecond})
		if errors.Is(err, berrors.ErrTimeout) {
			other = id // locked in the meantime: as above
			return nil
		}
		if err != nil {
			return err
		}
		defer db.Close()
		return db.View(func(tx *bbolt.Tx) error {
			if m := tx.Bucket(bucketMeta); m != nil {
				other = string(m.Get(keyStoreID))
			}
			return nil
		})
	})
	return err == nil && other == id
}

// forgetCopiedDesktops deletes the copied records of dynamic desktops (agents', shared and
// task desktops); fixed Compose desktops are found by their label and stay.
func forgetCopiedDesktops(tx *bbolt.Tx) error {
	b := tx.Bucket(bucketVMInstances)
	if b == nil {
		return nil
	}
	var drop [][]byte
	err := b.ForEach(func(k, v []byte) error {
		var in struct {
			Scope string `json:"scope"`
		}
		if json.Unmarshal(v, &in) != nil || in.Scope != "compose" {
			drop = append(drop, append([]byte(nil), k...))
		}
		return nil
	})
	if err != nil {
		return err
	}
	for _, k := range drop {
		if err := b.Delete(k); err != nil {
			return err
		}
	}
	return nil
}
