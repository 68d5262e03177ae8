package nodes

import (
	"context"
	"fmt"
	"net"
	"time"

	"cubicle/backend/fault"
	"cubicle/backend/guest"
	"cubicle/backend/nodeapi"
	"cubicle/backend/vm"
	"cubicle/runner/wire"
)

// Remote drives one runner's desktops over its link. It implements the node contract
// (nodeapi.Node) as vm.Manager does, plus the relays (Link, Tunnel) and host tools, so the
// backend routes an agent's calls to its node without knowing where it is. Every call on a node whose link is
// down is a fault.ErrUnavailable error naming the wire.
type Remote struct {
	h  *Hub
	id string
}

// A runner's desktops are a node of the contract.
var _ nodeapi.Node = (*Remote)(nil)

// Node returns the Remote of runner node (which may be disconnected).
func (h *Hub) Node(node string) (*Remote, error) {
	if _, err := h.Known(node); err != nil {
		return nil, err
	}
	return &Remote{h: h, id: node}, nil
}

// NodeID is the runner's node id.
func (r *Remote) NodeID() string { return r.id }

// live returns the runner's link, or why there is none.
func (r *Remote) live() (*conn, error) {
	if c := r.h.conn(r.id); c != nil {
		return c, nil
	}
	name := r.id
	if rec, err := r.h.cfg.Store.Runner(r.id); err == nil {
		name = rec.Name + " (" + r.id + ")"
		if rec.Revoked {
			return nil, fault.Unavailable("runner %s was revoked: its desktops cannot be reached", name)
		}
		if !rec.LastSeen.IsZero() {
			return nil, fault.Unavailable("runner %s is disconnected (last seen %s): its desktops are unreachable until it reconnects",
				name, rec.LastSeen.Local().Format(time.DateTime))
		}
	}
	return nil, fault.Unavailable("runner %s has not connected yet: run the command shown when it was added on that machine", name)
}

// open opens a stream for op's request and sends it; the stream follows ctx. A runner that
// did not advertise op's capability is refused (op.Refuse) before anything is sent.
func (r *Remote) open(ctx context.Context, op wire.Spec, req wire.Request) (net.Conn, *conn, error) {
	c, err := r.live()
	if err != nil {
		return nil, nil, err
	}
	if err := op.Refuse(c.hello.Capabilities, c.name, r.id, c.hello.Version, r.h.cfg.Version); err != nil {
		return nil, nil, err
	}
	st, err := c.sess.OpenStream()
	if err != nil {
		return nil, nil, fault.Unavailable("runner %s (%s): the link ended: %v", c.name, r.id, err)
	}
	if dl, ok := ctx.Deadline(); ok {
		st.SetWriteDeadline(dl)
	}
	if err := wire.WriteFrame(st, req); err != nil {
		st.Close()
		return nil, nil, fault.Unavailable("runner %s (%s): send %s: %v", c.name, r.id, op.Name, err)
	}
	st.SetWriteDeadline(time.Time{})
	c.mu.Lock()
	c.sent[op.Name]++
	c.mu.Unlock()
	return st, c, nil
}

// call runs a request/response op of the table (runner/wire.Ops) on runner r and decodes
// its result.
func call[A, R any](ctx context.Context, r *Remote, op wire.Op[A, R], args A) (R, error) {
	var zero R
	req, err := op.Request(args)
	if err != nil {
		return zero, err
	}
	st, c, err := r.open(ctx, op.Spec, req)
	if err != nil {
		return zero, err
	}
	defer st.Close()
	stop := context.AfterFunc(ctx, func() { st.Close() })
	defer stop()
	var resp wire.Response
	if err := wire.ReadFrame(st, &resp); err != nil {
		if ctx.Err() != nil {
			return zero, ctx.Err()
		}
		return zero, fault.Unavailable("runner %s (%s) did not answer %s: %v", c.name, r.id, op.Name, err)
	}
	return op.Result(resp)
}

