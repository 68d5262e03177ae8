package binding

import (
	"context"
	"errors"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"cubicle/backend/agent"
	"cubicle/backend/control"
	"cubicle/backend/fault"
	"cubicle/backend/guest"
	"cubicle/backend/guest/guesttest"
)

type vms struct {
	d      Desktop
	err    error
	called atomic.Int32
}

func (v *vms) Ensure(ctx context.Context, accountID, agentID string) (Desktop, error) {
	v.called.Add(1)
	return v.d, v.err
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
	v := &vms{d: Desktop{InstanceID: "desk1", Socket: drv.Socket}}
	ctl := newControl(t)
	var dials atomic.Int32
	b, err := New(Config{VMs: v, Tasks: ctl, Names: func(string) string { return "Ada" },
		Dial: func(ctx context.Context, s string) (*guest.Client, error) {
			dials.Add(1)
			return guest.WaitReady(ctx, s)
		}})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	ctx := context.Background()
	turn := agent.TurnInfo{SessionID: "s1", UserID: "u1", AgentID: "a1", TurnID: "t1"}

	// Concurrent acquires of one thread: one connection, one task.
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
	for _, c := range clients[1:] {
		if c != clients[0] {
			t.Fatal("concurrent acquires returned different desktops")
		}
	}
	if dials.Load() != 1 {
		t.Fatalf("dialled %d times", dials.Load())
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
	// The thread reuses its connection across turns.
	if _, err := b.Acquire(ctx, turn2); err != nil || dials.Load() != 1 {
		t.Fatalf("second turn: %v, dials %d", err, dials.Load())
	}
	b.TurnEnded(turn2)
	// A dead connection (desktop restarted) is replaced.
	c := clients[0].(*guest.Client)
	c.Close()
	deadline := time.Now().Add(5 * time.Second)
	for !dead(c) && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	turn3 := turn
	turn3.TurnID = "t3"
	if _, err := b.Acquire(ctx, turn3); err != nil || dials.Load() != 2 {
		t.Fatalf("after the connection died: %v, dials %d", err, dials.Load())
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
}

func TestMain(m *testing.M) {
	code := m.Run()
	guesttest.Cleanup()
	os.Exit(code)
}
