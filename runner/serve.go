package runner

import (
	"context"
	"fmt"
	"io"
	"net"
	"sync"
	"time"

	"cubicle/backend/fault"
	"cubicle/backend/nodeapi"
	"cubicle/backend/vm"
	"cubicle/runner/wire"
)

// statsTimeout bounds one wire.OpStats sample on the runner (the server asks every few
// seconds while an administrator watches, and waits three intervals at most).
const statsTimeout = 30 * time.Second

// handler answers one op on its stream: st is positioned after the request's frame, and the
// handler writes the framed response (and, for a streaming op, what follows it).
type handler func(ctx context.Context, st net.Conn, req wire.Request)

// serve answers one stream: a framed request, then the op's handler from the dispatch table
// (r.ops); an op the table does not have is answered with wire.UnknownOp.
func (r *Runner) serve(ctx context.Context, st net.Conn) {
	defer st.Close()
	var req wire.Request
	if err := wire.ReadFrame(st, &req); err != nil {
		r.log.Debug("runner stream without a request", "err", err)
		return
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	h, ok := r.dispatch()[req.Op]
	if !ok {
		wire.WriteFrame(st, wire.Response{Error: wire.ErrorOf(wire.UnknownOp(req.Op, r.cfg.Version))})
		return
	}
	h(ctx, st, req)
}

// dispatch is the runner's dispatch table, built once.
func (r *Runner) dispatch() map[string]handler {
	r.opsOnce.Do(func() { r.ops = r.handlers() })
	return r.ops
}

// handlers is the runner's dispatch table: a handler for every op of wire.Ops, each built
// from the op's declaration (unary decodes the op's arguments and encodes its result).
func (r *Runner) handlers() map[string]handler {
	t := map[string]handler{}
	add := func(op wire.Spec, h handler) { t[op.Name] = h }
	add(wire.Ping.Spec, unary(wire.Ping, func(context.Context, wire.None) (bool, error) { return true, nil }))
	add(wire.Status.Spec, unary(wire.Status, func(ctx context.Context, _ wire.None) (nodeapi.Status, error) { return r.vms.Status(ctx) }))
	add(wire.Stats.Spec, unary(wire.Stats, func(ctx context.Context, _ wire.None) ([]nodeapi.InstanceStats, error) {
		// The server gives up on its own deadline by closing the stream, which this call does
		// not see; bound the engine's work here too, so a stuck engine piles nothing up.
		ctx, cancel := context.WithTimeout(ctx, statsTimeout)
		defer cancel()
		return r.vms.Stats(ctx)
	}))
	add(wire.StartPrepare.Spec, unary(wire.StartPrepare, func(_ context.Context, a wire.InstanceArgs) (nodeapi.PrepareState, error) {
		return r.vms.StartPrepare(a.ImageKey)
	}))
	add(wire.Prepare.Spec, unary(wire.Prepare, func(ctx context.Context, a wire.InstanceArgs) (nodeapi.Image, error) {
		return r.vms.Prepare(ctx, a.ImageKey)
	}))
	add(wire.SetPolicy.Spec, unary(wire.SetPolicy, func(ctx context.Context, a wire.PolicyArgs) (nodeapi.NodeSettings, error) {
		return r.vms.SetPolicy(ctx, a.Isolation, a.MaxInstances)
	}))
	add(wire.SetIdlePolicy.Spec, unary(wire.SetIdlePolicy, func(ctx context.Context, a wire.PolicyArgs) (nodeapi.NodeSettings, error) {
		return r.vms.SetIdlePolicy(ctx, a.RequestID, a.Minutes, a.PauseMinutes)
	}))
	add(wire.SetEgress.Spec, unary(wire.SetEgress, r.SetEgress))
	add(wire.SetImageSources.Spec, unary(wire.SetImageSources, func(ctx context.Context, u nodeapi.ImageSourcesUpdate) (nodeapi.ImageSources, error) {
		return r.vms.SetImageSources(ctx, u)
	}))

	add(wire.Agent.Spec, agentOp(r, wire.Agent, func(ctx context.Context, a wire.AgentArgs) (nodeapi.AgentView, error) {
		return r.vms.Agent(ctx, a.Agent.AccountID, a.Agent.ID)
	}))
	add(wire.Act.Spec, agentOp(r, wire.Act, func(ctx context.Context, a wire.AgentArgs) (nodeapi.AgentView, error) {
		return r.vms.Act(ctx, a.Agent.AccountID, a.Agent.ID, a.Action)
	}))
	add(wire.Pause.Spec, agentOp(r, wire.Pause, func(ctx context.Context, a wire.AgentArgs) (nodeapi.AgentView, error) {
		return r.vms.Pause(ctx, a.Agent.AccountID, a.Agent.ID)
	}))
	add(wire.Resume.Spec, agentOp(r, wire.Resume, func(ctx context.Context, a wire.AgentArgs) (nodeapi.AgentView, error) {
		return r.vms.Resume(ctx, a.Agent.AccountID, a.Agent.ID)
	}))
	add(wire.SetImage.Spec, agentOp(r, wire.SetImage, func(ctx context.Context, a wire.AgentArgs) (nodeapi.AgentView, error) {
		return r.vms.SetImage(ctx, a.Agent.AccountID, a.Agent.ID, a.ImageKey)
	}))
	add(wire.ChooseDesktop.Spec, agentOp(r, wire.ChooseDesktop, func(ctx context.Context, a wire.AgentArgs) (nodeapi.AgentView, error) {
		return r.vms.ChooseDesktop(ctx, a.Agent.AccountID, a.Agent.ID, a.DesktopID)
	}))
	add(wire.VMReady.Spec, agentOp(r, wire.VMReady, func(ctx context.Context, a wire.AgentArgs) (wire.ReadyResult, error) {
		ok, why := r.vms.VMReady(ctx, a.Agent.AccountID, a.Agent.ID)
		return wire.ReadyResult{OK: ok, Why: why}, nil
	}))
	add(wire.AgentData.Spec, agentOp(r, wire.AgentData, func(ctx context.Context, a wire.AgentArgs) (nodeapi.AgentData, error) {
		return r.vms.AgentData(ctx, a.Agent.AccountID, a.Agent.ID, a.Measure)
	}))
	add(wire.ForgetAgent.Spec, agentOp(r, wire.ForgetAgent, func(ctx context.Context, a wire.AgentArgs) (bool, error) {
		return true, r.vms.ForgetAgent(ctx, a.Agent.AccountID, a.Agent.ID, a.RemoveDesktop, a.DeleteData)
	}))

	add(wire.StopInstance.Spec, unary(wire.StopInstance, func(ctx context.Context, a wire.InstanceArgs) (bool, error) {
		return true, r.vms.StopInstance(ctx, a.ID, a.Reason)
	}))
	add(wire.DeleteData.Spec, unary(wire.DeleteData, func(ctx context.Context, a wire.InstanceArgs) (bool, error) {
		return true, r.vms.DeleteData(ctx, a.ID)
	}))
	add(wire.AdminAct.Spec, unary(wire.AdminAct, func(ctx context.Context, a wire.InstanceArgs) (nodeapi.InstanceView, error) {
		return r.vms.AdminAct(ctx, a.ID, a.Action, a.Force)
	}))
	add(wire.MarkBusy.Spec, unary(wire.MarkBusy, func(_ context.Context, a wire.InstanceArgs) (bool, error) {
		r.mu.Lock()
		r.busy[a.ID] = true
		r.mu.Unlock()
		r.vms.MarkBusy(a.ID, a.Who)
		return true, nil
	}))
	add(wire.MarkIdle.Spec, unary(wire.MarkIdle, func(_ context.Context, a wire.InstanceArgs) (bool, error) {
		r.mu.Lock()
		delete(r.busy, a.ID)
		r.mu.Unlock()
		r.vms.MarkIdle(a.ID)
		return true, nil
	}))

	add(wire.Guest.Spec, relayed(wire.Guest, func(ctx context.Context, a wire.InstanceArgs) (net.Conn, error) {
		return r.vms.DriverStream(ctx, a.ID)
	}))
	add(wire.Tunnel.Spec, relayed(wire.Tunnel, func(ctx context.Context, a wire.InstanceArgs) (net.Conn, error) {
		return r.vms.Tunnel(ctx, a.ID, a.Address)
	}))
	add(wire.Watch.Spec, func(ctx context.Context, st net.Conn, _ wire.Request) { r.serveWatch(ctx, st) })
	add(wire.SelfUpdate.Spec, r.serveUpdate)
	add(wire.HostShell.Spec, r.hostOp(r.hostShell))
	add(wire.HostReadFile.Spec, r.hostOp(r.hostReadFile))
	add(wire.HostWriteFile.Spec, r.hostOp(r.hostWriteFile))
	add(wire.HostHome.Spec, r.hostOp(r.hostHome))
	add(wire.HostInfoOp.Spec, r.hostOp(r.hostInfo))
	r.recordingHandlers(add)
	return t
}

// unary is the handler of a request/response op: decode A, call fn, answer R or its error.
func unary[A, R any](op wire.Op[A, R], fn func(context.Context, A) (R, error)) handler {
	return func(ctx context.Context, st net.Conn, req wire.Request) {
		a, err := op.Args(req)
		var res R
		if err == nil {
			res, err = fn(ctx, a)
		}
		wire.WriteFrame(st, op.Response(res, err))
	}
}

// agentOp is a unary agent-scoped op: the runner keeps the server's copy of the agent first.
func agentOp[R any](r *Runner, op wire.Op[wire.AgentArgs, R], fn func(context.Context, wire.AgentArgs) (R, error)) handler {
	return unary(op, func(ctx context.Context, a wire.AgentArgs) (R, error) {
		if err := r.keepAgent(a.Agent); err != nil {
			var zero R
			return zero, err
		}
		return fn(ctx, a)
	})
}

// relayed is the handler of a relay op: dial the desktop's side, answer true, then pipe bytes
// both ways until either side closes.
func relayed(op wire.Op[wire.InstanceArgs, bool], dial func(context.Context, wire.InstanceArgs) (net.Conn, error)) handler {
	return func(ctx context.Context, st net.Conn, req wire.Request) {
		a, err := op.Args(req)
		var conn net.Conn
		if err == nil {
			conn, err = dial(ctx, a)
		}
		if err != nil {
			wire.WriteFrame(st, op.Response(false, err))
			return
		}
		defer conn.Close()
		if err := wire.WriteFrame(st, op.Response(true, nil)); err != nil {
			return
		}
		pipe(st, conn)
	}
}

// serveUpdate answers wire.OpUpdate: download, verify and install the version, answer, and then
// end the session so that Run returns ErrRestart. A failure is answered and changes nothing.
func (r *Runner) serveUpdate(ctx context.Context, st net.Conn, req wire.Request) {
	u, err := wire.SelfUpdate.Args(req)
	if err != nil {
		wire.WriteFrame(st, wire.Response{Error: wire.ErrorOf(err)})
		return
	}
	if r.managed {
		wire.WriteFrame(st, wire.Response{Error: wire.ErrorOf(fault.Invalid("the managed local runner is the server's own process: update the server"))})
		return
	}
	if err := r.selfUpdate(ctx, u); err != nil {
		r.log.Error("update failed; the old version keeps running", "to", u.Version, "err", err)
		wire.WriteFrame(st, wire.Response{Error: wire.ErrorOf(err)})
		return
	}
	wire.WriteFrame(st, wire.SelfUpdate.Response(wire.UpdateResult{From: r.cfg.Version, Version: u.Version}, nil))
	st.Close()
	r.askRestart()
}

// pipe copies both ways until one direction ends, then closes both ends.
func pipe(a, b net.Conn) {
	var wg sync.WaitGroup
	wg.Add(2)
	cp := func(dst, src net.Conn) {
		defer wg.Done()
		io.Copy(dst, src)
		dst.Close()
		src.Close()
	}
	go cp(a, b)
	go cp(b, a)
	wg.Wait()
}

// keepAgent stores the server's copy of an agent (never its model settings or key). The
// managed local runner shares the server's store, which has the agent already.
func (r *Runner) keepAgent(a nodeapi.Agent) error {
	if a.ID == "" || a.AccountID == "" {
		return fault.Invalid("the call names no agent")
	}
	if r.managed {
		return nil
	}
	if err := r.st.PutAgent(vm.StoredAgent(a)); err != nil {
		return fmt.Errorf("keep agent %s: %w", a.ID, err)
	}
	return nil
}
