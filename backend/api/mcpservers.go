package api

import (
	"net/http"

	"cubicle/backend/auth"
	"cubicle/backend/fault"
	"cubicle/backend/mcpclient"
)

// MCPServers are the MCP servers agents use (mcpclient.Service implements it): administrators
// manage them, an agent's owner chooses which the agent uses.
type MCPServers interface {
	List(p auth.Principal) ([]mcpclient.Server, error)
	Create(p auth.Principal, in mcpclient.Input) (mcpclient.Server, error)
	Update(p auth.Principal, id string, in mcpclient.Input) (mcpclient.Server, error)
	Delete(p auth.Principal, id string) error
	AgentServers(p auth.Principal, agentID string) ([]mcpclient.AgentServer, error)
	SetAgentServers(p auth.Principal, agentID string, ids []string) ([]mcpclient.AgentServer, error)
	// AgentDeleted forgets which servers a deleted agent used.
	AgentDeleted(agentID string) error
}

func (s *Server) mcpServerRoutes(mux *router) {
	mux.Handle("GET /api/app/admin/mcp-servers", s.admin(s.needMCPServers(s.listMCPServers)))
	mux.Handle("POST /api/app/admin/mcp-servers", s.admin(s.needMCPServers(s.createMCPServer)))
	mux.Handle("PUT /api/app/admin/mcp-servers/{id}", s.admin(s.needMCPServers(s.updateMCPServer)))
	mux.Handle("DELETE /api/app/admin/mcp-servers/{id}", s.admin(s.needMCPServers(s.deleteMCPServer)))
	mux.Handle("GET /api/app/agents/{id}/mcp-servers", s.authed(s.needMCPServers(s.agentMCPServers)))
	mux.Handle("PUT /api/app/agents/{id}/mcp-servers", s.authed(s.needMCPServers(s.putAgentMCPServers)))
}

func (s *Server) needMCPServers(h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if s.cfg.MCPServers == nil {
			writeError(w, r, s.log, fault.Unavailable("MCP servers are not available in this mode"))
			return
		}
		h(w, r)
	}
}

func (s *Server) listMCPServers(w http.ResponseWriter, r *http.Request) {
	list, err := s.cfg.MCPServers.List(principal(r))
	if err != nil {
		writeError(w, r, s.log, err)
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"servers": list})
}

func (s *Server) createMCPServer(w http.ResponseWriter, r *http.Request) {
	var in mcpclient.Input
	if err := decode(r, &in); err != nil {
		writeError(w, r, s.log, err)
		return
	}
	srv, err := s.cfg.MCPServers.Create(principal(r), in)
	if err != nil {
		writeError(w, r, s.log, err)
		return
	}
	s.log.Info("mcp server added", "user", principal(r).Username, "server", srv.Name, "transport", srv.Transport)
	writeJSON(w, http.StatusCreated, srv)
}

func (s *Server) updateMCPServer(w http.ResponseWriter, r *http.Request) {
	var in mcpclient.Input
	if err := decode(r, &in); err != nil {
		writeError(w, r, s.log, err)
		return
	}
	srv, err := s.cfg.MCPServers.Update(principal(r), r.PathValue("id"), in)
	if err != nil {
		writeError(w, r, s.log, err)
		return
	}
	s.log.Info("mcp server changed", "user", principal(r).Username, "server", srv.Name)
	writeJSON(w, http.StatusOK, srv)
}

func (s *Server) deleteMCPServer(w http.ResponseWriter, r *http.Request) {
	if err := s.cfg.MCPServers.Delete(principal(r), r.PathValue("id")); err != nil {
		writeError(w, r, s.log, err)
		return
	}
	s.log.Info("mcp server deleted", "user", principal(r).Username, "server", r.PathValue("id"))
	w.WriteHeader(http.StatusNoContent)
}

func (s *Server) agentMCPServers(w http.ResponseWriter, r *http.Request) {
	list, err := s.cfg.MCPServers.AgentServers(principal(r), r.PathValue("id"))
	if err != nil {
		writeError(w, r, s.log, err)
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"servers": list})
}

func (s *Server) putAgentMCPServers(w http.ResponseWriter, r *http.Request) {
	var body struct {
		IDs *[]string `json:"ids"`
	}
	if err := decode(r, &body); err != nil {
		writeError(w, r, s.log, err)
		return
	}
	if body.IDs == nil {
		writeError(w, r, s.log, fault.Invalid(`send {"ids": [...]}: the ids of the MCP servers the agent uses ([] for none)`))
		return
	}
	list, err := s.cfg.MCPServers.SetAgentServers(principal(r), r.PathValue("id"), *body.IDs)
	if err != nil {
		writeError(w, r, s.log, err)
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"servers": list})
}
