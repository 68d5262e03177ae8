package fleet

import (
	"cmp"
	"context"
	"slices"
	"time"

	"cubicle/backend/computer"
	"cubicle/backend/fault"
	"cubicle/backend/nodes"
	"cubicle/backend/store"
	"cubicle/backend/vm"
)

// Cloud computers (SPEC §1.6, §7): an agent whose computer type is "cloud" gets its desktop on
// a cloud node — a runner an administrator marked "cloud" — and the cloud_computer_* tools act
// on it. The cloud node is chosen so that an agent keeps its desktop where it is:
//
//  1. the node the agent is placed on, when that is a cloud runner (connected or not: a
//     disconnected one fails closed, the desktop is never recreated elsewhere);
//  2. else the cloud node this server chose for the agent before, while it stays connected
//     and marked cloud;
//  3. else the connected cloud runner where the agent's desktop already runs (after a server
//     restart);
//  4. else the first connected cloud runner (by name, then id) with a free desktop slot;
//  5. else the first connected cloud runner (its own capacity refusal says what to do).
//
// No connected cloud runner: the plan is "unavailable" with the error that says so. The host
// tools of a cloud round ("Allow host environment") are those of the agent's base node (the
// node it is placed on), never the cloud node's.

// NodeFor returns the node agent a's desktop calls go to: its cloud node for a cloud
// computer, else the node it is placed on.
func (f *Fleet) NodeFor(a store.Agent) (Node, error) {
	if k, _ := computer.Parse(a.Computer); k == computer.Cloud {
		node, err := f.CloudNode(a)
		if err != nil {
			return nil, err
		}
		return f.Node(node)
	}
	return f.Node(NodeOf(a))
}

// CloudNode chooses agent a's cloud node (see the rules above).
func (f *Fleet) CloudNode(a store.Agent) (string, error) {
	if base := NodeOf(a); base != nodes.LocalID {
		if r, err := f.cfg.Runners.Known(base); err == nil && r.Cloud {
			return base, nil
		}
	}
	clouds, err := f.cfg.Runners.CloudNodes()
	if err != nil {
		return "", err
	}
	if len(clouds) == 0 {
		return "", fault.Unavailable("no cloud execution node is connected to this server: an administrator marks a connected runner " +
			"as a cloud node in Settings → Runners; or choose Local VM (or another computer) in the computer panel")
	}
	f.mu.Lock()
	prev := f.cloud[a.ID]
	f.mu.Unlock()
	for _, r := range clouds {
		if r.ID == prev {
			return prev, nil
		}
	}
	ctx, cancel := context.WithTimeout(f.ctx, 10*time.Second)
	defer cancel()
	running, free := "", ""
	for _, r := range clouds {
		rem, err := f.cfg.Runners.Node(r.ID)
		if err != nil {
			continue
		}
		// The node's status, not an agent call: the agent's record goes only to the node chosen.
		st, err := rem.Status(ctx)
		if err != nil {
			continue
		}
		if slices.ContainsFunc(st.Instances, func(in vm.InstanceView) bool {
			return in.AgentID == a.ID && in.Scope == "agent" && in.State == vm.StateRunning
		}) {
			running = r.ID
			break
		}
		if free == "" && st.Running < st.Policy.MaxInstances {
			free = r.ID
		}
	}
	choice := cmp.Or(running, free, clouds[0].ID)
	f.mu.Lock()
	f.cloud[a.ID] = choice
	f.mu.Unlock()
	f.log.Info("cloud node chosen", "agent", a.ID, "node", choice)
	return choice, nil
}

// ForgetCloud forgets the cloud node chosen for agentID.
func (f *Fleet) ForgetCloud(agentID string) {
	f.mu.Lock()
	delete(f.cloud, agentID)
	f.mu.Unlock()
}
