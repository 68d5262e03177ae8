package api

import (
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"time"

	"cubicle/backend/fault"
	"cubicle/backend/nodeapi"
	"cubicle/backend/vm"
	"cubicle/runner/wire"
)

// VMs is a node's desktops as the Local VM routes use them: the node contract's one
// interface (nodeapi.Node), which *vm.Manager and *nodes.Remote implement. Errors carry fault
// classes.
type VMs = nodeapi.Node

var _ VMs = (*vm.Manager)(nil)

func (s *Server) localVMRoutes(mux *router) {
	mux.Handle("GET /api/app/admin/local-vm", s.admin(s.vmStatus))
	mux.Handle("POST /api/app/admin/local-vm/prepare", s.admin(s.vmPrepare))
	mux.Handle("PUT /api/app/admin/local-vm/policy", s.admin(s.vmPolicy))
	mux.Handle("PUT /api/app/admin/local-vm/idle-policy", s.admin(s.vmIdlePolicy))
	mux.Handle("POST /api/app/admin/local-vm/instances/{id}/{action}", s.admin(s.vmAdminAct))
	mux.Handle("DELETE /api/app/admin/local-vm/instances/{id}/data", s.admin(s.vmDeleteData))
	mux.Handle("PUT /api/app/admin/local-vm/image-sources", s.admin(s.vmImageSources))
	mux.Handle("GET /api/app/agents/{id}/local-vm", s.authed(s.vmAgent))
	mux.Handle("POST /api/app/agents/{id}/local-vm/{action}", s.authed(s.vmAct))
	mux.Handle("PUT /api/app/agents/{id}/local-vm/image", s.authed(s.vmImage))
}

// vms returns the desktops' manager of the route's node — the agent's node on the agent
// routes, ?node= (default local) on the admin routes — or writes why there is none.
func (s *Server) vms(w http.ResponseWriter, r *http.Request) (VMs, bool) {
	if p := s.cfg.Placement; p != nil {
		var m VMs
		var err error
		if id := r.PathValue("id"); id != "" && strings.HasPrefix(r.URL.Path, "/api/app/agents/") {
			m, err = p.ForAgent(id)
			if errors.Is(err, fault.ErrNotFound) {
				err = fault.NotFound("agent %q not found", id)
			}
		} else {
			m, err = p.ForNode(r.URL.Query().Get("node"))
		}
		if err != nil {
			writeError(w, r, s.log, err)
			return nil, false
		}
		return m, true
	}
	if node := nodeParam(r); node != "" && !strings.HasPrefix(r.URL.Path, "/api/app/agents/") {
		writeError(w, r, s.log, unknownNode(node))
		return nil, false
	}
	if s.cfg.VMs == nil {
		writeError(w, r, s.log, fault.Unavailable("Local VM is not available on this server (no desktop manager is running); "+
			"see `cubicle doctor`"))
		return nil, false
	}
	return s.cfg.VMs, true
}

func (s *Server) vmStatus(w http.ResponseWriter, r *http.Request) {
	m, ok := s.vms(w, r)
	if !ok {
		return
	}
	st, err := m.Status(r.Context())
	if err != nil {
		writeError(w, r, s.log, err)
		return
	}
	writeJSON(w, http.StatusOK, st)
}

// vmPrepare starts (or joins) the preparation of an image. It answers 202 with the progress
// while it runs; poll GET /api/app/admin/local-vm for progress. With ?wait=1 it waits for the
// result and answers 200 with the prepared image (or the preparation's error).
func (s *Server) vmPrepare(w http.ResponseWriter, r *http.Request) {
	m, ok := s.vms(w, r)
	if !ok {
		return
	}
	var body struct {
		ImageKey string `json:"imageKey"`
	}
	if r.ContentLength != 0 {
		if err := decode(r, &body); err != nil {
			writeError(w, r, s.log, err)
			return
		}
	}
	if body.ImageKey == "" {
		body.ImageKey = "standard"
	}
	if r.URL.Query().Get("wait") == "1" {
		img, err := m.Prepare(r.Context(), body.ImageKey)
		if err != nil {
			writeError(w, r, s.log, err)
			return
		}
		writeJSON(w, http.StatusOK, map[string]any{"imageKey": img.Key, "ref": img.Ref, "imageId": img.ImageID,
			"recipeHash": img.RecipeHash, "driverVersion": img.DriverVersion, "preparedAt": img.PreparedAt.Format(time.RFC3339)})
		return
	}
	st, err := m.StartPrepare(body.ImageKey)
	if err != nil {
		writeError(w, r, s.log, err)
		return
	}
	writeJSON(w, http.StatusAccepted, st)
}

