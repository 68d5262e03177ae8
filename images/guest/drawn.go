//go:build linux

package main

import (
	"context"
	"encoding/binary"
	"time"

	"cubicle/images/guest/wire"
	"cubicle/images/guest/x11"
)

// Until the desktop session has drawn, the screen is black (Xvfb's empty root window): a
// screenshot then shows nothing and a model that pays for it learns nothing. Screenshots and
// streams therefore wait until the screen looks drawn — at least drawnColours distinct
// colours and less than half of it still black (XFCE's wallpaper makes it so; the panels may
// come just before or just after) — then until drawing pauses (drawnQuiet) so a half-painted
// desktop is not taken — once per X server. Without a session configured the screen counts as
// drawn at once.
const (
	drawnColours = 16
	// The pause that ends the wait grows with how long the session took to colour the screen:
	// the pieces that follow the wallpaper (the panels' plugins) come after it by gaps that
	// grow with a slow machine. Measured on 2 cores, restarts of the standard image
	// (docs/bench.md): the screen colourful 0.36–0.61 s after the X server, the last piece
	// ≤ 75 ms later, gaps ≤ 30 ms between pieces; with three busy processes beside it,
	// colourful after 0.13–0.66 s, the last piece ≤ 128 ms later, gaps ≤ 94 ms (at most 0.29
	// of the time to colour).
	drawnQuietShare = 0.4
	drawnQuietMin   = 150 * time.Millisecond
	drawnQuietMax   = 500 * time.Millisecond
	// drawnWait bounds one wait by default: the caller gets an "is still starting" error
	// after it.
	drawnWait = 20 * time.Second
	// drawnAnyway: a session that has run this long without drawing colourful pixels has a
	// plain screen on purpose; it counts as drawn.
	drawnAnyway = 30 * time.Second
)

// errStarting is what a screenshot answers while the desktop has not drawn yet.
func errStarting() error {
	return wire.Unavailable("the desktop is still starting: its session has not drawn the screen yet; try again in a few seconds")
}

// isDrawn reports whether the current X server's screen has been drawn.
func (s *screen) isDrawn() bool {
	if !s.waitDrawn {
		return true
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.drawnEpoch == s.epoch && s.epoch != 0
}

// drawn returns once the screen has been drawn (see above), or errStarting after drawnWait,
// or ctx's error.
func (s *screen) drawn(ctx context.Context) error {
	if s.isDrawn() {
		return nil
	}
	deadline := time.NewTimer(s.drawnWait)
	defer deadline.Stop()
	for {
		d, ep, err := s.get(ctx)
		if err != nil {
			return err
		}
		_, _, next := d.Generation()
		ok, err := colourful(d)
		if err != nil {
			return unavailable(err)
		}
		s.mu.Lock()
		since := s.setAt
		anyway := s.epoch == ep && time.Since(since) > drawnAnyway
		s.mu.Unlock()
		if ok || anyway {
			_, last, _ := d.Generation()
			colourfulAt, quiet, left := drawnPause(since, last, time.Now())
			if ok && left > 0 {
				// The first colourful frame may be half painted (the wallpaper before the
				// panels): wait until drawing pauses, briefly.
				if _, _, err := d.WaitQuiet(ctx, quiet, 3*time.Second); err != nil {
					if ctx.Err() != nil {
						return ctx.Err()
					}
					return unavailable(err)
				}
			}
			s.mu.Lock()
			if s.epoch == ep {
				s.drawnEpoch = ep
			}
			s.mu.Unlock()
			// When the screen was seen colourful and when drawing paused, since the X server
			// was ready, say where a start went (docs/bench.md).
			s.log.Info("desktop drawn", "colourful", ok, "colourfulAfter", colourfulAt.Round(time.Millisecond), "quiet", quiet.Round(time.Millisecond),
				"drawnAfter", time.Since(since).Round(time.Millisecond))
			return nil
		}
		poll := time.NewTimer(500 * time.Millisecond) // also catches drawnAnyway
		select {
		case <-ctx.Done():
			poll.Stop()
			return ctx.Err()
		case <-deadline.C:
			poll.Stop()
			return errStarting()
		case <-next:
		case <-d.Done():
		case <-poll.C:
		}
		poll.Stop()
	}
}

// drawnPause says, for a screen seen colourful at now whose X server was ready at since and
// whose last change was at last: how long the session took to colour it (colourfulAfter), how
// long drawing must pause (quiet) and how much of that pause is still to come (left, 0: the
// screen is drawn). A screen first looked at long after its session drew it (nobody asked for
// a screenshot before) has been quiet since its last change: the session coloured it by then,
// and it is drawn at once.
func drawnPause(since, last, now time.Time) (colourfulAfter, quiet, left time.Duration) {
	colourfulAfter = now.Sub(since)
	if last.After(since) && last.Before(now) {
		colourfulAfter = last.Sub(since)
	}
	quiet = drawnQuiet(colourfulAfter)
	return colourfulAfter, quiet, max(quiet-now.Sub(last), 0)
}

// drawnQuiet is how long drawing must pause once the screen looks drawn, for a session that
// took colourfulAfter from the X server's start to colour it.
func drawnQuiet(colourfulAfter time.Duration) time.Duration {
	return min(max(time.Duration(float64(colourfulAfter)*drawnQuietShare), drawnQuietMin), drawnQuietMax)
}

// colourful reports whether a sample of the screen's pixels shows at least drawnColours
// distinct colours and is less than half black.
func colourful(d *x11.Display) (bool, error) {
	ok := false
	err := d.WithCapture(func(raw []byte, _ uint64) error {
		var seen [drawnColours]uint32
		n, black, total := 0, 0, 0
		for i := 0; i+4 <= len(raw); i += 4 * 61 { // a prime stride samples every column
			c := binary.LittleEndian.Uint32(raw[i:]) & 0xffffff
			total++
			if c == 0 {
				black++
			}
			if n == drawnColours {
				continue
			}
			found := false
			for _, v := range seen[:n] {
				if v == c {
					found = true
					break
				}
			}
			if !found {
				seen[n] = c
				n++
			}
		}
		ok = n == drawnColours && black*2 < total
		return nil
	})
	return ok, err
}
