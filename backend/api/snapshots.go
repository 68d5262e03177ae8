package api

import (
	"context"
	"net/http"

	"cubicle/backend/fault"
	"cubicle/backend/snapshot"
)

// Snapshots are agents' workspace snapshots (issue 25). Every method checks that agentID
// belongs to accountID (another account's agent is fault.ErrNotFound, as a missing one).
type Snapshots interface {
	List(ctx context.Context, accountID, agentID string) ([]snapshot.Snapshot, error)
	Take(ctx context.Context, accountID, agentID, name string) (snapshot.Snapshot, error)
	// Restore makes the workspace snapshot sid again (the desktop stopped around it: refused
	// with fault.ErrConflict while it is in use); it returns the snapshot of the workspace as it
	// was before ("" when it equalled an existing one), so a restore is undoable too.
	Restore(ctx context.Context, accountID, agentID, sid string) (RestoreResult, error)
	Delete(ctx context.Context, accountID, agentID, sid string) error
	Diff(ctx context.Context, accountID, agentID, sid string) (snapshot.Diff, error)
	Policy(ctx context.Context, accountID, agentID string) (snapshot.Policy, error)
	SetPolicy(ctx context.Context, accountID, agentID string, p snapshot.Policy) (snapshot.Policy, error)
	// CheckFork checks that a fork from (agentID, sid) of accountID can start (before the new
	// agent is made); Fork fills newAgentID's workspace with the snapshot.
	CheckFork(ctx context.Context, accountID, agentID, sid string) error
	Fork(ctx context.Context, accountID, agentID, sid, newAgentID string) error
}

// RestoreResult answers a restore. It is the snapshot package's, so that the service behind
// this interface (backend/snapshot/workspace) need not import the HTTP adapter.
type RestoreResult = snapshot.RestoreResult

func (s *Server) snapshotRoutes(mux *router) {
	mux.Handle("GET /api/app/agents/{id}/snapshots", s.authed(s.needSnapshots(s.listSnapshots)))
	mux.Handle("POST /api/app/agents/{id}/snapshots", s.authed(s.needSnapshots(s.takeSnapshot)))
	mux.Handle("GET /api/app/agents/{id}/snapshots/policy", s.authed(s.needSnapshots(s.snapshotPolicy)))
	mux.Handle("PUT /api/app/agents/{id}/snapshots/policy", s.authed(s.needSnapshots(s.putSnapshotPolicy)))
	mux.Handle("GET /api/app/agents/{id}/snapshots/{sid}/diff", s.authed(s.needSnapshots(s.diffSnapshot)))
	mux.Handle("POST /api/app/agents/{id}/snapshots/{sid}/restore", s.authed(s.needSnapshots(s.restoreSnapshot)))
	mux.Handle("DELETE /api/app/agents/{id}/snapshots/{sid}", s.authed(s.needSnapshots(s.deleteSnapshot)))
}

func (s *Server) needSnapshots(h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if s.cfg.Snapshots == nil {
			writeError(w, r, s.log, fault.Unavailable("workspace snapshots are not available on this server"))
			return
		}
		h(w, r)
	}
}

func (s *Server) listSnapshots(w http.ResponseWriter, r *http.Request) {
	list, err := s.cfg.Snapshots.List(r.Context(), principal(r).AccountID, r.PathValue("id"))
	if err != nil {
		writeError(w, r, s.log, err)
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"snapshots": list})
}

func (s *Server) takeSnapshot(w http.ResponseWriter, r *http.Request) {
	var body struct {
		Name string `json:"name"`
	}
	if r.ContentLength != 0 {
		if err := decode(r, &body); err != nil {
			writeError(w, r, s.log, err)
			return
		}
	}
	sn, err := s.cfg.Snapshots.Take(r.Context(), principal(r).AccountID, r.PathValue("id"), body.Name)
	if err != nil {
		writeError(w, r, s.log, err)
		return
	}
	writeJSON(w, http.StatusCreated, sn)
}

func (s *Server) diffSnapshot(w http.ResponseWriter, r *http.Request) {
	d, err := s.cfg.Snapshots.Diff(r.Context(), principal(r).AccountID, r.PathValue("id"), r.PathValue("sid"))
	if err != nil {
		writeError(w, r, s.log, err)
		return
	}
	writeJSON(w, http.StatusOK, d)
}

func (s *Server) restoreSnapshot(w http.ResponseWriter, r *http.Request) {
	res, err := s.cfg.Snapshots.Restore(r.Context(), principal(r).AccountID, r.PathValue("id"), r.PathValue("sid"))
	if err != nil {
		writeError(w, r, s.log, err)
		return
	}
	writeJSON(w, http.StatusOK, res)
}

func (s *Server) deleteSnapshot(w http.ResponseWriter, r *http.Request) {
	if err := s.cfg.Snapshots.Delete(r.Context(), principal(r).AccountID, r.PathValue("id"), r.PathValue("sid")); err != nil {
		writeError(w, r, s.log, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

func (s *Server) snapshotPolicy(w http.ResponseWriter, r *http.Request) {
	p, err := s.cfg.Snapshots.Policy(r.Context(), principal(r).AccountID, r.PathValue("id"))
	if err != nil {
		writeError(w, r, s.log, err)
		return
	}
	writeJSON(w, http.StatusOK, p)
}

func (s *Server) putSnapshotPolicy(w http.ResponseWriter, r *http.Request) {
	var p snapshot.Policy
	if err := decode(r, &p); err != nil {
		writeError(w, r, s.log, err)
		return
	}
	p, err := s.cfg.Snapshots.SetPolicy(r.Context(), principal(r).AccountID, r.PathValue("id"), p)
	if err != nil {
		writeError(w, r, s.log, err)
		return
	}
	writeJSON(w, http.StatusOK, p)
}
