package api

import (
	"context"
	"net/http"

	"cubicle/backend/fault"
	"cubicle/backend/housekeeping"
)

// Housekeeping finds and removes what Cubicle left on the engine (Settings → Local VM →
// Leftovers); *housekeeping.Housekeeper satisfies it.
type Housekeeping interface {
	Scan(ctx context.Context) (housekeeping.Report, error)
	Clean(ctx context.Context, sel housekeeping.Selection) ([]housekeeping.Outcome, error)
}

var _ Housekeeping = (*housekeeping.Housekeeper)(nil)

func (s *Server) housekeeping(w http.ResponseWriter, r *http.Request) (Housekeeping, bool) {
	if s.cfg.Housekeeping == nil {
		writeError(w, r, s.log, fault.Unavailable("leftovers cannot be listed: no container engine is connected (see `cubicle doctor`)"))
		return nil, false
	}
	return s.cfg.Housekeeping, true
}

// leftovers lists leftover containers, volumes and unused desktop image tags. It only looks.
func (s *Server) leftovers(w http.ResponseWriter, r *http.Request) {
	h, ok := s.housekeeping(w, r)
	if !ok {
		return
	}
	rep, err := h.Scan(r.Context())
	if err != nil {
		writeError(w, r, s.log, err)
		return
	}
	writeJSON(w, http.StatusOK, rep)
}

// cleanLeftovers removes exactly the named leftovers ({"containers": [...], "volumes": [...],
// "images": [...]}) that are still leftovers, and answers each one's outcome and a fresh list.
func (s *Server) cleanLeftovers(w http.ResponseWriter, r *http.Request) {
	h, ok := s.housekeeping(w, r)
	if !ok {
		return
	}
	var sel housekeeping.Selection
	if err := decode(r, &sel); err != nil {
		writeError(w, r, s.log, err)
		return
	}
	out, err := h.Clean(r.Context(), sel)
	if err != nil {
		writeError(w, r, s.log, err)
		return
	}
	rep, err := h.Scan(r.Context())
	if err != nil {
		writeError(w, r, s.log, err)
		return
	}
	s.log.Info("leftovers cleaned up", "by", principal(r).Username, "containers", len(sel.Containers),
		"volumes", len(sel.Volumes), "images", len(sel.Images))
	writeJSON(w, http.StatusOK, map[string]any{"outcomes": out, "leftovers": rep})
}
