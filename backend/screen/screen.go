// Package screen fans the live screen of desktops out to their viewers (DESIGN data flow 3).
//
// Hubs keeps at most one Hub per desktop. A Hub holds ONE frame stream from the desktop's
// frame source while at least one Viewer watches, and closes it when the last viewer leaves.
// The source is a desktop's in-guest driver (guest.Stream: JPEG, changed frames only, at most
// MaxFPS) or the execution node's own screen (package hostdesk: captures compared and sent
// only when they changed); the hub does not care which. Every frame the stream
// delivers is first reported to the Observer (control.Manager.ObserveFrame, so a lease can
// fence input aimed at frames from before it began) and then offered to every viewer.
//
// A viewer's mailbox has one slot: a new frame replaces an unread one, so a slow viewer gets
// the newest screen and never a backlog, and the memory a viewer holds is one frame however
// slow it is. A quiet screen produces no frames at all (the driver only answers next_frame
// when the screen changed), so an idle desktop costs its viewers no traffic.
//
// Version 2 viewers (WatchRegions, regions.go) get the screen as region updates instead: a
// RegionHub holds ONE region stream of the driver per desktop (guest.Client.NextUpdate) and
// a pointer report loop. Updates build on each other, so a region viewer's mailbox queues
// them (merged into one message when written) up to a limit, past which the viewer starts
// over from a keyframe of what the others have (guest.Client.Keyframe). Each region viewer
// has a quality level (Levels); the hub asks the driver to encode every JPEG region once per
// level in use, so viewers at one level share one encoding. Flow (flow.go) is the per-viewer
// flow control the computer channel runs to pick that level and to hold updates back while a
// viewer's link is behind.
//
// Goroutines: each Hub runs one goroutine (its stream loop), each RegionHub three (updates,
// pointer, keyframes), all owned by Hubs: Close cancels every hub and waits for them.
// Viewers own no goroutine. Hubs, Hub, RegionHub and the viewers are safe for concurrent use.
package screen

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"cubicle/backend/fault"
	"cubicle/backend/guest"
)

// DefaultMaxFPS caps the frame rate of a hub's stream.
const DefaultMaxFPS = 30

// DefaultQuality is the JPEG quality of streamed frames.
const DefaultQuality = 75

// Source opens a frame stream of a screen: *guest.Client (a desktop's driver) and
// *hostdesk.Desktop (the host's own screen) satisfy it. The hub never closes the Source
// itself: its owner does.
type Source interface {
	Frames(ctx context.Context, o guest.StreamOptions) (guest.FrameStream, error)
}

// Observer is told about every frame before viewers get it; *control.Manager satisfies it.
// ObserveFrame must be cheap and must not block.
type Observer interface {
	ObserveFrame(desktopID string, frameID uint64)
}

// Config configures Hubs. Every field is optional.
type Config struct {
	// Observer is told about every frame sent (the control manager); nil tells nobody.
	Observer Observer
	// Logger receives stream starts, stops and failures; nil discards.
	Logger *slog.Logger
	// MaxFPS caps each stream; 0 means DefaultMaxFPS; at most 60.
	MaxFPS int
	// Quality is the JPEG quality 1–100; 0 means DefaultQuality.
	Quality int
	// MaxWidth downscales frames wider than this; 0 keeps the native size.
	MaxWidth int
}

// ErrClosed is the class of the error a viewer ends with when Hubs is closed.
var ErrClosed = fault.Unavailable("screen: the screen service is shut down")

// Hubs is the set of hubs, one per watched desktop. Create it with New; Close it.
type Hubs struct {
	cfg Config
	log *slog.Logger

	ctx    context.Context // lifetime; cancelled by Close
	cancel context.CancelFunc
	wg     sync.WaitGroup // one per running hub goroutine

	mu     sync.Mutex
	hubs   map[string]*Hub       // guarded by mu; the current frame hub of each watched desktop
	rhubs  map[string]*RegionHub // guarded by mu; the current region hub of each watched desktop
	closed bool                  // guarded by mu
}

