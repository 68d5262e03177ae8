package screen

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"cubicle/backend/fault"
	"cubicle/backend/guest"
)

// Level is how a region viewer gets photographic regions: the JPEG quality and the scale (1
// full resolution, 2 half: a quarter of the pixels, stretched back by the client). Text and
// other lossless regions are never scaled.
type Level struct{ Quality, Scale int }

// Levels are the levels a region viewer can be at, best first. A viewer starts at level 0
// and its flow control (Flow) moves it down when its link cannot keep up and back up when it
// recovers. The driver encodes each JPEG region once per level in use, so viewers at one
// level share one encoding.
var Levels = [...]Level{{75, 1}, {50, 1}, {30, 1}, {40, 2}, {25, 2}}

// args returns the qualities and scales of levels, in order.
func args(levels []Level) (qs, scales []int) {
	half := false
	for _, l := range levels {
		qs, scales = append(qs, l.Quality), append(scales, l.Scale)
		half = half || l.Scale != 1
	}
	if !half {
		scales = nil
	}
	return qs, scales
}

// RegionSource is a desktop driver with region streams and pointer reports; *guest.Client
// satisfies it. The hub never closes it.
type RegionSource interface {
	NextUpdate(ctx context.Context, a guest.UpdateArgs) (guest.Update, error)
	Keyframe(ctx context.Context, a guest.KeyframeArgs) (guest.Update, error)
	EndUpdates(ctx context.Context, stream uint64) error
	NextPointer(ctx context.Context, a guest.PointerArgs) (guest.PointerState, []byte, error)
}

// ErrNoRegions is the class of the error a region viewer ends with when the desktop's driver
// has no region streams (an older image): the viewer should fall back to Watch.
var ErrNoRegions = errors.New("screen: the desktop's driver sends no region updates (an older desktop image)")

// Limits of a region viewer's mailbox: beyond them its pending updates are dropped and it
// starts again from a keyframe (cheaper than catching up).
const (
	maxPendingBytes   = 6 << 20
	maxPendingUpdates = 90
)

// Cursor is the pointer's image: a PNG with its size and hot spot.
type Cursor struct {
	Serial        uint32
	Width, Height int
	HotX, HotY    int
	PNG           []byte
}

// Pointer is the pointer's position.
type Pointer struct {
	X, Y   int
	Serial uint32 // the image shown (Cursor.Serial)
}

// Batch is what a region viewer takes at once: the updates that arrived since it last took
// (in order; the first may be a keyframe), the newest cursor image when it changed, and the
// newest pointer position when it moved. Updates are shared with other viewers: never
// modify them.
type Batch struct {
	Updates []*guest.Update
	Cursor  *Cursor
	Pointer *Pointer
	// Level is the viewer's quality level when it took the batch.
	Level int
}

// WatchRegions adds a viewer of desktopID's screen as region updates and pointer reports
// (docs/computer-protocol.md, version 2), served by src. The first viewer starts the
// desktop's region hub; later ones start from a keyframe of what the others have. The viewer
// must be closed.
func (hs *Hubs) WatchRegions(desktopID string, src RegionSource) (*RegionViewer, error) {
	if desktopID == "" || src == nil {
		return nil, fault.Invalid("screen: watch: a desktop and a region source are required")
	}
	hs.mu.Lock()
	defer hs.mu.Unlock()
	if hs.closed {
		return nil, fmt.Errorf("screen: watch %s: %w", desktopID, ErrClosed)
	}
	h := hs.rhubs[desktopID]
	if h == nil || h.src != src || h.ended() {
		h = hs.startRegionsLocked(desktopID, src)
	}
	return h.add(), nil
}

