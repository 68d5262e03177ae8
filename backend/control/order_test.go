package control_test

import (
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"cubicle/backend/control"
)

// TestOnChangeOrder checks the kinds, versions and holders announced for a scripted history,
// including an expiry announced by the loop with no further call.
func TestOnChangeOrder(t *testing.T) {
	e := newEnv(t)
	a, err := e.m.TakeOver("d1", alice)
	if err != nil {
		t.Fatal(err)
	}
	e.clock.Advance(10 * time.Second)
	if _, err := e.m.Renew("d1", a.Token); err != nil {
		t.Fatal(err)
	}
	if err := e.m.HandBack("d1", a.Token); err != nil {
		t.Fatal(err)
	}
	if err := e.m.BeginTask("d1", researcher); err != nil {
		t.Fatal(err)
	}
	if err := e.m.EndTask("d1", researcher.TaskID); err != nil {
		t.Fatal(err)
	}
	b, err := e.m.TakeOver("d1", bob)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.m.TakeOver("d2", carol); err != nil {
		t.Fatal(err)
	}
	e.clock.Advance(ttl) // both leases expire; the loop announces it on its own

	want := []struct {
		desktop string
		kind    control.ChangeKind
		version uint64
		who     string
	}{
		{"d1", control.ChangeTaken, 1, "Alice"},
		{"d1", control.ChangeRenewed, 1, "Alice"},
		{"d1", control.ChangeHandedBack, 2, "Alice"},
		{"d1", control.ChangeTaskStarted, 3, "agent Researcher"},
		{"d1", control.ChangeTaskEnded, 4, "agent Researcher"},
		{"d1", control.ChangeTaken, 5, "Bob"},
		{"d2", control.ChangeTaken, 1, "Carol"},
		{"d1", control.ChangeExpired, 6, "Bob"},
		{"d2", control.ChangeExpired, 2, "Carol"},
	}
	got := e.rec.wait(t, len(want))
	if len(got) != len(want) {
		t.Fatalf("changes = %v", kinds(got))
	}
	// The two expiries come from one sweep over a map: their relative order is free.
	if got[7].DesktopID == "d2" {
		got[7], got[8] = got[8], got[7]
	}
	for i, w := range want {
		c := got[i]
		if c.DesktopID != w.desktop || c.Kind != w.kind || c.Version != w.version || c.Holder.Name() != w.who {
			t.Errorf("change %d = %s %s v%d %s; want %s %s v%d %s", i, c.DesktopID, c.Kind, c.Version,
				c.Holder.Name(), w.desktop, w.kind, w.version, w.who)
		}
	}
	if !got[1].ExpiresAt.Equal(t0.Add(10*time.Second + ttl)) {
		t.Errorf("renewed ExpiresAt = %v", got[1].ExpiresAt)
	}
	if got[5].ExpiresAt != b.ExpiresAt || got[5].At != t0.Add(10*time.Second) {
		t.Errorf("taken change = %+v, lease %+v", got[5], b)
	}
	if _, busy := e.m.Busy("d1"); busy {
		t.Error("d1 busy after expiry")
	}
}

// TestOnChangeOrderConcurrent churns on a few desktops from many goroutines and checks that
// each desktop's announcements arrive in version order and form a valid history.
func TestOnChangeOrderConcurrent(t *testing.T) {
	e := newEnv(t)
	desktops := []string{"d1", "d2", "d3"}
	people := []control.Person{alice, bob, carol}
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			r := rand.New(rand.NewPCG(uint64(g), 1))
			var mine []control.Lease
			for range 300 {
				d := desktops[r.IntN(len(desktops))]
				switch r.IntN(7) {
				case 0, 1:
					if l, err := e.m.TakeOver(d, people[r.IntN(len(people))]); err == nil {
						mine = append(mine, l)
					}
				case 2:
					if len(mine) > 0 {
						l := mine[r.IntN(len(mine))]
						_, _ = e.m.Renew(l.DesktopID, l.Token)
					}
				case 3:
					if len(mine) > 0 {
						l := mine[r.IntN(len(mine))]
						_ = e.m.HandBack(l.DesktopID, l.Token)
					}
				case 4:
					task := fmt.Sprintf("t%d", g)
					if e.m.BeginTask(d, control.Agent{AgentID: "x", AgentName: "X", TaskID: task}) == nil {
						_ = e.m.EndTask(d, task)
					}
				case 5:
					if g == 0 {
						e.clock.Advance(time.Duration(r.IntN(20)) * time.Second)
					}
				case 6:
					e.m.ObserveFrame(d, uint64(r.IntN(1000)+1))
					_, _ = e.m.Busy(d)
				}
			}
		})
	}
	wg.Wait()
	if err := e.m.Close(); err != nil { // delivers what is queued
		t.Fatal(err)
	}
	total := checkHistory(t, e.rec.snapshot())
	t.Logf("%d changes checked", total)
	if total < 100 {
		t.Fatalf("only %d changes; the churn did not exercise the machine", total)
	}
}

// checkHistory checks that each desktop's announcements arrive in version order and form a
// valid history, and returns how many there were.
func checkHistory(t *testing.T, all []control.Change) int {
	t.Helper()
	per := map[string][]control.Change{}
	for _, c := range all {
		per[c.DesktopID] = append(per[c.DesktopID], c)
	}
	for d, cs := range per {
		var version uint64
		held := "" // "", "person", "task"
		for i, c := range cs {
			bump := c.Kind != control.ChangeRenewed
			if bump && c.Version != version+1 || !bump && c.Version != version {
				t.Fatalf("%s change %d: %s v%d after v%d", d, i, c.Kind, c.Version, version)
			}
			version = c.Version
			ok := true
			switch c.Kind {
			case control.ChangeTaken:
				ok = held == "" || held == "person" // a re-take by the same person
				held = "person"
			case control.ChangeRenewed:
				ok = held == "person"
			case control.ChangeHandedBack, control.ChangeExpired:
				ok, held = held == "person", ""
			case control.ChangeTaskStarted:
				ok, held = held == "", "task"
			case control.ChangeTaskEnded:
				ok, held = held == "task", ""
			case control.ChangeRevoked:
				ok, held = held != "", ""
			}
			if !ok {
				t.Fatalf("%s change %d: %s not allowed here: %v", d, i, c.Kind, kinds(cs[max(0, i-5):i+1]))
			}
		}
	}
	return len(all)
}
