package api

import (
	"context"
	"net/http"
	"net/url"
	"strings"

	"cubicle/backend/fault"
	"cubicle/backend/nodes"
	"cubicle/backend/store"
	"cubicle/runner/wire"
)

// Placement routes the Local VM routes to execution nodes: the agent routes to the node the
// agent is placed on, the admin routes to ?node= (default the local node). The backend
// provides it; without one every route uses Config.VMs.
type Placement interface {
	ForNode(node string) (VMs, error)
	ForAgent(agentID string) (VMs, error)
	// Place moves an agent to a node (PUT /api/app/agents/:id/node) and returns the node id.
	Place(ctx context.Context, accountID, agentID, node string) (string, error)
}

// Runners is the registry of execution nodes (*nodes.Hub); as an http.Handler it is the
// runners' connect route.
type Runners interface {
	http.Handler
	Create(name string, cloud bool, serverURL string) (nodes.Created, error)
	List(ctx context.Context) ([]nodes.View, error)
	Revoke(id string) error
	// SetCloud marks a runner as a cloud node or not (PATCH /api/app/admin/runners/:id).
	SetCloud(id string, cloud bool) (store.Runner, error)
}

var _ Runners = (*nodes.Hub)(nil)

func (s *Server) runnerRoutes(mux *router) {
	if s.cfg.Runners != nil {
		// The runner authenticates with its own token (not a person's session).
		mux.Handle("GET "+wire.ConnectPath, s.cfg.Runners)
	}
	mux.Handle("GET /api/app/admin/runners", s.admin(s.listRunners))
	mux.Handle("POST /api/app/admin/runners", s.admin(s.createRunner))
	mux.Handle("DELETE /api/app/admin/runners/{id}", s.admin(s.revokeRunner))
	mux.Handle("PATCH /api/app/admin/runners/{id}", s.admin(s.patchRunner))
	mux.Handle("PUT /api/app/agents/{id}/node", s.authed(s.placeAgent))
}

func (s *Server) runners(w http.ResponseWriter, r *http.Request) (Runners, bool) {
	if s.cfg.Runners == nil {
		writeError(w, r, s.log, fault.Unavailable("runners are not available on this server"))
		return nil, false
	}
	return s.cfg.Runners, true
}

func (s *Server) listRunners(w http.ResponseWriter, r *http.Request) {
	rs, ok := s.runners(w, r)
	if !ok {
		return
	}
	list, err := rs.List(r.Context())
	if err != nil {
		writeError(w, r, s.log, err)
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"runners": list})
}

// createRunner adds a runner: 201 {id, name, token, joinCommand}; the token is shown only
// here. serverUrl (optional) is how the runner's machine reaches this server, default the
// address this request was sent to.
func (s *Server) createRunner(w http.ResponseWriter, r *http.Request) {
	rs, ok := s.runners(w, r)
	if !ok {
		return
	}
	var body struct {
		Name      string `json:"name"`
		Cloud     bool   `json:"cloud"`
		ServerURL string `json:"serverUrl"`
	}
	if err := decode(r, &body); err != nil {
		writeError(w, r, s.log, err)
		return
	}
	server := body.ServerURL
	if server == "" {
		scheme := "http"
		if r.TLS != nil {
			scheme = "https"
		}
		server = scheme + "://" + r.Host
	} else if u, err := url.Parse(server); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" ||
		strings.ContainsAny(server, " '\"\\$`;&|<>") {
		writeError(w, r, s.log, fault.Invalid("serverUrl %q is not an http(s) URL like http://192.0.2.10:8765", body.ServerURL))
		return
	}
	c, err := rs.Create(body.Name, body.Cloud, strings.TrimRight(server, "/"))
	if err != nil {
		writeError(w, r, s.log, err)
		return
	}
	writeJSON(w, http.StatusCreated, c)
}

func (s *Server) revokeRunner(w http.ResponseWriter, r *http.Request) {
	rs, ok := s.runners(w, r)
	if !ok {
		return
	}
	if err := rs.Revoke(r.PathValue("id")); err != nil {
		writeError(w, r, s.log, err)
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"id": r.PathValue("id"), "status": nodes.StatusRevoked})
}

// patchRunner changes a runner's settings: {cloud} marks it a cloud node (agents whose computer
// is "cloud" get their desktop there) or not. It answers the runner as the list shows it.
func (s *Server) patchRunner(w http.ResponseWriter, r *http.Request) {
	rs, ok := s.runners(w, r)
	if !ok {
		return
	}
	var body struct {
		Cloud *bool `json:"cloud"`
	}
	if err := decode(r, &body); err != nil {
		writeError(w, r, s.log, err)
		return
	}
	if body.Cloud == nil {
		writeError(w, r, s.log, fault.Invalid(`send {"cloud": true} to make the runner a cloud node, {"cloud": false} to make it an ordinary one`))
		return
	}
	id := r.PathValue("id")
	if _, err := rs.SetCloud(id, *body.Cloud); err != nil {
		writeError(w, r, s.log, err)
		return
	}
	list, err := rs.List(r.Context())
	if err != nil {
		writeError(w, r, s.log, err)
		return
	}
	for _, v := range list {
		if v.ID == id {
			writeJSON(w, http.StatusOK, v)
			return
		}
	}
	writeError(w, r, s.log, fault.NotFound("runner %q not found", id))
}

func (s *Server) placeAgent(w http.ResponseWriter, r *http.Request) {
	if s.cfg.Placement == nil {
		writeError(w, r, s.log, fault.Unavailable("execution nodes are not available on this server"))
		return
	}
	var body struct {
		NodeID string `json:"nodeId"`
	}
	if err := decode(r, &body); err != nil {
		writeError(w, r, s.log, err)
		return
	}
	node, err := s.cfg.Placement.Place(r.Context(), principal(r).AccountID, r.PathValue("id"), body.NodeID)
	if err != nil {
		writeError(w, r, s.log, err)
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"agentId": r.PathValue("id"), "nodeId": node})
}