func (s *Server) vmPolicy(w http.ResponseWriter, r *http.Request) {
	m, ok := s.vms(w, r)
	if !ok {
		return
	}
	var body struct {
		Isolation    *string `json:"isolation"`
		MaxInstances *int    `json:"maxInstances"`
	}
	if err := decode(r, &body); err != nil {
		writeError(w, r, s.log, err)
		return
	}
	if body.Isolation == nil || body.MaxInstances == nil {
		writeError(w, r, s.log, fault.Invalid(`send {"isolation": "shared"|"per-agent", "maxInstances": 1..4}`))
		return
	}
	if !s.requireCapability(w, r, wire.CapNodeSettings, "isolation and max instances") {
		return
	}
	ns, err := m.SetPolicy(r.Context(), *body.Isolation, *body.MaxInstances)
	if err != nil {
		writeError(w, r, s.log, err)
		return
	}
	writeJSON(w, http.StatusOK, policyOf(ns))
}

// policyOf is the policy part of node settings ns.
func policyOf(ns nodeapi.NodeSettings) vm.Policy {
	return vm.Policy{Isolation: ns.Isolation, MaxInstances: ns.MaxInstances, IdleStopMinutes: ns.IdleStopMinutes,
		PauseAfterMinutes: ns.PauseAfterMinutes}
}

// vmIdlePolicy sets the node's idle policy: {"requestId", "idleStopMinutes", "pauseAfterMinutes"}
// — an idle desktop is paused after pauseAfterMinutes (optional: absent keeps the current
// value; 0 = never) and stopped after idleStopMinutes (0 = never).
func (s *Server) vmIdlePolicy(w http.ResponseWriter, r *http.Request) {
	m, ok := s.vms(w, r)
	if !ok {
		return
	}
	var body struct {
		RequestID         string `json:"requestId"`
		IdleStopMinutes   *int   `json:"idleStopMinutes"`
		PauseAfterMinutes *int   `json:"pauseAfterMinutes"`
	}
	if err := decode(r, &body); err != nil {
		writeError(w, r, s.log, err)
		return
	}
	if body.IdleStopMinutes == nil {
		writeError(w, r, s.log, fault.Invalid(`send {"requestId": "…", "idleStopMinutes": 0..10080, "pauseAfterMinutes": 0..10080} `+
			`(0 = never; pauseAfterMinutes is optional and must be less than idleStopMinutes)`))
		return
	}
	if !s.requireCapability(w, r, wire.CapIdlePolicy, "the idle policy") {
		return
	}
	ns, err := m.SetIdlePolicy(r.Context(), body.RequestID, *body.IdleStopMinutes, body.PauseAfterMinutes)
	if err != nil {
		writeError(w, r, s.log, err)
		return
	}
	writeJSON(w, http.StatusOK, policyOf(ns))
}

// vmImageSources saves the images' base sources: {"standard": {"image", "digest"},
// "cursor": {"image", "digest"}}, each part optional, "" = inherit the environment's or the
// built-in pin. An invalid value answers 400 naming the field, and nothing changes.
func (s *Server) vmImageSources(w http.ResponseWriter, r *http.Request) {
	m, ok := s.vms(w, r)
	if !ok {
		return
	}
	// Strict: a misspelt field must not pass as "" (which would clear a saved value).
	var body vm.ImageSourcesUpdate
	dec := json.NewDecoder(http.MaxBytesReader(nil, r.Body, 64<<10))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&body); err != nil {
		writeError(w, r, s.log, fault.Invalid(`the body must be {"standard": {"image", "digest"}, "cursor": {"image", "digest"}} `+
			`(each part optional): %v`, err))
		return
	}
	if !s.requireCapability(w, r, wire.CapNodeSettings, "the image sources") {
		return
	}
	v, err := m.SetImageSources(r.Context(), body)
	if err != nil {
		writeError(w, r, s.log, err)
		return
	}
	s.log.Info("image sources changed", "by", principal(r).Username)
	writeJSON(w, http.StatusOK, v)
}

