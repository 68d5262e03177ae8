package store

import (
	"bytes"
	"encoding/json"
	"fmt"
	"sort"
	"time"

	"go.etcd.io/bbolt"

	"cubicle/backend/fault"
)

// Buckets of the chat (schema version 4).
var (
	bucketChatSessions = []byte("chat_sessions")
	bucketToolRuns     = []byte("tool_runs")
	bucketAppSettings  = []byte("app_settings")
)

func migrateChatBuckets(tx *bbolt.Tx) error {
	for _, b := range [][]byte{bucketChatSessions, bucketToolRuns, bucketAppSettings} {
		if _, err := tx.CreateBucketIfNotExists(b); err != nil {
			return fmt.Errorf("create bucket %s: %w", b, err)
		}
	}
	return nil
}

// ChatSession is one conversation's saved state. The store keeps the runtime's messages as
// opaque JSON.
type ChatSession struct {
	UserID    string          `json:"userId"`
	SessionID string          `json:"sessionId"`
	AgentID   string          `json:"agentId,omitempty"`
	Title     string          `json:"title,omitempty"`
	History   json.RawMessage `json:"history,omitempty"`
	Pending   json.RawMessage `json:"pending,omitempty"`
	// ActiveTurn is set while a turn runs (saved before its model or tools run) and cleared
	// when it ends, so a turn that a crash interrupted is found at the next start.
	ActiveTurn *ActiveTurn `json:"activeTurn,omitempty"`
	CreatedAt  time.Time   `json:"createdAt"`
	UpdatedAt  time.Time   `json:"updatedAt"`
}

// ActiveTurn marks the turn a conversation is running.
type ActiveTurn struct {
	ID        string    `json:"id"`
	StartedAt time.Time `json:"startedAt"`
}

func chatKey(userID, sessionID string) []byte { return []byte(userID + "\x00" + sessionID) }

// PutChatSession saves a conversation, replacing the saved one.
func (s *Store) PutChatSession(c ChatSession) error {
	if c.UserID == "" || c.SessionID == "" {
		return fault.Invalid("a chat session needs a user and a session id")
	}
	raw, err := json.Marshal(c)
	if err != nil {
		return fmt.Errorf("store: encode chat session: %w", err)
	}
	return s.update("put chat session", func(tx *bbolt.Tx) error {
		return tx.Bucket(bucketChatSessions).Put(chatKey(c.UserID, c.SessionID), raw)
	})
}

// ChatSession returns a saved conversation.
func (s *Store) ChatSession(userID, sessionID string) (ChatSession, error) {
	var c ChatSession
	err := s.view("get chat session", func(tx *bbolt.Tx) error {
		raw := tx.Bucket(bucketChatSessions).Get(chatKey(userID, sessionID))
		if raw == nil {
			return fault.NotFound("chat session %q not found", sessionID)
		}
		return json.Unmarshal(raw, &c)
	})
	return c, err
}

// ChatSessions lists a user's conversations, most recently updated first, without their
// messages.
func (s *Store) ChatSessions(userID string) ([]ChatSession, error) {
	var out []ChatSession
	err := s.view("list chat sessions", func(tx *bbolt.Tx) error {
		c := tx.Bucket(bucketChatSessions).Cursor()
		prefix := []byte(userID + "\x00")
		for k, v := c.Seek(prefix); k != nil && bytes.HasPrefix(k, prefix); k, v = c.Next() {
			var cs ChatSession
			if err := json.Unmarshal(v, &cs); err != nil {
				return fmt.Errorf("store: chat session %q: corrupt record: %w", k, err)
			}
			cs.History, cs.Pending = nil, nil
			out = append(out, cs)
		}
		return nil
	})
	sort.SliceStable(out, func(i, j int) bool { return out[i].UpdatedAt.After(out[j].UpdatedAt) })
	return out, err
}