// startRegionsLocked starts a region hub; the caller holds hs.mu.
func (hs *Hubs) startRegionsLocked(desktopID string, src RegionSource) *RegionHub {
	ctx, cancel := context.WithCancel(hs.ctx)
	var id [8]byte
	rand.Read(id[:])
	h := &RegionHub{hubs: hs, id: desktopID, src: src, stream: binary.BigEndian.Uint64(id[:])>>1 | 1, cancel: cancel,
		viewers: map[*RegionViewer]struct{}{}, wantKey: make(chan struct{}, 1)}
	hs.rhubs[desktopID] = h
	hs.wg.Add(3)
	go h.run(ctx)
	go h.pointers(ctx)
	go h.keyframes(ctx)
	return h
}

// RegionHub streams one desktop's screen as region updates to its viewers. Three goroutines,
// owned by Hubs: run (the update stream), pointers (pointer reports) and keyframes (for
// viewers joining or starting over).
type RegionHub struct {
	hubs   *Hubs
	id     string
	src    RegionSource
	stream uint64 // the driver's region stream id
	cancel context.CancelFunc

	wantKey chan struct{} // capacity 1: a viewer waits for a keyframe

	mu        sync.Mutex
	viewers   map[*RegionViewer]struct{} // guarded by mu
	seq       uint64                     // guarded by mu; the newest update published (0: none yet)
	frameID   uint64                     // guarded by mu; its frame id
	cursor    *Cursor                    // guarded by mu; the newest cursor image
	pointer   *Pointer                   // guarded by mu; the newest position
	err       error                      // guarded by mu; why the hub ended
	stopped   bool                       // guarded by mu
	published uint64                     // guarded by mu; updates published (for tests and logs)
	// noRefresh: the update asked for now was asked without refreshes; cancelCall ends that
	// ask (a viewer came to the best level: it is asked again with them). Guarded by mu.
	noRefresh  bool
	cancelCall context.CancelFunc
}

func (h *RegionHub) ended() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.stopped
}

// add registers a viewer; it gets the stream's first update, or asks for a keyframe. On a hub
// that has ended the viewer ends at once with the hub's error: a new hub's stream can end
// (a driver without region streams answers its first ask at once) before its first viewer is
// added, and that viewer must hear why rather than wait for ever.
func (h *RegionHub) add() *RegionViewer {
	v := &RegionViewer{hub: h, ready: make(chan struct{}, 1), done: make(chan struct{})}
	// Once v is in h.viewers the hub's goroutines write its fields (under v.mu): what add
	// needs of them afterwards is read here, while h.mu keeps them out.
	h.mu.Lock()
	if h.stopped {
		err := h.err
		h.mu.Unlock()
		if err == nil {
			err = h.stopErr()
		}
		v.finish(err)
		return v
	}
	h.viewers[v] = struct{}{}
	v.mu.Lock() // h.mu, then v.mu: the order pointers and run take them in
	v.cursor, v.pointer = h.cursor, h.pointer
	v.awaitKey = h.seq != 0
	awaitKey, pointed := v.awaitKey, v.cursor != nil || v.pointer != nil
	v.mu.Unlock()
	h.mu.Unlock()
	h.refreshWanted() // it starts at the best level
	if awaitKey {
		h.askKey()
	}
	if pointed {
		v.signal()
	}
	return v
}

func (h *RegionHub) askKey() {
	select {
	case h.wantKey <- struct{}{}:
	default:
	}
}

// remove unregisters v; the last viewer leaving stops the hub.
func (h *RegionHub) remove(v *RegionViewer) {
	h.mu.Lock()
	delete(h.viewers, v)
	last := len(h.viewers) == 0 && !h.stopped
	h.mu.Unlock()
	if !last {
		return
	}
	hs := h.hubs
	hs.mu.Lock() // a concurrent WatchRegions must not join a stopping hub
	h.mu.Lock()
	still := len(h.viewers) == 0 && !h.stopped
	if still {
		h.stopped = true
		if hs.rhubs[h.id] == h {
			delete(hs.rhubs, h.id)
		}
	}
	h.mu.Unlock()
	hs.mu.Unlock()
	if still {
		h.cancel()
	}
}

