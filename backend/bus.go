package backend

import (
	"runtime"

	"cubicle/backend/computer"
	"cubicle/backend/control"
	"cubicle/backend/events"
	"cubicle/backend/store"
	"cubicle/backend/vm"
)

// This file connects the services to the event bus (backend/events): every change the UI
// shows is published here, in one place, with the audience that may see it on the UI's
// stream (a desktop: its account and administrators; a chat's tool runs: its account only;
// preparation progress, resources and runners: administrators).

// desktopChanged publishes a desktop's state change (vm.Config.OnChange). A desktop that
// stops, is removed or is being recreated also loses whatever control it was under: late input
// of the old lease is fenced off, and the frame count starts again with the new screen (a
// restarted desktop's frames count from the start, so a lease would otherwise wait for frames
// newer than the old ones).
func (b *Backend) desktopChanged(c vm.InstanceChange) {
	if c.State != "running" && c.Previous == "running" && b.Control != nil {
		b.Control.Revoke(c.InstanceID)
	}
	if c.State != vm.StateRunning && c.State != vm.StatePaused && b.Egress != nil {
		b.Egress.Release(c.InstanceID) // its network namespace is going (or gone)
	}
	b.Events.Publish(events.DesktopState, events.ForAccount(c.AccountID, true), events.Desktop{
		InstanceID: c.InstanceID, NodeID: b.nodeID(), Scope: c.Scope, AccountID: c.AccountID, AgentID: c.AgentID,
		State: c.State, Previous: c.Previous, LastError: c.LastError, Removed: c.Removed})
}

// prepareChanged publishes a preparation's progress (vm.Config.OnPrepare) and, when it ends
// well, the node's prepared images.
func (b *Backend) prepareChanged(p vm.PrepareState) {
	node := b.nodeID()
	b.Events.Publish(events.PrepareProgress, events.AdminsOnly, events.Prepare{NodeID: node, ImageKey: p.Key,
		Running: p.Running, Phase: p.Phase, Message: p.Message, Percent: p.Percent, StartedAt: p.StartedAt,
		FinishedAt: p.FinishedAt, Error: p.Error})
	if !p.Running && p.Error == "" {
		b.imagesChanged()
	}
}

// imagesChanged publishes the node's prepared image keys.
func (b *Backend) imagesChanged() {
	node := b.nodeID()
	keys := []string{}
	if imgs, err := b.Store.VMImages(node); err == nil {
		for _, i := range imgs {
			keys = append(keys, i.Key)
		}
	}
	b.Events.Publish(events.ImagesChanged, events.Everyone, events.Images{NodeID: node, Prepared: keys})
}

// nodeChanged publishes a node's settings (vm.Config.OnSettings, host screen control).
func (b *Backend) nodeChanged(ns store.NodeSettings) {
	b.Events.Publish(events.NodeChanged, events.Everyone, events.Node{NodeID: ns.NodeID, Isolation: ns.Isolation,
		MaxInstances: ns.MaxInstances, IdleStopMinutes: ns.IdleStopMinutes, PauseAfterMinutes: ns.PauseAfterMinutes,
		HostScreenControl: ns.HostScreenControl})
}

// publishControl publishes a control change. Its audience is the account owning the desktop
// (and administrators); for the host screen, the account of the person or agent holding it.
func (b *Backend) publishControl(c control.Change) {
	account := ""
	if in, err := b.Store.VMInstance(c.DesktopID); err == nil {
		account = in.AccountID
	} else if c.Holder.Kind == control.HolderPerson {
		account = c.Holder.Person.AccountID
	} else if a, err := b.Store.Agent(c.Holder.Agent.AgentID); err == nil {
		account = a.AccountID
	}
	agentID := c.Holder.Agent.AgentID
	if c.Holder.Kind == control.HolderPerson {
		agentID = c.Holder.Person.AgentID
	}
	d := events.Control{DesktopID: c.DesktopID, Kind: string(c.Kind), HolderKind: string(c.Holder.Kind),
		Holder: c.Holder.Name(), Activity: c.Holder.Activity(), AgentID: agentID, Version: c.Version}
	if !c.ExpiresAt.IsZero() {
		d.ExpiresAt = c.ExpiresAt.UTC()
	}
	b.Events.Publish(events.ControlChanged, events.ForAccount(account, true), d)
}

