package api

import (
	"net/http"
	"time"

	"cubicle/backend/auth"
	"cubicle/backend/fault"
	"cubicle/backend/hostaccess"
	"cubicle/backend/store"
)

// HostAccess decides and records host access per account and node (*hostaccess.Checker).
type HostAccess interface {
	Check(accountID, nodeID string) (hostaccess.Access, error)
	Grants(accountID string) (map[string]hostaccess.Access, error)
	Grant(by, accountID, nodeID string, a hostaccess.Access) error
}

var _ HostAccess = (*hostaccess.Checker)(nil)

// accountJSON is an account as the Users page shows it (never its password hash).
type accountJSON struct {
	ID             string                       `json:"id"`
	Username       string                       `json:"username"`
	Role           string                       `json:"role"`
	Disabled       bool                         `json:"disabled"`
	CreatedAt      time.Time                    `json:"createdAt"`
	PasswordSetAt  *time.Time                   `json:"passwordSetAt,omitempty"`
	PasswordChosen bool                         `json:"passwordChosen"`
	Agents         int                          `json:"agents"`
	HostAccess     map[string]hostaccess.Access `json:"hostAccess"`
}

func (s *Server) accountOf(a store.Account) accountJSON {
	out := accountJSON{ID: a.ID, Username: a.Username, Role: string(a.Role), Disabled: a.Disabled,
		CreatedAt: a.CreatedAt, PasswordChosen: a.PasswordChosen, HostAccess: map[string]hostaccess.Access{}}
	if !a.PasswordSetAt.IsZero() {
		t := a.PasswordSetAt
		out.PasswordSetAt = &t
	}
	if agents, err := s.cfg.Profiles.List(a.ID); err == nil {
		out.Agents = len(agents)
	}
	if s.cfg.HostAccess != nil {
		if g, err := s.cfg.HostAccess.Grants(a.ID); err == nil {
			out.HostAccess = g
		}
		if acc, err := s.cfg.HostAccess.Check(a.ID, hostaccess.LocalNode); err == nil && acc.ByRole {
			out.HostAccess[hostaccess.LocalNode] = acc
		}
	}
	return out
}

func (s *Server) userRoutes(mux *router) {
	mux.Handle("PUT /api/auth/password", s.authed(s.changePassword))
	mux.Handle("GET /api/app/admin/users", s.admin(s.listUsers))
	mux.Handle("POST /api/app/admin/users", s.admin(s.createUser))
	mux.Handle("GET /api/app/admin/users/{id}", s.admin(s.getUser))
	mux.Handle("PUT /api/app/admin/users/{id}", s.admin(s.updateUser))
	mux.Handle("DELETE /api/app/admin/users/{id}", s.admin(s.deleteUser))
	mux.Handle("PUT /api/app/admin/users/{id}/host-access", s.admin(s.putHostAccess))
}

func (s *Server) listUsers(w http.ResponseWriter, r *http.Request) {
	accts, err := s.cfg.Accounts.Accounts()
	if err != nil {
		writeError(w, r, s.log, err)
		return
	}
	out := make([]accountJSON, 0, len(accts))
	for _, a := range accts {
		out = append(out, s.accountOf(a))
	}
	writeJSON(w, http.StatusOK, map[string]any{"users": out})
}

func (s *Server) getUser(w http.ResponseWriter, r *http.Request) {
	a, err := s.cfg.Accounts.Account(r.PathValue("id"))
	if err != nil {
		writeError(w, r, s.log, err)
		return
	}
	writeJSON(w, http.StatusOK, s.accountOf(a))
}

// createUser: {username, password, role: "admin"|"member"} → 201 with the account.
func (s *Server) createUser(w http.ResponseWriter, r *http.Request) {
	var body struct {
		Username string `json:"username"`
		Password string `json:"password"`
		Role     string `json:"role"`
	}
	if err := decode(r, &body); err != nil {
		writeError(w, r, s.log, err)
		return
	}
	a, err := s.cfg.Auth.CreateAccount(principal(r), auth.NewAccount{Username: body.Username, Password: body.Password,
		Role: store.Role(body.Role)})
	if err != nil {
		writeError(w, r, s.log, err)
		return
	}
	writeJSON(w, http.StatusCreated, s.accountOf(a))
}

