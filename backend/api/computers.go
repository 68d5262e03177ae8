package api

import (
	"context"
	"net/http"

	"cubicle/backend/computer"
	"cubicle/backend/fault"
	"cubicle/backend/fleet"
	"cubicle/backend/store"
)

// This file serves the agent's computer settings next to its selection (SPEC §1.6, §1.7,
// §2.3, §7): the working directory, the sandbox binding, the plan the gate gives the agent,
// and the admin's host setting "Host screen control" of the execution node.

// Computers is what the routes need of the agents' computers; the backend implements it.
type Computers interface {
	// Busy says why agentID's computer cannot change now ("" when it can): a running turn,
	// a task on its desktop or browser, a person's control.
	Busy(ctx context.Context, accountID, agentID string) string
	// Changed applies a saved change of the agent's computer: what it no longer has stops.
	Changed(ctx context.Context, before, after store.Agent)
	// WorkDirChanged applies a new working directory: the agent's own running desktop is
	// rebuilt when idle (data kept); rebuilt reports whether it was rebuilt now.
	WorkDirChanged(ctx context.Context, accountID, agentID string) (rebuilt bool, err error)
	// Plan is the gate's plan for the agent's next turn, and the plan of its latest turn.
	Plan(ctx context.Context, a store.Agent) (next computer.Plan, last *computer.Plan)
	// Host is the node's host screen: the admin's setting, what the OS allows, the displays.
	Host(ctx context.Context) (HostView, error)
	// SetHostScreenControl turns "Host screen control" on or off (requestId makes it idempotent).
	SetHostScreenControl(ctx context.Context, requestID string, on bool) (HostView, error)
	// Anticipate starts the agent's desktop because a person opened the agent — when its next
	// turn would use one and a capacity slot is free — and says what it did.
	Anticipate(ctx context.Context, accountID, agentID string) (Anticipation, error)
}

// Anticipation is the answer of POST /api/app/agents/:id/opened (the fleet's shape).
type Anticipation = fleet.Anticipation

// HostView is the execution node's host screen for Settings → Host and the computer panel
// (the fleet's shape).
type HostView = fleet.HostView

func (s *Server) computerRoutes(mux *router) {
	mux.Handle("PUT /api/app/agents/{id}/workdir", s.authed(s.putWorkDir))
	mux.Handle("PUT /api/app/agents/{id}/lazy-init", s.authed(s.putLazyInit))
	mux.Handle("GET /api/app/agents/{id}/computer-plan", s.authed(s.getComputerPlan))
	mux.Handle("POST /api/app/agents/{id}/opened", s.authed(s.postOpened))
	mux.Handle("GET /api/app/admin/host", s.admin(s.getHost))
	mux.Handle("PUT /api/app/admin/host", s.admin(s.putHost))
}

func (s *Server) needComputers(w http.ResponseWriter, r *http.Request) bool {
	if s.cfg.Computers == nil {
		writeError(w, r, s.log, fault.Unavailable("agent computers are not available on this server"))
		return false
	}
	return true
}

func (s *Server) putWorkDir(w http.ResponseWriter, r *http.Request) {
	var body struct {
		WorkDir *string `json:"workdir"`
	}
	if err := decode(r, &body); err != nil {
		writeError(w, r, s.log, err)
		return
	}
	if body.WorkDir == nil {
		writeError(w, r, s.log, fault.Invalid(`send {"workdir": "…"}: "." (or empty) for the default, a directory relative to it, or an absolute path`))
		return
	}
	_, after, err := s.cfg.Profiles.SetWorkDir(principal(r).AccountID, r.PathValue("id"), *body.WorkDir)
	if err != nil {
		writeError(w, r, s.log, err)
		return
	}
	rebuilt := false
	if s.cfg.Computers != nil {
		if rebuilt, err = s.cfg.Computers.WorkDirChanged(r.Context(), after.AccountID, after.ID); err != nil {
			s.log.Warn("rebuild desktop for a new working directory", "agent", after.ID, "err", err)
		}
	}
	out := agentOf(after)
	writeJSON(w, http.StatusOK, map[string]any{"agent": out, "rebuilt": rebuilt})
}

func (s *Server) putLazyInit(w http.ResponseWriter, r *http.Request) {
	var body struct {
		LazyInit *bool `json:"lazyInit"`
	}
	if err := decode(r, &body); err != nil {
		writeError(w, r, s.log, err)
		return
	}
	if body.LazyInit == nil {
		writeError(w, r, s.log, fault.Invalid(`send {"lazyInit": true} (bind the desktop at the first tool call) or false (before the first model call)`))
		return
	}
	a, err := s.cfg.Profiles.SetLazyInit(principal(r).AccountID, r.PathValue("id"), *body.LazyInit)
	if err != nil {
		writeError(w, r, s.log, err)
		return
	}
	writeJSON(w, http.StatusOK, agentOf(a))
}

func (s *Server) getComputerPlan(w http.ResponseWriter, r *http.Request) {
	if !s.needComputers(w, r) {
		return
	}
	a, err := s.cfg.Profiles.Get(principal(r).AccountID, r.PathValue("id"))
	if err != nil {
		writeError(w, r, s.log, err)
		return
	}
	next, last := s.cfg.Computers.Plan(r.Context(), a)
	body := map[string]any{"agentId": a.ID, "next": next.Notice()}
	if last != nil {
		body["last"] = last.Notice()
	}
	writeJSON(w, http.StatusOK, body)
}

// postOpened: a person opened the agent (its chat); its desktop starts if its next turn would
// use one and a slot is free (anticipatory start). It answers when the start is done, so the
// web client sends it without waiting for the answer.
func (s *Server) postOpened(w http.ResponseWriter, r *http.Request) {
	if !s.needComputers(w, r) {
		return
	}
	res, err := s.cfg.Computers.Anticipate(r.Context(), principal(r).AccountID, r.PathValue("id"))
	if err != nil {
		writeError(w, r, s.log, err)
		return
	}
	writeJSON(w, http.StatusOK, res)
}

func (s *Server) getHost(w http.ResponseWriter, r *http.Request) {
	if !s.needComputers(w, r) {
		return
	}
	v, err := s.cfg.Computers.Host(r.Context())
	if err != nil {
		writeError(w, r, s.log, err)
		return
	}
	writeJSON(w, http.StatusOK, v)
}

func (s *Server) putHost(w http.ResponseWriter, r *http.Request) {
	if !s.needComputers(w, r) {
		return
	}
	var body struct {
		RequestID     string `json:"requestId"`
		ScreenControl *bool  `json:"screenControl"`
	}
	if err := decode(r, &body); err != nil {
		writeError(w, r, s.log, err)
		return
	}
	if body.ScreenControl == nil {
		writeError(w, r, s.log, fault.Invalid(`send {"screenControl": true|false, "requestId": "…"}`))
		return
	}
	v, err := s.cfg.Computers.SetHostScreenControl(r.Context(), body.RequestID, *body.ScreenControl)
	if err != nil {
		writeError(w, r, s.log, err)
		return
	}
	writeJSON(w, http.StatusOK, v)
}
