package store

import (
	"encoding/json"
	"fmt"
	"strings"
	"unicode"

	"go.etcd.io/bbolt"

	"cubicle/backend/fault"
)

// Bucket names of the current schema (see the package doc).
var (
	bucketMeta         = []byte("meta")
	bucketAccounts     = []byte("accounts")
	bucketUsernames    = []byte("account_usernames")
	bucketAgents       = []byte("agents")
	bucketNodeSettings = []byte("node_settings")

	keyVersion = []byte("version")
)

// table is a bucket of JSON records of type T keyed by id. Adding an entity is one table
// value plus thin typed methods. Decoding copies out of bbolt's memory (json.Unmarshal never
// keeps the input slice), so records stay valid after the transaction ends.
type table[T any] struct {
	bucket []byte
	kind   string // in messages: `agent "x" not found`
}

func (t table[T]) b(tx *bbolt.Tx) (*bbolt.Bucket, error) {
	b := tx.Bucket(t.bucket)
	if b == nil {
		return nil, fmt.Errorf("store: bucket %q is missing from the data file", t.bucket)
	}
	return b, nil
}

// get returns the record id, or a fault.ErrNotFound error.
func (t table[T]) get(tx *bbolt.Tx, id string) (T, error) {
	var v T
	b, err := t.b(tx)
	if err != nil {
		return v, err
	}
	raw := b.Get([]byte(id))
	if raw == nil {
		return v, fault.NotFound("%s %q not found", t.kind, id)
	}
	if err := json.Unmarshal(raw, &v); err != nil {
		return v, fmt.Errorf("store: %s %q: corrupt record: %w", t.kind, id, err)
	}
	return v, nil
}

// has reports whether record id exists.
func (t table[T]) has(tx *bbolt.Tx, id string) (bool, error) {
	b, err := t.b(tx)
	if err != nil {
		return false, err
	}
	return b.Get([]byte(id)) != nil, nil
}

// put stores v under id, replacing any previous record.
func (t table[T]) put(tx *bbolt.Tx, id string, v T) error {
	if id == "" {
		return fault.Invalid("%s: empty id", t.kind)
	}
	b, err := t.b(tx)
	if err != nil {
		return err
	}
	raw, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("store: encode %s %q: %w", t.kind, id, err)
	}
	if err := b.Put([]byte(id), raw); err != nil {
		return fmt.Errorf("store: put %s %q: %w", t.kind, id, err)
	}
	return nil
}

// del removes record id, or returns a fault.ErrNotFound error.
func (t table[T]) del(tx *bbolt.Tx, id string) error {
	b, err := t.b(tx)
	if err != nil {
		return err
	}
	if b.Get([]byte(id)) == nil {
		return fault.NotFound("%s %q not found", t.kind, id)
	}
	return b.Delete([]byte(id))
}

// list returns every record for which keep (nil keeps all) is true, in key order.
func (t table[T]) list(tx *bbolt.Tx, keep func(T) bool) ([]T, error) {
	b, err := t.b(tx)
	if err != nil {
		return nil, err
	}
	out := []T{}
	err = b.ForEach(func(k, raw []byte) error {
		var v T
		if err := json.Unmarshal(raw, &v); err != nil {
			return fmt.Errorf("store: %s %q: corrupt record: %w", t.kind, k, err)
		}
		if keep == nil || keep(v) {
			out = append(out, v)
		}
		return nil
	})
	return out, err
}

// modify is the read-modify-write of UpdateX: it loads record id, lets fn change it, checks
// the result with check (which may be nil) and stores it, all in tx. fn's error is returned as
// is, and the caller's transaction then rolls back, so nothing changes.
func (t table[T]) modify(tx *bbolt.Tx, id string, fn func(*T) error, check func(old, new T) error) (T, error) {
	var zero T
	old, err := t.get(tx, id)
	if err != nil {
		return zero, err
	}
	v := old
	if err := fn(&v); err != nil {
		return zero, err
	}
	if check != nil {
		if err := check(old, v); err != nil {
			return zero, err
		}
	}
	if err := t.put(tx, id, v); err != nil {
		return zero, err
	}
	return v, nil
}

// foldKey maps s to a key that is equal for exactly the strings strings.EqualFold deems
// equal: each rune becomes the lower case of the smallest rune of its case-folding orbit
// ("Admin" → "admin", the Kelvin sign → "k").
func foldKey(s string) string {
	return strings.Map(func(r rune) rune {
		lo := r
		for f := unicode.SimpleFold(r); f != r; f = unicode.SimpleFold(f) {
			lo = min(lo, f)
		}
		return unicode.ToLower(lo)
	}, s)
}
