package store

import (
	"cmp"
	"fmt"
	"slices"
	"time"

	"go.etcd.io/bbolt"

	"cubicle/backend/fault"
)

// bucketRunners holds the execution nodes the server knows (backend/nodes).
var bucketRunners = []byte("runners")

func migrateRunnerBuckets(tx *bbolt.Tx) error {
	if _, err := tx.CreateBucketIfNotExists(bucketRunners); err != nil {
		return fmt.Errorf("create bucket %s: %w", bucketRunners, err)
	}
	return nil
}

// Runner is an execution node registered on this server (SPEC §4). The server keeps only a
// hash of its token; the token itself is shown once when the runner is created.
type Runner struct {
	ID        string `json:"id"`
	Name      string `json:"name"`
	TokenHash []byte `json:"tokenHash"` // SHA-256 of the runner's secret
	Cloud     bool   `json:"cloud"`
	// Revoked is set when an admin revoked the runner: its token no longer works.
	Revoked   bool      `json:"revoked,omitempty"`
	RevokedAt time.Time `json:"revokedAt,omitzero"`
	// Hello is what the runner said when it last connected (its version, platform, engine and
	// capabilities), as JSON the nodes package owns.
	Hello     []byte    `json:"hello,omitempty"`
	LastSeen  time.Time `json:"lastSeen,omitzero"`
	CreatedAt time.Time `json:"createdAt"`
	// Managed marks the server's own managed local runner (node "local"): never listed as an
	// external runner, never revoked. Its token is kept sealed (AES-256-GCM under a key in
	// the data directory's secrets) so the server can start it again; other runners' are not.
	Managed      bool   `json:"managed,omitempty"`
	SecretSealed []byte `json:"secretSealed,omitempty"`
}

var runners = table[Runner]{bucket: bucketRunners, kind: "runner"}

// CreateRunner stores a new runner; an empty id is fault.ErrInvalid, a taken one fault.ErrExists.
func (s *Store) CreateRunner(r Runner) error {
	if r.ID == "" {
		return fault.Invalid("create runner: a runner needs an id")
	}
	return s.update("create runner", func(tx *bbolt.Tx) error {
		ok, err := runners.has(tx, r.ID)
		if err != nil {
			return err
		}
		if ok {
			return fault.Exists("runner %q already exists", r.ID)
		}
		return runners.put(tx, r.ID, r)
	})
}

// Runner returns runner id, or a fault.ErrNotFound error.
func (s *Store) Runner(id string) (Runner, error) {
	var r Runner
	err := s.view("get runner", func(tx *bbolt.Tx) (err error) {
		r, err = runners.get(tx, id)
		return err
	})
	return r, err
}

// Runners returns every runner, oldest first.
func (s *Store) Runners() ([]Runner, error) {
	var out []Runner
	err := s.view("list runners", func(tx *bbolt.Tx) (err error) {
		out, err = runners.list(tx, nil)
		return err
	})
	slices.SortFunc(out, func(a, b Runner) int { return cmp.Or(a.CreatedAt.Compare(b.CreatedAt), cmp.Compare(a.ID, b.ID)) })
	return out, err
}

// UpdateRunner changes runner id with fn in one transaction; fn may not change the id.
func (s *Store) UpdateRunner(id string, fn func(*Runner) error) (Runner, error) {
	var r Runner
	err := s.update("update runner", func(tx *bbolt.Tx) (err error) {
		r, err = runners.modify(tx, id, fn, func(old, new Runner) error {
			if new.ID != old.ID {
				return fault.Invalid("update runner %q: the id cannot change", id)
			}
			return nil
		})
		return err
	})
	return r, err
}

// PutAgent stores agent a, replacing the record with its id. A runner keeps the copy of an
// agent its server sends with each desktop call (the desktop's owner and name); the server
// itself creates and updates agents with CreateAgent and UpdateAgent.
func (s *Store) PutAgent(a Agent) error {
	if a.ID == "" {
		return fault.Invalid("put agent: an agent needs an id")
	}
	return s.update("put agent", func(tx *bbolt.Tx) error { return agents.put(tx, a.ID, a) })
}
