// Package binding ties chat threads to desktops (SPEC §2.3). A thread gets its agent's
// desktop — the shared one or the agent's own, as the isolation policy says — lazily on its
// first computer tool call (or eagerly at the start of a turn when configured), keeps it
// across turns, and holds it as an agent task for the duration of each turn, so that a person
// cannot take over mid-action and the idle timer stays off. The desktop is not released after
// a turn: idle stop and shutdown release it.
//
// A temporary task helper's turn (agent.TurnInfo.TaskID set) is bound differently: its first
// computer tool call creates a new task-isolated desktop for that task (never the agent's own
// or shared one), later calls of the task reuse it, and TaskEnded removes it.
package binding

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"sync"
	"time"

	"cubicle/backend/agent"
	"cubicle/backend/agent/tools"
	"cubicle/backend/control"
	"cubicle/backend/fault"
)

// Desktop is a running desktop (or an agent's browser) a thread can drive.
type Desktop struct {
	InstanceID string
	// Computer is the desktop's driver: its one shared link, owned by the VM manager (the
	// binder never closes it). A link that ends fails its calls at once; the next Acquire
	// gets the repaired desktop's new link.
	Computer tools.Computer
	// Tunnel opens a byte stream to a loopback address inside the desktop (through the
	// driver, over the desktop's transport); browsers reach their DevTools port with it.
	Tunnel Tunnel
}

// Tunnel opens a byte stream to address (host:port on the desktop's loopback interface).
type Tunnel func(ctx context.Context, address string) (net.Conn, error)

// VMs makes sure an agent's desktop runs (the VM manager). Ensure starts a stopped one
// (capacity permitting), repairs one whose driver cannot be reached, and never changes which
// desktop an agent has. The manager finishes a start whose caller went away on its own; Ensure
// and EnsureBrowser then return ctx's error with Desktop.InstanceID naming the desktop that is
// still coming up, so that a turn a person stopped meanwhile can fence it.
type VMs interface {
	Ensure(ctx context.Context, accountID, agentID string) (Desktop, error)
	// CreateTask returns the running task-isolated desktop of spec.TaskID, creating it
	// (capacity permitting: a full node is fault.ErrConflict) when there is none.
	CreateTask(ctx context.Context, spec TaskSpec) (Desktop, error)
	// RemoveTask removes task taskID's desktop entirely; removing none succeeds.
	RemoveTask(ctx context.Context, taskID string) error
	// EnsureBrowser makes sure the agent's own browser (computer "Browser only") runs.
	EnsureBrowser(ctx context.Context, accountID, agentID string) (Desktop, error)
}

// TaskSpec names the task a task-isolated desktop is created for.
type TaskSpec struct {
	AccountID, AgentID, SessionID string
	TaskID                        string
	Helper                        string // the helper's name
}

// Tasks marks agent tasks on desktops (the control leases).
type Tasks interface {
	BeginTask(desktopID string, a control.Agent) error
	EndTask(desktopID, taskID string) error
}

// Config configures a Binder. VMs and Tasks are required.
type Config struct {
	VMs   VMs
	Tasks Tasks
	Names func(agentID string) string // agent names for messages
	// Connect attaches to a browser through a tunnel to its DevTools port (default:
	// ConnectBrowser).
	Connect func(ctx context.Context, tunnel Tunnel) (BrowserSession, error)
	// Fence stops a desktop or browser that a turn held when a person stopped the turn, so
	// late operations of the cancelled task are fenced off (SPEC §1.5); nil does nothing.
	Fence  func(instanceID, reason string)
	Logger *slog.Logger
}

// Binder implements tools.Desktops. It is safe for concurrent use; acquires of one thread are
// serialised and idempotent.
type Binder struct {
	cfg Config
	log *slog.Logger

	mu      sync.Mutex
	threads map[string]*thread // guarded by mu
	closed  bool               // guarded by mu
}

type thread struct {
	mu         sync.Mutex // serialises acquire and release of this thread
	agentID    string
	instanceID string
	task       string         // turn id holding the desktop as a task, "" when none
	ended      bool           // a helper's task ended and its desktop was removed
	browser    BrowserSession // browser threads: the connection to the agent's browser
	// abandoned is the desktop that turn abandonedBy stopped waiting for while it came up;
	// it is fenced when that turn ends stopped.
	abandoned   string
	abandonedBy string
}

