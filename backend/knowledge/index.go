package knowledge

import (
	"errors"
	"slices"
	"strings"
	"sync"

	"github.com/blevesearch/bleve/v2"
	"github.com/blevesearch/bleve/v2/analysis/lang/en"
	"github.com/blevesearch/bleve/v2/index/scorch"
	"github.com/blevesearch/bleve/v2/mapping"
	bindex "github.com/blevesearch/bleve_index_api"

	"cubicle/backend/store"
)

// accountIndex is one account's runs in memory: a bleve index scoring by BM25 (English
// analysis: lower case, stop words, Porter stems) over two fields — the request (boosted) and
// the body (tools and result) — and the runs' vectors.
type accountIndex struct {
	mu   sync.Mutex
	idx  bleve.Index                   // guarded by mu (for put/close ordering)
	runs map[string]store.KnowledgeRun // by ID, without vectors; guarded by mu
	vecs map[string]vector             // by ID; guarded by mu
}

// vector is a run's unit-length embedding and the model that made it.
type vector struct {
	v     []float32
	model string
}

// requestBoost weighs a match in the request over one in the tools or the result.
const requestBoost = 2.0

func newMapping() mapping.IndexMapping {
	m := bleve.NewIndexMapping()
	m.ScoringModel = bindex.BM25Scoring
	m.DefaultAnalyzer = en.AnalyzerName
	m.StoreDynamic = false
	m.DocValuesDynamic = false
	text := bleve.NewTextFieldMapping()
	text.Analyzer = en.AnalyzerName
	text.Store = false
	text.IncludeInAll = false
	text.IncludeTermVectors = false
	doc := bleve.NewDocumentStaticMapping()
	doc.AddFieldMappingsAt("request", text)
	doc.AddFieldMappingsAt("body", text)
	m.DefaultMapping = doc
	return m
}

func newAccountIndex(runs []store.KnowledgeRun) (*accountIndex, error) {
	// An in-memory scorch index (no path): the store holds the truth.
	idx, err := bleve.NewUsing("", newMapping(), scorch.Name, scorch.Name, nil)
	if err != nil {
		return nil, err
	}
	ai := &accountIndex{idx: idx, runs: map[string]store.KnowledgeRun{}, vecs: map[string]vector{}}
	b := idx.NewBatch()
	for _, r := range runs {
		if err := b.Index(r.ID, doc(r)); err != nil {
			idx.Close()
			return nil, err
		}
		ai.keep(r)
	}
	if err := idx.Batch(b); err != nil {
		idx.Close()
		return nil, err
	}
	return ai, nil
}

// doc is what bleve indexes of a run.
func doc(r store.KnowledgeRun) map[string]any {
	var tools []string
	for _, n := range toolNames(r.Tools) {
		// "computer_shell" as itself and as words, so "shell" finds it.
		tools = append(tools, n, strings.ReplaceAll(n, "_", " "))
	}
	return map[string]any{"request": r.Request, "body": strings.Join(tools, " ") + "\n" + r.Result + "\n" + r.Error}
}

// keep remembers r and its vector (the caller holds mu or owns ai alone).
func (ai *accountIndex) keep(r store.KnowledgeRun) {
	if v := decodeVector(r.Vector); len(v) > 0 {
		ai.vecs[r.ID] = vector{v: v, model: r.VectorModel}
	} else {
		delete(ai.vecs, r.ID)
	}
	r.Vector = nil
	ai.runs[r.ID] = r
}

// put adds or replaces r and drops the oldest runs beyond keep.
func (ai *accountIndex) put(r store.KnowledgeRun, keep int) error {
	ai.mu.Lock()
	defer ai.mu.Unlock()
	if ai.idx == nil {
		return errors.New("the index is closed")
	}
	if err := ai.idx.Index(r.ID, doc(r)); err != nil {
		return err
	}
	ai.keep(r)
	if over := len(ai.runs) - keep; over > 0 {
		ids := make([]string, 0, len(ai.runs))
		for id := range ai.runs {
			ids = append(ids, id)
		}
		slices.Sort(ids)
		for _, id := range ids[:over] {
			ai.idx.Delete(id)
			delete(ai.runs, id)
			delete(ai.vecs, id)
		}
	}
	return nil
}

func (ai *accountIndex) run(id string) (store.KnowledgeRun, bool) {
	ai.mu.Lock()
	defer ai.mu.Unlock()
	r, ok := ai.runs[id]
	return r, ok
}

func (ai *accountIndex) count() int {
	ai.mu.Lock()
	defer ai.mu.Unlock()
	return len(ai.runs)
}

func (ai *accountIndex) setVector(id string, v []float32, model string) {
	ai.mu.Lock()
	defer ai.mu.Unlock()
	if _, ok := ai.runs[id]; ok {
		ai.vecs[id] = vector{v: v, model: model}
	}
}

func (ai *accountIndex) close() error {
	ai.mu.Lock()
	defer ai.mu.Unlock()
	if ai.idx == nil {
		return nil
	}
	err := ai.idx.Close()
	ai.idx = nil
	return err
}

// scored is a run and its BM25 score.
type scored struct {
	id    string
	score float64
}

// keyword returns up to k runs matching q by BM25, best first.
func (ai *accountIndex) keyword(q string, k int) ([]scored, error) {
	ai.mu.Lock()
	defer ai.mu.Unlock()
	if ai.idx == nil {
		return nil, errors.New("the index is closed")
	}
	req := bleve.NewMatchQuery(q)
	req.SetField("request")
	req.SetBoost(requestBoost)
	body := bleve.NewMatchQuery(q)
	body.SetField("body")
	sr := bleve.NewSearchRequestOptions(bleve.NewDisjunctionQuery(req, body), k, 0, false)
	res, err := ai.idx.Search(sr)
	if err != nil {
		return nil, err
	}
	out := make([]scored, 0, len(res.Hits))
	for _, h := range res.Hits {
		if _, ok := ai.runs[h.ID]; ok && h.Score > 0 {
			out = append(out, scored{id: h.ID, score: h.Score})
		}
	}
	return out, nil
}
