package vmtest

import (
	"context"
	"sync"
	"time"
)

// Clock is a manual vm.Clock: timers fire when Advance passes their deadline.
type Clock struct {
	mu     sync.Mutex
	now    time.Time
	timers []*timer
}

type timer struct {
	at      time.Time
	c       chan time.Time
	stopped bool
}

// NewClock returns a clock at 2026-01-01 09:00 UTC.
func NewClock() *Clock { return &Clock{now: time.Date(2026, 1, 1, 9, 0, 0, 0, time.UTC)} }

// Now returns the clock's time.
func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// NewTimer returns a timer that fires when Advance reaches now+d (at once when d ≤ 0).
func (c *Clock) NewTimer(d time.Duration) (<-chan time.Time, func() bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	t := &timer{at: c.now.Add(d), c: make(chan time.Time, 1)}
	if d <= 0 {
		t.c <- c.now
		t.stopped = true
	} else {
		c.timers = append(c.timers, t)
	}
	return t.c, func() bool {
		c.mu.Lock()
		defer c.mu.Unlock()
		was := !t.stopped
		t.stopped = true
		return was
	}
}

// Advance moves the clock forward and fires the timers that are due.
func (c *Clock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
	keep := c.timers[:0]
	for _, t := range c.timers {
		if t.stopped {
			continue
		}
		if !t.at.After(c.now) {
			t.stopped = true
			t.c <- c.now
			continue
		}
		keep = append(keep, t)
	}
	c.timers = keep
}

// Activity is a vm.Activity whose busy set the test controls.
type Activity struct {
	mu       sync.Mutex
	busy     map[string]string
	stopAlls int
	revoked  []string
}

// Revoke ends whoever uses id (the busy mark) and records the call.
func (a *Activity) Revoke(id string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.revoked = append(a.revoked, id)
	delete(a.busy, id)
}

// Revoked returns the ids Revoke was called with, in order.
func (a *Activity) Revoked() []string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([]string(nil), a.revoked...)
}

// SetBusy marks id as used by who ("" clears it).
func (a *Activity) SetBusy(id, who string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.busy == nil {
		a.busy = map[string]string{}
	}
	if who == "" {
		delete(a.busy, id)
	} else {
		a.busy[id] = who
	}
}

// StopAlls returns how many times StopAll was called.
func (a *Activity) StopAlls() int { a.mu.Lock(); defer a.mu.Unlock(); return a.stopAlls }

// Busy reports who SetBusy said uses id.
func (a *Activity) Busy(id string) (string, bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	who, ok := a.busy[id]
	return who, ok
}

// StopAll counts the call and clears the busy set.
func (a *Activity) StopAll(ctx context.Context, reason string) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.stopAlls++
	a.busy = map[string]string{}
	return nil
}
