package api

import (
	"errors"
	"net/http"
	"strconv"

	toolguard "cubicle/backend/agent/guard"
	"cubicle/backend/fault"
	"cubicle/backend/security"
	"cubicle/backend/store"
)

// Security is Settings → Security (*security.Service).
type Security interface {
	View() security.View
	Update(by string, u security.Update) (security.View, error)
	AllowRules(agentID string) ([]store.AllowRule, error)
	AllAllowRules() ([]store.AllowRule, error)
	AddAllowRule(by, agentID string, r toolguard.AllowRule) (store.AllowRule, error)
	DeleteAllowRule(agentID, id string) error
	AgentDeleted(agentID string) error
	Confirmations(limit int, accountID string) ([]store.Confirmation, error)
}

var _ Security = (*security.Service)(nil)

func (s *Server) securityRoutes(mux *router) {
	mux.Handle("GET /api/app/admin/security", s.admin(s.needSecurity(s.getSecurity)))
	mux.Handle("PUT /api/app/admin/security", s.admin(s.needSecurity(s.putSecurity)))
	mux.Handle("GET /api/app/admin/security/allow-rules", s.admin(s.needSecurity(s.listAllRules)))
	mux.Handle("POST /api/app/admin/security/allow-rules", s.admin(s.needSecurity(s.addRule)))
	mux.Handle("DELETE /api/app/admin/security/allow-rules/{rule}", s.admin(s.needSecurity(s.deleteRule)))
	mux.Handle("GET /api/app/admin/security/confirmations", s.admin(s.needSecurity(s.listConfirmations)))
	mux.Handle("GET /api/app/agents/{id}/allow-rules", s.authed(s.needSecurity(s.agentRules)))
	mux.Handle("DELETE /api/app/agents/{id}/allow-rules/{rule}", s.authed(s.needSecurity(s.deleteAgentRule)))
}

func (s *Server) needSecurity(h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if s.cfg.Security == nil {
			writeError(w, r, s.log, fault.Unavailable("security settings are not available in this mode"))
			return
		}
		h(w, r)
	}
}

func (s *Server) getSecurity(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusOK, s.cfg.Security.View())
}

// putSecurity changes Settings → Security; fields left out stay as they are.
func (s *Server) putSecurity(w http.ResponseWriter, r *http.Request) {
	var u security.Update
	if err := decode(r, &u); err != nil {
		writeError(w, r, s.log, err)
		return
	}
	v, err := s.cfg.Security.Update(principal(r).AccountID, u)
	if err != nil {
		writeError(w, r, s.log, err)
		return
	}
	writeJSON(w, http.StatusOK, v)
}

// ruleJSON is an allow rule with the names of its agent and author.
type ruleJSON struct {
	store.AllowRule
	AgentName     string `json:"agentName,omitempty"`
	CreatedByName string `json:"createdByName,omitempty"`
}

func (s *Server) rulesOut(rs []store.AllowRule) []ruleJSON {
	out := make([]ruleJSON, 0, len(rs))
	names := map[string]string{}
	who := func(id string) string {
		if id == "" {
			return ""
		}
		if n, ok := names[id]; ok {
			return n
		}
		n := id
		if a, err := s.cfg.Accounts.Account(id); err == nil {
			n = a.Username
		}
		names[id] = n
		return n
	}
	for _, r := range rs {
		j := ruleJSON{AllowRule: r, CreatedByName: who(r.CreatedBy)}
		if r.AgentID != "" {
			j.AgentName = r.AgentID
			if a, err := s.cfg.Profiles.Agent(r.AgentID); err == nil {
				j.AgentName = a.Name
			}
		}
		out = append(out, j)
	}
	return out
}

func (s *Server) listAllRules(w http.ResponseWriter, r *http.Request) {
	rs, err := s.cfg.Security.AllAllowRules()
	if err != nil {
		writeError(w, r, s.log, err)
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"rules": s.rulesOut(rs)})
}

// addRule: {agentId?: "" = every agent, tool, command?, pattern?}.
func (s *Server) addRule(w http.ResponseWriter, r *http.Request) {
	var body struct {
		AgentID string `json:"agentId"`
		toolguard.AllowRule
	}
	if err := decode(r, &body); err != nil {
		writeError(w, r, s.log, err)
		return
	}
	if body.AgentID != "" {
		if _, err := s.cfg.Profiles.Agent(body.AgentID); err != nil {
			writeError(w, r, s.log, err)
			return
		}
	}
	rec, err := s.cfg.Security.AddAllowRule(principal(r).AccountID, body.AgentID, body.AllowRule)
	if err != nil {
		writeError(w, r, s.log, err)
		return
	}
	writeJSON(w, http.StatusCreated, s.rulesOut([]store.AllowRule{rec})[0])
}

// deleteRule removes a rule: ?agentId= names its agent ("" = a rule for every agent).
func (s *Server) deleteRule(w http.ResponseWriter, r *http.Request) {
	if err := s.cfg.Security.DeleteAllowRule(r.URL.Query().Get("agentId"), r.PathValue("rule")); err != nil {
		writeError(w, r, s.log, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// agentRules lists an agent's own allow rules (its owner, or an administrator).
func (s *Server) agentRules(w http.ResponseWriter, r *http.Request) {
	id, err := s.agentModelAccess(r)
	if err != nil {
		writeError(w, r, s.log, err)
		return
	}
	rs, err := s.cfg.Security.AllowRules(id)
	if err != nil {
		writeError(w, r, s.log, err)
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"rules": s.rulesOut(rs)})
}

func (s *Server) deleteAgentRule(w http.ResponseWriter, r *http.Request) {
	id, err := s.agentModelAccess(r)
	if err != nil {
		writeError(w, r, s.log, err)
		return
	}
	if err := s.cfg.Security.DeleteAllowRule(id, r.PathValue("rule")); err != nil {
		writeError(w, r, s.log, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// confirmationJSON is a confirmation record with the person's name.
type confirmationJSON struct {
	store.Confirmation
	Username string `json:"username"`
}

// listConfirmations: the newest confirmation answers (?limit=, default 200; ?accountId=).
func (s *Server) listConfirmations(w http.ResponseWriter, r *http.Request) {
	limit := 200
	if v := r.URL.Query().Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > 5000 {
			writeError(w, r, s.log, fault.Invalid("limit must be a number from 1 to 5000"))
			return
		}
		limit = n
	}
	cs, err := s.cfg.Security.Confirmations(limit, r.URL.Query().Get("accountId"))
	if err != nil {
		writeError(w, r, s.log, err)
		return
	}
	out := make([]confirmationJSON, 0, len(cs))
	for _, c := range cs {
		j := confirmationJSON{Confirmation: c, Username: c.AccountID}
		if a, err := s.cfg.Accounts.Account(c.AccountID); err == nil {
			j.Username = a.Username
		} else if !errors.Is(err, fault.ErrNotFound) {
			writeError(w, r, s.log, err)
			return
		}
		out = append(out, j)
	}
	writeJSON(w, http.StatusOK, map[string]any{"confirmations": out})
}