// updateUser: {role?, disabled?, password?}. Disabling or a new password ends the account's
// sessions, including its open computer channels.
func (s *Server) updateUser(w http.ResponseWriter, r *http.Request) {
	var body struct {
		Role     *string `json:"role"`
		Disabled *bool   `json:"disabled"`
		Password *string `json:"password"`
	}
	if err := decode(r, &body); err != nil {
		writeError(w, r, s.log, err)
		return
	}
	if body.Role == nil && body.Disabled == nil && body.Password == nil {
		writeError(w, r, s.log, fault.Invalid(`send any of {"role": "admin"|"member", "disabled": true|false, "password": "…"}`))
		return
	}
	c := auth.AccountChange{Disabled: body.Disabled, Password: body.Password}
	if body.Role != nil {
		role := store.Role(*body.Role)
		c.Role = &role
	}
	a, err := s.cfg.Auth.UpdateAccount(principal(r), r.PathValue("id"), c)
	if err != nil {
		writeError(w, r, s.log, err)
		return
	}
	if s.cfg.LiveView != nil && (a.Disabled || body.Password != nil) {
		s.cfg.LiveView.Reauthenticate()
	}
	writeJSON(w, http.StatusOK, s.accountOf(a))
}

// deleteUser removes an account. An account that still has agents is refused (409) unless
// ?deleteAgents=1 says to delete their profiles too; their desktops' work data stays (Local
// VM settings can delete it explicitly).
func (s *Server) deleteUser(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	p := principal(r)
	if _, err := s.cfg.Auth.CheckDelete(p, id); err != nil {
		writeError(w, r, s.log, err)
		return
	}
	agents, err := s.cfg.Profiles.List(id)
	if err != nil {
		writeError(w, r, s.log, err)
		return
	}
	if len(agents) > 0 && r.URL.Query().Get("deleteAgents") != "1" {
		writeError(w, r, s.log, fault.Conflict("this account still has %d agent(s); delete them first, or confirm deleting the account with its agents", len(agents)))
		return
	}
	for _, a := range agents {
		if err := s.cfg.Profiles.Delete(id, a.ID); err != nil {
			writeError(w, r, s.log, err)
			return
		}
		s.agentDeleted(a.ID)
	}
	if err := s.cfg.Auth.DeleteAccount(p, id); err != nil {
		writeError(w, r, s.log, err)
		return
	}
	if s.cfg.LiveView != nil {
		s.cfg.LiveView.Reauthenticate()
	}
	w.WriteHeader(http.StatusNoContent)
}

// putHostAccess: {nodeId?: "local", hostTools, hostDesktop, placement} grants or withdraws
// host access, and the right to place agents on the node (a runner).
func (s *Server) putHostAccess(w http.ResponseWriter, r *http.Request) {
	if s.cfg.HostAccess == nil {
		writeError(w, r, s.log, fault.Unavailable("host access is not managed by this server"))
		return
	}
	var body struct {
		NodeID      string `json:"nodeId"`
		HostTools   *bool  `json:"hostTools"`
		HostDesktop *bool  `json:"hostDesktop"`
		Placement   *bool  `json:"placement"`
	}
	if err := decode(r, &body); err != nil {
		writeError(w, r, s.log, err)
		return
	}
	if body.HostTools == nil && body.HostDesktop == nil && body.Placement == nil {
		writeError(w, r, s.log, fault.Invalid(`send {"nodeId": "local", "hostTools": true|false, "hostDesktop": true|false, "placement": true|false}`))
		return
	}
	if body.NodeID == "" {
		body.NodeID = hostaccess.LocalNode
	}
	id := r.PathValue("id")
	a, err := s.cfg.Accounts.Account(id)
	if err != nil {
		writeError(w, r, s.log, err)
		return
	}
	cur, err := s.cfg.HostAccess.Grants(id)
	if err != nil {
		writeError(w, r, s.log, err)
		return
	}
	g := cur[body.NodeID]
	if body.HostTools != nil {
		g.HostTools = *body.HostTools
	}
	if body.HostDesktop != nil {
		g.HostDesktop = *body.HostDesktop
	}
	if body.Placement != nil {
		g.Placement = *body.Placement
	}
	if err := s.cfg.HostAccess.Grant(principal(r).AccountID, id, body.NodeID, g); err != nil {
		writeError(w, r, s.log, err)
		return
	}
	s.log.Info("host access changed", "by", principal(r).Username, "user", a.Username, "node", body.NodeID,
		"hostTools", g.HostTools, "hostDesktop", g.HostDesktop, "placement", g.Placement)
	writeJSON(w, http.StatusOK, s.accountOf(a))
}

// agentDeleted forgets what the security layer keeps about a deleted agent (its allow rules)
// and which MCP servers it used.
func (s *Server) agentDeleted(id string) {
	if s.cfg.Security != nil {
		if err := s.cfg.Security.AgentDeleted(id); err != nil {
			s.log.Warn("forget the allow rules of a deleted agent", "agent", id, "err", err)
		}
	}
	if s.cfg.MCPServers != nil {
		if err := s.cfg.MCPServers.AgentDeleted(id); err != nil {
			s.log.Warn("forget the MCP servers of a deleted agent", "agent", id, "err", err)
		}
	}
}