// ChatSessionsWithActiveTurn returns every conversation (of every user) whose saved state
// says a turn is running. At start-up these are the turns a crash interrupted.
func (s *Store) ChatSessionsWithActiveTurn() ([]ChatSession, error) {
	var out []ChatSession
	err := s.view("list running chat turns", func(tx *bbolt.Tx) error {
		return tx.Bucket(bucketChatSessions).ForEach(func(k, v []byte) error {
			var probe struct {
				ActiveTurn *ActiveTurn `json:"activeTurn"`
			}
			if err := json.Unmarshal(v, &probe); err != nil {
				return fmt.Errorf("store: chat session %q: corrupt record: %w", k, err)
			}
			if probe.ActiveTurn == nil {
				return nil
			}
			var cs ChatSession
			if err := json.Unmarshal(v, &cs); err != nil {
				return fmt.Errorf("store: chat session %q: corrupt record: %w", k, err)
			}
			out = append(out, cs)
			return nil
		})
	})
	return out, err
}

// Tool run statuses (SPEC §2.5). PENDING: asked for, not running yet (queued behind a
// confirmation, its desktop starting, the lease). TIMEOUT: its deadline ended it.
// INTERRUPTED: the run did not finish — a person stopped it, or the process that ran it ended
// (InterruptRuns at the next start).
const (
	RunPending     = "PENDING"
	RunRunning     = "RUNNING"
	RunSuccess     = "SUCCESS"
	RunFailed      = "FAILED"
	RunTimeout     = "TIMEOUT"
	RunInterrupted = "INTERRUPTED"
)

// ToolRun is one tool call in the execution history.
type ToolRun struct {
	ID           string  `json:"id"`
	SessionID    string  `json:"sessionId"`
	UserID       string  `json:"userId"`
	TurnID       string  `json:"turnId"`
	Step         int     `json:"step"`
	Tool         string  `json:"tool"`
	Source       string  `json:"source,omitempty"` // "main/<name>" for a task helper's call
	InputSHA256  string  `json:"inputSha256"`
	OutputSHA256 *string `json:"outputSha256"` // null on failure
	Status       string  `json:"status"`
	DurationMs   int64   `json:"durationMs"`
	// MemoryBytes and CPUMillis are the peak resident memory and the CPU time of the command
	// the call ran, measured where it ran (0: the tool ran no command, or it was not measured).
	MemoryBytes int64 `json:"memoryBytes,omitempty"`
	CPUMillis   int64 `json:"cpuMillis,omitempty"`
	// Denied: the call never ran — a person declined it, or the guard denied it when it was
	// judged again after the wait (Status FAILED).
	Denied    bool      `json:"denied,omitempty"`
	CreatedAt time.Time `json:"createdAt"` // when it was asked for (PENDING from then)
	// StartedAt is when it started running (zero while PENDING, and for a call that never ran).
	StartedAt time.Time `json:"startedAt,omitzero"`
	UpdatedAt time.Time `json:"updatedAt"`
}

// runKey orders a session's runs by creation time.
func runKey(r ToolRun) []byte {
	return []byte(r.SessionID + "\x00" + r.CreatedAt.UTC().Format("20060102T150405.000000000") + "\x00" + r.ID)
}

// PutToolRun saves a run (insert or replace; SessionID, ID and CreatedAt identify it).
func (s *Store) PutToolRun(r ToolRun) error {
	if r.ID == "" || r.SessionID == "" || r.CreatedAt.IsZero() {
		return fault.Invalid("a tool run needs an id, a session and a creation time")
	}
	raw, err := json.Marshal(r)
	if err != nil {
		return fmt.Errorf("store: encode tool run: %w", err)
	}
	return s.update("put tool run", func(tx *bbolt.Tx) error {
		return tx.Bucket(bucketToolRuns).Put(runKey(r), raw)
	})
}

// ToolRuns returns the runs of userID's session sessionID in the order they started. Runs
// are keyed by session id, which two accounts may both use, so the account is always part of
// the query: another account's runs are never returned.
func (s *Store) ToolRuns(userID, sessionID string) ([]ToolRun, error) {
	var out []ToolRun
	err := s.view("list tool runs", func(tx *bbolt.Tx) error {
		c := tx.Bucket(bucketToolRuns).Cursor()
		prefix := []byte(sessionID + "\x00")
		for k, v := c.Seek(prefix); k != nil && bytes.HasPrefix(k, prefix); k, v = c.Next() {
			var r ToolRun
			if err := json.Unmarshal(v, &r); err != nil {
				return fmt.Errorf("store: tool run %q: corrupt record: %w", k, err)
			}
			if r.UserID == userID {
				out = append(out, r)
			}
		}
		return nil
	})
	return out, err
}

