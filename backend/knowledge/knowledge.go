// Package knowledge is the knowledge base of past runs: every finished agent turn (the
// person's request, the tools called in order, the result, success or failure, the agent,
// the chat and the time) is kept per account in the store, and retrieved by keyword (BM25,
// with bleve) re-ranked by vectors when an administrator configured an OpenAI-compatible
// embeddings endpoint. Agents reach it through the recall_past_runs tool (tool.go), people
// through the chat's "ask past runs" search (GET /api/app/knowledge/search).
//
// Scoping: an account's runs are indexed in an index of their own and searched only for
// that account; no search ever reads another account's index.
//
// Ownership: New starts one goroutine, the embedder, which computes the vectors of newly
// indexed runs in the background (Record never blocks on the network); Close stops it and
// waits. Each account's keyword index is built in memory from the store the first time it is
// searched (or a run of it is recorded) and kept up to date from then on; the store is the
// truth, so a restart only rebuilds it.
//
// Errors: bad queries are fault.ErrInvalid; an embeddings endpoint that fails makes a
// search fall back to keyword retrieval and say so (Result.Notice), never fail.
package knowledge

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"time"

	"cubicle/backend/agent"
	"cubicle/backend/egress"
	"cubicle/backend/fault"
	"cubicle/backend/store"
)

// Store is the part of the store the knowledge base uses (store.Store implements it).
type Store interface {
	PutKnowledgeRun(r store.KnowledgeRun, keep int) error
	KnowledgeRuns(accountID string) ([]store.KnowledgeRun, error)
	SetKnowledgeVector(accountID, id string, vec []byte, model string) error
	ClearKnowledge(accountID string) (int, error)
	EmbeddingSettings() (store.EmbeddingSettings, error)
	PutEmbeddingSettings(e store.EmbeddingSettings) error
}

// Config configures a Service. Store and Key are required.
type Config struct {
	Store Store
	// Key (32 bytes) seals the embeddings API key, like model keys (the same key file).
	Key    []byte
	Logger *slog.Logger
	// Keep is how many runs an account keeps (the oldest go first); 0 means DefaultKeep.
	Keep int
	// HTTPClient is the client of calls to the embeddings endpoint; nil means
	// egress.ModelClient: the egress rules of model endpoints (no private addresses unless
	// allowed, no redirects).
	HTTPClient func(allowPrivate bool) *http.Client
	// EmbedTimeout bounds one embeddings call; 0 means 30 s.
	EmbedTimeout time.Duration
	Now          func() time.Time
}

// DefaultKeep is how many runs an account keeps by default.
const DefaultKeep = 5000

// Status values of a run.
const (
	StatusSuccess = "success"
	StatusFailed  = "failed"
	StatusStopped = "stopped"
)

