package api

import (
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