// agentArgs loads the agent a call is for; its model settings never leave the server.
func (r *Remote) agentArgs(accountID, agentID string) (wire.AgentArgs, error) {
	a, err := r.h.cfg.Store.Agent(agentID)
	if err != nil || a.AccountID != accountID {
		return wire.AgentArgs{}, fault.NotFound("agent %q not found", agentID)
	}
	return wire.AgentArgs{Agent: vm.AgentOf(a)}, nil
}

// remember notes that desktop id is on this node's link (its leases end when the link does).
func (r *Remote) remember(id string) {
	if c := r.h.conn(r.id); c != nil && id != "" {
		c.mu.Lock()
		c.seen[id] = true
		c.mu.Unlock()
	}
}

// Status is the node's Local VM status (GET /api/app/admin/local-vm?node=…).
func (r *Remote) Status(ctx context.Context) (vm.Status, error) {
	st, err := call(ctx, r, wire.Status, wire.None{})
	st.NodeID = r.id
	for i := range st.Instances {
		st.Instances[i].NodeID = r.id
	}
	return st, err
}

// The node id in a runner's answers is the runner's word: the server puts the id its token
// authenticated in its place (a runner claiming "local" or another runner's id is not shown
// as that node).

// Stats samples the CPU and memory of the node's running desktops (the sampler of
// desktop.stats). A runner that did not advertise wire.CapStats is refused before anything
// is sent, with a fault.ErrUnavailable error saying what it must support (wire.Stats).
func (r *Remote) Stats(ctx context.Context) ([]vm.InstanceStats, error) {
	return call(ctx, r, wire.Stats, wire.None{})
}

// StartPrepare starts preparing image key on the node.
func (r *Remote) StartPrepare(key string) (vm.PrepareState, error) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	return call(ctx, r, wire.StartPrepare, wire.InstanceArgs{ImageKey: key})
}

// Prepare prepares image key on the node and waits for it.
func (r *Remote) Prepare(ctx context.Context, key string) (nodeapi.Image, error) {
	return call(ctx, r, wire.Prepare, wire.InstanceArgs{ImageKey: key})
}

// SetPolicy sets the node's isolation policy and capacity.
func (r *Remote) SetPolicy(ctx context.Context, isolation string, maxInstances int) (nodeapi.NodeSettings, error) {
	return call(ctx, r, wire.SetPolicy, wire.PolicyArgs{Isolation: isolation, MaxInstances: maxInstances})
}

// SetIdlePolicy sets the node's idle policy; the runner must support it (wire.SetIdlePolicy
// refuses an older one with fault.ErrConflict), and an idle pause (pauseMinutes > 0) needs
// wire.CapPause: a runner without it is refused before anything is sent, rather than
// silently never pausing.
func (r *Remote) SetIdlePolicy(ctx context.Context, requestID string, minutes int, pauseMinutes *int) (nodeapi.NodeSettings, error) {
	if pauseMinutes != nil {
		c, err := r.live()
		if err != nil {
			return nodeapi.NodeSettings{}, err
		}
		spec := wire.Pause.Spec
		spec.Lacks, spec.Fix = "cannot pause idle desktops", "update it to version {version}, or send pauseAfterMinutes 0"
		if err := spec.Refuse(c.hello.Capabilities, c.name, r.id, c.hello.Version, r.h.cfg.Version); err != nil {
			if *pauseMinutes > 0 {
				return nodeapi.NodeSettings{}, err
			}
			pauseMinutes = nil // never pausing is what a runner without the pause does anyway
		}
	}
	return call(ctx, r, wire.SetIdlePolicy, wire.PolicyArgs{RequestID: requestID, Minutes: minutes, PauseMinutes: pauseMinutes})
}

// SetEgress replaces the node's desktop egress policies (the node's and the agents' own); a
// runner without wire.CapEgress is refused with fault.ErrConflict saying to update it.
func (r *Remote) SetEgress(ctx context.Context, node nodeapi.EgressPolicy, agents map[string]nodeapi.EgressPolicy) (nodeapi.NodeSettings, error) {
	return call(ctx, r, wire.SetEgress, wire.EgressArgs{Node: node, Agents: agents})
}

// SetImageSources sets the node's image sources.
func (r *Remote) SetImageSources(ctx context.Context, u vm.ImageSourcesUpdate) (vm.ImageSources, error) {
	return call(ctx, r, wire.SetImageSources, u)
}

