package control_test

import (
	"testing"
	"time"

	"cubicle/backend/control"
)

// BenchmarkCheckInput measures the input hot path: an accepted input.
func BenchmarkCheckInput(b *testing.B) {
	m, in := benchManager(b, nil)
	b.ReportAllocs()
	for b.Loop() {
		if err := m.CheckInput("d1", in); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkCheckInputFixedClock is BenchmarkCheckInput with a clock that costs nothing, to
// separate the Manager's own cost from time.Now (which is a system call on some VMs).
func BenchmarkCheckInputFixedClock(b *testing.B) {
	m, in := benchManager(b, fixedClock{t0})
	b.ReportAllocs()
	for b.Loop() {
		if err := m.CheckInput("d1", in); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkTimeNow is the cost of the real clock read CheckInput makes, for comparison.
func BenchmarkTimeNow(b *testing.B) {
	var c control.SystemClock
	for b.Loop() {
		_ = c.Now()
	}
}

// BenchmarkCheckInputParallel: accepted inputs from all Ps at once (many viewers' channels
// and the holder's input share the read lock).
func BenchmarkCheckInputParallel(b *testing.B) {
	m, in := benchManager(b, nil)
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if err := m.CheckInput("d1", in); err != nil {
				b.Error(err)
				return
			}
		}
	})
}

// BenchmarkCheckInputRefused: a late input after hand back (the history lookup path).
func BenchmarkCheckInputRefused(b *testing.B) {
	m, in := benchManager(b, nil)
	if err := m.HandBack("d1", in.Token); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		if m.CheckInput("d1", in) == nil {
			b.Fatal("accepted")
		}
	}
}

// fixedClock always reads the same time and never fires.
type fixedClock struct{ now time.Time }

func (c fixedClock) Now() time.Time                                { return c.now }
func (c fixedClock) AfterFunc(time.Duration, func()) control.Timer { return noTimer{} }

type noTimer struct{}

func (noTimer) Stop() bool { return true }

// benchManager returns a started Manager (on clock; nil means the real one) where alice holds
// d1, and an input of hers.
func benchManager(b *testing.B, clock control.Clock) (*control.Manager, control.InputAuth) {
	m := control.New(control.Config{Clock: clock})
	if err := m.Start(b.Context()); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { m.Close() })
	for _, d := range []string{"d0", "d2", "d3"} { // a few other desktops in the map
		if _, err := m.TakeOver(d, bob); err != nil {
			b.Fatal(err)
		}
	}
	m.ObserveFrame("d1", 10)
	l, err := m.TakeOver("d1", alice)
	if err != nil {
		b.Fatal(err)
	}
	return m, control.InputAuth{AccountID: alice.AccountID, AgentID: alice.AgentID, Token: l.Token, Version: l.Version, FrameID: 12}
}
