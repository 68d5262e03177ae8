package control

import "time"

// Clock is the time source of a Manager. Tests inject controltest.Clock to move time by hand;
// production uses SystemClock. Implementations must be safe for concurrent use.
type Clock interface {
	// Now returns the current time.
	Now() time.Time
	// AfterFunc arranges for f to be called once, in a goroutine of the clock's choosing,
	// after d has elapsed. f must not block; the Manager's f only signals its own loop.
	AfterFunc(d time.Duration, f func()) Timer
}

// Timer is a pending AfterFunc call.
type Timer interface {
	// Stop prevents the call if it has not started yet and reports whether it did so.
	Stop() bool
}

// SystemClock is the real clock: time.Now and time.AfterFunc.
type SystemClock struct{}

// Now returns time.Now().
func (SystemClock) Now() time.Time { return time.Now() }

// AfterFunc wraps time.AfterFunc.
func (SystemClock) AfterFunc(d time.Duration, f func()) Timer { return time.AfterFunc(d, f) }
