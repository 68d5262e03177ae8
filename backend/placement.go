package backend

import (
	"context"
	"net"
	"sync"
	"time"

	"cubicle/backend/api"
	"cubicle/backend/fault"
	"cubicle/backend/guest"
	"cubicle/backend/nodeapi"
	"cubicle/backend/nodes"
	"cubicle/backend/store"
	"cubicle/backend/vm"
)

// nodeVMs is one execution node's desktops as the backend uses them: the node contract
// (nodeapi.Node) plus the relays to a running desktop. The local node's vm.Manager and a
// runner's nodes.Remote both provide it, so an agent's calls take the same path wherever its
// desktop runs.
type nodeVMs interface {
	nodeapi.Node
	Link(ctx context.Context, id string) (*guest.Client, error)
	Tunnel(ctx context.Context, id, address string) (net.Conn, error)
}

var (
	_ nodeVMs       = (*vm.Manager)(nil)
	_ nodeVMs       = (*nodes.Remote)(nil)
	_ api.Placement = (*placement)(nil)
)

// placement routes calls to the node an agent is placed on (store.Agent.NodeID, "" = local)
// and remembers which node each remote desktop id belongs to (control changes name only the
// desktop).
type placement struct {
	b *Backend

	mu     sync.Mutex
	remote map[string]string // desktop id → runner node id
	cloud  map[string]string // agent id → the cloud node chosen for its cloud computer (cloud.go)
}

func newPlacement(b *Backend) *placement {
	return &placement{b: b, remote: map[string]string{}, cloud: map[string]string{}}
}

// nodeOf is the node agent a is placed on.
func nodeOf(a store.Agent) string {
	if a.NodeID == "" {
		return nodes.LocalID
	}
	return a.NodeID
}

// ForNode returns node's desktops (api.Placement).
func (p *placement) ForNode(node string) (api.VMs, error) { return p.node(node) }

func (p *placement) node(node string) (nodeVMs, error) {
	if node == "" || node == nodes.LocalID {
		return p.local()
	}
	return p.b.Nodes.Node(node)
}

// local is node "local": the VM manager, or the managed local runner's link to it
// (localrunner.go).
func (p *placement) local() (nodeVMs, error) {
	if p.b.VMs == nil {
		return nil, fault.Unavailable("Local VM is not available on this server")
	}
	if p.b.local != nil && p.b.local.Connected() {
		return p.b.Nodes.Node(nodes.LocalID)
	}
	// Direct mode, or the managed runner still connecting: the manager it wraps answers.
	return p.b.VMs, nil
}

// ForAgent returns the desktops of the node agentID's desktop is on: the node it is placed
// on, or its cloud node for a cloud computer (api.Placement).
func (p *placement) ForAgent(agentID string) (api.VMs, error) { return p.agent(agentID) }

func (p *placement) agent(agentID string) (nodeVMs, error) {
	a, err := p.b.Store.Agent(agentID)
	if err != nil {
		return nil, err
	}
	return p.forAgent(a)
}

// note records that desktop id runs on vms's node.
func (p *placement) note(vms nodeVMs, id string) {
	if id == "" || vms.NodeID() == nodes.LocalID {
		return
	}
	p.mu.Lock()
	p.remote[id] = vms.NodeID()
	p.mu.Unlock()
}

// desktop returns the node desktop id belongs to (the local node unless a runner's).
func (p *placement) desktop(id string) nodeVMs {
	p.mu.Lock()
	node, ok := p.remote[id]
	p.mu.Unlock()
	if ok {
		if r, err := p.b.Nodes.Node(node); err == nil {
			return r
		}
	}
	if l, err := p.local(); err == nil {
		return l
	}
	return p.b.VMs
}

// Place puts agentID of accountID on node (PUT /api/app/agents/:id/node). It is refused while
// the agent's desktop runs, a task runs or a person controls it.
func (p *placement) Place(ctx context.Context, accountID, agentID, node string) (string, error) {
	a, err := p.b.Store.Agent(agentID)
	if err != nil || a.AccountID != accountID {
		return "", fault.NotFound("agent %q not found", agentID)
	}
	if node == "" {
		return "", fault.Invalid(`send {"nodeId": "local"} or a runner's id (Settings → Runners)`)
	}
	if _, err := p.b.Nodes.Known(node); err != nil {
		return "", err
	}
	if node != nodes.LocalID {
		// Like host access: a runner is someone's machine, and an administrator says whose
		// agents may run there (Settings → Users → the account → placement on the runner).
		ok, err := p.b.HostAccess.Placement(accountID, node)
		if err != nil {
			return "", err
		}
		if !ok {
			return "", fault.Forbidden("placing agents on runner %s needs an administrator's grant for your account: ask an administrator to allow it (Settings → Users)", node)
		}
	}
	if nodeOf(a) == node {
		return node, nil
	}
	if why := p.b.computers.Busy(ctx, accountID, agentID); why != "" {
		return "", fault.Conflict("agent %s cannot move to another node now: %s; wait for it to finish or hand back control", a.Name, why)
	}
	cur, err := p.agent(agentID)
	if err == nil {
		vctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		v, verr := cur.Agent(vctx, accountID, agentID)
		cancel()
		if verr == nil && v.Desktop.Scope == "agent" && v.Desktop.State == "running" {
			return "", fault.Conflict("agent %s's desktop is running on node %s: stop it first, then move the agent", a.Name, cur.NodeID())
		}
	}
	if _, err := p.b.Store.UpdateAgent(agentID, func(a *store.Agent) error {
		a.NodeID = node
		if node == nodes.LocalID {
			a.NodeID = ""
		}
		return nil
	}); err != nil {
		return "", err
	}
	p.b.Binder.Forget(agentID)
	p.b.log.Info("agent placed", "agent", agentID, "node", node)
	return node, nil
}

// nodeDisconnected ends the control leases of a runner's desktops when its link ends (fail
// closed: no person keeps control of a desktop nobody can reach, no task goes on).
func (b *Backend) nodeDisconnected(node string, desktops []string) {
	for _, id := range desktops {
		b.Control.Revoke(id)
	}
}