// InterruptRuns marks every run still PENDING or RUNNING as INTERRUPTED, with updated as its
// update time, and returns how many it changed. Call it at start-up, before any turn runs:
// the process that ran them is gone.
func (s *Store) InterruptRuns(updated time.Time) (int, error) {
	n := 0
	err := s.update("interrupt tool runs", func(tx *bbolt.Tx) error {
		b := tx.Bucket(bucketToolRuns)
		changed := map[string][]byte{}
		err := b.ForEach(func(k, v []byte) error {
			var r ToolRun
			if err := json.Unmarshal(v, &r); err != nil {
				return fmt.Errorf("store: tool run %q: corrupt record: %w", k, err)
			}
			if r.Status != RunRunning && r.Status != RunPending {
				return nil
			}
			// Its duration stays unknown (0): it ended somewhere before the restart.
			r.Status, r.UpdatedAt, r.OutputSHA256 = RunInterrupted, updated.UTC(), nil
			raw, err := json.Marshal(r)
			if err != nil {
				return err
			}
			changed[string(k)] = raw
			return nil
		})
		if err != nil {
			return err
		}
		for k, v := range changed { // bbolt forbids writes inside ForEach
			if err := b.Put([]byte(k), v); err != nil {
				return err
			}
		}
		n = len(changed)
		return nil
	})
	return n, err
}

// ModelSettings is the app's default chat model (an OpenAI-compatible endpoint). The API key
// is stored encrypted by the caller (APIKeySealed); the store never sees it in clear.
type ModelSettings struct {
	BaseURL      string `json:"baseUrl"`
	Model        string `json:"model"`
	APIKeySealed []byte `json:"apiKeySealed,omitempty"`
	// KeyBaseURL is the base URL the key was saved with: the key is only ever sent there.
	KeyBaseURL string `json:"keyBaseUrl,omitempty"`
	// AllowPrivate lets the base URL resolve to loopback or private addresses (the admin's
	// explicit allowance; otherwise such a model endpoint is refused at dial time).
	AllowPrivate bool      `json:"allowPrivate,omitempty"`
	UpdatedAt    time.Time `json:"updatedAt"`
	// Provider is the wire protocol of BaseURL ("" = openai-compatible, for records from
	// before providers).
	Provider string `json:"provider,omitempty"`
	// Tested is the outcome of the last Test of these settings (nil: never tested since they
	// were saved; saving them again clears it). Older records decode with it nil.
	Tested *ModelTest `json:"tested,omitempty"`
}

// ModelTest is the outcome of one model test (models.Service.Test).
type ModelTest struct {
	At      time.Time `json:"at"`
	OK      bool      `json:"ok"`
	Code    string    `json:"code,omitempty"`    // what failed ("key", "model", "url", …)
	Problem string    `json:"problem,omitempty"` // why, as the test said it
}

var keyModel = []byte("model")

// ModelSettings returns the saved model settings (fault.ErrNotFound when none were saved).
func (s *Store) ModelSettings() (ModelSettings, error) {
	var m ModelSettings
	err := s.view("get model settings", func(tx *bbolt.Tx) error {
		raw := tx.Bucket(bucketAppSettings).Get(keyModel)
		if raw == nil {
			return fault.NotFound("no model is configured")
		}
		return json.Unmarshal(raw, &m)
	})
	return m, err
}

// PutModelSettings saves the model settings.
func (s *Store) PutModelSettings(m ModelSettings) error {
	raw, err := json.Marshal(m)
	if err != nil {
		return fmt.Errorf("store: encode model settings: %w", err)
	}
	return s.update("put model settings", func(tx *bbolt.Tx) error {
		return tx.Bucket(bucketAppSettings).Put(keyModel, raw)
	})
}