// New returns a Binder.
func New(cfg Config) (*Binder, error) {
	if cfg.VMs == nil || cfg.Tasks == nil {
		return nil, errors.New("binding: Config.VMs and Config.Tasks are required")
	}
	if cfg.Names == nil {
		cfg.Names = func(id string) string { return id }
	}
	if cfg.Connect == nil {
		cfg.Connect = ConnectBrowser
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	return &Binder{cfg: cfg, log: cfg.Logger, threads: map[string]*thread{}}, nil
}

// key is the binding key of a turn: its chat thread, or for a task helper its task.
func key(t agent.TurnInfo) string {
	if t.TaskID != "" {
		return "task\x00" + t.TaskID
	}
	return t.UserID + "\x00" + t.SessionID
}

func (b *Binder) thread(t agent.TurnInfo) (*thread, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return nil, fault.Unavailable("the service is shutting down")
	}
	th := b.threads[key(t)]
	if th == nil {
		th = &thread{agentID: t.AgentID}
		b.threads[key(t)] = th
	}
	return th, nil
}

// Acquire implements tools.Desktops: the thread's desktop, started if needed, held as this
// turn's task.
func (b *Binder) Acquire(ctx context.Context, t agent.TurnInfo) (tools.Computer, error) {
	d, err := b.AcquireDesktop(ctx, t)
	if err != nil {
		return nil, err
	}
	return d.Computer, nil
}

// AcquireDesktop is Acquire that also gives the desktop's tunnels (for processes that serve
// inside it, such as stdio MCP servers). A helper's task desktop has none.
func (b *Binder) AcquireDesktop(ctx context.Context, t agent.TurnInfo) (Desktop, error) {
	if t.SessionID == "" || t.UserID == "" {
		return Desktop{}, fault.Invalid("a computer tool needs a chat thread (sessionId and userId)")
	}
	if t.AgentID == "" {
		return Desktop{}, fault.Invalid("this chat has no agent, so it has no computer; open the chat from an agent")
	}
	if t.TaskID != "" {
		c, err := b.acquireTask(ctx, t)
		return Desktop{Computer: c}, err
	}
	th, err := b.thread(t)
	if err != nil {
		return Desktop{}, err
	}
	th.mu.Lock()
	defer th.mu.Unlock()
	d, err := b.cfg.VMs.Ensure(ctx, t.UserID, t.AgentID)
	if err != nil {
		th.gaveUp(ctx, d.InstanceID, t)
		return Desktop{}, fmt.Errorf("the agent's desktop: %w", err)
	}
	if th.instanceID != d.InstanceID {
		if th.task != "" {
			b.cfg.Tasks.EndTask(th.instanceID, th.task)
			th.task = ""
		}
		th.instanceID = d.InstanceID
	}
	if th.task != t.TurnID {
		if th.task != "" {
			b.cfg.Tasks.EndTask(th.instanceID, th.task)
			th.task = ""
		}
		if err := b.cfg.Tasks.BeginTask(th.instanceID, control.Agent{AgentID: t.AgentID, AgentName: b.cfg.Names(t.AgentID), TaskID: t.TurnID}); err != nil {
			return Desktop{}, err
		}
		th.task = t.TurnID
	}
	return d, nil
}

// acquireTask binds a helper's task to its task-isolated desktop, creating it on the task's
// first computer tool call, and holds it as the task's agent task (refused while a person
// holds control of it).
func (b *Binder) acquireTask(ctx context.Context, t agent.TurnInfo) (tools.Computer, error) {
	th, err := b.thread(t)
	if err != nil {
		return nil, err
	}
	th.mu.Lock()
	defer th.mu.Unlock()
	if th.ended {
		return nil, fault.Conflict("the helper's task has ended and its task desktop was removed")
	}
	// CreateTask returns the task's running desktop (creating it on the first call).
	d, err := b.cfg.VMs.CreateTask(ctx, TaskSpec{AccountID: t.UserID, AgentID: t.AgentID, SessionID: t.SessionID,
		TaskID: t.TaskID, Helper: t.Helper})
	if err != nil {
		return nil, fmt.Errorf("the helper's task desktop: %w", err)
	}
	th.instanceID = d.InstanceID
	if th.task == "" {
		a := control.Agent{AgentID: t.AgentID, AgentName: b.cfg.Names(t.AgentID) + " (helper " + t.Helper + ")", TaskID: t.TaskID}
		if err := b.cfg.Tasks.BeginTask(th.instanceID, a); err != nil {
			return nil, err
		}
		th.task = t.TaskID
	}
	return d.Computer, nil
}

