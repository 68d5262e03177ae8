package binding

import (
	"context"
	"errors"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"cubicle/backend/agent"
	"cubicle/backend/agent/tools"
	"cubicle/backend/control"
	"cubicle/backend/fault"
	"cubicle/backend/guest/guesttest"
)

type vms struct {
	mu0    sync.Mutex // guards d
	d      Desktop
	err    error
	called atomic.Int32

	task     Desktop // the task desktop CreateTask returns
	taskErr  error
	created  atomic.Int32
	removed  []string // task ids; guarded by mu
	mu       sync.Mutex
	lastSpec TaskSpec // guarded by mu
}

func (v *vms) Ensure(ctx context.Context, accountID, agentID string) (Desktop, error) {
	v.called.Add(1)
	v.mu0.Lock()
	defer v.mu0.Unlock()
	return v.d, v.err
}

func (v *vms) setDesktop(d Desktop) { v.mu0.Lock(); v.d = d; v.mu0.Unlock() }

func (v *vms) CreateTask(ctx context.Context, spec TaskSpec) (Desktop, error) {
	v.created.Add(1)
	v.mu.Lock()
	v.lastSpec = spec
	v.mu.Unlock()
	return v.task, v.taskErr
}

func (v *vms) RemoveTask(ctx context.Context, taskID string) error {
	v.mu.Lock()
	v.removed = append(v.removed, taskID)
	v.mu.Unlock()
	return nil
}

func newControl(t *testing.T) *control.Manager {
	m := control.New(control.Config{})
	ctx, cancel := context.WithCancel(context.Background())
	if err := m.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cancel(); m.Close() })
	return m
}

func TestBinding(t *testing.T) {
	drv := guesttest.Start(t, ":72", "")
	link := drv.Dial(t) // the desktop's one link, as the VM manager keeps it
	v := &vms{d: Desktop{InstanceID: "desk1", Computer: link}}
	ctl := newControl(t)
	b, err := New(Config{VMs: v, Tasks: ctl, Names: func(string) string { return "Ada" }})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	ctx := context.Background()
	turn := agent.TurnInfo{SessionID: "s1", UserID: "u1", AgentID: "a1", TurnID: "t1"}

	// Concurrent acquires of one thread: the desktop's link, one task.
	var wg sync.WaitGroup
	clients := make([]any, 8)
	for i := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c, err := b.Acquire(ctx, turn)
			if err != nil {
				t.Error(err)
			}
			clients[i] = c
		}()
	}
	wg.Wait()
	for _, c := range clients {
		if c != tools.Computer(link) {
			t.Fatal("acquires did not return the desktop's link")
		}
	}
	// During the turn the desktop is the agent's: a person cannot take over.
	if _, err := ctl.TakeOver("desk1", control.Person{AccountID: "u1", Username: "alice", AgentID: "a1"}); !errors.Is(err, fault.ErrConflict) {
		t.Fatalf("take over during a task: %v", err)
	}
	if who, busy := ctl.Busy("desk1"); !busy || who == "" {
		t.Fatalf("desk not busy during the turn: %q", who)
	}
	b.TurnEnded(turn)
	if _, busy := ctl.Busy("desk1"); busy {
		t.Fatal("desk still busy after the turn")
	}
	// A person takes over; the next turn's acquire is refused with a clear message.
	lease, err := ctl.TakeOver("desk1", control.Person{AccountID: "u1", Username: "alice", AgentID: "a1"})
	if err != nil {
		t.Fatal(err)
	}
	turn2 := turn
	turn2.TurnID = "t2"
	if _, err := b.Acquire(ctx, turn2); !errors.Is(err, fault.ErrConflict) {
		t.Fatalf("acquire while a person controls: %v", err)
	}
	ctl.HandBack("desk1", lease.Token)
	// The thread keeps its desktop across turns.
	if c, err := b.Acquire(ctx, turn2); err != nil || c != tools.Computer(link) {
		t.Fatalf("second turn: %v", err)
	}
	b.TurnEnded(turn2)
	// The desktop was repaired and has a new link: the next acquire uses it; the binder
	// never closes a link (the manager owns them).
	link2 := drv.Dial(t)
	v.setDesktop(Desktop{InstanceID: "desk1", Computer: link2})
	turn3 := turn
	turn3.TurnID = "t3"
	if c, err := b.Acquire(ctx, turn3); err != nil || c != tools.Computer(link2) {
		t.Fatalf("after the desktop's link changed: %v", err)
	}
	b.TurnEnded(turn3)
	// Errors say what is wrong.
	if _, err := b.Acquire(ctx, agent.TurnInfo{UserID: "u1", AgentID: "a1"}); !errors.Is(err, fault.ErrInvalid) {
		t.Fatalf("missing thread: %v", err)
	}
	v.err = fault.Conflict("2 desktops already run (the maximum)")
	if _, err := b.Acquire(ctx, agent.TurnInfo{SessionID: "s2", UserID: "u1", AgentID: "a1", TurnID: "x"}); !errors.Is(err, fault.ErrConflict) {
		t.Fatalf("capacity: %v", err)
	}
	b.Close()
	if _, err := link.Health(ctx); err != nil {
		t.Fatalf("the binder closed a link it does not own: %v", err)
	}
}

