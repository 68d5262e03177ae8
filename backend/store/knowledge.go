package store

import (
	"bytes"
	"encoding/json"
	"fmt"
	"time"

	"go.etcd.io/bbolt"

	"cubicle/backend/fault"
)

// bucketKnowledge holds the outcomes of finished agent turns, per account (package knowledge).
var bucketKnowledge = []byte("knowledge")

// migrateKnowledgeBucket is version 6 → 7: the knowledge base of past runs.
func migrateKnowledgeBucket(tx *bbolt.Tx) error {
	if _, err := tx.CreateBucketIfNotExists(bucketKnowledge); err != nil {
		return fmt.Errorf("create bucket %s: %w", bucketKnowledge, err)
	}
	return nil
}

// KnowledgeRun is what one finished agent turn did, as the knowledge base keeps it: the
// person's request, the tools it called in order, the result, and whether it worked.
type KnowledgeRun struct {
	// ID orders an account's runs by time: the request's time (20 decimal digits of Unix
	// nanoseconds), "-", the request message's id. A turn resumed after a confirmation has
	// the same ID as the turn that paused, so its record replaces the first one.
	ID        string          `json:"id"`
	AccountID string          `json:"accountId"`
	AgentID   string          `json:"agentId,omitempty"`
	AgentName string          `json:"agentName,omitempty"`
	SessionID string          `json:"sessionId"`
	TurnID    string          `json:"turnId,omitempty"`
	Request   string          `json:"request"`
	Tools     []KnowledgeTool `json:"tools,omitempty"`
	Result    string          `json:"result,omitempty"`
	// Status is "success", "failed" or "stopped"; Error says why a failed turn failed.
	Status    string    `json:"status"`
	Error     string    `json:"error,omitempty"`
	StartedAt time.Time `json:"startedAt"`
	EndedAt   time.Time `json:"endedAt"`
	// Vector is the embedding of the run's text (little-endian float32s) by VectorModel; empty
	// when no embeddings endpoint was configured when it was indexed.
	Vector      []byte `json:"vector,omitempty"`
	VectorModel string `json:"vectorModel,omitempty"`
}

// KnowledgeTool is one tool call of a run: its name and final state (SUCCESS, ERROR, …).
type KnowledgeTool struct {
	Name  string `json:"name"`
	State string `json:"state"`
}

func knowledgeKey(accountID, id string) []byte { return []byte(accountID + "\x00" + id) }

func knowledgePrefix(accountID string) []byte { return []byte(accountID + "\x00") }

// PutKnowledgeRun saves r (replacing a record of the same account and ID) and then drops the
// account's oldest runs beyond keep (keep ≤ 0 keeps all).
func (s *Store) PutKnowledgeRun(r KnowledgeRun, keep int) error {
	if r.AccountID == "" || r.ID == "" {
		return fault.Invalid("knowledge run: account and id are required")
	}
	raw, err := json.Marshal(r)
	if err != nil {
		return fmt.Errorf("store: encode knowledge run %q: %w", r.ID, err)
	}
	return s.update("put knowledge run", func(tx *bbolt.Tx) error {
		b := tx.Bucket(bucketKnowledge)
		if err := b.Put(knowledgeKey(r.AccountID, r.ID), raw); err != nil {
			return err
		}
		if keep <= 0 {
			return nil
		}
		// Keys sort by time within an account: the first ones are the oldest.
		pre := knowledgePrefix(r.AccountID)
		var keys [][]byte
		c := b.Cursor()
		for k, _ := c.Seek(pre); k != nil && bytes.HasPrefix(k, pre); k, _ = c.Next() {
			keys = append(keys, bytes.Clone(k))
		}
		for i := 0; i < len(keys)-keep; i++ {
			if err := b.Delete(keys[i]); err != nil {
				return err
			}
		}
		return nil
	})
}

