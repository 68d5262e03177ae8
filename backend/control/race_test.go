package control_test

import (
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"cubicle/backend/control"
	"cubicle/backend/fault"
)

// TestTakeOverRace: many people take over the same desktop at once; exactly one wins.
func TestTakeOverRace(t *testing.T) {
	e := newEnv(t)
	for round := range 50 {
		desktop := fmt.Sprintf("d%d", round)
		start := make(chan struct{})
		var wins atomic.Int32
		var wg sync.WaitGroup
		for i := range 8 {
			p := control.Person{AccountID: fmt.Sprintf("acct-%d", i), Username: fmt.Sprintf("P%d", i)}
			wg.Go(func() {
				<-start
				_, err := e.m.TakeOver(desktop, p)
				switch {
				case err == nil:
					wins.Add(1)
				case control.ReasonOf(err) != control.ReasonPersonControlling || !errors.Is(err, fault.ErrConflict):
					t.Errorf("loser got %v", err)
				}
			})
		}
		close(start)
		wg.Wait()
		if n := wins.Load(); n != 1 {
			t.Fatalf("round %d: %d winners", round, n)
		}
	}
}

// TestHandBackVsExpiry: hand back and the lease's expiry happen at the same instant; exactly
// one of them ends the lease, the version moves once, and the token is dead.
func TestHandBackVsExpiry(t *testing.T) {
	outcomes := map[control.ChangeKind]int{}
	for i := range 200 {
		e := newEnv(t)
		l, err := e.m.TakeOver("d1", alice)
		if err != nil {
			t.Fatal(err)
		}
		var handBackErr error
		race(i,
			func() { handBackErr = e.m.HandBack("d1", l.Token) },
			func() { e.clock.Advance(ttl) })
		if handBackErr != nil {
			t.Fatalf("HandBack: %v", handBackErr)
		}
		in := control.InputAuth{AccountID: alice.AccountID, AgentID: alice.AgentID, Token: l.Token, Version: l.Version, FrameID: 1}
		if r := control.ReasonOf(e.m.CheckInput("d1", in)); r != control.ReasonHandedBack && r != control.ReasonExpired {
			t.Fatalf("input after the end: reason %q", r)
		}
		e.m.Close()
		cs := e.rec.snapshot()
		if len(cs) != 2 || (cs[1].Kind != control.ChangeHandedBack && cs[1].Kind != control.ChangeExpired) || cs[1].Version != l.Version+1 {
			t.Fatalf("changes = %v", kinds(cs))
		}
		outcomes[cs[1].Kind]++
	}
	t.Logf("outcomes: %v", outcomes)
}

// TestRenewVsExpiry: a heartbeat races the last instant of the lease; either the renewal wins
// and the lease lives on, or the expiry wins and the renewal is refused.
func TestRenewVsExpiry(t *testing.T) {
	outcomes := map[string]int{}
	for i := range 200 {
		e := newEnv(t)
		l, err := e.m.TakeOver("d1", alice)
		if err != nil {
			t.Fatal(err)
		}
		e.clock.Advance(ttl - time.Second)
		var renewErr error
		race(i,
			func() { _, renewErr = e.m.Renew("d1", l.Token) },
			func() { e.clock.Advance(time.Second) })
		in := control.InputAuth{AccountID: alice.AccountID, AgentID: alice.AgentID, Token: l.Token, Version: l.Version, FrameID: 1}
		inputErr := e.m.CheckInput("d1", in)
		switch {
		case renewErr == nil && inputErr == nil:
			outcomes["renewed"]++
		case control.ReasonOf(renewErr) == control.ReasonExpired && control.ReasonOf(inputErr) == control.ReasonExpired:
			outcomes["expired"]++
		default:
			t.Fatalf("renew: %v; input: %v", renewErr, inputErr)
		}
		e.m.Close()
	}
	t.Logf("outcomes: %v", outcomes)
}

// TestInputAfterHandBack: inputs race a hand back; none that starts after HandBack returned
// is accepted.
func TestInputAfterHandBack(t *testing.T) {
	for range 20 {
		e := newEnv(t)
		l, err := e.m.TakeOver("d1", alice)
		if err != nil {
			t.Fatal(err)
		}
		in := control.InputAuth{AccountID: alice.AccountID, AgentID: alice.AgentID, Token: l.Token, Version: l.Version, FrameID: 7}
		var handedBack, stop atomic.Bool
		var accepted, late atomic.Int64
		var wg sync.WaitGroup
		for range 4 {
			wg.Go(func() {
				for !stop.Load() {
					after := handedBack.Load()
					err := e.m.CheckInput("d1", in)
					if err == nil {
						accepted.Add(1)
						if after {
							t.Error("input accepted after hand back")
							return
						}
					} else if after {
						late.Add(1)
						if control.ReasonOf(err) != control.ReasonHandedBack {
							t.Errorf("late input: %v", err)
							return
						}
					}
				}
			})
		}
		waitFor(t, func() bool { return accepted.Load() > 0 })
		if err := e.m.HandBack("d1", l.Token); err != nil {
			t.Fatal(err)
		}
		handedBack.Store(true)
		waitFor(t, func() bool { return late.Load() > 10 })
		stop.Store(true)
		wg.Wait()
	}
}

