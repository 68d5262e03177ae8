package runner

import (
	"context"
	"encoding/json"
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

// serve answers one stream: a framed request, a framed response, and for the relay ops the
// raw bytes of the driver or tunnel until either side closes.
func (r *Runner) serve(ctx context.Context, st net.Conn) {
	defer st.Close()
	var req wire.Request
	if err := wire.ReadFrame(st, &req); err != nil {
		r.log.Debug("runner stream without a request", "err", err)
		return
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	switch req.Op {
	case wire.OpWatch:
		r.serveWatch(ctx, st)
		return
	case wire.OpHostShell, wire.OpHostReadFile, wire.OpHostWriteFile, wire.OpHostHome, wire.OpHostInfo:
		r.serveHost(ctx, st, req)
		return
	case wire.OpGuest, wire.OpTunnel:
		var a wire.InstanceArgs
		if err := json.Unmarshal(req.Args, &a); err != nil {
			wire.WriteFrame(st, wire.Response{Error: wire.ErrorOf(fault.Invalid("%s: %v", req.Op, err))})
			return
		}
		var conn net.Conn
		var err error
		if req.Op == wire.OpGuest {
			conn, err = r.vms.DriverStream(ctx, a.ID)
		} else {
			conn, err = r.vms.Tunnel(ctx, a.ID, a.Address)
		}
		if err != nil {
			wire.WriteFrame(st, wire.Response{Error: wire.ErrorOf(err)})
			return
		}
		defer conn.Close()
		if err := wire.WriteFrame(st, wire.Response{Result: json.RawMessage(`true`)}); err != nil {
			return
		}
		pipe(st, conn)
		return
	}
	if req.Op == wire.OpUpdate {
		r.serveUpdate(ctx, st, req)
		return
	}
	res, err := r.call(ctx, req)
	resp := wire.Response{Error: wire.ErrorOf(err)}
	if err == nil {
		b, merr := json.Marshal(res)
		if merr != nil {
			resp.Error = wire.ErrorOf(merr)
		} else {
			resp.Result = b
		}
	}
	wire.WriteFrame(st, resp)
}

// serveUpdate answers wire.OpUpdate: download, verify and install the version, answer, and then
// end the session so that Run returns ErrRestart. A failure is answered and changes nothing.
func (r *Runner) serveUpdate(ctx context.Context, st net.Conn, req wire.Request) {
	var u wire.Update
	if err := json.Unmarshal(req.Args, &u); err != nil {
		wire.WriteFrame(st, wire.Response{Error: wire.ErrorOf(fault.Invalid("update: %v", err))})
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
	raw, _ := json.Marshal(wire.UpdateResult{From: r.cfg.Version, Version: u.Version})
	wire.WriteFrame(st, wire.Response{Result: raw})
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

// call runs a request/response op.
func (r *Runner) call(ctx context.Context, req wire.Request) (any, error) {
	args := func(v any) error {
		if len(req.Args) == 0 {
			return nil
		}
		if err := json.Unmarshal(req.Args, v); err != nil {
			return fault.Invalid("%s: bad arguments: %v", req.Op, err)
		}
		return nil
	}
	switch req.Op {
	case wire.OpPing:
		return true, nil
	case wire.OpStatus:
		return r.vms.Status(ctx)
	case wire.OpStats:
		// The server gives up on its own deadline by closing the stream, which this call does
		// not see; bound the engine's work here too, so a stuck engine piles nothing up.
		sctx, cancel := context.WithTimeout(ctx, statsTimeout)
		defer cancel()
		return r.vms.Stats(sctx)
	case wire.OpStartPrepare, wire.OpPrepare:
		var a wire.InstanceArgs
		if err := args(&a); err != nil {
			return nil, err
		}
		if req.Op == wire.OpStartPrepare {
			return r.vms.StartPrepare(a.ImageKey)
		}
		return r.vms.Prepare(ctx, a.ImageKey)
	case wire.OpSetPolicy:
		var a wire.PolicyArgs
		if err := args(&a); err != nil {
			return nil, err
		}
		return r.vms.SetPolicy(ctx, a.Isolation, a.MaxInstances)
	case wire.OpSetIdlePolicy:
		var a wire.PolicyArgs
		if err := args(&a); err != nil {
			return nil, err
		}
		return r.vms.SetIdlePolicy(ctx, a.RequestID, a.Minutes)
	case wire.OpSetImageSources:
		var u vm.ImageSourcesUpdate
		if err := args(&u); err != nil {
			return nil, err
		}
		return r.vms.SetImageSources(ctx, u)
	case wire.OpStopInstance, wire.OpMarkBusy, wire.OpMarkIdle, wire.OpDeleteData, wire.OpAdminAct:
		var a wire.InstanceArgs
		if err := args(&a); err != nil {
			return nil, err
		}
		switch req.Op {
		case wire.OpAdminAct:
			return r.vms.AdminAct(ctx, a.ID, a.Action, a.Force)
		case wire.OpStopInstance:
			return true, r.vms.StopInstance(ctx, a.ID, a.Reason)
		case wire.OpDeleteData:
			return true, r.vms.DeleteData(ctx, a.ID)
		case wire.OpMarkBusy:
			r.mu.Lock()
			r.busy[a.ID] = true
			r.mu.Unlock()
			r.vms.MarkBusy(a.ID, a.Who)
		default:
			r.mu.Lock()
			delete(r.busy, a.ID)
			r.mu.Unlock()
			r.vms.MarkIdle(a.ID)
		}
		return true, nil
	case wire.OpAgent, wire.OpAct, wire.OpSetImage, wire.OpChooseDesktop, wire.OpVMReady, wire.OpAgentData, wire.OpForgetAgent:
		var a wire.AgentArgs
		if err := args(&a); err != nil {
			return nil, err
		}
		if err := r.keepAgent(a.Agent); err != nil {
			return nil, err
		}
		acc, id := a.Agent.AccountID, a.Agent.ID
		switch req.Op {
		case wire.OpAgent:
			return r.vms.Agent(ctx, acc, id)
		case wire.OpAct:
			return r.vms.Act(ctx, acc, id, a.Action)
		case wire.OpSetImage:
			return r.vms.SetImage(ctx, acc, id, a.ImageKey)
		case wire.OpChooseDesktop:
			return r.vms.ChooseDesktop(ctx, acc, id, a.DesktopID)
		case wire.OpAgentData:
			return r.vms.AgentData(ctx, acc, id, a.Measure)
		case wire.OpForgetAgent:
			return true, r.vms.ForgetAgent(ctx, acc, id, a.RemoveDesktop, a.DeleteData)
		default:
			ok, why := r.vms.VMReady(ctx, acc, id)
			return wire.ReadyResult{OK: ok, Why: why}, nil
		}
	}
	return nil, fault.Invalid("this runner does not know the operation %q: update it (cubicle runner %s)", req.Op, r.cfg.Version)
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
