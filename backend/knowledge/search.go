package knowledge

import (
	"context"
	"net/url"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"cubicle/backend/fault"
	"cubicle/backend/store"
)

// Retrieval modes.
const (
	// ModeHybrid: BM25 candidates and the runs nearest by vector, ranked by a weighted sum.
	ModeHybrid = "hybrid"
	// ModeKeyword: BM25 only (no embeddings endpoint is configured, or it failed).
	ModeKeyword = "keyword"
)

// Query limits.
const (
	MaxQuery     = 1000 // characters
	DefaultLimit = 5
	MaxLimit     = 20
)

// Ranking in hybrid mode: score = keywordWeight·bm25/max(bm25) + vectorWeight·max(cos, 0). A
// run no keyword matched is a candidate only when its cosine reaches minVectorOnly.
const (
	keywordWeight = 0.35
	vectorWeight  = 0.65
	minVectorOnly = 0.3
	// backfill is how many runs without a vector of the current model a search embeds.
	backfill = 64
)

// Hit is one past run a search found.
type Hit struct {
	ID        string    `json:"id"`
	AgentID   string    `json:"agentId,omitempty"`
	AgentName string    `json:"agentName,omitempty"`
	SessionID string    `json:"sessionId"`
	Request   string    `json:"request"`
	Tools     []string  `json:"tools"` // in order, a tool repeated in a row once
	ToolCalls int       `json:"toolCalls"`
	Status    string    `json:"status"`
	Error     string    `json:"error,omitempty"`
	Result    string    `json:"result,omitempty"`
	StartedAt time.Time `json:"startedAt"`
	EndedAt   time.Time `json:"endedAt"`
	// Link opens the run's agent chat in the UI.
	Link  string  `json:"link"`
	Score float64 `json:"score"`
}

// Result is what a search found and how.
type Result struct {
	Query string `json:"query"`
	Mode  string `json:"mode"`
	// Notice says why a search that should have used vectors did not (the endpoint failed).
	Notice string `json:"notice,omitempty"`
	Hits   []Hit  `json:"hits"`
}

// CheckQuery validates a query and a limit as a person or a model gives them (0 is the
// default limit); bad ones are fault.ErrInvalid errors saying what is wrong.
func CheckQuery(q string, limit int) (string, int, error) {
	q = strings.TrimSpace(q)
	switch {
	case q == "":
		return "", 0, fault.Invalid("the query is empty: say what the past run was about (for example \"compress the photos\")")
	case utf8.RuneCountInString(q) > MaxQuery:
		return "", 0, fault.Invalid("the query is too long (%d characters at most)", MaxQuery)
	case !utf8.ValidString(q):
		return "", 0, fault.Invalid("the query is not valid UTF-8 text")
	case limit < 0 || limit > MaxLimit:
		return "", 0, fault.Invalid("limit must be between 1 and %d", MaxLimit)
	case limit == 0:
		limit = DefaultLimit
	}
	return q, limit, nil
}

// Search finds the account's past runs that best match q, best first: BM25 over the runs'
// requests, tools and results, re-ranked by vectors when an embeddings endpoint is
// configured. It reads only accountID's index.
func (s *Service) Search(ctx context.Context, accountID, q string, limit int) (Result, error) {
	q, limit, err := CheckQuery(q, limit)
	if err != nil {
		return Result{}, err
	}
	if accountID == "" {
		return Result{}, fault.Invalid("an account is required")
	}
	ai, err := s.index(accountID)
	if err != nil {
		return Result{}, err
	}
	kw, err := ai.keyword(q, max(50, limit*5))
	if err != nil {
		return Result{}, fault.Unavailable("keyword search: %v", err)
	}
	res := Result{Query: q, Mode: ModeKeyword, Hits: []Hit{}}
	ranked := kw
	em, ok, err := s.embedderNow()
	if err != nil {
		res.Notice = "vectors are not used: " + err.Error()
	}
	if ok {
		if hy, err := s.hybrid(ctx, ai, em, q, kw); err != nil {
			res.Notice = "vectors are not used for this search (" + err.Error() + "); results by keyword only"
			s.log.Warn("knowledge: hybrid search fell back to keywords", "account", accountID, "err", err)
		} else {
			ranked, res.Mode = hy, ModeHybrid
		}
	}
	ai.mu.Lock()
	defer ai.mu.Unlock()
	for _, sc := range ranked {
		if len(res.Hits) == limit {
			break
		}
		if r, ok := ai.runs[sc.id]; ok {
			res.Hits = append(res.Hits, hit(r, sc.score))
		}
	}
	return res, nil
}

// hybrid ranks the keyword candidates kw and the runs nearest to q by vector.
func (s *Service) hybrid(ctx context.Context, ai *accountIndex, em embedder, q string, kw []scored) ([]scored, error) {
	// Runs without a vector of this model (indexed before the endpoint was set, or while it
	// failed) get one now, the newest first, a bounded number per search.
	ai.mu.Lock()
	var missing []store.KnowledgeRun
	for id, r := range ai.runs {
		if v, ok := ai.vecs[id]; !ok || v.model != em.model {
			missing = append(missing, r)
		}
	}
	ai.mu.Unlock()
	slices.SortFunc(missing, func(a, b store.KnowledgeRun) int { return strings.Compare(b.ID, a.ID) })
	if len(missing) > backfill {
		missing = missing[:backfill]
	}
	texts := []string{q}
	for _, r := range missing {
		texts = append(texts, embedText(r))
	}
	vecs, err := s.embed(ctx, em, texts)
	if err != nil {
		return nil, err
	}
	for i, r := range missing {
		if err := s.saveVector(ai, r, vecs[i+1], em.model); err != nil {
			s.log.Warn("knowledge: save a vector", "err", err)
		}
	}
	qv := vecs[0]
	kwScore := map[string]float64{}
	top := 0.0
	for _, k := range kw {
		kwScore[k.id] = k.score
		top = max(top, k.score)
	}
	ai.mu.Lock()
	var out []scored
	for id := range ai.runs {
		kn := 0.0
		if sc, ok := kwScore[id]; ok && top > 0 {
			kn = sc / top
		}
		cos := 0.0
		if v, ok := ai.vecs[id]; ok && v.model == em.model {
			cos = max(cosine(qv, v.v), 0)
		}
		_, matched := kwScore[id]
		if !matched && cos < minVectorOnly {
			continue
		}
		out = append(out, scored{id: id, score: keywordWeight*kn + vectorWeight*cos})
	}
	ai.mu.Unlock()
	slices.SortFunc(out, func(a, b scored) int {
		if a.score != b.score {
			if a.score > b.score {
				return -1
			}
			return 1
		}
		return strings.Compare(b.id, a.id) // newer first
	})
	return out, nil
}

func hit(r store.KnowledgeRun, score float64) Hit {
	h := Hit{ID: r.ID, AgentID: r.AgentID, AgentName: r.AgentName, SessionID: r.SessionID, Request: r.Request,
		Tools: toolNames(r.Tools), ToolCalls: len(r.Tools), Status: r.Status, Error: r.Error, Result: clip(r.Result, 600),
		StartedAt: r.StartedAt, EndedAt: r.EndedAt, Link: "#/agents", Score: score}
	if h.Tools == nil {
		h.Tools = []string{}
	}
	if r.AgentID != "" {
		h.Link = "#/agents/" + url.PathEscape(r.AgentID)
	}
	return h
}
