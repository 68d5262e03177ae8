package api

import (
	"context"
	"net/http"

	"cubicle/backend/fault"
	"cubicle/backend/models"
)

// Models is the model settings service.
type Models interface {
	Get() (models.View, error)
	Set(u models.Update) (models.View, error)
	AgentModels
}

func (s *Server) getModel(w http.ResponseWriter, r *http.Request) {
	if s.cfg.Models == nil {
		writeError(w, r, s.log, fault.Unavailable("model settings are not available in this mode"))
		return
	}
	v, err := s.cfg.Models.Get()
	if err != nil {
		writeError(w, r, s.log, err)
		return
	}
	writeJSON(w, http.StatusOK, v)
}

func (s *Server) putModel(w http.ResponseWriter, r *http.Request) {
	if s.cfg.Models == nil {
		writeError(w, r, s.log, fault.Unavailable("model settings are not available in this mode"))
		return
	}
	var u models.Update
	if err := decode(r, &u); err != nil {
		writeError(w, r, s.log, err)
		return
	}
	v, err := s.cfg.Models.Set(u)
	if err != nil {
		writeError(w, r, s.log, err)
		return
	}
	s.log.Info("model settings changed", "by", principal(r).Username, "model", v.Model)
	writeJSON(w, http.StatusOK, v)
}

// ModelTester tests a model setting with one tiny real request (models.Service.Test).
type ModelTester interface {
	Test(ctx context.Context, agentID string) (models.TestResult, error)
}

// ModelLister lists the models of a model setting's endpoint (models.Service.Models).
type ModelLister interface {
	Models(ctx context.Context, agentID string) (models.ModelList, error)
}

// listModels answers GET /api/app/admin/model/models (the app's endpoint) and
// GET /api/app/agents/{id}/model/models (the agent's, for its owner or an admin): the models
// the saved endpoint offers, or why it offers none (code, problem).
func (s *Server) listModels(w http.ResponseWriter, r *http.Request) {
	l, ok := s.cfg.Models.(ModelLister)
	id, ok := s.modelTarget(w, r, ok)
	if !ok {
		return
	}
	res, err := l.Models(r.Context(), id)
	if err != nil {
		writeError(w, r, s.log, err)
		return
	}
	writeJSON(w, http.StatusOK, res)
}

// modelTarget is the agent a model route is about ("" = the app's model), or it writes why
// there is none: model settings unavailable in this mode (!available), or the caller may not
// reach the agent's model.
func (s *Server) modelTarget(w http.ResponseWriter, r *http.Request, available bool) (string, bool) {
	if s.cfg.Models == nil || !available {
		writeError(w, r, s.log, fault.Unavailable("model settings are not available in this mode"))
		return "", false
	}
	if r.PathValue("id") == "" {
		return "", true
	}
	id, err := s.agentModelAccess(r)
	if err != nil {
		writeError(w, r, s.log, err)
		return "", false
	}
	return id, true
}

// testModel answers POST /api/app/admin/model/test (the app's model) and
// POST /api/app/agents/{id}/model/test (the model a turn of the agent would use): 200 with
// {ok, code, problem}; code says what failed ("key", "model", "url", "quota", "unavailable",
// "config").
func (s *Server) testModel(w http.ResponseWriter, r *http.Request) {
	t, ok := s.cfg.Models.(ModelTester)
	id, ok := s.modelTarget(w, r, ok)
	if !ok {
		return
	}
	res, err := t.Test(r.Context(), id)
	if err != nil {
		writeError(w, r, s.log, err)
		return
	}
	s.log.Info("model tested", "by", principal(r).Username, "agent", id, "provider", res.Provider, "ok", res.OK, "code", res.Code)
	writeJSON(w, http.StatusOK, res)
}