// agentCall runs an agent-scoped op.
func (r *Remote) agentCall(ctx context.Context, op wire.Op[wire.AgentArgs, vm.AgentView], accountID, agentID string, fill func(*wire.AgentArgs)) (vm.AgentView, error) {
	a, err := r.agentArgs(accountID, agentID)
	if err != nil {
		return vm.AgentView{}, err
	}
	if fill != nil {
		fill(&a)
	}
	v, err := call(ctx, r, op, a)
	if err != nil {
		return vm.AgentView{}, err
	}
	v.Desktop.NodeID = r.id
	r.remember(v.Desktop.ID)
	return v, nil
}

// Agent is agentID's desktop on the node.
func (r *Remote) Agent(ctx context.Context, accountID, agentID string) (vm.AgentView, error) {
	return r.agentCall(ctx, wire.Agent, accountID, agentID, nil)
}

// Act runs a lifecycle action on agentID's desktop on the node.
func (r *Remote) Act(ctx context.Context, accountID, agentID, action string) (vm.AgentView, error) {
	return r.agentCall(ctx, wire.Act, accountID, agentID, func(a *wire.AgentArgs) { a.Action = action })
}

// Pause freezes agentID's running desktop on the node (a runner without wire.CapPause is
// refused with fault.ErrConflict before anything is sent).
func (r *Remote) Pause(ctx context.Context, accountID, agentID string) (vm.AgentView, error) {
	return r.agentCall(ctx, wire.Pause, accountID, agentID, nil)
}

// Resume thaws agentID's paused desktop on the node (see Pause).
func (r *Remote) Resume(ctx context.Context, accountID, agentID string) (vm.AgentView, error) {
	return r.agentCall(ctx, wire.Resume, accountID, agentID, nil)
}

// SetImage chooses agentID's image on the node.
func (r *Remote) SetImage(ctx context.Context, accountID, agentID, key string) (vm.AgentView, error) {
	return r.agentCall(ctx, wire.SetImage, accountID, agentID, func(a *wire.AgentArgs) { a.ImageKey = key })
}

// ChooseDesktop chooses agentID's fixed desktop on a Compose node.
func (r *Remote) ChooseDesktop(ctx context.Context, accountID, agentID, desktopID string) (vm.AgentView, error) {
	return r.agentCall(ctx, wire.ChooseDesktop, accountID, agentID, func(a *wire.AgentArgs) { a.DesktopID = desktopID })
}

// VMReady reports whether agentID could get a desktop on the node now, and why not.
func (r *Remote) VMReady(ctx context.Context, accountID, agentID string) (bool, string) {
	a, err := r.agentArgs(accountID, agentID)
	if err != nil {
		return false, err.Error()
	}
	res, err := call(ctx, r, wire.VMReady, a)
	if err != nil {
		return false, err.Error()
	}
	return res.OK, res.Why
}

// StopInstance stops desktop id on the node.
func (r *Remote) StopInstance(ctx context.Context, id, reason string) error {
	_, err := call(ctx, r, wire.StopInstance, wire.InstanceArgs{ID: id, Reason: reason})
	return err
}

// DeleteData deletes desktop id's retained workspace and browser profile on the node.
func (r *Remote) DeleteData(ctx context.Context, id string) error {
	_, err := call(ctx, r, wire.DeleteData, wire.InstanceArgs{ID: id})
	return err
}

// AdminAct runs an administrator's action (stop, remove, …) on desktop id on the node.
func (r *Remote) AdminAct(ctx context.Context, id, action string, force bool) (vm.InstanceView, error) {
	v, err := call(ctx, r, wire.AdminAct, wire.InstanceArgs{ID: id, Action: action, Force: force})
	v.NodeID = r.id
	return v, err
}

// AgentData is what agentID keeps on the node (desktops and their volumes, sizes measured
// when asked).
func (r *Remote) AgentData(ctx context.Context, accountID, agentID string, measure bool) (vm.AgentData, error) {
	a, err := r.agentArgs(accountID, agentID)
	if err != nil {
		return vm.AgentData{}, err
	}
	a.Measure = measure
	d, err := call(ctx, r, wire.AgentData, a)
	for i := range d.Desktops {
		d.Desktops[i].NodeID = r.id
	}
	if d.Shared != nil {
		d.Shared.NodeID = r.id
	}
	return d, err
}

