package fleet

import (
	"context"
	"io"
	"log/slog"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"cubicle/backend/events"
	"cubicle/backend/fault"
	"cubicle/backend/vm"
)

// fakeStatsNode is a node for the sampler: it answers at once, fails, or hangs until its
// context ends (a runner that stopped answering).
type fakeStatsNode struct {
	id   string
	hang bool
	err  error

	mu        sync.Mutex
	calls     int
	deadlines []time.Time // the deadline of each call's context
	ended     []time.Time // when each hanging call gave up
}

func (n *fakeStatsNode) NodeID() string { return n.id }

func (n *fakeStatsNode) Stats(ctx context.Context) ([]vm.InstanceStats, error) {
	dl, _ := ctx.Deadline()
	n.mu.Lock()
	n.calls++
	n.deadlines = append(n.deadlines, dl)
	n.mu.Unlock()
	if n.hang {
		<-ctx.Done()
		n.mu.Lock()
		n.ended = append(n.ended, time.Now())
		n.mu.Unlock()
		return nil, ctx.Err()
	}
	if n.err != nil {
		return nil, n.err
	}
	return []vm.InstanceStats{{InstanceID: "vm-" + n.id, CPUPercent: 12.5, MemoryBytes: 300 << 20, MemoryLimit: 4 << 30, PIDs: 40}}, nil
}

func (n *fakeStatsNode) snapshot() (int, []time.Time, []time.Time) {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.calls, slices.Clone(n.deadlines), slices.Clone(n.ended)
}

// published is what the sampler published, with the (bubble) time of each event.
type published struct {
	mu  sync.Mutex
	out []events.Stats
	at  []time.Time
}

func (p *published) add(s events.Stats) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.out = append(p.out, s)
	p.at = append(p.at, time.Now())
}

// since returns the events published after the first n, as "node@offset" from start.
func (p *published) since(n int, start time.Time) []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []string
	for i := n; i < len(p.out); i++ {
		out = append(out, p.out[i].NodeID+"@"+p.at[i].Sub(start).String())
	}
	slices.Sort(out)
	return out
}

func (p *published) count() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.out)
}

// samplerGoroutines counts the goroutines running the sampler's code.
func samplerGoroutines() int {
	buf := make([]byte, 1<<20)
	buf = buf[:runtime.Stack(buf, true)]
	n := 0
	for g := range strings.SplitSeq(string(buf), "\n\n") {
		if strings.Contains(g, "(*statsSampler)") {
			n++
		}
	}
	return n
}

// TestStatsSamplerFanOut: every tick the sampler asks every node concurrently, each with its
// own deadline. A runner that hangs does not delay the others' events (they come at the tick,
// on the bubble's clock), is not asked again while its call runs (no pile-up), gives up at its
// own deadline and is asked again at the next tick; a node that fails publishes nothing and
// stops nothing; nobody watching means nobody is asked; close ends a hanging call at once and
// leaves no goroutine behind.
func TestStatsSamplerFanOut(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		local := &fakeStatsNode{id: "local"}
		fast := &fakeStatsNode{id: "r-fast"}
		hung := &fakeStatsNode{id: "r-hung", hang: true}
		gone := &fakeStatsNode{id: "r-gone", err: fault.Unavailable("runner gone is disconnected")}
		var pub published
		var watchMu sync.Mutex
		watching := false
		const interval, timeout = time.Second, 3 * time.Second
		s := &statsSampler{interval: interval, timeout: timeout,
			watching: func() bool { watchMu.Lock(); defer watchMu.Unlock(); return watching },
			nodes:    func() []StatsNode { return []StatsNode{hung, local, gone, fast} },
			publish:  pub.add,
			log:      slog.New(slog.NewTextHandler(io.Discard, nil))}
		start := time.Now()
		s.start(context.Background())

		// Nobody watches: two ticks pass and no node is asked.
		time.Sleep(2*interval + interval/2)
		synctest.Wait()
		for _, n := range []*fakeStatsNode{local, fast, hung, gone} {
			if c, _, _ := n.snapshot(); c != 0 {
				t.Fatalf("%s was asked %d times while nobody watched", n.id, c)
			}
		}
		watchMu.Lock()
		watching = true
		watchMu.Unlock()

		// Tick 3 (t=3s): every node is asked; the fast ones publish at once, the hung one
		// holds nothing up.
		time.Sleep(interval / 2)
		synctest.Wait()
		if got, want := pub.since(0, start), []string{"local@3s", "r-fast@3s"}; !slices.Equal(got, want) {
			t.Fatalf("tick 3 published %v, want %v", got, want)
		}
		for _, n := range []*fakeStatsNode{local, fast, hung, gone} {
			c, dl, _ := n.snapshot()
			if c != 1 {
				t.Fatalf("%s asked %d times at tick 3, want 1", n.id, c)
			}
			if want := start.Add(3*time.Second + timeout); !dl[0].Equal(want) {
				t.Fatalf("%s's deadline %v after start, want %v", n.id, dl[0].Sub(start), want.Sub(start))
			}
		}

		// Ticks 4 and 5: the others publish each tick; the hung runner's call still runs, so it
		// is not asked again.
		time.Sleep(2 * interval)
		synctest.Wait()
		if got, want := pub.since(2, start), []string{"local@4s", "local@5s", "r-fast@4s", "r-fast@5s"}; !slices.Equal(got, want) {
			t.Fatalf("ticks 4–5 published %v, want %v", got, want)
		}
		if c, _, _ := hung.snapshot(); c != 1 {
			t.Fatalf("the hung runner was asked %d times while its call ran, want 1", c)
		}
		if c, _, _ := gone.snapshot(); c != 3 {
			t.Fatalf("the failing runner was asked %d times in three ticks, want 3", c)
		}

		// t=6s: the hung call's own deadline ends it (it publishes nothing), and the tick of
		// the same instant may ask it again; by tick 7 it has been asked again.
		time.Sleep(interval)
		synctest.Wait()
		if _, _, ended := hung.snapshot(); len(ended) != 1 || !ended[0].Equal(start.Add(6*time.Second)) {
			t.Fatalf("the hung call ended at %v, want once at 6s after start", ended)
		}
		time.Sleep(interval)
		synctest.Wait()
		if c, _, _ := hung.snapshot(); c != 2 {
			t.Fatalf("the hung runner was asked %d times after its deadline, want 2", c)
		}
		for _, st := range pub.out {
			if st.NodeID == hung.id || st.NodeID == gone.id {
				t.Fatalf("published stats of %s, which did not answer", st.NodeID)
			}
			if len(st.Instances) != 1 || st.Instances[0].InstanceID != "vm-"+st.NodeID || st.Instances[0].MemoryBytes != 300<<20 {
				t.Fatalf("published %+v", st)
			}
		}

		// close while the hung runner's second call runs: it returns without waiting for that
		// call's deadline, and nothing of the sampler is left.
		before := time.Now()
		s.close()
		if time.Since(before) != 0 {
			t.Fatalf("close waited %v of the bubble's clock for the hung call", time.Since(before))
		}
		if n := samplerGoroutines(); n != 0 {
			t.Fatalf("%d sampler goroutines left after close", n)
		}
		n := pub.count()
		time.Sleep(5 * interval)
		synctest.Wait()
		if pub.count() != n {
			t.Fatalf("published after close: %v", pub.since(n, start))
		}
	})
}