// TestTaskBinding: a helper's task gets its own desktop (not the thread's), concurrent
// acquires of the task are idempotent, a person holding control refuses it, and the end of
// the task releases and removes the desktop.
func TestTaskBinding(t *testing.T) {
	own := guesttest.Start(t, ":97", "")
	task := guesttest.Start(t, ":98", "")
	taskLink := task.Dial(t)
	v := &vms{d: Desktop{InstanceID: "desk1", Computer: own.Dial(t)}, task: Desktop{InstanceID: "task-1", Computer: taskLink}}
	ctl := newControl(t)
	b, err := New(Config{VMs: v, Tasks: ctl, Names: func(string) string { return "Ada" }})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	ctx := context.Background()
	main := agent.TurnInfo{SessionID: "s1", UserID: "u1", AgentID: "a1", TurnID: "t1"}
	if _, err := b.Acquire(ctx, main); err != nil {
		t.Fatal(err)
	}
	helper := main
	helper.TurnID, helper.Helper, helper.TaskID = "h1", "researcher", "h1"

	var wg sync.WaitGroup
	clients := make([]any, 6)
	for i := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c, err := b.Acquire(ctx, helper)
			if err != nil {
				t.Error(err)
			}
			clients[i] = c
		}()
	}
	wg.Wait()
	for _, c := range clients {
		if c != tools.Computer(taskLink) {
			t.Fatal("acquires of the task did not return the task desktop's link")
		}
	}
	if n := v.created.Load(); n != int32(len(clients)) {
		t.Fatalf("CreateTask called %d times for %d acquires (the VM manager makes it idempotent)", n, len(clients))
	}
	v.mu.Lock()
	spec := v.lastSpec
	v.mu.Unlock()
	if spec != (TaskSpec{AccountID: "u1", AgentID: "a1", SessionID: "s1", TaskID: "h1", Helper: "researcher"}) {
		t.Fatalf("task spec %+v", spec)
	}
	// The task desktop is a different desktop from the thread's, held by the helper's task.
	if who, busy := ctl.Busy("task-1"); !busy || !strings.Contains(who, "helper researcher") {
		t.Fatalf("task desktop holder %q %v", who, busy)
	}
	if h, _ := ctl.Holder("desk1"); h.Agent.TaskID != "t1" {
		t.Fatalf("the thread's desktop changed hands: %+v", h)
	}
	// The task ends: released and removed; later acquires of it are refused.
	b.TaskEnded(helper)
	if _, busy := ctl.Busy("task-1"); busy {
		t.Fatal("task desktop still held after the task ended")
	}
	v.mu.Lock()
	removed := append([]string(nil), v.removed...)
	v.mu.Unlock()
	if len(removed) != 1 || removed[0] != "h1" {
		t.Fatalf("removed %v", removed)
	}
	// A task that never used a computer has nothing to remove.
	b.TaskEnded(agent.TurnInfo{SessionID: "s1", UserID: "u1", AgentID: "a1", TaskID: "never"})
	if len(v.removed) != 1 {
		t.Fatalf("removed %v", v.removed)
	}
	// A person holding the task desktop's control refuses the binding.
	helper2 := helper
	helper2.TurnID, helper2.TaskID = "h2", "h2"
	lease, err := ctl.TakeOver("task-1", control.Person{AccountID: "u1", Username: "alice", AgentID: "a1"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.Acquire(ctx, helper2); !errors.Is(err, fault.ErrConflict) || !strings.Contains(err.Error(), "person is controlling") {
		t.Fatalf("acquire while a person controls: %v", err)
	}
	ctl.HandBack("task-1", lease.Token)
	// Capacity refusals reach the caller with their class and message.
	v.taskErr = fault.Conflict("no desktop free for the helper's task: 2 of 2 running")
	helper3 := helper
	helper3.TurnID, helper3.TaskID = "h3", "h3"
	if _, err := b.Acquire(ctx, helper3); !errors.Is(err, fault.ErrConflict) || !strings.Contains(err.Error(), "no desktop free") {
		t.Fatalf("capacity: %v", err)
	}
	b.TaskEnded(helper3)
	b.TurnEnded(main)
}

func TestMain(m *testing.M) {
	code := m.Run()
	guesttest.Cleanup()
	os.Exit(code)
}

func (v *vms) EnsureBrowser(ctx context.Context, accountID, agentID string) (Desktop, error) {
	return Desktop{}, fault.Unavailable("no browsers in this test")
}

// TestStoppedTurnFencesADesktopStillComingUp: a turn that stopped waiting for its desktop
// (the manager finishes the start on its own) and is then stopped by a person fences that
// desktop; a turn that ends normally does not.
func TestStoppedTurnFencesADesktopStillComingUp(t *testing.T) {
	ctl := newControl(t)
	v := &vms{d: Desktop{InstanceID: "desk-slow"}, err: context.Canceled}
	var fenced []string
	b, err := New(Config{VMs: v, Tasks: ctl, Fence: func(id, reason string) { fenced = append(fenced, id) }})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	ctx, cancel := context.WithCancel(context.Background())
	cancel() // the turn's context ended while the desktop came up
	turn := agent.TurnInfo{SessionID: "s1", UserID: "u1", AgentID: "a1", TurnID: "t1"}
	if _, err := b.Acquire(ctx, turn); err == nil {
		t.Fatal("Acquire succeeded")
	}
	turn.Stopped = true
	b.TurnEnded(turn)
	if len(fenced) != 1 || fenced[0] != "desk-slow" {
		t.Fatalf("fenced %v, want the desktop that was coming up", fenced)
	}
	// Once only; and not for a turn that ended without a stop.
	b.TurnEnded(turn)
	turn2 := agent.TurnInfo{SessionID: "s1", UserID: "u1", AgentID: "a1", TurnID: "t2"}
	b.Acquire(ctx, turn2)
	b.TurnEnded(turn2)
	if len(fenced) != 1 {
		t.Fatalf("fenced %v", fenced)
	}
}
