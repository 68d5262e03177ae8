package store

import (
	"encoding/json"
	"fmt"
	"time"

	"go.etcd.io/bbolt"
)

// APIToken is a personal API token (package apitoken): who owns it, what it may reach, and the
// SHA-256 of its secret (the secret itself is never stored).
type APIToken struct {
	ID        string    `json:"id"`
	AccountID string    `json:"accountId"`
	Name      string    `json:"name"`
	Agents    []string  `json:"agents,omitempty"` // empty: every agent of the account
	Hash      string    `json:"hash"`             // hex SHA-256 of the secret
	CreatedAt time.Time `json:"createdAt"`
	ExpiresAt time.Time `json:"expiresAt,omitzero"` // zero: never
	LastUsed  time.Time `json:"lastUsed,omitzero"`
}

var keyAPITokens = []byte("api-tokens")

// APITokens returns every personal API token.
func (s *Store) APITokens() ([]APIToken, error) {
	var out []APIToken
	err := s.view("get api tokens", func(tx *bbolt.Tx) error {
		raw := tx.Bucket(bucketAppSettings).Get(keyAPITokens)
		if raw == nil {
			return nil
		}
		return json.Unmarshal(raw, &out)
	})
	return out, err
}

// UpdateAPITokens replaces the tokens with what fn makes of them, in one transaction (so
// concurrent changes are never lost). An error from fn changes nothing.
func (s *Store) UpdateAPITokens(fn func([]APIToken) ([]APIToken, error)) error {
	return s.update("update api tokens", func(tx *bbolt.Tx) error {
		b := tx.Bucket(bucketAppSettings)
		var list []APIToken
		if raw := b.Get(keyAPITokens); raw != nil {
			if err := json.Unmarshal(raw, &list); err != nil {
				return fmt.Errorf("store: corrupt api tokens: %w", err)
			}
		}
		list, err := fn(list)
		if err != nil {
			return err
		}
		raw, err := json.Marshal(list)
		if err != nil {
			return fmt.Errorf("store: encode api tokens: %w", err)
		}
		return b.Put(keyAPITokens, raw)
	})
}
