package fleet

import (
	"context"
	"time"

	"cubicle/backend/fault"
	"cubicle/backend/nodeapi"
	"cubicle/backend/nodes"
	"cubicle/backend/store"
)

// Placement: an agent's calls go to the node it is placed on (store.Agent.NodeID, "" =
// local), or to its cloud node for a cloud computer (cloud.go). The Fleet remembers which node
// each remote desktop id belongs to, since control changes name only the desktop.

// NodeOf is the node agent a is placed on.
func NodeOf(a store.Agent) string {
	if a.NodeID == "" {
		return nodes.LocalID
	}
	return a.NodeID
}

// ForNode returns node's desktops (api.Placement).
func (f *Fleet) ForNode(node string) (nodeapi.Node, error) { return f.Node(node) }

// Node returns node's desktops: "" and "local" are this server's node.
func (f *Fleet) Node(node string) (Node, error) {
	if node == "" || node == nodes.LocalID {
		return f.Local()
	}
	return f.cfg.Runners.Node(node)
}

// Local is node "local": the VM manager, or the managed local runner's link to it.
func (f *Fleet) Local() (Node, error) {
	if f.cfg.Local == nil {
		return nil, fault.Unavailable("Local VM is not available on this server")
	}
	if f.cfg.LocalLinked != nil && f.cfg.LocalLinked() {
		return f.cfg.Runners.Node(nodes.LocalID)
	}
	// Direct mode, or the managed runner still connecting: the manager it wraps answers.
	return f.cfg.Local, nil
}

// ForAgent returns the desktops of the node agentID's desktop is on: the node it is placed
// on, or its cloud node for a cloud computer (api.Placement).
func (f *Fleet) ForAgent(agentID string) (nodeapi.Node, error) { return f.AgentNode(agentID) }

// AgentNode is ForAgent with the relays to the agent's running desktop.
func (f *Fleet) AgentNode(agentID string) (Node, error) {
	a, err := f.cfg.Store.Agent(agentID)
	if err != nil {
		return nil, err
	}
	return f.NodeFor(a)
}

// Note records that desktop id runs on node n.
func (f *Fleet) Note(n Node, id string) {
	if id == "" || n.NodeID() == nodes.LocalID {
		return
	}
	f.mu.Lock()
	f.remote[id] = n.NodeID()
	f.mu.Unlock()
}

// Desktop returns the node desktop id belongs to (the local node unless a runner's, as noted
// by Note).
func (f *Fleet) Desktop(id string) Node {
	f.mu.Lock()
	node, ok := f.remote[id]
	f.mu.Unlock()
	if ok {
		if r, err := f.cfg.Runners.Node(node); err == nil {
			return r
		}
	}
	if l, err := f.Local(); err == nil {
		return l
	}
	return f.cfg.Local
}

// Place puts agentID of accountID on node (PUT /api/app/agents/:id/node). It is refused while
// the agent's desktop runs, a task runs or a person controls it.
func (f *Fleet) Place(ctx context.Context, accountID, agentID, node string) (string, error) {
	a, err := f.cfg.Store.Agent(agentID)
	if err != nil || a.AccountID != accountID {
		return "", fault.NotFound("agent %q not found", agentID)
	}
	if node == "" {
		return "", fault.Invalid(`send {"nodeId": "local"} or a runner's id (Settings → Runners)`)
	}
	if _, err := f.cfg.Runners.Known(node); err != nil {
		return "", err
	}
	if node != nodes.LocalID {
		// Like host access: a runner is someone's machine, and an administrator says whose
		// agents may run there (Settings → Users → the account → placement on the runner).
		ok, err := f.cfg.HostAccess.Placement(accountID, node)
		if err != nil {
			return "", err
		}
		if !ok {
			return "", fault.Forbidden("placing agents on runner %s needs an administrator's grant for your account: ask an administrator to allow it (Settings → Users)", node)
		}
	}
	if NodeOf(a) == node {
		return node, nil
	}
	if why := f.comp.Busy(ctx, accountID, agentID); why != "" {
		return "", fault.Conflict("agent %s cannot move to another node now: %s; wait for it to finish or hand back control", a.Name, why)
	}
	cur, err := f.AgentNode(agentID)
	if err == nil {
		vctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		v, verr := cur.Agent(vctx, accountID, agentID)
		cancel()
		if verr == nil && v.Desktop.Scope == "agent" && v.Desktop.State == "running" {
			return "", fault.Conflict("agent %s's desktop is running on node %s: stop it first, then move the agent", a.Name, cur.NodeID())
		}
	}
	if _, err := f.cfg.Store.UpdateAgent(agentID, func(a *store.Agent) error {
		a.NodeID = node
		if node == nodes.LocalID {
			a.NodeID = ""
		}
		return nil
	}); err != nil {
		return "", err
	}
	if f.binder != nil {
		f.binder.Forget(agentID)
	}
	f.log.Info("agent placed", "agent", agentID, "node", node)
	return node, nil
}

// Label names node for people: `runner "mac-mini" (r-…)`, or this server's own machine.
func (f *Fleet) Label(node string) string {
	if node == "" || node == nodes.LocalID {
		return "this server's machine (node local)"
	}
	if r, err := f.cfg.Runners.Node(node); err == nil {
		return r.Label()
	}
	return "runner " + node
}