// KnowledgeRuns returns every run of an account, oldest first.
func (s *Store) KnowledgeRuns(accountID string) ([]KnowledgeRun, error) {
	out := []KnowledgeRun{}
	err := s.view("list knowledge runs", func(tx *bbolt.Tx) error {
		pre := knowledgePrefix(accountID)
		c := tx.Bucket(bucketKnowledge).Cursor()
		for k, v := c.Seek(pre); k != nil && bytes.HasPrefix(k, pre); k, v = c.Next() {
			var r KnowledgeRun
			if err := json.Unmarshal(v, &r); err != nil {
				return fmt.Errorf("store: knowledge run %q: corrupt record: %w", k, err)
			}
			out = append(out, r)
		}
		return nil
	})
	return out, err
}

// SetKnowledgeVector stores the embedding of a run (fault.ErrNotFound when the run is gone,
// e.g. cleared while it was being embedded).
func (s *Store) SetKnowledgeVector(accountID, id string, vec []byte, model string) error {
	return s.update("set knowledge vector", func(tx *bbolt.Tx) error {
		b := tx.Bucket(bucketKnowledge)
		k := knowledgeKey(accountID, id)
		raw := b.Get(k)
		if raw == nil {
			return fault.NotFound("knowledge run %q not found", id)
		}
		var r KnowledgeRun
		if err := json.Unmarshal(raw, &r); err != nil {
			return fmt.Errorf("store: knowledge run %q: corrupt record: %w", id, err)
		}
		r.Vector, r.VectorModel = vec, model
		out, err := json.Marshal(r)
		if err != nil {
			return err
		}
		return b.Put(k, out)
	})
}

// ClearKnowledge removes every run of accountID ("" removes every account's) and returns how
// many it removed.
func (s *Store) ClearKnowledge(accountID string) (int, error) {
	n := 0
	err := s.update("clear knowledge", func(tx *bbolt.Tx) error {
		b := tx.Bucket(bucketKnowledge)
		var pre []byte
		if accountID != "" {
			pre = knowledgePrefix(accountID)
		}
		var keys [][]byte
		c := b.Cursor()
		for k, _ := c.Seek(pre); k != nil && bytes.HasPrefix(k, pre); k, _ = c.Next() {
			keys = append(keys, bytes.Clone(k))
		}
		for _, k := range keys {
			if err := b.Delete(k); err != nil {
				return err
			}
		}
		n = len(keys)
		return nil
	})
	return n, err
}

// EmbeddingSettings are the embeddings endpoint of the knowledge base (Settings → Model,
// admin only): an OpenAI-compatible POST {BaseURL}/embeddings. The API key is sealed by
// package knowledge and bound to the base URL it was saved with (KeyBaseURL).
type EmbeddingSettings struct {
	BaseURL      string    `json:"baseUrl"`
	Model        string    `json:"model"`
	APIKeySealed []byte    `json:"apiKeySealed,omitempty"`
	KeyBaseURL   string    `json:"keyBaseUrl,omitempty"`
	AllowPrivate bool      `json:"allowPrivate,omitempty"`
	UpdatedAt    time.Time `json:"updatedAt"`
}

var keyEmbeddings = []byte("embeddings")

// EmbeddingSettings returns the saved embeddings settings (fault.ErrNotFound when none).
func (s *Store) EmbeddingSettings() (EmbeddingSettings, error) {
	var e EmbeddingSettings
	err := s.view("get embedding settings", func(tx *bbolt.Tx) error {
		raw := tx.Bucket(bucketAppSettings).Get(keyEmbeddings)
		if raw == nil {
			return fault.NotFound("no embeddings endpoint is configured")
		}
		return json.Unmarshal(raw, &e)
	})
	return e, err
}

// PutEmbeddingSettings saves the embeddings settings.
func (s *Store) PutEmbeddingSettings(e EmbeddingSettings) error {
	raw, err := json.Marshal(e)
	if err != nil {
		return fmt.Errorf("store: encode embedding settings: %w", err)
	}
	return s.update("put embedding settings", func(tx *bbolt.Tx) error {
		return tx.Bucket(bucketAppSettings).Put(keyEmbeddings, raw)
	})
}