// ForgetAgent removes agentID's desktop on the node (when asked) and its data (when asked).
func (r *Remote) ForgetAgent(ctx context.Context, accountID, agentID string, removeDesktop, deleteData bool) error {
	a, err := r.agentArgs(accountID, agentID)
	if err != nil {
		return err
	}
	a.RemoveDesktop, a.DeleteData = removeDesktop, deleteData
	_, err = call(ctx, r, wire.ForgetAgent, a)
	return err
}

// MarkBusy and MarkIdle tell the node's idle timers who holds desktop id. They do not wait
// long: a node that cannot be told stops its desktops by its own idle timer.
func (r *Remote) MarkBusy(id, who string) { r.mark(wire.MarkBusy, id, who) }

// MarkIdle: see MarkBusy.
func (r *Remote) MarkIdle(id string) { r.mark(wire.MarkIdle, id, "") }

func (r *Remote) mark(op wire.Op[wire.InstanceArgs, bool], id, who string) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := call(ctx, r, op, wire.InstanceArgs{ID: id, Who: who}); err != nil {
		r.h.log.Debug("runner idle mark", "node", r.id, "op", op.Name, "desktop", id, "err", err)
	}
}

// Link returns the shared relayed link to running desktop id's driver on the node: the
// server's guest client speaks the guest protocol end to end over one stream, which the
// runner pipes into a stream of its own local link. It ends with the node's link.
func (r *Remote) Link(ctx context.Context, id string) (*guest.Client, error) {
	c, err := r.live()
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	if g := c.guests[id]; g != nil && g.Err() == nil {
		c.mu.Unlock()
		return g, nil
	}
	c.mu.Unlock()
	st, c, err := relay(ctx, r, wire.Guest, wire.InstanceArgs{ID: id})
	if err != nil {
		return nil, err
	}
	g, err := guest.NewClient(ctx, st, guest.Options{Name: fmt.Sprintf("the relay through runner %s to %s", c.name, id),
		Heartbeat: 3 * time.Second, Timeout: 10 * time.Second})
	if err != nil {
		st.Close()
		return nil, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if cur := c.guests[id]; cur != nil && cur.Err() == nil {
		g.Close()
		return cur, nil
	}
	if r.h.conn(r.id) != c { // the link ended meanwhile
		g.Close()
		return nil, fault.Unavailable("runner %s (%s): the link ended", c.name, r.id)
	}
	c.guests[id] = g
	c.seen[id] = true
	return g, nil
}

// Tunnel opens a byte stream to address inside running desktop id on the node.
func (r *Remote) Tunnel(ctx context.Context, id, address string) (net.Conn, error) {
	st, _, err := relay(ctx, r, wire.Tunnel, wire.InstanceArgs{ID: id, Address: address})
	return st, err
}

// relay opens a raw stream: request, OK, then bytes.
func relay[A, R any](ctx context.Context, r *Remote, op wire.Op[A, R], args A) (net.Conn, *conn, error) {
	req, err := op.Request(args)
	if err != nil {
		return nil, nil, err
	}
	st, c, err := r.open(ctx, op.Spec, req)
	if err != nil {
		return nil, nil, err
	}
	stop := context.AfterFunc(ctx, func() { st.Close() })
	var resp wire.Response
	err = wire.ReadFrame(st, &resp)
	if !stop() {
		st.Close()
		return nil, nil, ctx.Err()
	}
	if err != nil {
		st.Close()
		return nil, nil, fault.Unavailable("runner %s (%s) did not answer %s: %v", c.name, r.id, op.Name, err)
	}
	if _, err := op.Result(resp); err != nil {
		st.Close()
		return nil, nil, err
	}
	return st, c, nil
}

// seen returns the desktop ids the server used on link c.
func (h *Hub) seen(c *conn) []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make([]string, 0, len(c.seen))
	for id := range c.seen {
		out = append(out, id)
	}
	return out
}
