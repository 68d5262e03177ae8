package api

import (
	"net/http"

	"cubicle/backend/apitoken"
	"cubicle/backend/auth"
	"cubicle/backend/fault"
)

// Tokens manages personal API tokens (apitoken.Service implements it).
type Tokens interface {
	Create(p auth.Principal, name string, agents []string, expiresInDays int) (apitoken.Token, string, error)
	List(p auth.Principal, all bool) ([]apitoken.Token, error)
	Revoke(p auth.Principal, id string) error
}

func (s *Server) tokenRoutes(mux *router) {
	mux.Handle("GET /api/app/account/tokens", s.authed(s.needTokens(s.listTokens)))
	mux.Handle("POST /api/app/account/tokens", s.authed(s.needTokens(s.createToken)))
	mux.Handle("DELETE /api/app/account/tokens/{id}", s.authed(s.needTokens(s.revokeToken)))
	// The MCP endpoint checks its own bearer token (an API token, not a session).
	if s.cfg.MCP != nil {
		mux.Handle("/mcp", s.cfg.MCP)
	}
}

func (s *Server) needTokens(h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if s.cfg.Tokens == nil {
			writeError(w, r, s.log, fault.Unavailable("API tokens are not available in this mode"))
			return
		}
		h(w, r)
	}
}

// listTokens answers the caller's tokens; ?all=1 everyone's (administrators only).
func (s *Server) listTokens(w http.ResponseWriter, r *http.Request) {
	all := r.URL.Query().Get("all")
	list, err := s.cfg.Tokens.List(principal(r), all == "1" || all == "true")
	if err != nil {
		writeError(w, r, s.log, err)
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"tokens": list})
}

// createToken makes a token {name, agents?, expiresInDays?}; the answer carries the secret,
// shown this once.
func (s *Server) createToken(w http.ResponseWriter, r *http.Request) {
	var body struct {
		Name          string   `json:"name"`
		Agents        []string `json:"agents"`
		ExpiresInDays int      `json:"expiresInDays"`
	}
	if err := decode(r, &body); err != nil {
		writeError(w, r, s.log, err)
		return
	}
	t, secret, err := s.cfg.Tokens.Create(principal(r), body.Name, body.Agents, body.ExpiresInDays)
	if err != nil {
		writeError(w, r, s.log, err)
		return
	}
	s.log.Info("api token created", "user", principal(r).Username, "token", t.ID, "name", t.Name)
	writeJSON(w, http.StatusCreated, map[string]any{"token": t, "secret": secret})
}

// revokeToken deletes a token: the caller's own, or anyone's for an administrator.
func (s *Server) revokeToken(w http.ResponseWriter, r *http.Request) {
	if err := s.cfg.Tokens.Revoke(principal(r), r.PathValue("id")); err != nil {
		writeError(w, r, s.log, err)
		return
	}
	s.log.Info("api token revoked", "user", principal(r).Username, "token", r.PathValue("id"))
	w.WriteHeader(http.StatusNoContent)
}
