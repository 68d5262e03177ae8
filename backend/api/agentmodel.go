package api

import (
	"errors"
	"net/http"

	"cubicle/backend/fault"
	"cubicle/backend/models"
)

// AgentModels is an agent's own chat model (models.Service). It does not check ownership:
// the handlers do.
type AgentModels interface {
	AgentView(agentID string) (models.AgentView, error)
	SetAgent(agentID string, u models.Update, by models.Setter) (models.AgentView, error)
}

// agentModelAccess lets the agent's owner, or an administrator, at agent id's model. Another
// account's agent does not exist for a user; for an administrator the model service answers
// not found when the agent really does not exist.
func (s *Server) agentModelAccess(r *http.Request) (string, error) {
	id := r.PathValue("id")
	p := principal(r)
	if _, err := s.cfg.Profiles.Get(p.AccountID, id); err != nil && !(p.Admin() && errors.Is(err, fault.ErrNotFound)) {
		return "", err
	}
	return id, nil
}

func (s *Server) getAgentModel(w http.ResponseWriter, r *http.Request) {
	if s.cfg.Models == nil {
		writeError(w, r, s.log, fault.Unavailable("model settings are not available in this mode"))
		return
	}
	id, err := s.agentModelAccess(r)
	if err != nil {
		writeError(w, r, s.log, err)
		return
	}
	v, err := s.cfg.Models.AgentView(id)
	if err != nil {
		writeError(w, r, s.log, err)
		return
	}
	writeJSON(w, http.StatusOK, v)
}

func (s *Server) putAgentModel(w http.ResponseWriter, r *http.Request) {
	if s.cfg.Models == nil {
		writeError(w, r, s.log, fault.Unavailable("model settings are not available in this mode"))
		return
	}
	id, err := s.agentModelAccess(r)
	if err != nil {
		writeError(w, r, s.log, err)
		return
	}
	var u models.Update
	if err := decode(r, &u); err != nil {
		writeError(w, r, s.log, err)
		return
	}
	p := principal(r)
	v, err := s.cfg.Models.SetAgent(id, u, models.Setter{AccountID: p.AccountID, Admin: p.Admin()})
	if err != nil {
		writeError(w, r, s.log, err)
		return
	}
	s.log.Info("agent model changed", "by", principal(r).Username, "agent", id, "model", v.Model, "baseUrl", v.BaseURL)
	writeJSON(w, http.StatusOK, v)
}
