package screen

import "time"

// Flow is one region viewer's flow control: it decides when the next update may be written
// to the viewer's connection and at which quality level, from what the connection reports —
// the bytes written but not yet acknowledged by the viewer (its backlog; TCP's unacked bytes)
// and how long writes take. A viewer whose link cannot carry the stream is held back (its
// mailbox merges what arrives meanwhile, so it sees fewer, newer frames) and moved down a
// quality level; when the link keeps up it moves back up, probing less often each time a
// step up had to be undone. Other viewers are not affected: each has its own Flow.
//
// Flow is not safe for concurrent use (the connection's writer owns it); times are passed in
// so tests need no clock.
type Flow struct {
	level int

	bw       float64   // estimated link rate, bytes/s (0: unknown)
	bwAt     time.Time // when bw was last sampled
	written  int64     // total bytes written
	acked    int64     // total bytes the peer has acknowledged (written − backlog)
	heldAt   time.Time // start of the current hold (zero: not held)
	held     time.Duration
	windowAt time.Time // start of the current 1 s measuring window
	downAt   time.Time // last step down
	upAt     time.Time // last step up (zero: none yet)
	upEvery  time.Duration
	heldLast time.Time // end of the last window in which the viewer was held back
	heldEver time.Time // the same, zero while it never was
	measured bool      // the connection reports its backlog (then write times do not count)
	msgs     int       // messages written in the current window
	updates  int       // updates they carried (merged ones included)
	started  bool
}

// Flow's tuning.
const (
	// flowMinBudget is the backlog always allowed; flowDelay is how much queueing delay the
	// budget allows on top of it at the estimated rate.
	flowMinBudget = 64 << 10
	flowDelay     = 100 * time.Millisecond
	flowMaxBudget = 4 << 20
	// Levels are judged every flowWindow: a viewer held back for more than flowHeldShare of
	// it goes down a level (at most once per flowDownEvery); one not held for upEvery goes up.
	flowWindow    = 500 * time.Millisecond
	flowHeldShare = 0.25
	flowDownEvery = 400 * time.Millisecond
	flowUpFirst   = 3 * time.Second
	flowUpMax     = 30 * time.Second
	// flowCalm: a viewer not held back for this long probes upwards at the first pace again
	// (its link recovered).
	flowCalm = 10 * time.Second
	// A viewer whose messages carry more than 1/flowMergeShare updates each on average while
	// the screen makes at least flowBusyRate updates a second sees too few of the frames: it
	// goes down a level as if held back.
	flowMergeShare = 0.6
	flowBusyRate   = 10
	// flowSlowWrite: without a backlog measurement, a write this slow means the socket
	// buffer was full.
	flowSlowWrite = 50 * time.Millisecond
)

// Level returns the quality level (an index into Levels) the viewer should be at.
func (f *Flow) Level() int { return f.level }

// Budget returns how many unacknowledged bytes may be outstanding before the viewer is held.
func (f *Flow) Budget() int {
	b := flowMinBudget + int(f.bw*flowDelay.Seconds())
	return min(b, flowMaxBudget)
}

// Calm reports whether the viewer's link carries the best level without being held back:
// at level 0, and not held back for flowCalm (or never). Only then are lossless refreshes
// worth sending it: a refresh repeats, exactly, what stopped changing, and on a photo a whole
// screen is megabytes — seconds on a slow link, during which no change gets through.
func (f *Flow) Calm(now time.Time) bool {
	return f.level == 0 && (f.heldEver.IsZero() || now.Sub(f.heldEver) >= flowCalm)
}

// Rate returns the estimated link rate in bytes per second (0 while unknown).
func (f *Flow) Rate() float64 { return f.bw }

func (f *Flow) start(now time.Time) {
	if !f.started {
		f.started = true
		f.windowAt, f.bwAt, f.upEvery, f.heldLast = now, now, flowUpFirst, now
	}
}

// Allow reports whether an update waiting for the viewer may be written now, given backlog,
// the connection's unacknowledged bytes (negative: unknown, then only write times count). A
// false answer counts as time held back; ask again a little later.
func (f *Flow) Allow(now time.Time, backlog int) bool {
	f.start(now)
	if backlog >= 0 {
		f.measured = true
		f.sample(now, backlog)
	}
	ok := backlog < 0 || backlog <= f.Budget()
	if !ok && f.heldAt.IsZero() {
		f.heldAt = now
	}
	if ok && !f.heldAt.IsZero() {
		f.held += now.Sub(f.heldAt)
		f.heldAt = time.Time{}
	}
	f.adjust(now)
	return ok
}

// sample updates the rate estimate from the acknowledged byte count.
func (f *Flow) sample(now time.Time, backlog int) {
	acked := f.written - int64(backlog)
	dt := now.Sub(f.bwAt)
	if dt < 50*time.Millisecond {
		return
	}
	// Only a busy link measures its rate: with nothing outstanding the peer acked all there
	// was, and the rate says nothing.
	if backlog > 0 && acked > f.acked {
		r := float64(acked-f.acked) / dt.Seconds()
		if f.bw == 0 {
			f.bw = r
		} else {
			f.bw = 0.7*f.bw + 0.3*r
		}
	}
	f.acked, f.bwAt = acked, now
}

// Wrote records that n bytes were written to the connection, taking d: one message made of
// updates updates (more than one when it was held back and they were merged).
func (f *Flow) Wrote(now time.Time, n int, d time.Duration, updates int) {
	f.start(now)
	f.written += int64(n)
	f.msgs++
	f.updates += max(updates, 1)
	if d > flowSlowWrite && !f.measured {
		// Without a backlog report, a slow write means the socket buffer was full: the link
		// is behind. (With one, a slow write is more likely a busy machine's scheduler.)
		f.held += d
	}
	f.adjust(now)
}

// adjust moves the level at the end of each measuring window.
func (f *Flow) adjust(now time.Time) {
	win := now.Sub(f.windowAt)
	if win < flowWindow {
		return
	}
	held := f.held
	if !f.heldAt.IsZero() {
		held += now.Sub(f.heldAt)
		f.heldAt = now
	}
	// Merging many updates into each message means the link shows a fraction of the frames
	// the screen makes: a lower level buys frames back.
	merging := f.updates >= int(flowBusyRate*win.Seconds()) && float64(f.msgs) < flowMergeShare*float64(f.updates)
	f.held, f.windowAt, f.msgs, f.updates = 0, now, 0, 0
	if held > 0 || merging {
		f.heldLast, f.heldEver = now, now
	}
	switch {
	case float64(held) > flowHeldShare*float64(win) || merging:
		if f.level < len(Levels)-1 && now.Sub(f.downAt) >= flowDownEvery {
			if !f.upAt.IsZero() && now.Sub(f.upAt) < flowUpFirst {
				// The last step up did not hold: probe less often.
				f.upEvery = min(2*f.upEvery, flowUpMax)
			}
			f.level++
			f.downAt = now
		}
	case held == 0:
		if now.Sub(f.heldLast) >= flowCalm {
			f.upEvery = flowUpFirst
		}
		if f.level > 0 && now.Sub(f.downAt) >= f.upEvery && now.Sub(f.upAt) >= f.upEvery {
			f.level--
			f.upAt = now
		}
	}
}
