package binding

import (
	"context"
	"fmt"
	"net"
	"strconv"

	"cubicle/backend/agent"
	"cubicle/backend/agent/tools"
	"cubicle/backend/browser"
	"cubicle/backend/control"
	"cubicle/backend/fault"
	"cubicle/backend/vm"
)

// A thread of an agent whose computer is "Browser only" is bound to the agent's own browser the
// same way as to a desktop: lazily on the first browser tool call (or eagerly), held as the
// turn's agent task so a person cannot take over mid-action and the idle timer stays off, kept
// across turns. Its connection is a DevTools session through the driver's tunnel.

// BrowserSession is a connection to an agent's browser (*browser.Session implements it).
type BrowserSession interface {
	tools.Browser
	Alive() bool
	Close() error
}

// ConnectBrowser attaches to a browser through tunnels to its DevTools port inside its
// container.
func ConnectBrowser(ctx context.Context, tunnel Tunnel) (BrowserSession, error) {
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(vm.DevToolsPort))
	return browser.Connect(ctx, func(ctx context.Context) (net.Conn, error) {
		return tunnel(ctx, addr)
	})
}

func browserKey(t agent.TurnInfo) string { return "browser\x00" + t.UserID + "\x00" + t.SessionID }

// Browser implements tools.Browsers: the thread's browser, started if needed, held as this
// turn's task.
func (b *Binder) Browser(ctx context.Context, t agent.TurnInfo) (tools.Browser, error) {
	if t.SessionID == "" || t.UserID == "" {
		return nil, fault.Invalid("a browser tool needs a chat thread (sessionId and userId)")
	}
	if t.AgentID == "" {
		return nil, fault.Invalid("this chat has no agent, so it has no browser; open the chat from an agent")
	}
	if t.TaskID != "" {
		return nil, fault.Forbidden("a task helper has no browser")
	}
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		return nil, fault.Unavailable("the service is shutting down")
	}
	th := b.threads[browserKey(t)]
	if th == nil {
		th = &thread{agentID: t.AgentID}
		b.threads[browserKey(t)] = th
	}
	b.mu.Unlock()
	th.mu.Lock()
	defer th.mu.Unlock()
	d, err := b.cfg.VMs.EnsureBrowser(ctx, t.UserID, t.AgentID)
	if err != nil {
		th.gaveUp(ctx, d.InstanceID, t)
		return nil, fmt.Errorf("the agent's browser: %w", err)
	}
	if th.instanceID != d.InstanceID || th.browser == nil || !th.browser.Alive() {
		if th.task != "" && th.instanceID != d.InstanceID {
			b.cfg.Tasks.EndTask(th.instanceID, th.task)
			th.task = ""
		}
		th.drop()
		s, err := b.cfg.Connect(ctx, d.Tunnel)
		if err != nil {
			return nil, fmt.Errorf("the agent's browser: %w", err)
		}
		th.instanceID, th.browser = d.InstanceID, s
	}
	if th.task != t.TurnID {
		if th.task != "" {
			b.cfg.Tasks.EndTask(th.instanceID, th.task)
			th.task = ""
		}
		if err := b.cfg.Tasks.BeginTask(th.instanceID, control.Agent{AgentID: t.AgentID, AgentName: b.cfg.Names(t.AgentID), TaskID: t.TurnID}); err != nil {
			return nil, err
		}
		th.task = t.TurnID
	}
	return th.browser, nil
}

var _ tools.Browsers = (*Binder)(nil)
