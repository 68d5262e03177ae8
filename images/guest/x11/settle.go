package x11

import (
	"context"
	"time"
)

// Change is one observed change of the screen: when, the generation it produced and the
// rectangle XDAMAGE reported (the whole screen when changes come from polling).
type Change struct {
	At         time.Time
	Gen        uint64
	X, Y, W, H int
}

// changeLog keeps the most recent changes (a ring); the owner's lock guards it.
type changeLog struct {
	buf  [256]Change
	next int
	n    int
}

func (l *changeLog) add(c Change) {
	l.buf[l.next] = c
	l.next = (l.next + 1) % len(l.buf)
	l.n = min(l.n+1, len(l.buf))
}

// since appends the changes after t, oldest first, to dst.
func (l *changeLog) since(dst []Change, t time.Time) []Change {
	first := len(dst)
	for i := 0; i < l.n; i++ {
		c := l.buf[(l.next-1-i+2*len(l.buf))%len(l.buf)]
		if !c.At.After(t) {
			break
		}
		dst = append(dst, c)
	}
	// Reverse the appended part into chronological order.
	for i, j := first, len(dst)-1; i < j; i, j = i+1, j-1 {
		dst[i], dst[j] = dst[j], dst[i]
	}
	return dst
}

// ChangesSince returns the changes observed after t (at most the last 256), oldest first.
func (d *Display) ChangesSince(t time.Time) []Change {
	d.chMu.Lock()
	defer d.chMu.Unlock()
	return d.changes.since(nil, t)
}

// SettlePolicy tunes WaitSettled. Zero fields take the defaults.
type SettlePolicy struct {
	// React is how long to wait for a first change after the call: an action whose effect
	// has not started drawing by then is taken to have none. Default 100 ms.
	React time.Duration
	// MinQuiet is the quiet period needed after small changes (a caret, a highlighted
	// button, typed text). Default 100 ms.
	MinQuiet time.Duration
	// MaxQuiet is the quiet period needed after large changes (a window or page redrawn:
	// a quarter of the screen or more); sizes in between scale linearly. A pause between two
	// bursts of drawing also raises the quiet period to 1.5 × that pause, up to MaxQuiet, so
	// content that arrives in stages is waited for. Default 300 ms.
	MaxQuiet time.Duration
	// Max caps the whole wait (something animates). Default 5 s.
	Max time.Duration
	// SmallAfter: once the wait has lasted this long, changes smaller than 1% of the screen
	// (a blinking caret, a spinner, a clock) no longer keep it from settling. Default 1 s.
	SmallAfter time.Duration
	// Since is when the action whose effect is awaited happened (the driver's last input);
	// changes from then on count. Zero or in the future: the call.
	Since time.Time
	// Busy, when set, is asked once React has passed without a change: true (programs are
	// working, e.g. a browser navigating) extends the wait for a first change by React/2 at a
	// time, up to MaxQuiet.
	Busy func() bool
}

func (p *SettlePolicy) defaults() {
	if p.React <= 0 {
		p.React = 100 * time.Millisecond
	}
	if p.MinQuiet <= 0 {
		p.MinQuiet = 100 * time.Millisecond
	}
	if p.MaxQuiet <= 0 {
		p.MaxQuiet = 300 * time.Millisecond
	}
	if p.MaxQuiet < p.MinQuiet {
		p.MaxQuiet = p.MinQuiet
	}
	if p.Max <= 0 {
		p.Max = 5 * time.Second
	}
	if p.SmallAfter <= 0 {
		p.SmallAfter = time.Second
	}
}

// SettleResult says how a settle wait ended.
type SettleResult struct {
	Gen     uint64        // the generation when it ended
	Settled bool          // false: Max ran out while the screen kept changing
	Changes int           // changes seen after the call
	Quiet   time.Duration // the quiet period it finally required
	Waited  time.Duration
}

// WaitSettled waits until the screen has settled after an action (at p.Since, else the
// call): no change within React of it (nothing happened), or no change for a quiet period
// that adapts to what is drawing (MinQuiet for small changes up to MaxQuiet for large ones or
// for drawing that comes in stages), or Max after the call. Earlier changes are ignored.
func (d *Display) WaitSettled(ctx context.Context, p SettlePolicy) (SettleResult, error) {
	p.defaults()
	now := time.Now()
	start := now
	if !p.Since.IsZero() && p.Since.Before(now) {
		start = p.Since
	}
	deadline := now.Add(p.Max)
	screen := float64(d.width * d.height)
	var buf []Change
	react := p.React
	for {
		gen, _, next := d.Generation()
		d.chMu.Lock()
		buf = d.changes.since(buf[:0], start)
		d.chMu.Unlock()
		now := time.Now()
		res := SettleResult{Gen: gen, Changes: len(buf), Waited: now.Sub(start)}
		var wake time.Time
		if len(buf) == 0 {
			wake = start.Add(react)
			// A late wake-up (a loaded machine) may be past several steps at once.
			for !now.Before(wake) && p.Busy != nil && react < p.MaxQuiet && p.Busy() {
				react = min(react+p.React/2, p.MaxQuiet)
				wake = start.Add(react)
			}
			res.Quiet = react
		} else {
			quiet, last := settleQuiet(buf, start, now.Sub(start) >= p.SmallAfter, screen, p)
			res.Quiet = quiet
			wake = last.Add(quiet)
		}
		if !now.Before(wake) {
			res.Settled = true
			return res, nil
		}
		if !now.Before(deadline) {
			return res, nil
		}
		if deadline.Before(wake) {
			wake = deadline
		}
		t := time.NewTimer(wake.Sub(now))
		select {
		case <-ctx.Done():
			t.Stop()
			return res, ctx.Err()
		case <-d.done:
			t.Stop()
			return res, ErrClosed
		case <-next:
		case <-t.C:
		}
		t.Stop()
	}
}

// settleQuiet computes the quiet period the changes since start call for, and the time of
// the last change that counts. With ignoreSmall, changes under 1% of the screen do not count
// (unless nothing else changed).
func settleQuiet(cs []Change, start time.Time, ignoreSmall bool, screen float64, p SettlePolicy) (time.Duration, time.Time) {
	var (
		x0, y0, x1, y1 int
		any            bool
		prev           = start
		gap            time.Duration
		last           time.Time
	)
	for _, c := range cs {
		if ignoreSmall && float64(c.W*c.H) < screen/100 {
			continue
		}
		if !any {
			x0, y0, x1, y1, any = c.X, c.Y, c.X+c.W, c.Y+c.H, true
		} else {
			x0, y0, x1, y1 = min(x0, c.X), min(y0, c.Y), max(x1, c.X+c.W), max(y1, c.Y+c.H)
		}
		if g := c.At.Sub(prev); g > gap && g <= p.MaxQuiet {
			gap = g
		}
		prev, last = c.At, c.At
	}
	if !any {
		// Only small changes for SmallAfter: something small animates (a caret, a
		// spinner); it does not hold the wait any longer.
		return 0, start
	}
	frac := float64((x1-x0)*(y1-y0)) / screen
	quiet := p.MinQuiet + time.Duration(float64(p.MaxQuiet-p.MinQuiet)*min(1, frac/0.25))
	if g := gap * 3 / 2; g > quiet {
		quiet = min(g, p.MaxQuiet)
	}
	return quiet, last
}
