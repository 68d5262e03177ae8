// Package controltest provides a fake clock for tests of control and of the packages that use
// it: time moves only when the test says so, and timers fire in the goroutine that moves it.
package controltest

import (
	"sort"
	"sync"
	"time"

	"cubicle/backend/control"
)

// Clock is a control.Clock whose time moves only by Advance. It is safe for concurrent use.
type Clock struct {
	mu     sync.Mutex
	now    time.Time // guarded by mu
	timers []*timer  // pending, guarded by mu
}

var _ control.Clock = (*Clock)(nil)

// NewClock returns a Clock reading start.
func NewClock(start time.Time) *Clock { return &Clock{now: start} }

// Now returns the clock's time.
func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// AfterFunc schedules f for d from the clock's time; f runs inside the Advance that reaches it.
func (c *Clock) AfterFunc(d time.Duration, f func()) control.Timer {
	c.mu.Lock()
	defer c.mu.Unlock()
	t := &timer{c: c, when: c.now.Add(d), f: f}
	c.timers = append(c.timers, t)
	return t
}

// Advance moves the clock forward by d and then runs, in deadline order and in the calling
// goroutine, every timer whose deadline has come.
func (c *Clock) Advance(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	var due []*timer
	kept := c.timers[:0]
	for _, t := range c.timers {
		if !t.when.After(c.now) {
			due = append(due, t)
		} else {
			kept = append(kept, t)
		}
	}
	clear(c.timers[len(kept):])
	c.timers = kept
	c.mu.Unlock()
	sort.SliceStable(due, func(i, j int) bool { return due[i].when.Before(due[j].when) })
	for _, t := range due {
		t.f()
	}
}

// Pending returns how many timers are scheduled and not yet fired or stopped.
func (c *Clock) Pending() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.timers)
}

type timer struct {
	c    *Clock
	when time.Time
	f    func()
}

// Stop unschedules the timer and reports whether it was still pending.
func (t *timer) Stop() bool {
	t.c.mu.Lock()
	defer t.c.mu.Unlock()
	for i, p := range t.c.timers {
		if p == t {
			t.c.timers = append(t.c.timers[:i], t.c.timers[i+1:]...)
			return true
		}
	}
	return false
}