// end stops the hub and ends every viewer with err.
func (h *RegionHub) end(err error) {
	h.mu.Lock()
	h.stopped = true
	if h.err == nil {
		h.err = err
	}
	vs := make([]*RegionViewer, 0, len(h.viewers))
	for v := range h.viewers {
		vs = append(vs, v)
	}
	h.mu.Unlock()
	h.cancel()
	h.hubs.mu.Lock()
	if h.hubs.rhubs[h.id] == h {
		delete(h.hubs.rhubs, h.id)
	}
	h.hubs.mu.Unlock()
	for _, v := range vs {
		v.finish(err)
	}
}

// levels returns the levels viewers are at, best first (the best level alone when there is
// no viewer).
func (h *RegionHub) levels() []Level {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.levelsLocked()
}

// levelsLocked is levels; the caller holds mu.
func (h *RegionHub) levelsLocked() []Level {
	used := [len(Levels)]bool{}
	for v := range h.viewers {
		used[v.Level()] = true
	}
	var ls []Level
	for i, u := range used {
		if u {
			ls = append(ls, Levels[i])
		}
	}
	if len(ls) == 0 {
		ls = append(ls, Levels[0])
	}
	return ls
}

// refreshingLocked reports whether a viewer takes lossless refreshes (with none, the driver
// is asked for them as before viewers say otherwise: a viewer starts taking them). The
// caller holds mu.
func (h *RegionHub) refreshingLocked() bool {
	for v := range h.viewers {
		if v.takesRefresh() {
			return true
		}
	}
	return len(h.viewers) == 0
}

// stopErr is what a viewer ends with when the hub's context ended.
func (h *RegionHub) stopErr() error {
	if h.hubs.ctx.Err() != nil {
		return ErrClosed
	}
	return fault.Unavailable("screen %s: nobody watches", h.id)
}

// run is the update stream: it asks the driver for each next update, paced to MaxFPS, and
// publishes it to every viewer. Lossless refreshes are asked for only while a viewer takes
// them (at the best level, its link calm: see SetRefresh): a refresh is a lossless encode of
// everything that stopped changing — on a photo a whole screen is megabytes, and on a busy
// machine its PNG takes the driver most of a second, during which no change reaches anyone
// (issue 31 item 4: the live view stalled behind a slow link under load).
func (h *RegionHub) run(ctx context.Context) {
	defer h.hubs.wg.Done()
	log := h.hubs.log.With("desktop", h.id, "stream", h.stream)
	cfg := h.hubs.cfg
	gap := time.Second / time.Duration(cfg.MaxFPS)
	defer func() {
		ectx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
		h.src.EndUpdates(ectx, h.stream) // frees the driver's copy of the screen; best effort
		cancel()
	}()
	var (
		after uint64
		next  time.Time
		n     int
	)
	for {
		if wait := time.Until(next); wait > 0 {
			t := time.NewTimer(wait)
			select {
			case <-ctx.Done():
			case <-t.C:
			}
			t.Stop()
		}
		next = time.Now().Add(gap)
		cctx, cancelCall := context.WithCancel(ctx)
		h.mu.Lock()
		ls := h.levelsLocked()
		h.noRefresh, h.cancelCall = !h.refreshingLocked(), cancelCall
		var refresh time.Duration
		if h.noRefresh {
			refresh = -1 // nobody takes refreshes: the driver makes none
		}
		h.mu.Unlock()
		qs, scales := args(ls)
		u, err := h.src.NextUpdate(cctx, guest.UpdateArgs{Stream: h.stream, After: after, Qualities: qs, Scales: scales, Refresh: refresh})
		recalled := cctx.Err() != nil && ctx.Err() == nil // by refreshWanted
		cancelCall()
		if err != nil && recalled {
			next = time.Time{}
			continue // a viewer came to the best level: ask again, with refreshes
		}
		if err != nil {
			switch {
			case ctx.Err() != nil:
				log.Debug("region stream stopped", "updates", n)
				h.end(h.stopErr())
			case n == 0 && errors.Is(err, fault.ErrInvalid):
				log.Info("the desktop's driver has no region streams; viewers fall back to frames", "err", err)
				h.end(fmt.Errorf("%w: %v", ErrNoRegions, err))
			default:
				log.Warn("region stream failed", "err", err, "updates", n)
				h.end(fmt.Errorf("screen %s: %w", h.id, err))
			}
			return
		}
		n++
		after = u.Seq
		if o := cfg.Observer; o != nil {
			o.ObserveFrame(h.id, u.FrameID)
		}
		h.publish(&u)
	}
}

