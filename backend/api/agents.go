package api

import (
	"net/http"
	"time"

	"cubicle/backend/fault"
	"cubicle/backend/profile"
	"cubicle/backend/store"
	"cubicle/backend/vm"
)

// agentJSON is an agent as the API shows it.
type agentJSON struct {
	ID                   string    `json:"id"`
	Name                 string    `json:"name"`
	Computer             string    `json:"computer"`
	AllowHostEnvironment bool      `json:"allowHostEnvironment"`
	WorkDir              string    `json:"workdir"`  // terminal.cwd; "" = the default
	LazyInit             bool      `json:"lazyInit"` // sandbox binding at the first tool call (else before the first model call)
	NodeID               string    `json:"nodeId"`   // the execution node of its desktop: "local" or a runner's id
	CreatedAt            time.Time `json:"createdAt"`
	UpdatedAt            time.Time `json:"updatedAt"`
}

func agentOf(a store.Agent) agentJSON {
	c := a.Computer
	if c == "" {
		c = profile.ComputerNone
	}
	node := a.NodeID
	if node == "" {
		node = "local"
	}
	return agentJSON{ID: a.ID, Name: a.Name, Computer: c, AllowHostEnvironment: a.AllowHostEnvironment,
		WorkDir: a.WorkDir, LazyInit: a.LazyInit == nil || *a.LazyInit, NodeID: node, CreatedAt: a.CreatedAt, UpdatedAt: a.UpdatedAt}
}

func (s *Server) listAgents(w http.ResponseWriter, r *http.Request) {
	agents, err := s.cfg.Profiles.List(principal(r).AccountID)
	if err != nil {
		writeError(w, r, s.log, err)
		return
	}
	out := make([]agentJSON, 0, len(agents))
	for _, a := range agents {
		out = append(out, agentOf(a))
	}
	writeJSON(w, http.StatusOK, map[string]any{"agents": out})
}

func (s *Server) createAgent(w http.ResponseWriter, r *http.Request) {
	var body struct {
		Name string `json:"name"`
		// From forks an agent: the new agent's workspace starts as that snapshot (snapshots.go).
		From *struct {
			AgentID    string `json:"agentId"`
			SnapshotID string `json:"snapshotId"`
		} `json:"from"`
	}
	if err := decode(r, &body); err != nil {
		writeError(w, r, s.log, err)
		return
	}
	p := principal(r)
	if body.From != nil {
		if s.cfg.Snapshots == nil {
			writeError(w, r, s.log, fault.Unavailable("workspace snapshots are not available on this server: an agent cannot be forked"))
			return
		}
		if body.From.AgentID == "" || body.From.SnapshotID == "" {
			writeError(w, r, s.log, fault.Invalid(`a fork names its snapshot: {"from": {"agentId": "…", "snapshotId": "…"}}`))
			return
		}
		if err := s.cfg.Snapshots.CheckFork(r.Context(), p.AccountID, body.From.AgentID, body.From.SnapshotID); err != nil {
			writeError(w, r, s.log, err)
			return
		}
	}
	a, err := s.cfg.Profiles.Create(p.AccountID, body.Name)
	if err != nil {
		writeError(w, r, s.log, err)
		return
	}
	if body.From != nil {
		if err := s.cfg.Snapshots.Fork(r.Context(), p.AccountID, body.From.AgentID, body.From.SnapshotID, a.ID); err != nil {
			// Nothing half made: the new agent goes again.
			if derr := s.cfg.Profiles.Delete(p.AccountID, a.ID); derr != nil {
				s.log.Warn("forked agent not removed after its workspace failed", "agent", a.ID, "err", derr)
			}
			writeError(w, r, s.log, err)
			return
		}
	}
	writeJSON(w, http.StatusCreated, agentOf(a))
}

func (s *Server) getAgent(w http.ResponseWriter, r *http.Request) {
	a, err := s.cfg.Profiles.Get(principal(r).AccountID, r.PathValue("id"))
	if err != nil {
		writeError(w, r, s.log, err)
		return
	}
	writeJSON(w, http.StatusOK, agentOf(a))
}

func (s *Server) renameAgent(w http.ResponseWriter, r *http.Request) {
	var body struct {
		Name *string `json:"name"`
	}
	if err := decode(r, &body); err != nil {
		writeError(w, r, s.log, err)
		return
	}
	if body.Name == nil {
		writeError(w, r, s.log, fault.Invalid(`send {"name": "…"} to rename the agent`))
		return
	}
	a, err := s.cfg.Profiles.Rename(principal(r).AccountID, r.PathValue("id"), *body.Name)
	if err != nil {
		writeError(w, r, s.log, err)
		return
	}
	writeJSON(w, http.StatusOK, agentOf(a))
}

// deletionJSON answers GET /api/app/agents/:id/deletion: what deleting the agent concerns.
type deletionJSON struct {
	vm.AgentData
	// Busy says why the agent cannot be deleted now ("" when it can).
	Busy string `json:"busy,omitempty"`
}

