package control_test

import (
	"context"
	"errors"
	"runtime"
	"strings"
	"testing"
	"time"

	"cubicle/backend/control"
	"cubicle/backend/control/controltest"
	"cubicle/backend/fault"
)

func TestCloseStopsTimers(t *testing.T) {
	e := newEnv(t)
	for _, d := range []string{"d1", "d2", "d3"} {
		if _, err := e.m.TakeOver(d, alice); err != nil {
			t.Fatal(err)
		}
	}
	l, err := e.m.TakeOver("d1", alice) // replaces d1's lease: its timer must go too
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.m.Renew("d1", l.Token); err != nil {
		t.Fatal(err)
	}
	if n := e.clock.Pending(); n != 3 {
		t.Fatalf("%d timers pending with 3 leases", n)
	}
	if err := e.m.HandBack("d2", strings.Repeat("0", 32)); err == nil {
		t.Fatal("hand back with a wrong token succeeded")
	}
	if n := e.clock.Pending(); n != 3 {
		t.Fatalf("%d timers pending after a refused hand back", n)
	}
	if err := e.m.Close(); err != nil {
		t.Fatal(err)
	}
	if n := e.clock.Pending(); n != 0 {
		t.Fatalf("%d timers pending after Close", n)
	}
	if err := e.m.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
}

func TestStartTwice(t *testing.T) {
	e := newEnv(t)
	if err := e.m.Start(t.Context()); !errors.Is(err, fault.ErrConflict) {
		t.Fatalf("second Start: %v", err)
	}
}

// TestCloseWaitsForOnChange: Close returns only after the change being delivered and those
// queued behind it were delivered.
func TestCloseWaitsForOnChange(t *testing.T) {
	entered, release := make(chan struct{}), make(chan struct{})
	var got []control.ChangeKind
	m := control.New(control.Config{Clock: controltest.NewClock(t0), Logger: testLogger(t),
		OnChange: func(c control.Change) {
			if len(got) == 0 {
				close(entered)
				<-release
			}
			got = append(got, c.Kind)
		}})
	if err := m.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	l, err := m.TakeOver("d1", alice)
	if err != nil {
		t.Fatal(err)
	}
	<-entered
	if err := m.HandBack("d1", l.Token); err != nil { // queued behind the blocked call
		t.Fatal(err)
	}
	closed := make(chan struct{})
	go func() { m.Close(); close(closed) }()
	select {
	case <-closed:
		t.Fatal("Close returned while OnChange was running")
	case <-time.After(50 * time.Millisecond):
	}
	close(release)
	select {
	case <-closed:
	case <-time.After(5 * time.Second):
		t.Fatal("Close did not return")
	}
	if len(got) != 2 || got[0] != control.ChangeTaken || got[1] != control.ChangeHandedBack {
		t.Fatalf("delivered %v", got)
	}
}

// TestCloseDeliversQueued: changes made before Close are delivered even when Close races the
// loop's wake-up.
func TestCloseDeliversQueued(t *testing.T) {
	for range 100 {
		rec := newRecorder()
		m := control.New(control.Config{Clock: controltest.NewClock(t0), OnChange: rec.record})
		if err := m.Start(t.Context()); err != nil {
			t.Fatal(err)
		}
		if _, err := m.TakeOver("d1", alice); err != nil {
			t.Fatal(err)
		}
		m.Close()
		if got := rec.snapshot(); len(got) != 1 {
			t.Fatalf("delivered %v, want the take-over", kinds(got))
		}
	}
}

// TestExpiryIsNotAHandBack: a hand back that arrives after the lease's expiry, before the
// loop announced it, still ends it as expired — the VM manager stops the desktop on expiry
// but only arms the idle timer on a hand back (SPEC §1.5).
func TestExpiryIsNotAHandBack(t *testing.T) {
	for range 50 {
		e := newEnv(t)
		l, err := e.m.TakeOver("d1", alice)
		if err != nil {
			t.Fatal(err)
		}
		e.clock.Advance(ttl)
		if err := e.m.HandBack("d1", l.Token); err != nil {
			t.Fatal(err)
		}
		e.m.Close()
		if got := e.rec.snapshot(); len(got) != 2 || got[1].Kind != control.ChangeExpired {
			t.Fatalf("changes = %v", kinds(got))
		}
	}
}

// TestRealClockNoLeak runs the Manager on the real clock: leases expire by real timers and
// are announced by the loop, and after Close no goroutine of the Manager is left.
func TestRealClockNoLeak(t *testing.T) {
	before := runtime.NumGoroutine()
	rec := newRecorder()
	m := control.New(control.Config{LeaseTTL: 30 * time.Millisecond, Logger: testLogger(t), OnChange: rec.record})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if err := m.Start(ctx); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	for _, d := range []string{"d1", "d2"} {
		if _, err := m.TakeOver(d, alice); err != nil {
			t.Fatal(err)
		}
	}
	cs := rec.wait(t, 4)
	waited := time.Since(start)
	for _, c := range cs[2:] {
		if c.Kind != control.ChangeExpired {
			t.Fatalf("changes = %v", kinds(cs))
		}
	}
	if waited < 30*time.Millisecond {
		t.Fatalf("expired after %v, before the TTL", waited)
	}
	t.Logf("expiry announced %v after the grant (TTL 30ms)", waited)
	// Leave live leases (and their real timers) behind for Close to stop.
	for _, d := range []string{"d1", "d2", "d3"} {
		if _, err := m.TakeOver(d, bob); err != nil {
			t.Fatal(err)
		}
	}
	if err := m.Close(); err != nil {
		t.Fatal(err)
	}
	checkNoLeak(t, before)
	if got := rec.snapshot(); len(got) != 7 {
		t.Fatalf("changes after Close = %v; a stopped timer fired?", kinds(got))
	}
	time.Sleep(50 * time.Millisecond) // past the TTL of the stopped leases
	if got := rec.snapshot(); len(got) != 7 {
		t.Fatalf("changes after Close = %v", kinds(got))
	}
}

// TestCancelStartContext: cancelling Start's context stops the loop too; Close still waits.
func TestCancelStartContext(t *testing.T) {
	before := runtime.NumGoroutine()
	m := control.New(control.Config{Clock: controltest.NewClock(t0), Logger: testLogger(t)})
	ctx, cancel := context.WithCancel(context.Background())
	if err := m.Start(ctx); err != nil {
		t.Fatal(err)
	}
	cancel()
	checkNoLeak(t, before)
	if err := m.Close(); err != nil {
		t.Fatal(err)
	}
}

// checkNoLeak waits up to 2 s for the goroutine count to fall back to before, then fails with
// the goroutines still running.
func checkNoLeak(t *testing.T, before int) {
	t.Helper()
	deadline := time.Now().Add(2 * time.Second)
	for runtime.NumGoroutine() > before {
		if time.Now().After(deadline) {
			buf := make([]byte, 1<<20)
			t.Fatalf("%d goroutines, %d before:\n%s", runtime.NumGoroutine(), before, buf[:runtime.Stack(buf, true)])
		}
		time.Sleep(5 * time.Millisecond)
	}
}
