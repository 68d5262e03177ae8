package screen

import (
	"testing"
	"time"
)

// link simulates a network path: it carries rate bytes per second and acknowledges what it
// delivered rtt later.
type link struct {
	rate      float64
	rtt       time.Duration
	written   float64
	delivered float64
	history   []float64 // delivered per millisecond, for acks rtt later
}

func (l *link) step() {
	l.delivered = min(l.written, l.delivered+l.rate/1000)
	l.history = append(l.history, l.delivered)
}

func (l *link) backlog() int {
	i := len(l.history) - 1 - int(l.rtt/time.Millisecond)
	acked := 0.0
	if i >= 0 {
		acked = l.history[i]
	}
	return int(l.written - acked)
}

// simulate runs a 30 fps stream of full-screen changes through f over l for d and returns
// the frames per second delivered over the last 5 s and the level at the end. size gives an
// update's bytes at a level.
func simulate(f *Flow, l *link, start time.Time, d time.Duration, size func(level int) int) (fps float64, level int, end time.Time) {
	pending := 0
	frames := 0
	now := start
	for ms := 0; ms < int(d/time.Millisecond); ms++ {
		now = start.Add(time.Duration(ms) * time.Millisecond)
		l.step()
		if ms%33 == 0 {
			pending++ // a new screen; unsent ones are merged into the next message
		}
		if pending > 0 && f.Allow(now, l.backlog()) {
			n := size(f.Level())
			l.written += float64(n)
			f.Wrote(now, n, 0, pending)
			pending = 0
			if now.Sub(start) >= d-5*time.Second {
				frames++
			}
		}
	}
	return float64(frames) / 5, f.Level(), now
}

func sizes(level int) int { return []int{160 << 10, 90 << 10, 55 << 10, 24 << 10, 15 << 10}[level] }

// TestFlow: a fast link stays at the best level with every frame; a 10 Mbit/s, 40 ms link is
// brought down to a level that still shows at least 15 frames a second; when the link
// recovers the level comes back up.
func TestFlow(t *testing.T) {
	start := time.Unix(1000, 0)

	var fast Flow
	fps, level, _ := simulate(&fast, &link{rate: 100e6, rtt: time.Millisecond}, start, 20*time.Second, sizes)
	if level != 0 || fps < 29 {
		t.Errorf("fast link: level %d, %.1f fps; want level 0 at ~30 fps", level, fps)
	}
	if !fast.Calm(start.Add(20 * time.Second)) {
		t.Error("a fast link is not calm: it would get no lossless refreshes")
	}

	var f Flow
	slow := &link{rate: 10e6 / 8, rtt: 40 * time.Millisecond}
	fps, level, end := simulate(&f, slow, start, 30*time.Second, sizes)
	if fps < 15 || level == 0 {
		t.Errorf("10 Mbit/s link: level %d, %.1f fps; want a lower level and at least 15 fps", level, fps)
	}
	if r := f.Rate(); r < 0.5*slow.rate || r > 1.5*slow.rate {
		t.Errorf("estimated rate %.0f B/s, the link carries %.0f", r, slow.rate)
	}
	t.Logf("10 Mbit/s: level %d (%+v), %.1f fps, budget %d bytes", level, Levels[level], fps, f.Budget())
	if f.Calm(end) {
		t.Error("a 10 Mbit/s link that holds updates back is calm: it would get lossless refreshes (megabytes on a photo)")
	}

	// The link recovers: the same Flow climbs back.
	slow.rate = 100e6
	fps, level, end = simulate(&f, slow, end, 60*time.Second, sizes)
	if level != 0 || fps < 29 {
		t.Errorf("recovered link: level %d, %.1f fps; want level 0 at ~30 fps", level, fps)
	}
	if !f.Calm(end) {
		t.Error("a recovered link is not calm again")
	}

	// Without backlog reports, slow writes alone bring the level down.
	var blind Flow
	now := start
	for i := 0; i < 100; i++ {
		blind.Allow(now, -1)
		blind.Wrote(now, 100<<10, 80*time.Millisecond, 1)
		now = now.Add(100 * time.Millisecond)
	}
	if blind.Level() == 0 {
		t.Errorf("slow writes without backlog reports left the level at 0")
	}
}