// planChanged tells the agent's viewers that the computer its latest turn chose changed (for
// "auto": the panel shows what was chosen).
func (b *Backend) planChanged(a store.Agent, before, after computer.Plan, had bool) {
	if had && before.Kind == after.Kind {
		return
	}
	b.Events.Publish(events.AgentChanged, events.ForAccount(a.AccountID, false),
		events.Agent{AgentID: a.ID, AccountID: a.AccountID, Change: events.AgentUpdated})
}

// nodeID is the local node's id (before the VM manager exists: "local").
func (b *Backend) nodeID() string {
	if b.VMs != nil {
		return b.VMs.NodeID()
	}
	return "local"
}

// agentStore publishes agent changes as the profiles write them (profile.Store).
type agentStore struct {
	*store.Store
	bus *events.Bus
	// deleted hears each deleted agent (its workspace snapshots go); nil: nobody.
	deleted func(id string)
}

func (s agentStore) CreateAgent(a store.Agent) error {
	if err := s.Store.CreateAgent(a); err != nil {
		return err
	}
	s.publish(a.ID, a.AccountID, events.AgentCreated)
	return nil
}

func (s agentStore) UpdateAgent(id string, fn func(*store.Agent) error) (store.Agent, error) {
	a, err := s.Store.UpdateAgent(id, fn)
	if err == nil {
		s.publish(a.ID, a.AccountID, events.AgentUpdated)
	}
	return a, err
}

func (s agentStore) DeleteAgent(id string) error {
	a, err := s.Store.Agent(id)
	if err != nil {
		return err
	}
	if err := s.Store.DeleteAgent(id); err != nil {
		return err
	}
	s.publish(a.ID, a.AccountID, events.AgentDeleted)
	if s.deleted != nil {
		s.deleted(id)
	}
	return nil
}

func (s agentStore) publish(id, account, change string) {
	s.bus.Publish(events.AgentChanged, events.ForAccount(account, false), events.Agent{AgentID: id, AccountID: account, Change: change})
}

// runStore publishes each tool run the history records, to its chat's account (history.Store).
type runStore struct {
	*store.Store
	bus *events.Bus
}

func (s runStore) PutToolRun(r store.ToolRun) error {
	if err := s.Store.PutToolRun(r); err != nil {
		return err
	}
	s.bus.Publish(events.TimelineEntry, events.ForAccount(r.UserID, false),
		events.Timeline{SessionID: r.SessionID, RunID: r.ID, Tool: r.Tool, Status: r.Status, Run: r})
	return nil
}

// runnerConnecting announces that node "local" (this process) is connecting its managed local
// runner (and, before it, its engine); runnerUp follows once it is connected.
func (b *Backend) runnerConnecting() {
	kind, problem := b.engineNamed()
	b.Events.Publish(events.RunnerStatus, events.AdminsOnly, events.Runner{NodeID: b.nodeID(), State: events.RunnerConnecting,
		Managed: true, Version: b.cfg.Version, OS: runtime.GOOS, Arch: runtime.GOARCH, Engine: kind, EngineError: problem})
}

// runnerUp announces the managed local runner (node "local" in this process), with its
// engine as far as it is known. The runner link of external runners publishes the same
// event type when it comes.
func (b *Backend) runnerUp() {
	kind, problem := b.engineNamed()
	b.Events.Publish(events.RunnerStatus, events.AdminsOnly, events.Runner{NodeID: b.nodeID(), State: events.RunnerConnected,
		Managed: true, Version: b.cfg.Version, OS: runtime.GOOS, Arch: runtime.GOARCH, Engine: kind, EngineError: problem,
		Capabilities: []string{computer.CapHostTools, computer.CapHostDesktop}})
}

// engineNamed is the connected engine's kind, or why there is none ("" and the problem).
func (b *Backend) engineNamed() (kind, problem string) {
	b.engMu.Lock()
	defer b.engMu.Unlock()
	if b.engine != nil {
		return string(b.engine.Endpoint.Kind), ""
	}
	return "", b.engineProblem
}

// engineSettled follows the engine's connection (connectEngine; at Start when there is no
// engine to connect): the managed local runner starts, its hello naming the engine; in
// direct mode node "local" is announced again with its engine, so that views read its
// status again.
func (b *Backend) engineSettled() {
	if b.local == nil {
		if b.engineDone != nil {
			b.runnerUp()
		}
		return
	}
	kind, problem := b.engineNamed()
	if err := b.local.start(b.runnerUp, kind, problem); err != nil {
		b.log.Error("the managed local runner cannot start; node local is served directly", "err", err)
	}
}
