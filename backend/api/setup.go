package api

import (
	"context"
	"net/http"

	"cubicle/backend/fault"
	"cubicle/backend/setup"
	"cubicle/backend/vm"
)

// Setup is the first-run path (*setup.Service): which steps are done and what to do about
// the rest. Errors carry fault classes.
type Setup interface {
	Status(ctx context.Context, accountID string) (setup.Status, error)
	Member(ctx context.Context, accountID string) (setup.Status, error)
	CancelImage() (vm.PrepareState, error)
}

func (s *Server) setupRoutes(mux *router) {
	mux.Handle("GET /api/app/admin/setup", s.admin(s.needSetup(s.setupStatus)))
	mux.Handle("POST /api/app/admin/setup/image/cancel", s.admin(s.needSetup(s.setupCancelImage)))
	mux.Handle("GET /api/app/setup", s.authed(s.needSetup(s.setupMember)))
}

func (s *Server) needSetup(next http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if s.cfg.Setup == nil {
			writeError(w, r, s.log, fault.Unavailable("the first-run steps are not available in this mode"))
			return
		}
		next(w, r)
	}
}

// setupStatus answers GET /api/app/admin/setup: {engine, image, model, agents, done}, each
// step {state, detail, percent?, admin}; the agents step is the caller's own agents.
func (s *Server) setupStatus(w http.ResponseWriter, r *http.Request) {
	st, err := s.cfg.Setup.Status(r.Context(), principal(r).AccountID)
	if err != nil {
		writeError(w, r, s.log, err)
		return
	}
	writeJSON(w, http.StatusOK, st)
}

// setupMember answers GET /api/app/setup for anyone signed in: the administrator's steps
// with their state only, and the caller's own agents step.
func (s *Server) setupMember(w http.ResponseWriter, r *http.Request) {
	st, err := s.cfg.Setup.Member(r.Context(), principal(r).AccountID)
	if err != nil {
		writeError(w, r, s.log, err)
		return
	}
	writeJSON(w, http.StatusOK, st)
}

// setupCancelImage answers POST /api/app/admin/setup/image/cancel: it cancels the running
// preparation of the standard image on this server (409 when none runs) and answers its
// final state.
func (s *Server) setupCancelImage(w http.ResponseWriter, r *http.Request) {
	st, err := s.cfg.Setup.CancelImage()
	if err != nil {
		writeError(w, r, s.log, err)
		return
	}
	s.log.Info("image preparation cancelled", "by", principal(r).Username)
	writeJSON(w, http.StatusOK, st)
}