// TaskEnded ends a helper's task (t.TaskID): the task releases its desktop, which is removed
// with its scratch workspace — whether the task finished, failed, was stopped or timed out.
// A task that never used a computer has nothing to remove. It implements the runtime's
// agent.HelperConfig.Ended and is called after the task's last tool call returned.
func (b *Binder) TaskEnded(t agent.TurnInfo) {
	if t.TaskID == "" {
		return
	}
	b.mu.Lock()
	th := b.threads[key(t)]
	delete(b.threads, key(t))
	b.mu.Unlock()
	if th == nil {
		return
	}
	th.mu.Lock()
	defer th.mu.Unlock()
	th.ended = true
	if th.task != "" {
		if err := b.cfg.Tasks.EndTask(th.instanceID, th.task); err != nil {
			b.log.Warn("end helper task", "desktop", th.instanceID, "err", err)
		}
		th.task = ""
	}
	// Cleanup runs after a stop or a timeout too, so it has its own deadline.
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := b.cfg.VMs.RemoveTask(ctx, t.TaskID); err != nil {
		b.log.Error("remove the task desktop of a helper", "task", t.TaskID, "helper", t.Helper, "err", err)
	}
}

// TurnEnded releases the task the turn held on its desktop and on its browser; they stay
// bound to the thread (and become idle, so their idle timers start). When a person stopped the
// turn (t.Stopped) while it held one, that desktop or browser is stopped (Config.Fence): a
// cancel fences off the old task's late operations whatever the idle policy (SPEC §1.5).
func (b *Binder) TurnEnded(t agent.TurnInfo) {
	for _, k := range []string{key(t), browserKey(t)} {
		b.mu.Lock()
		th := b.threads[k]
		b.mu.Unlock()
		if th == nil {
			continue
		}
		th.mu.Lock()
		held := th.task != ""
		if held {
			if err := b.cfg.Tasks.EndTask(th.instanceID, th.task); err != nil {
				b.log.Warn("end agent task", "desktop", th.instanceID, "err", err)
			}
			th.task = ""
		}
		id := th.instanceID
		if held && t.Stopped && b.cfg.Fence != nil {
			// The connection of the old task goes with the instance.
			th.drop()
		}
		// A desktop this turn stopped waiting for while it came up is still started by the
		// manager: a stopped turn fences it too (the stop runs after the start).
		abandoned := ""
		if th.abandonedBy == t.TurnID {
			if t.Stopped && !held {
				abandoned = th.abandoned
			}
			th.abandoned, th.abandonedBy = "", ""
		}
		th.mu.Unlock()
		if held && t.Stopped && b.cfg.Fence != nil {
			b.log.Info("a person stopped a turn that held its desktop: stopping it", "desktop", id, "agent", t.AgentID)
			b.cfg.Fence(id, "the chat was stopped while its task held the desktop")
		}
		if abandoned != "" && b.cfg.Fence != nil {
			b.log.Info("a person stopped a turn while its desktop came up: stopping it", "desktop", abandoned, "agent", t.AgentID)
			b.cfg.Fence(abandoned, "the chat was stopped while its desktop was starting")
		}
	}
}

// gaveUp notes that turn t stopped waiting (ctx ended) for desktop id to come up. th.mu is
// held.
func (th *thread) gaveUp(ctx context.Context, id string, t agent.TurnInfo) {
	if ctx.Err() != nil && id != "" {
		th.abandoned, th.abandonedBy = id, t.TurnID
	}
}

// drop forgets the thread's browser connection (desktop links are the VM manager's). th.mu
// is held.
func (th *thread) drop() {
	if th.browser != nil {
		th.browser.Close()
		th.browser = nil
	}
}

// Forget drops every binding of agentID's threads (its computer changed): their next
// computer call binds afresh. Tasks they hold are ended.
func (b *Binder) Forget(agentID string) {
	b.mu.Lock()
	var drop []*thread
	for k, th := range b.threads {
		if th.agentID == agentID && !strings.HasPrefix(k, "task\x00") {
			drop = append(drop, th)
			delete(b.threads, k)
		}
	}
	b.mu.Unlock()
	for _, th := range drop {
		th.mu.Lock()
		if th.task != "" {
			b.cfg.Tasks.EndTask(th.instanceID, th.task)
			th.task = ""
		}
		th.drop()
		th.mu.Unlock()
	}
}

// Close drops every binding and ends the tasks they hold (the driver links are the VM
// manager's).
func (b *Binder) Close() error {
	b.mu.Lock()
	b.closed = true
	threads := b.threads
	b.threads = map[string]*thread{}
	b.mu.Unlock()
	for _, th := range threads {
		th.mu.Lock()
		if th.task != "" {
			b.cfg.Tasks.EndTask(th.instanceID, th.task)
		}
		th.drop()
		th.mu.Unlock()
	}
	return nil
}

var _ tools.Desktops = (*Binder)(nil)