// publish hands u to every viewer.
func (h *RegionHub) publish(u *guest.Update) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.seq, h.frameID = u.Seq, u.FrameID
	h.published++
	for v := range h.viewers {
		if v.put(u) {
			h.askKeyLocked()
		}
	}
}

func (h *RegionHub) askKeyLocked() {
	select {
	case h.wantKey <- struct{}{}:
	default:
	}
}

// keyframes serves viewers waiting for a keyframe: one request per quality level they are
// at, delivered to each of them.
func (h *RegionHub) keyframes(ctx context.Context) {
	defer h.hubs.wg.Done()
	retry := time.NewTimer(time.Hour)
	retry.Stop()
	defer retry.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-h.wantKey:
		case <-retry.C:
		}
		h.mu.Lock()
		waiting := map[*RegionViewer]int{}
		levels := map[int]bool{}
		for v := range h.viewers {
			if lv, ok := v.needsKey(); ok {
				waiting[v] = lv
				levels[lv] = true
			}
		}
		started := h.seq != 0
		h.mu.Unlock()
		if len(waiting) == 0 || !started {
			continue // the stream's first update is a keyframe for everyone
		}
		for lv := range levels {
			qs, scales := args([]Level{Levels[lv]})
			k, err := h.src.Keyframe(ctx, guest.KeyframeArgs{Stream: h.stream, Qualities: qs, Scales: scales})
			if err != nil {
				if ctx.Err() != nil {
					return
				}
				// The stream is being restarted (a keyframe of its own is coming to everyone)
				// or the driver failed: try again shortly.
				h.hubs.log.Debug("keyframe failed", "desktop", h.id, "err", err)
				retry.Reset(100 * time.Millisecond)
				continue
			}
			h.mu.Lock()
			for v, vl := range waiting {
				if vl == lv {
					v.putKey(&k)
				}
			}
			h.mu.Unlock()
		}
	}
}

// pointers follows the pointer: each position and image change goes to every viewer.
func (h *RegionHub) pointers(ctx context.Context) {
	defer h.hubs.wg.Done()
	var (
		after uint64
		shape uint32
	)
	for {
		st, img, err := h.src.NextPointer(ctx, guest.PointerArgs{After: after, Shape: shape})
		if err != nil {
			if ctx.Err() == nil {
				// An older driver, or one without XFIXES: no pointer, the screen goes on.
				h.hubs.log.Debug("pointer reports ended", "desktop", h.id, "err", err)
			}
			return
		}
		after = st.Gen
		var cur *Cursor
		if st.Shape != nil && len(img) > 0 {
			shape = st.Serial
			cur = &Cursor{Serial: st.Serial, Width: st.Shape.Width, Height: st.Shape.Height, HotX: st.Shape.HotX,
				HotY: st.Shape.HotY, PNG: img}
		}
		p := &Pointer{X: st.X, Y: st.Y, Serial: st.Serial}
		h.mu.Lock()
		if cur != nil {
			h.cursor = cur
		}
		h.pointer = p
		for v := range h.viewers {
			v.putPointer(cur, p)
		}
		h.mu.Unlock()
	}
}