// Service is the knowledge base. It is safe for concurrent use.
type Service struct {
	cfg  Config
	log  *slog.Logger
	aead interface {
		NonceSize() int
		Seal(dst, nonce, plaintext, additionalData []byte) []byte
		Open(dst, nonce, ciphertext, additionalData []byte) ([]byte, error)
	}
	setMu sync.Mutex // serialises SetEmbeddings

	mu      sync.Mutex
	indexes map[string]*accountIndex // by account; guarded by mu
	closed  bool                     // guarded by mu

	jobs   chan job // runs to embed; the embedder goroutine owns the receiving end
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

// job is a run to embed.
type job struct{ accountID, id string }

// New returns a Service and starts its embedder; Close stops it.
func New(cfg Config) (*Service, error) {
	if cfg.Store == nil {
		return nil, errors.New("knowledge: Config.Store is required")
	}
	aead, err := newAEAD(cfg.Key)
	if err != nil {
		return nil, err
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Keep <= 0 {
		cfg.Keep = DefaultKeep
	}
	if cfg.HTTPClient == nil {
		cfg.HTTPClient = egress.ModelClient
	}
	if cfg.EmbedTimeout <= 0 {
		cfg.EmbedTimeout = embedTimeout
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	s := &Service{cfg: cfg, log: cfg.Logger, aead: aead, indexes: map[string]*accountIndex{}, jobs: make(chan job, 256)}
	s.ctx, s.cancel = context.WithCancel(context.Background())
	s.wg.Add(1)
	go s.embedder()
	return s, nil
}

func (s *Service) now() time.Time { return s.cfg.Now() }

// Close stops the embedder, waits for it and drops the in-memory indexes. It is safe to
// call more than once.
func (s *Service) Close() error {
	s.cancel()
	s.wg.Wait()
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closed = true
	var errs []error
	for _, ai := range s.indexes {
		errs = append(errs, ai.close())
	}
	s.indexes = map[string]*accountIndex{}
	return errors.Join(errs...)
}

// Record indexes what a finished turn did (agent.Config.Finished). A turn waiting for a
// confirmation is not indexed yet: the turn that answers it records the whole run. Turns
// without a person's request (a bare confirmation, a helper's) are skipped. It never blocks
// on the network: the run's vector is computed by the embedder.
func (s *Service) Record(o agent.Outcome) {
	if o.Paused || strings.TrimSpace(o.Request) == "" || o.Info.UserID == "" || o.Info.Helper != "" {
		return
	}
	at := o.RequestAt
	if at.IsZero() {
		at = o.StartedAt
	}
	r := store.KnowledgeRun{
		ID:        fmt.Sprintf("%020d-%s", at.UTC().UnixNano(), o.RequestID),
		AccountID: o.Info.UserID, AgentID: o.Info.AgentID, AgentName: o.Info.AgentName, SessionID: o.Info.SessionID,
		TurnID: o.Info.TurnID, Request: clip(o.Request, maxRequest), Result: clip(o.Result, maxResult),
		Status: status(o), Error: clip(o.Error, 1000), StartedAt: at.UTC(), EndedAt: o.EndedAt.UTC(),
	}
	for _, t := range o.Tools {
		r.Tools = append(r.Tools, store.KnowledgeTool{Name: t.Name, State: t.State})
	}
	if len(r.Tools) > maxTools {
		r.Tools = r.Tools[len(r.Tools)-maxTools:]
	}
	if err := s.cfg.Store.PutKnowledgeRun(r, s.cfg.Keep); err != nil {
		s.log.Warn("knowledge: the run was not indexed", "account", r.AccountID, "session", r.SessionID, "err", err)
		return
	}
	if ai := s.loaded(r.AccountID); ai != nil {
		if err := ai.put(r, s.cfg.Keep); err != nil {
			s.log.Warn("knowledge: in-memory index", "account", r.AccountID, "err", err)
		}
	}
	select {
	case s.jobs <- job{accountID: r.AccountID, id: r.ID}:
	default: // a backlog: a search embeds what is missing
	}
}

// Limits of what a run keeps.
const (
	maxRequest = 4000
	maxResult  = 4000
	maxTools   = 200
)

// status is a run's outcome: stopped by a person, failed (the turn ended in an error, or
// its last tool call did not succeed and nothing came after it), or success.
func status(o agent.Outcome) string {
	switch {
	case o.Stopped:
		return StatusStopped
	case o.Error != "":
		return StatusFailed
	case len(o.Tools) > 0 && o.Tools[len(o.Tools)-1].State != agent.StateSuccess && strings.TrimSpace(o.Result) == "":
		return StatusFailed
	}
	return StatusSuccess
}

// clip shortens s to at most n bytes, on a rune boundary, marking the cut.
func clip(s string, n int) string {
	s = strings.TrimSpace(s)
	if len(s) <= n {
		return s
	}
	cut := n
	for cut > 0 && !utf8Start(s[cut]) {
		cut--
	}
	return s[:cut] + "…"
}

func utf8Start(b byte) bool { return b&0xC0 != 0x80 }

// Clear removes the runs of accountID ("" every account's) and returns how many.
func (s *Service) Clear(accountID string) (int, error) {
	n, err := s.cfg.Store.ClearKnowledge(accountID)
	if err != nil {
		return 0, err
	}
	s.mu.Lock()
	for acc, ai := range s.indexes {
		if accountID == "" || acc == accountID {
			ai.close()
			delete(s.indexes, acc)
		}
	}
	s.mu.Unlock()
	return n, nil
}

// loaded is the account's index when it is in memory, else nil.
func (s *Service) loaded(accountID string) *accountIndex {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.indexes[accountID]
}

// index returns the account's index, building it from the store the first time.
func (s *Service) index(accountID string) (*accountIndex, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil, fault.Unavailable("the knowledge base is closed")
	}
	if ai := s.indexes[accountID]; ai != nil {
		return ai, nil
	}
	runs, err := s.cfg.Store.KnowledgeRuns(accountID)
	if err != nil {
		return nil, fmt.Errorf("knowledge: load the runs of %s: %w", accountID, err)
	}
	ai, err := newAccountIndex(runs)
	if err != nil {
		return nil, fmt.Errorf("knowledge: index the runs of %s: %w", accountID, err)
	}
	s.indexes[accountID] = ai
	return ai, nil
}

// embedder computes the vectors of recorded runs until Close.
func (s *Service) embedder() {
	defer s.wg.Done()
	for {
		select {
		case <-s.ctx.Done():
			return
		case j := <-s.jobs:
			if err := s.embedRun(s.ctx, j); err != nil && s.ctx.Err() == nil {
				s.log.Warn("knowledge: no vector for a run (retrieval by keyword still finds it)", "account", j.accountID, "err", err)
			}
		}
	}
}

// embedRun computes and saves the vector of one run, when an endpoint is configured.
func (s *Service) embedRun(ctx context.Context, j job) error {
	em, ok, err := s.embedderNow()
	if err != nil || !ok {
		return err
	}
	ai, err := s.index(j.accountID)
	if err != nil {
		return err
	}
	r, ok := ai.run(j.id)
	if !ok {
		return nil // cleared meanwhile
	}
	vecs, err := s.embed(ctx, em, []string{embedText(r)})
	if err != nil {
		return err
	}
	return s.saveVector(ai, r, vecs[0], em.model)
}

func (s *Service) saveVector(ai *accountIndex, r store.KnowledgeRun, v []float32, model string) error {
	if err := s.cfg.Store.SetKnowledgeVector(r.AccountID, r.ID, encodeVector(v), model); err != nil {
		if errors.Is(err, fault.ErrNotFound) {
			return nil
		}
		return err
	}
	ai.setVector(r.ID, v, model)
	return nil
}

// embedText is what a run's vector is computed from.
func embedText(r store.KnowledgeRun) string {
	var b strings.Builder
	b.WriteString(r.Request)
	if tools := toolNames(r.Tools); len(tools) > 0 {
		b.WriteString("\nTools: " + strings.Join(tools, ", "))
	}
	if r.Result != "" {
		b.WriteString("\nResult: " + clip(r.Result, 2000))
	}
	return b.String()
}

// toolNames lists the tools of a run in order, a tool called several times in a row once.
func toolNames(ts []store.KnowledgeTool) []string {
	var out []string
	for _, t := range ts {
		if n := len(out); n == 0 || out[n-1] != t.Name {
			out = append(out, t.Name)
		}
	}
	return out
}

// Stats is what the knowledge base holds for an account and how it retrieves.
type Stats struct {
	Runs int `json:"runs"`
	// Mode is "hybrid" (BM25 re-ranked by vectors) or "keyword" (BM25 only: no embeddings
	// endpoint is configured).
	Mode string `json:"mode"`
}

// Stats returns the account's count and the retrieval mode.
func (s *Service) Stats(accountID string) (Stats, error) {
	ai, err := s.index(accountID)
	if err != nil {
		return Stats{}, err
	}
	_, ok, err := s.embedderNow()
	if err != nil {
		s.log.Warn("knowledge: embeddings setting", "err", err)
	}
	mode := ModeKeyword
	if ok {
		mode = ModeHybrid
	}
	return Stats{Runs: ai.count(), Mode: mode}, nil
}
