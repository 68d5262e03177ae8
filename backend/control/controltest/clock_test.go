package controltest

import (
	"testing"
	"time"
)

func TestClock(t *testing.T) {
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	c := NewClock(start)
	var fired []string
	c.AfterFunc(3*time.Second, func() { fired = append(fired, "3s") })
	c.AfterFunc(time.Second, func() { fired = append(fired, "1s") })
	stopped := c.AfterFunc(2*time.Second, func() { fired = append(fired, "2s") })
	if !stopped.Stop() || stopped.Stop() {
		t.Fatal("Stop should report true once")
	}
	c.Advance(999 * time.Millisecond)
	if len(fired) != 0 || c.Pending() != 2 {
		t.Fatalf("fired early: %v", fired)
	}
	c.Advance(5 * time.Second)
	if got := c.Now(); !got.Equal(start.Add(5999 * time.Millisecond)) {
		t.Fatalf("Now = %v", got)
	}
	if len(fired) != 2 || fired[0] != "1s" || fired[1] != "3s" || c.Pending() != 0 {
		t.Fatalf("fired %v, pending %d", fired, c.Pending())
	}
}
