package runner

import (
	"context"
	"encoding/json"
	"io"
	"net"
	"sync"
	"sync/atomic"

	"cubicle/backend/fault"
	"cubicle/backend/store"
	"cubicle/backend/vm"
	"cubicle/runner/wire"
)

// watchers fans the desktops' manager's changes out to the server's OpWatch streams. The
// manager's callbacks must return at once, so publish never waits: a stream whose buffer is
// full loses the event and is told to resync (wire.WatchResync) when it catches up.
type watchers struct {
	mu   sync.Mutex
	subs map[*watcher]struct{}
}

type watcher struct {
	ch     chan wire.WatchEvent
	lagged atomic.Bool
}

func newWatchers() *watchers { return &watchers{subs: map[*watcher]struct{}{}} }

func (w *watchers) add() *watcher {
	s := &watcher{ch: make(chan wire.WatchEvent, 256)}
	w.mu.Lock()
	w.subs[s] = struct{}{}
	w.mu.Unlock()
	return s
}

func (w *watchers) remove(s *watcher) {
	w.mu.Lock()
	delete(w.subs, s)
	w.mu.Unlock()
}

func (w *watchers) publish(e wire.WatchEvent) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for s := range w.subs {
		select {
		case s.ch <- e:
		default:
			s.lagged.Store(true)
		}
	}
}

// The manager's callbacks (vm.Config.OnChange, OnPrepare, OnSettings).

func (w *watchers) desktop(c vm.InstanceChange) {
	d := wire.DesktopChange{InstanceID: c.InstanceID, Scope: c.Scope, AccountID: c.AccountID, AgentID: c.AgentID,
		State: c.State, Previous: c.Previous, LastError: c.LastError, Removed: c.Removed, At: c.At}
	w.publish(wire.WatchEvent{Kind: wire.WatchDesktop, Desktop: &d})
}

func (w *watchers) prepare(p vm.PrepareState) {
	w.publish(wire.WatchEvent{Kind: wire.WatchPrepare, Prepare: &p})
}

func (w *watchers) settings(ns store.NodeSettings) {
	v := vm.NodeSettingsView(ns)
	w.publish(wire.WatchEvent{Kind: wire.WatchSettings, Settings: &v})
}

// serveWatch answers OpWatch on st: OK once the stream is subscribed, then every change until
// the server closes the stream or the session ends (ctx).
func (r *Runner) serveWatch(ctx context.Context, st net.Conn) {
	if r.watch == nil { // the managed runner: the server follows its own manager directly
		wire.WriteFrame(st, wire.Response{Error: wire.ErrorOf(fault.Invalid("this runner has no event stream (%s)", wire.CapEvents))})
		return
	}
	s := r.watch.add()
	defer r.watch.remove(s)
	if err := wire.WriteFrame(st, wire.Response{Result: json.RawMessage(`true`)}); err != nil {
		return
	}
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { // the server sends nothing more: its close (or the session's end) ends the stream
		defer close(done)
		io.Copy(io.Discard, st)
		cancel()
	}()
	defer func() {
		cancel()
		st.Close()
		<-done
	}()
	for {
		select {
		case <-ctx.Done():
			return
		case e := <-s.ch:
			if wire.WriteFrame(st, e) != nil {
				return
			}
			// Lost events (the buffer was full) are announced once the buffer has drained.
			if len(s.ch) == 0 && s.lagged.Swap(false) {
				if wire.WriteFrame(st, wire.WatchEvent{Kind: wire.WatchResync}) != nil {
					return
				}
			}
		}
	}
}