// agentDeletion tells what deleting the agent would stop, remove and (only on request)
// delete, with the sizes of its data (?sizes=0: without measuring them, at once).
func (s *Server) agentDeletion(w http.ResponseWriter, r *http.Request) {
	p := principal(r)
	a, err := s.cfg.Profiles.Get(p.AccountID, r.PathValue("id"))
	if err != nil {
		writeError(w, r, s.log, err)
		return
	}
	out := deletionJSON{AgentData: vm.AgentData{AgentID: a.ID, Desktops: []vm.InstanceView{}, Volumes: []vm.VolumeView{}}}
	if s.cfg.VMs != nil {
		if out.AgentData, err = s.cfg.VMs.AgentData(r.Context(), p.AccountID, a.ID, r.URL.Query().Get("sizes") != "0"); err != nil {
			writeError(w, r, s.log, err)
			return
		}
	}
	if s.cfg.Computers != nil {
		out.Busy = s.cfg.Computers.Busy(r.Context(), p.AccountID, a.ID)
	}
	writeJSON(w, http.StatusOK, out)
}

// deleteAgent deletes an agent. Body (optional): {"removeDesktop": true, "deleteData": false}
// — by default its own desktop and browser are stopped and removed and their work files and
// browser profile kept; {"removeDesktop": false} leaves them running (an administrator can
// stop them); "deleteData" deletes the work files and browser profile too, and only then.
// Refused (409, nothing changed) while the agent runs a task or a person controls its desktop.
func (s *Server) deleteAgent(w http.ResponseWriter, r *http.Request) {
	p := principal(r)
	body := struct {
		RemoveDesktop *bool `json:"removeDesktop"`
		DeleteData    bool  `json:"deleteData"`
	}{}
	if r.ContentLength != 0 {
		if err := decode(r, &body); err != nil {
			writeError(w, r, s.log, err)
			return
		}
	}
	remove := body.RemoveDesktop == nil || *body.RemoveDesktop
	if body.DeleteData && !remove {
		writeError(w, r, s.log, fault.Invalid(`"deleteData" needs "removeDesktop": the work files can be deleted only with the desktop`))
		return
	}
	a, err := s.cfg.Profiles.Get(p.AccountID, r.PathValue("id"))
	if err != nil {
		writeError(w, r, s.log, err)
		return
	}
	if s.cfg.Computers != nil {
		if who := s.cfg.Computers.Busy(r.Context(), p.AccountID, a.ID); who != "" {
			writeError(w, r, s.log, fault.Conflict("the agent cannot be deleted while %s; wait for it to finish or hand back control first", who))
			return
		}
	}
	if s.cfg.VMs != nil {
		if err := s.cfg.VMs.ForgetAgent(r.Context(), p.AccountID, a.ID, remove, body.DeleteData); err != nil {
			writeError(w, r, s.log, err)
			return
		}
	}
	if err := s.cfg.Profiles.Delete(p.AccountID, a.ID); err != nil {
		writeError(w, r, s.log, err)
		return
	}
	s.log.Info("agent deleted", "agent", a.ID, "by", p.Username, "removeDesktop", remove, "deleteData", body.DeleteData)
	w.WriteHeader(http.StatusNoContent)
}

func (s *Server) selectComputer(w http.ResponseWriter, r *http.Request) {
	var body struct {
		Computer             *string `json:"computer"`
		AllowHostEnvironment *bool   `json:"allowHostEnvironment"`
	}
	if err := decode(r, &body); err != nil {
		writeError(w, r, s.log, err)
		return
	}
	if body.Computer == nil {
		writeError(w, r, s.log, fault.Invalid(`send {"computer": "vm"|"cloud"|"host"|"browser"|"auto"|"none", "allowHostEnvironment": true|false}`))
		return
	}
	// SPEC §1.6: the environment cannot change during a task or a takeover.
	if _, err := s.cfg.Profiles.Get(principal(r).AccountID, r.PathValue("id")); err != nil {
		writeError(w, r, s.log, err)
		return
	}
	if s.cfg.Computers != nil {
		if who := s.cfg.Computers.Busy(r.Context(), principal(r).AccountID, r.PathValue("id")); who != "" {
			writeError(w, r, s.log, fault.Conflict("the computer cannot change while %s; wait for it to finish or hand back control first", who))
			return
		}
	} else if s.cfg.VMs != nil {
		if v, err := s.cfg.VMs.Agent(r.Context(), principal(r).AccountID, r.PathValue("id")); err == nil && v.Desktop.BusyBy != "" {
			writeError(w, r, s.log, fault.Conflict("the computer cannot change while %s; wait for it to finish or hand back control first", v.Desktop.BusyBy))
			return
		}
	}
	sel := profile.Selection{Computer: *body.Computer}
	if body.AllowHostEnvironment != nil {
		sel.AllowHostEnvironment = *body.AllowHostEnvironment
	}
	before, a, err := s.cfg.Profiles.SelectComputerFrom(principal(r).AccountID, r.PathValue("id"), sel)
	if err != nil {
		writeError(w, r, s.log, err)
		return
	}
	if s.cfg.Computers != nil {
		s.cfg.Computers.Changed(r.Context(), before, a)
	}
	writeJSON(w, http.StatusOK, agentOf(a))
}

func (s *Server) doctor(w http.ResponseWriter, r *http.Request) {
	if s.cfg.Doctor == nil {
		writeError(w, r, s.log, fault.Unavailable("the environment check is not available in this mode"))
		return
	}
	writeJSON(w, http.StatusOK, s.cfg.Doctor(r.Context()))
}