// RegionViewer is one watcher of a desktop's screen as region updates. Its mailbox holds the
// updates it has not taken yet (they cannot be skipped: each builds on the one before), up to
// a limit beyond which it starts over from a keyframe, plus the newest pointer position and
// cursor image (those replace older ones).
type RegionViewer struct {
	hub   *RegionHub
	ready chan struct{} // capacity 1: something is waiting
	done  chan struct{}
	once  sync.Once

	mu        sync.Mutex
	level     int             // guarded by mu; index into Levels
	noRefresh bool            // guarded by mu; it does not take lossless refreshes (SetRefresh)
	pending   []*guest.Update // guarded by mu
	bytes     int             // guarded by mu; of pending
	awaitKey  bool            // guarded by mu; only a keyframe may come next
	cursor    *Cursor         // guarded by mu; not yet taken
	pointer   *Pointer        // guarded by mu; not yet taken
	restarts  int             // guarded by mu; times the mailbox overflowed
	refreshAt time.Time       // guarded by mu; when Refresh last asked for a keyframe
	err       error           // guarded by mu
	closed    bool            // guarded by mu
}

func (v *RegionViewer) signal() {
	select {
	case v.ready <- struct{}{}:
	default:
	}
}

// put queues a published update; it reports whether the viewer now needs a keyframe.
func (v *RegionViewer) put(u *guest.Update) (wantKey bool) {
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.closed {
		return false
	}
	if u.Key {
		// The stream started over (first update, new screen, resynchronised): a keyframe
		// for everyone, nothing before it matters.
		v.pending, v.bytes, v.awaitKey = v.pending[:0], 0, false
	}
	v.pending = append(v.pending, u)
	v.bytes += len(u.Data)
	if !v.awaitKey && (v.bytes > maxPendingBytes || len(v.pending) > maxPendingUpdates) {
		// Too far behind: start over from a keyframe, keeping what arrives meanwhile.
		v.pending, v.bytes, v.awaitKey = v.pending[:0], 0, true
		v.restarts++
		return true
	}
	if !v.awaitKey {
		v.signal()
	}
	return false
}

// needsKey reports whether v waits for a keyframe, and at which level.
func (v *RegionViewer) needsKey() (int, bool) {
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.level, v.awaitKey && !v.closed
}

// putKey delivers a keyframe: updates after it stay queued, those it includes go.
func (v *RegionViewer) putKey(k *guest.Update) {
	v.mu.Lock()
	defer v.mu.Unlock()
	if !v.awaitKey || v.closed {
		return
	}
	keep := v.pending[:0]
	bytes := len(k.Data)
	for _, u := range v.pending {
		if u.Seq > k.Seq {
			keep = append(keep, u)
			bytes += len(u.Data)
		}
	}
	v.pending = append([]*guest.Update{k}, keep...)
	v.bytes, v.awaitKey = bytes, false
	v.signal()
}

func (v *RegionViewer) putPointer(c *Cursor, p *Pointer) {
	v.mu.Lock()
	if v.closed {
		v.mu.Unlock()
		return
	}
	if c != nil {
		v.cursor = c
	}
	v.pointer = p
	v.mu.Unlock()
	v.signal()
}

func (v *RegionViewer) finish(err error) {
	v.mu.Lock()
	if v.err == nil {
		v.err = err
	}
	v.mu.Unlock()
	v.once.Do(func() { close(v.done) })
}

// Ready is signalled when something waits; then call Take.
func (v *RegionViewer) Ready() <-chan struct{} { return v.ready }

// Done is closed when the viewer has ended (Close, or its hub ended: Err says why).
func (v *RegionViewer) Done() <-chan struct{} { return v.done }

// Err says why the viewer ended; nil while it runs. errors.Is(err, ErrNoRegions): the
// desktop's driver is too old for region streams.
func (v *RegionViewer) Err() error {
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.err
}