// vmAgent answers the agent's desktop. A desktop whose node cannot be reached now (a runner
// whose link is down) is a state of that desktop, not a failed read: it answers 200 with the
// desktop "unreachable" and why (vm.UnreachableAgentView), so that the panel shows it without
// a failed request each time it looks; actions on it still answer 503.
func (s *Server) vmAgent(w http.ResponseWriter, r *http.Request) {
	m, ok := s.vms(w, r)
	if !ok {
		return
	}
	agentID := r.PathValue("id")
	v, err := m.Agent(r.Context(), principal(r).AccountID, agentID)
	if errors.Is(err, fault.ErrUnavailable) {
		node := ""
		if n, ok := m.(interface{ NodeID() string }); ok {
			node = n.NodeID()
		}
		v, err = vm.UnreachableAgentView(node, agentID, err), nil
	}
	if err != nil {
		writeError(w, r, s.log, err)
		return
	}
	writeJSON(w, http.StatusOK, v)
}

// vmAct runs a lifecycle action on the agent's desktop: create, start, stop, recreate,
// remove (vm.Actions), or pause and resume (their own operations of the node contract: a
// runner without them is refused by its capability).
func (s *Server) vmAct(w http.ResponseWriter, r *http.Request) {
	m, ok := s.vms(w, r)
	if !ok {
		return
	}
	var (
		v   vm.AgentView
		err error
	)
	account, agent := principal(r).AccountID, r.PathValue("id")
	switch action := r.PathValue("action"); action {
	case vm.ActionPause:
		v, err = m.Pause(r.Context(), account, agent)
	case vm.ActionResume:
		v, err = m.Resume(r.Context(), account, agent)
	default:
		v, err = m.Act(r.Context(), account, agent, action)
	}
	if err != nil {
		writeError(w, r, s.log, err)
		return
	}
	writeJSON(w, http.StatusOK, v)
}

// vmImage saves the image key of the agent's desktop ({"imageKey": "standard"|"cursor"},
// prepared keys only). In Compose mode it chooses a fixed desktop instead ({"desktop": id}).
func (s *Server) vmImage(w http.ResponseWriter, r *http.Request) {
	m, ok := s.vms(w, r)
	if !ok {
		return
	}
	var body struct {
		ImageKey string `json:"imageKey"`
		Desktop  string `json:"desktop"`
	}
	if err := decode(r, &body); err != nil {
		writeError(w, r, s.log, err)
		return
	}
	var (
		v   vm.AgentView
		err error
	)
	switch {
	case body.Desktop != "":
		v, err = m.ChooseDesktop(r.Context(), principal(r).AccountID, r.PathValue("id"), body.Desktop)
	case body.ImageKey != "":
		v, err = m.SetImage(r.Context(), principal(r).AccountID, r.PathValue("id"), body.ImageKey)
	default:
		err = fault.Invalid(`send {"imageKey": "standard"|"cursor"} (a prepared image)`)
	}
	if err != nil {
		writeError(w, r, s.log, err)
		return
	}
	writeJSON(w, http.StatusOK, v)
}

// vmAdminAct stops or removes any desktop of the node by its id (an administrator's Desktops
// table): {"force": true} ends the task or control on a desktop in use first.
func (s *Server) vmAdminAct(w http.ResponseWriter, r *http.Request) {
	m, ok := s.vms(w, r)
	if !ok {
		return
	}
	var body struct {
		Force bool `json:"force"`
	}
	if r.ContentLength != 0 {
		if err := decode(r, &body); err != nil {
			writeError(w, r, s.log, err)
			return
		}
	}
	v, err := m.AdminAct(r.Context(), r.PathValue("id"), r.PathValue("action"), body.Force)
	if err != nil {
		writeError(w, r, s.log, err)
		return
	}
	s.log.Info("administrator acted on a desktop", "by", principal(r).Username, "desktop", r.PathValue("id"),
		"action", r.PathValue("action"), "force", body.Force)
	writeJSON(w, http.StatusOK, v)
}

// vmDeleteData deletes a desktop's retained workspace and browser profile (with its container
// and record): an administrator's explicit act, refused while the desktop is in use.
func (s *Server) vmDeleteData(w http.ResponseWriter, r *http.Request) {
	m, ok := s.vms(w, r)
	if !ok {
		return
	}
	if err := m.DeleteData(r.Context(), r.PathValue("id")); err != nil {
		writeError(w, r, s.log, err)
		return
	}
	s.log.Info("desktop data deleted", "by", principal(r).Username, "instance", r.PathValue("id"))
	w.WriteHeader(http.StatusNoContent)
}
