package control_test

import (
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"cubicle/backend/control"
	"cubicle/backend/control/controltest"
	"cubicle/backend/fault"
	"cubicle/internal/testenv"
)

var (
	t0    = time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	ttl   = 30 * time.Second
	alice = control.Person{AccountID: "acct-alice", Username: "Alice", AgentID: "agent-1"}
	bob   = control.Person{AccountID: "acct-bob", Username: "Bob", AgentID: "agent-1"}
	carol = control.Person{AccountID: "acct-carol", Username: "Carol", AgentID: "agent-2"}
	// researcher is an agent task.
	researcher = control.Agent{AgentID: "agent-1", AgentName: "Researcher", TaskID: "task-1"}
)

// recorder collects OnChange calls.
type recorder struct {
	mu      sync.Mutex
	changes []control.Change
	signal  chan struct{}
}

func newRecorder() *recorder { return &recorder{signal: make(chan struct{}, 1)} }

func (r *recorder) record(c control.Change) {
	r.mu.Lock()
	r.changes = append(r.changes, c)
	r.mu.Unlock()
	select {
	case r.signal <- struct{}{}:
	default:
	}
}

func (r *recorder) snapshot() []control.Change {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]control.Change(nil), r.changes...)
}

// wait returns the changes once there are at least n, failing after 5 s.
func (r *recorder) wait(t testing.TB, n int) []control.Change {
	t.Helper()
	deadline := time.After(5 * time.Second)
	for {
		if cs := r.snapshot(); len(cs) >= n {
			return cs
		}
		select {
		case <-r.signal:
		case <-deadline:
			t.Fatalf("waited for %d changes, have %d: %v", n, len(r.snapshot()), kinds(r.snapshot()))
		}
	}
}

func kinds(cs []control.Change) []string {
	var out []string
	for _, c := range cs {
		out = append(out, fmt.Sprintf("%s:%s:v%d", c.DesktopID, c.Kind, c.Version))
	}
	return out
}

// env is a started Manager on a fake clock.
type env struct {
	t      testing.TB
	clock  *controltest.Clock
	m      *control.Manager
	rec    *recorder
	leases map[string]control.Lease
	owners map[string]control.Person
}

func newEnv(t testing.TB) *env {
	t.Helper()
	e := &env{t: t, clock: controltest.NewClock(t0), rec: newRecorder(),
		leases: map[string]control.Lease{}, owners: map[string]control.Person{}}
	e.m = control.New(control.Config{Clock: e.clock, LeaseTTL: ttl, Logger: testLogger(t),
		OnChange: e.rec.record})
	if err := e.m.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.m.Close() })
	return e
}

// testLogger writes to the test's output.
func testLogger(t testing.TB) *slog.Logger {
	return testenv.Logger(t, slog.LevelDebug)
}

// auth builds the InputAuth the holder of lease label would send.
func (e *env) auth(label string) control.InputAuth {
	l, p := e.leases[label], e.owners[label]
	return control.InputAuth{AccountID: p.AccountID, AgentID: p.AgentID, Token: l.Token, Version: l.Version, FrameID: 100}
}

// checkRefusal fails t unless err matches class (nil: success), reason and message part.
func checkRefusal(t testing.TB, err, class error, reason control.Reason, msg string) {
	t.Helper()
	if class == nil {
		if err != nil {
			t.Fatalf("err = %v (reason %q), want success", err, control.ReasonOf(err))
		}
		return
	}
	if err == nil {
		t.Fatalf("succeeded, want %v", class)
	}
	if !errors.Is(err, class) {
		t.Fatalf("err = %v (class %v), want class %v", err, fault.Class(err), class)
	}
	if reason != "" && control.ReasonOf(err) != reason {
		t.Fatalf("err = %v, reason %q, want %q", err, control.ReasonOf(err), reason)
	}
	if !strings.Contains(err.Error(), msg) {
		t.Fatalf("err = %q, want it to contain %q", err, msg)
	}
}