// TestRetakeFencesOldVersion: inputs of the first lease race the same person taking over
// again; after the re-take returns, only the new lease operates.
func TestRetakeFencesOldVersion(t *testing.T) {
	e := newEnv(t)
	old, err := e.m.TakeOver("d1", alice)
	if err != nil {
		t.Fatal(err)
	}
	in := control.InputAuth{AccountID: alice.AccountID, AgentID: alice.AgentID, Token: old.Token, Version: old.Version, FrameID: 3}
	var retaken, stop atomic.Bool
	var before, after atomic.Int64
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			for !stop.Load() {
				late := retaken.Load()
				err := e.m.CheckInput("d1", in)
				if !late {
					before.Add(1)
					continue
				}
				after.Add(1)
				if control.ReasonOf(err) != control.ReasonStaleVersion {
					t.Errorf("old lease after re-take: %v", err)
					return
				}
			}
		})
	}
	waitFor(t, func() bool { return before.Load() > 0 })
	fresh, err := e.m.TakeOver("d1", alice)
	if err != nil {
		t.Fatal(err)
	}
	retaken.Store(true)
	waitFor(t, func() bool { return after.Load() > 10 })
	stop.Store(true)
	wg.Wait()
	in.Token, in.Version = fresh.Token, fresh.Version
	if err := e.m.CheckInput("d1", in); err != nil {
		t.Fatalf("new lease: %v", err)
	}
	in.Version = old.Version
	if r := control.ReasonOf(e.m.CheckInput("d1", in)); r != control.ReasonStaleVersion {
		t.Fatalf("new token, old version: reason %q", r)
	}
}

// TestSwitchRace: a person switches between two desktops while another keeps grabbing and
// handing them back. A switch either moves the lease or fails naming the other person, and
// in both cases the old lease is dead; the announced history stays valid.
func TestSwitchRace(t *testing.T) {
	e := newEnv(t)
	var stop atomic.Bool
	var wg sync.WaitGroup
	wg.Go(func() {
		for i := 0; !stop.Load(); i++ {
			d := []string{"d1", "d2"}[i%2]
			if l, err := e.m.TakeOver(d, bob); err == nil {
				_ = e.m.HandBack(d, l.Token)
			}
		}
	})
	var l control.Lease
	for l.Token == "" {
		l, _ = e.m.TakeOver("d1", alice)
	}
	from, moved, refused := "d1", 0, 0
	for moved < 100 {
		to := map[string]string{"d1": "d2", "d2": "d1"}[from]
		next, err := e.m.Switch(alice, from, l.Token, to)
		// The reason varies (handed back, taken by Bob, or unknown once Bob's churn pushed it
		// out of the remembered history); what matters is the refusal.
		if _, rerr := e.m.Renew(from, l.Token); rerr == nil {
			t.Fatalf("old lease after switch (err %v): renew gave %v", err, rerr)
		}
		if err != nil {
			if control.ReasonOf(err) != control.ReasonPersonControlling || !strings.Contains(err.Error(), "Bob") {
				t.Fatalf("switch: %v", err)
			}
			refused++
			for next.Token == "" { // hold something again to switch from
				next, _ = e.m.TakeOver(from, alice)
			}
			l = next
			continue
		}
		moved++
		l, from = next, to
	}
	stop.Store(true)
	wg.Wait()
	e.m.Close()
	t.Logf("switches: %d moved, %d refused; %d changes", moved, refused, checkHistory(t, e.rec.snapshot()))
}

// waitFor polls cond for up to 5 s.
func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); !cond(); time.Sleep(100 * time.Microsecond) {
		if time.Now().After(deadline) {
			t.Fatal("condition not reached in 5 s")
		}
	}
}

// race runs a and b at once from two goroutines released together, and waits for both. The
// scheduler favours the goroutine started last, so round i alternates which one that is.
func race(i int, a, b func()) {
	if i%2 == 1 {
		a, b = b, a
	}
	start := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() { <-start; a() })
	wg.Go(func() { <-start; b() })
	close(start)
	wg.Wait()
}
