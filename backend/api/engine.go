package api

import (
	"context"
	"net/http"

	"cubicle/backend/fault"
	"cubicle/backend/store"
)

// Engines is what the engine routes need: the local node's container engine, as it runs and
// as the admin chose it (the backend implements it). A saved choice applies at the node's
// next start.
type Engines interface {
	EngineStatus() (EngineStatus, error)
	// SetEngine checks and saves the choice (kubernetes: connects to the cluster first);
	// bad settings are fault.ErrInvalid, an unreachable cluster fault.ErrUnavailable, and
	// nothing is saved then.
	SetEngine(ctx context.Context, requestID string, s store.EngineSettings) (EngineStatus, error)
}

// EngineStatus is what Settings → Local VM shows about the node's engine.
type EngineStatus struct {
	// Active is the engine this process runs desktops on ("" none), Endpoint where it is.
	Active   string `json:"active"`
	Endpoint string `json:"endpoint,omitempty"`
	// Problem says why no engine is connected; Connecting: it is still being connected
	// (the server has just started).
	Problem    string `json:"problem,omitempty"`
	Connecting bool   `json:"connecting,omitempty"`
	// Settings are the effective settings of this process; Saved the admin's saved choice.
	Settings store.EngineSettings `json:"settings"`
	Saved    store.EngineSettings `json:"saved"`
	// Overrides name the flags and environment variables that override Saved.
	Overrides []string `json:"overrides,omitempty"`
	// RestartNeeded: what would run at the next start differs from what runs now.
	RestartNeeded bool `json:"restartNeeded"`
	// ImagesProblem says why images cannot be prepared on this node ("" when they can).
	ImagesProblem string `json:"imagesProblem,omitempty"`
}

func (s *Server) engineRoutes(mux *router) {
	mux.Handle("GET /api/app/admin/local-vm/engine", s.admin(s.getEngine))
	mux.Handle("PUT /api/app/admin/local-vm/engine", s.admin(s.putEngine))
}

func (s *Server) engines(w http.ResponseWriter, r *http.Request) (Engines, bool) {
	if !s.localOnly(w, r, "the container engine") {
		return nil, false
	}
	if s.cfg.Engines == nil {
		writeError(w, r, s.log, fault.Unavailable("the engine settings are not available on this server"))
		return nil, false
	}
	return s.cfg.Engines, true
}

func (s *Server) getEngine(w http.ResponseWriter, r *http.Request) {
	e, ok := s.engines(w, r)
	if !ok {
		return
	}
	st, err := e.EngineStatus()
	if err != nil {
		writeError(w, r, s.log, err)
		return
	}
	writeJSON(w, http.StatusOK, st)
}

// putEngine takes {requestId, kind, kubeconfig?, context?, namespace?, storageClass?,
// volumeSize?, registry?, registryInsecure?}.
func (s *Server) putEngine(w http.ResponseWriter, r *http.Request) {
	e, ok := s.engines(w, r)
	if !ok {
		return
	}
	var body struct {
		RequestID string `json:"requestId"`
		store.EngineSettings
	}
	if err := decode(r, &body); err != nil {
		writeError(w, r, s.log, err)
		return
	}
	st, err := e.SetEngine(r.Context(), body.RequestID, body.EngineSettings)
	if err != nil {
		writeError(w, r, s.log, err)
		return
	}
	writeJSON(w, http.StatusOK, st)
}