// New returns an empty set of hubs.
func New(cfg Config) *Hubs {
	if cfg.MaxFPS <= 0 {
		cfg.MaxFPS = DefaultMaxFPS
	}
	if cfg.MaxFPS > 60 {
		cfg.MaxFPS = 60
	}
	if cfg.Quality <= 0 || cfg.Quality > 100 {
		cfg.Quality = DefaultQuality
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	ctx, cancel := context.WithCancel(context.Background())
	return &Hubs{cfg: cfg, log: cfg.Logger, ctx: ctx, cancel: cancel, hubs: map[string]*Hub{}, rhubs: map[string]*RegionHub{}}
}

// Watch adds a viewer of desktopID's screen, served by src. The first viewer of a desktop
// starts its hub; a viewer joining a running hub gets the newest frame at once. When src is
// not the running hub's source (the desktop was recreated and has a new driver connection),
// a new hub takes its place for new viewers; the old one serves its viewers until they leave
// or its stream fails. The viewer must be closed.
func (hs *Hubs) Watch(desktopID string, src Source) (*Viewer, error) {
	if desktopID == "" || src == nil {
		return nil, fault.Invalid("screen: watch: a desktop and a frame source are required")
	}
	hs.mu.Lock()
	defer hs.mu.Unlock()
	if hs.closed {
		return nil, fmt.Errorf("screen: watch %s: %w", desktopID, ErrClosed)
	}
	h := hs.hubs[desktopID]
	if h == nil || h.src != src || h.ended() {
		h = hs.startLocked(desktopID, src)
	}
	return h.add(), nil
}

// Viewers returns how many viewers watch desktopID through its current hub.
func (hs *Hubs) Viewers(desktopID string) int {
	hs.mu.Lock()
	h := hs.hubs[desktopID]
	hs.mu.Unlock()
	if h == nil {
		return 0
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.viewers)
}

// Streaming reports whether a hub holds a driver stream (frames or regions) open for
// desktopID.
func (hs *Hubs) Streaming(desktopID string) bool {
	hs.mu.Lock()
	h, rh := hs.hubs[desktopID], hs.rhubs[desktopID]
	hs.mu.Unlock()
	return (h != nil && !h.ended()) || (rh != nil && !rh.ended())
}

// RegionLevels returns the quality level of each region viewer of desktopID's current hub
// (in no particular order), and how many updates the hub has published.
func (hs *Hubs) RegionLevels(desktopID string) (levels []int, published uint64) {
	hs.mu.Lock()
	h := hs.rhubs[desktopID]
	hs.mu.Unlock()
	if h == nil {
		return nil, 0
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	for v := range h.viewers {
		levels = append(levels, v.Level())
	}
	return levels, h.published
}

// RegionViewers returns how many region viewers watch desktopID through its current hub.
func (hs *Hubs) RegionViewers(desktopID string) int {
	hs.mu.Lock()
	h := hs.rhubs[desktopID]
	hs.mu.Unlock()
	if h == nil {
		return 0
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.viewers)
}

// Close ends every hub and viewer (viewers end with ErrClosed) and waits for the hubs'
// goroutines. It is idempotent.
func (hs *Hubs) Close() error {
	hs.mu.Lock()
	hs.closed = true
	hubs, rhubs := hs.hubs, hs.rhubs
	hs.hubs, hs.rhubs = map[string]*Hub{}, map[string]*RegionHub{}
	hs.mu.Unlock()
	hs.cancel()
	for _, h := range hubs {
		h.end(ErrClosed)
	}
	for _, h := range rhubs {
		h.end(ErrClosed)
	}
	hs.wg.Wait()
	return nil
}

// startLocked starts a hub for desktopID; the caller holds hs.mu.
func (hs *Hubs) startLocked(desktopID string, src Source) *Hub {
	ctx, cancel := context.WithCancel(hs.ctx)
	h := &Hub{hubs: hs, id: desktopID, src: src, cancel: cancel, viewers: map[*Viewer]struct{}{},
		done: make(chan struct{})}
	hs.hubs[desktopID] = h
	hs.wg.Add(1)
	go h.run(ctx)
	return h
}

// forget removes h from the map if it is still desktopID's current hub.
func (hs *Hubs) forget(h *Hub) {
	hs.mu.Lock()
	if hs.hubs[h.id] == h {
		delete(hs.hubs, h.id)
	}
	hs.mu.Unlock()
}

// Hub streams one desktop's screen to its viewers.
type Hub struct {
	hubs   *Hubs
	id     string
	src    Source
	cancel context.CancelFunc
	done   chan struct{} // closed when the hub has ended (no more frames)

	frames atomic.Uint64 // frames received from the driver

	mu      sync.Mutex
	viewers map[*Viewer]struct{} // guarded by mu
	last    *guest.Frame         // guarded by mu; the newest frame
	err     error                // guarded by mu; why the hub ended
	stopped bool                 // guarded by mu
}

// ended reports whether the hub has stopped (its last viewer left or its stream failed).
func (h *Hub) ended() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.stopped
}

// add registers a new viewer and hands it the newest frame; on a hub that has ended the viewer
// ends at once with the hub's error.
func (h *Hub) add() *Viewer {
	v := &Viewer{hub: h, ready: make(chan struct{}, 1), done: make(chan struct{})}
	h.mu.Lock()
	if h.stopped {
		// The hub ended between Watch's look and this add (its source failed at once):
		// the viewer hears why instead of waiting for ever.
		err := h.err
		h.mu.Unlock()
		if err == nil {
			err = fault.Unavailable("screen %s: the stream ended", h.id)
		}
		v.finish(err)
		return v
	}
	h.viewers[v] = struct{}{}
	last := h.last
	h.mu.Unlock()
	if last != nil {
		v.put(last)
	}
	return v
}

// remove unregisters v; the last viewer leaving stops the hub.
func (h *Hub) remove(v *Viewer) {
	h.mu.Lock()
	delete(h.viewers, v)
	last := len(h.viewers) == 0 && !h.stopped
	h.mu.Unlock()
	if last {
		h.hubs.mu.Lock() // a concurrent Watch must not join a stopping hub
		h.mu.Lock()
		still := len(h.viewers) == 0 && !h.stopped
		if still {
			h.stopped = true
			if h.hubs.hubs[h.id] == h {
				delete(h.hubs.hubs, h.id)
			}
		}
		h.mu.Unlock()
		h.hubs.mu.Unlock()
		if still {
			h.cancel()
		}
	}
}

// end stops the hub and ends every viewer with err.
func (h *Hub) end(err error) {
	h.mu.Lock()
	h.stopped = true
	if h.err == nil {
		h.err = err
	}
	vs := make([]*Viewer, 0, len(h.viewers))
	for v := range h.viewers {
		vs = append(vs, v)
	}
	h.mu.Unlock()
	h.cancel()
	for _, v := range vs {
		v.finish(err)
	}
}

// run is the hub's goroutine: it pulls frames from the driver and offers them to viewers.
func (h *Hub) run(ctx context.Context) {
	defer h.hubs.wg.Done()
	defer close(h.done)
	defer h.hubs.forget(h)
	log := h.hubs.log.With("desktop", h.id)
	cfg := h.hubs.cfg
	// The hub paces requests itself, from the start of one request to the start of the next,
	// so capture, encoding and transfer overlap the frame interval instead of adding to it
	// (guest.Stream counts its interval from a frame's arrival, which at 1280x800 turned a
	// 30 fps cap into ≈18 fps). The stream's own cap is set to its maximum, 60 fps, which
	// still spaces frames after a long quiet spell.
	gap := time.Second / time.Duration(cfg.MaxFPS)
	st, err := h.src.Frames(ctx, guest.StreamOptions{MaxFPS: 60,
		ScreenshotOptions: guest.ScreenshotOptions{Format: "jpeg", Quality: cfg.Quality, MaxWidth: cfg.MaxWidth}})
	if err != nil {
		log.Warn("screen stream failed to start", "err", err)
		h.end(fmt.Errorf("screen %s: %w", h.id, err))
		return
	}
	defer st.Close()
	log.Debug("screen stream started")
	start := time.Now()
	var next time.Time // earliest start of the next request
	for {
		if wait := time.Until(next); wait > 0 {
			t := time.NewTimer(wait)
			select {
			case <-ctx.Done():
				t.Stop()
			case <-t.C:
			}
		}
		next = time.Now().Add(gap)
		f, err := st.Next(ctx)
		if err != nil {
			if ctx.Err() != nil {
				log.Debug("screen stream stopped", "frames", h.frames.Load(), "after", time.Since(start))
				if h.hubs.ctx.Err() != nil {
					h.end(ErrClosed)
				} else {
					h.end(fault.Unavailable("screen %s: nobody watches", h.id))
				}
				return
			}
			log.Warn("screen stream failed", "err", err, "frames", h.frames.Load())
			h.end(fmt.Errorf("screen %s: %w", h.id, err))
			return
		}
		h.frames.Add(1)
		if o := cfg.Observer; o != nil {
			o.ObserveFrame(h.id, f.ID)
		}
		h.publish(&f)
	}
}

// publish makes f the newest frame and puts it in every viewer's mailbox.
func (h *Hub) publish(f *guest.Frame) {
	h.mu.Lock()
	h.last = f
	for v := range h.viewers {
		v.put(f)
	}
	h.mu.Unlock()
}

// Viewer is one watcher of a desktop's screen: a one-slot mailbox of the newest unread
// frame. Frames share their Data with other viewers: never modify it.
type Viewer struct {
	hub   *Hub
	ready chan struct{} // capacity 1: a frame is waiting
	done  chan struct{} // closed when the viewer has ended

	once sync.Once

	mu      sync.Mutex
	slot    *guest.Frame // guarded by mu
	err     error        // guarded by mu
	dropped uint64       // guarded by mu; frames replaced before being read
	closed  bool         // guarded by mu
}

func (v *Viewer) put(f *guest.Frame) {
	v.mu.Lock()
	if v.closed {
		v.mu.Unlock()
		return
	}
	if v.slot != nil {
		v.dropped++
	}
	v.slot = f
	v.mu.Unlock()
	select {
	case v.ready <- struct{}{}:
	default:
	}
}

func (v *Viewer) finish(err error) {
	v.mu.Lock()
	if v.err == nil {
		v.err = err
	}
	v.mu.Unlock()
	v.once.Do(func() { close(v.done) })
}

// Ready is signalled when a frame is waiting; then call Take.
func (v *Viewer) Ready() <-chan struct{} { return v.ready }

// Done is closed when the viewer has ended: Close was called, or the hub's stream ended
// (Err says why). A frame still waiting may be taken afterwards.
func (v *Viewer) Done() <-chan struct{} { return v.done }

// Err says why the viewer ended; nil while it runs.
func (v *Viewer) Err() error {
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.err
}

// Take returns the waiting frame and empties the mailbox; ok is false when none waits.
func (v *Viewer) Take() (f guest.Frame, ok bool) {
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.slot == nil {
		return guest.Frame{}, false
	}
	f, v.slot = *v.slot, nil
	return f, true
}

// Pending reports how many frames wait in the mailbox: 0 or 1.
func (v *Viewer) Pending() int {
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.slot != nil {
		return 1
	}
	return 0
}

// Dropped returns how many frames were replaced before this viewer read them.
func (v *Viewer) Dropped() uint64 {
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.dropped
}

// Next waits for the next frame; it fails when ctx ends or the viewer has ended.
func (v *Viewer) Next(ctx context.Context) (guest.Frame, error) {
	for {
		if f, ok := v.Take(); ok {
			return f, nil
		}
		select {
		case <-v.ready:
		case <-v.done:
			if f, ok := v.Take(); ok {
				return f, nil
			}
			return guest.Frame{}, v.Err()
		case <-ctx.Done():
			return guest.Frame{}, fmt.Errorf("screen: next frame: %w", ctx.Err())
		}
	}
}

// Close stops watching; the last viewer of a hub closing stops its stream. Idempotent.
func (v *Viewer) Close() error {
	v.mu.Lock()
	already := v.closed
	v.closed = true
	v.slot = nil
	v.mu.Unlock()
	if already {
		return nil
	}
	v.finish(errViewerClosed)
	v.hub.remove(v)
	return nil
}

var errViewerClosed = errors.New("screen: viewer closed")
