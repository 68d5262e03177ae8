package api

import (
	"context"
	"net/http"

	"cubicle/backend/deskegress"
	"cubicle/backend/fault"
	"cubicle/backend/fleet"
	"cubicle/backend/store"
)

// Egress is the desktops' egress policy (Settings → Security → Desktop network, docs/egress.md).
type Egress interface {
	// EgressView is node's view ("" = this server's own node; a runner's is what the server
	// sent it, with the refusals it reported).
	EgressView(ctx context.Context, node string) (EgressView, error)
	// SetNodeEgress saves node's policy; SetAgentEgress an agent's own (nil: the node's again).
	// Both re-apply it to the running desktops.
	SetNodeEgress(ctx context.Context, by, node string, p store.EgressPolicy) (EgressView, error)
	SetAgentEgress(ctx context.Context, by, agentID string, p *store.EgressPolicy) (EgressView, error)
	// AllowEgress adds destination (a refused address or name) to the allow-list that refused
	// it: agentID's own when the agent has one, else node's ("" = this server's own).
	AllowEgress(ctx context.Context, by, node, agentID, destination string) (EgressView, error)
}

// EgressView is what Settings shows of the egress policies of the node; AgentEgress one
// agent's own policy (the shapes are the egress service's, backend/fleet).
type (
	EgressView  = fleet.EgressView
	AgentEgress = fleet.AgentEgress
)

func (s *Server) egressRoutes(mux *router) {
	mux.Handle("GET /api/app/admin/egress", s.admin(s.needEgress(s.getEgress)))
	mux.Handle("PUT /api/app/admin/egress/nodes/{node}", s.admin(s.needEgress(s.putNodeEgress)))
	mux.Handle("PUT /api/app/admin/egress/agents/{id}", s.admin(s.needEgress(s.putAgentEgress)))
	mux.Handle("DELETE /api/app/admin/egress/agents/{id}", s.admin(s.needEgress(s.deleteAgentEgress)))
	mux.Handle("POST /api/app/admin/egress/allow", s.admin(s.needEgress(s.allowEgress)))
}

func (s *Server) needEgress(h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if s.cfg.Egress == nil {
			writeError(w, r, s.log, fault.Unavailable("desktop egress policies are not available in this mode"))
			return
		}
		h(w, r)
	}
}

func (s *Server) getEgress(w http.ResponseWriter, r *http.Request) {
	v, err := s.cfg.Egress.EgressView(r.Context(), r.URL.Query().Get("node"))
	if err != nil {
		writeError(w, r, s.log, err)
		return
	}
	writeJSON(w, http.StatusOK, v)
}

// egressBody is a policy as the client sends it.
type egressBody struct {
	Mode  *string  `json:"mode"`
	Allow []string `json:"allow"`
}

func (b egressBody) policy() (store.EgressPolicy, error) {
	if b.Mode == nil {
		return store.EgressPolicy{}, fault.Invalid("mode is required: \"open\", \"allow-list\" or \"closed\"")
	}
	p, err := deskegress.Normalize(store.EgressPolicy{Mode: *b.Mode, Allow: b.Allow})
	if err == nil && *b.Mode == "" {
		return store.EgressPolicy{}, fault.Invalid("mode is required: \"open\", \"allow-list\" or \"closed\"")
	}
	return p, err
}

func (s *Server) putNodeEgress(w http.ResponseWriter, r *http.Request) {
	var b egressBody
	if err := decode(r, &b); err != nil {
		writeError(w, r, s.log, err)
		return
	}
	p, err := b.policy()
	if err != nil {
		writeError(w, r, s.log, err)
		return
	}
	v, err := s.cfg.Egress.SetNodeEgress(r.Context(), principal(r).AccountID, r.PathValue("node"), p)
	if err != nil {
		writeError(w, r, s.log, err)
		return
	}
	writeJSON(w, http.StatusOK, v)
}

func (s *Server) putAgentEgress(w http.ResponseWriter, r *http.Request) {
	var b egressBody
	if err := decode(r, &b); err != nil {
		writeError(w, r, s.log, err)
		return
	}
	p, err := b.policy()
	if err != nil {
		writeError(w, r, s.log, err)
		return
	}
	v, err := s.cfg.Egress.SetAgentEgress(r.Context(), principal(r).AccountID, r.PathValue("id"), &p)
	if err != nil {
		writeError(w, r, s.log, err)
		return
	}
	writeJSON(w, http.StatusOK, v)
}

func (s *Server) deleteAgentEgress(w http.ResponseWriter, r *http.Request) {
	v, err := s.cfg.Egress.SetAgentEgress(r.Context(), principal(r).AccountID, r.PathValue("id"), nil)
	if err != nil {
		writeError(w, r, s.log, err)
		return
	}
	writeJSON(w, http.StatusOK, v)
}

func (s *Server) allowEgress(w http.ResponseWriter, r *http.Request) {
	var b struct {
		Node        string `json:"node"` // "" = this server's own
		AgentID     string `json:"agentId"`
		Destination string `json:"destination"`
	}
	if err := decode(r, &b); err != nil {
		writeError(w, r, s.log, err)
		return
	}
	if _, err := deskegress.NormalizeEntry(b.Destination); err != nil {
		writeError(w, r, s.log, err)
		return
	}
	v, err := s.cfg.Egress.AllowEgress(r.Context(), principal(r).AccountID, b.Node, b.AgentID, b.Destination)
	if err != nil {
		writeError(w, r, s.log, err)
		return
	}
	writeJSON(w, http.StatusOK, v)
}
