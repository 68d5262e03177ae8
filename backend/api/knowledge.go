package api

import (
	"context"
	"net/http"
	"strconv"
	"strings"

	"cubicle/backend/fault"
	"cubicle/backend/knowledge"
)

// Knowledge is the knowledge base of past runs (knowledge.Service).
type Knowledge interface {
	Search(ctx context.Context, accountID, q string, limit int) (knowledge.Result, error)
	Stats(accountID string) (knowledge.Stats, error)
	Clear(accountID string) (int, error)
	Embeddings() (knowledge.EmbeddingsView, error)
	SetEmbeddings(u knowledge.EmbeddingsUpdate) (knowledge.EmbeddingsView, error)
}

func (s *Server) needKnowledge(h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if s.cfg.Knowledge == nil {
			writeError(w, r, s.log, fault.Unavailable("the knowledge base of past runs is not available in this mode"))
			return
		}
		h(w, r)
	}
}

// knowledgeStats answers GET /api/app/knowledge: how many past runs the caller's account
// has and how they are retrieved ("keyword" without an embeddings endpoint).
func (s *Server) knowledgeStats(w http.ResponseWriter, r *http.Request) {
	st, err := s.cfg.Knowledge.Stats(principal(r).AccountID)
	if err != nil {
		writeError(w, r, s.log, err)
		return
	}
	writeJSON(w, http.StatusOK, st)
}

// searchKnowledge answers GET /api/app/knowledge/search?q=…&limit=…: the caller's account's
// past runs that best match q (never another account's, administrators included).
func (s *Server) searchKnowledge(w http.ResponseWriter, r *http.Request) {
	qv := r.URL.Query()
	limit := 0
	if v := qv.Get("limit"); v != "" {
		n, err := strconv.Atoi(strings.TrimSpace(v))
		if err != nil || n < 1 || n > knowledge.MaxLimit {
			writeError(w, r, s.log, fault.Invalid("limit must be a whole number between 1 and %d", knowledge.MaxLimit))
			return
		}
		limit = n
	}
	res, err := s.cfg.Knowledge.Search(r.Context(), principal(r).AccountID, qv.Get("q"), limit)
	if err != nil {
		writeError(w, r, s.log, err)
		return
	}
	writeJSON(w, http.StatusOK, res)
}

// clearKnowledge answers DELETE /api/app/admin/knowledge[?account=ID] (administrators): it
// removes the past runs of one account, or of every account without ?account.
func (s *Server) clearKnowledge(w http.ResponseWriter, r *http.Request) {
	acc := strings.TrimSpace(r.URL.Query().Get("account"))
	if r.URL.Query().Has("account") && acc == "" {
		writeError(w, r, s.log, fault.Invalid("account is empty: name an account id, or leave the parameter out to clear every account"))
		return
	}
	if acc != "" {
		if _, err := s.cfg.Accounts.Account(acc); err != nil {
			writeError(w, r, s.log, err)
			return
		}
	}
	n, err := s.cfg.Knowledge.Clear(acc)
	if err != nil {
		writeError(w, r, s.log, err)
		return
	}
	s.log.Info("knowledge base cleared", "by", principal(r).Username, "account", acc, "runs", n)
	writeJSON(w, http.StatusOK, map[string]any{"removed": n, "account": acc})
}

func (s *Server) getEmbeddings(w http.ResponseWriter, r *http.Request) {
	v, err := s.cfg.Knowledge.Embeddings()
	if err != nil {
		writeError(w, r, s.log, err)
		return
	}
	writeJSON(w, http.StatusOK, v)
}

func (s *Server) putEmbeddings(w http.ResponseWriter, r *http.Request) {
	var u knowledge.EmbeddingsUpdate
	if err := decode(r, &u); err != nil {
		writeError(w, r, s.log, err)
		return
	}
	v, err := s.cfg.Knowledge.SetEmbeddings(u)
	if err != nil {
		writeError(w, r, s.log, err)
		return
	}
	s.log.Info("embeddings setting changed", "by", principal(r).Username, "model", v.Model)
	writeJSON(w, http.StatusOK, v)
}
