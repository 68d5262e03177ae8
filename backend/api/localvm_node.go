package api

import (
	"net/http"

	"cubicle/backend/fault"
)

// This file is the ?node= rule of the Local VM admin routes (Settings → Local VM's node
// picker): every admin route under /api/app/admin/local-vm acts on the node ?node= names
// (default the local node), never silently on another. An unknown node is 404; a runner that
// is not connected is 503 naming it (from the node's own call); a route that only exists for
// the local node (the engine choice) refuses a runner with 400 saying where that is set.

// nodeParam is the route's ?node= ("" and "local" are the local node).
func nodeParam(r *http.Request) string {
	n := r.URL.Query().Get("node")
	if n == "local" {
		return ""
	}
	return n
}

// unknownNode refuses a ?node= that no placement can resolve (a server without execution
// nodes knows only the local node).
func unknownNode(node string) error {
	return fault.NotFound("no node %q: this server runs desktops only on this computer (node \"local\")", node)
}

// localOnly admits a route that exists only for the local node. It writes the refusal and
// returns false for any other ?node=.
func (s *Server) localOnly(w http.ResponseWriter, r *http.Request, what string) bool {
	node := nodeParam(r)
	if node == "" {
		return true
	}
	if s.cfg.Placement == nil {
		writeError(w, r, s.log, unknownNode(node))
		return false
	}
	if _, err := s.cfg.Placement.ForNode(node); err != nil {
		writeError(w, r, s.log, err)
		return false
	}
	writeError(w, r, s.log, fault.Invalid("%s of runner %s is chosen on that machine (cubicle runner --engine …), not here", what, node))
	return false
}