// Take empties the mailbox; ok is false when nothing waits.
func (v *RegionViewer) Take() (b Batch, ok bool) {
	v.mu.Lock()
	defer v.mu.Unlock()
	if !v.awaitKey && len(v.pending) > 0 {
		b.Updates = slices.Clone(v.pending)
		v.pending, v.bytes = v.pending[:0], 0
	}
	b.Cursor, b.Pointer, b.Level = v.cursor, v.pointer, v.level
	v.cursor, v.pointer = nil, nil
	return b, len(b.Updates) > 0 || b.Cursor != nil || b.Pointer != nil
}

// TakePointer takes only the pointer position and cursor image waiting (updates stay); ok is
// false when neither waits. Flow control uses it while it holds updates back.
func (v *RegionViewer) TakePointer() (b Batch, ok bool) {
	v.mu.Lock()
	defer v.mu.Unlock()
	b.Cursor, b.Pointer, b.Level = v.cursor, v.pointer, v.level
	v.cursor, v.pointer = nil, nil
	return b, b.Cursor != nil || b.Pointer != nil
}

// Pending returns how many updates and bytes wait in the mailbox.
func (v *RegionViewer) Pending() (updates, bytes int) {
	v.mu.Lock()
	defer v.mu.Unlock()
	return len(v.pending), v.bytes
}

// Restarts returns how often the viewer fell so far behind that it started over.
func (v *RegionViewer) Restarts() int {
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.restarts
}

// Level returns the viewer's quality level (an index into Levels).
func (v *RegionViewer) Level() int {
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.level
}

// SetLevel sets the viewer's quality level (clamped to Levels); updates encoded from then on
// include its quality.
func (v *RegionViewer) SetLevel(l int) {
	v.mu.Lock()
	v.level = min(max(l, 0), len(Levels)-1)
	v.mu.Unlock()
	if v.takesRefresh() {
		v.hub.refreshWanted()
	}
}

// SetRefresh says whether the viewer takes lossless refreshes (the default): a viewer whose
// link is behind, or was lately, drops them, and while no viewer takes them the driver is
// not asked to make them. Only a viewer at the best level takes them in any case.
func (v *RegionViewer) SetRefresh(take bool) {
	v.mu.Lock()
	v.noRefresh = !take
	v.mu.Unlock()
	if v.takesRefresh() {
		v.hub.refreshWanted()
	}
}

// takesRefresh reports whether v takes lossless refreshes: at the best level, and not
// refused by SetRefresh.
func (v *RegionViewer) takesRefresh() bool {
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.level == 0 && !v.noRefresh && !v.closed
}

// refreshWanted ends an update asked for without refreshes: a viewer takes them again (run
// asks again, with them, so that what stopped changing becomes exact even on a screen that
// no longer changes).
func (h *RegionHub) refreshWanted() {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.noRefresh && h.cancelCall != nil {
		h.noRefresh = false
		h.cancelCall()
	}
}

// Refresh asks for a keyframe for this viewer (a client that lost track of its screen); what
// is pending is dropped. While one is awaited, and within refreshEvery of the last, it does
// nothing more: a keyframe costs the driver a whole-screen encode, and a client asking in a
// loop must not make it encode in a loop.
func (v *RegionViewer) Refresh() {
	v.mu.Lock()
	if v.closed || v.awaitKey || time.Since(v.refreshAt) < refreshEvery {
		v.mu.Unlock()
		return
	}
	v.pending, v.bytes, v.awaitKey, v.refreshAt = v.pending[:0], 0, true, time.Now()
	v.mu.Unlock()
	v.hub.askKey()
}

// refreshEvery is the least time between two keyframes a viewer's Refresh asks for.
const refreshEvery = time.Second

// Close stops watching; the last viewer of a hub closing stops it. Idempotent.
func (v *RegionViewer) Close() error {
	v.mu.Lock()
	already := v.closed
	v.closed = true
	v.pending, v.cursor, v.pointer = nil, nil, nil
	v.mu.Unlock()
	if already {
		return nil
	}
	v.finish(errViewerClosed)
	v.hub.remove(v)
	return nil
}
