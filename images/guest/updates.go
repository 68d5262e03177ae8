//go:build linux

package main

import (
	"context"
	"sync"
	"time"

	"cubicle/images/guest/wire"
	"cubicle/images/guest/x11"
)

// A region stream (wire.OpNextUpdate, docs/guest-protocol.md) sends the screen as changed
// rectangles. The driver keeps, per stream, an exact copy of the screen as of the last update
// (ref) and which tiles the host has only lossily (JPEG); each update compares a new capture
// with ref, finds a scroll (a copy), then the changed tiles, classifies and merges them into
// rectangles and encodes each: fill, paletted or truecolour PNG, or JPEG at every quality the
// host asked for (so viewers at one quality share one encoding). A tile that stays unchanged
// for the refresh delay after a JPEG is sent again losslessly.

// defaultRefresh is how long a lossily sent tile must stay unchanged before its lossless
// refresh.
const defaultRefresh = 250 * time.Millisecond

// stream is one region stream's state. mu serialises work on it; waiting for a change does
// not hold it.
type stream struct {
	id uint64

	mu      sync.Mutex
	epoch   uint64 // the X connection ref belongs to (0: none yet)
	g       grid
	ref     []byte // BGRX, the screen as the host has it after seq (exact pixels)
	gen     uint64 // the screen generation ref shows
	seq     uint64
	lossy   []bool      // per tile: the host's pixels are a JPEG's
	lossyAt []time.Time // per tile: when it last changed while lossy
	// Per tile: when it was last refreshed, and how many times the refresh delay has been
	// doubled because the tile changed again soon after a refresh (a video, an animation that
	// stutters): refreshing such content costs much and shows little.
	refreshedAt []time.Time
	backoff     []uint8
	dirty       []box
	class       []int
	fill        []uint32
	rects       []rect
	enc         *regionEncoder
	scroll      *scrollScratch
	lastUsed    time.Time

	// kick (capacity 1) wakes a waiting next_update when a keyframe for a joining viewer
	// marked tiles lossy: their refresh is now due at a time the wait did not know.
	kick chan struct{}
}

func newStream(id uint64) *stream {
	return &stream{id: id, enc: newRegionEncoder(), scroll: newScrollScratch(), lastUsed: time.Now(), kick: make(chan struct{}, 1)}
}

// jpegPart is how one JPEG part of every lossy region is encoded.
type jpegPart struct{ quality, scale int }

// parts checks and defaults the JPEG qualities and scales of a request.
func parts(q, sc []int) ([]jpegPart, error) {
	if len(q) == 0 {
		q = []int{80}
	}
	if len(q) > wire.MaxQualities {
		return nil, wire.Invalid("%d qualities asked for; at most %d", len(q), wire.MaxQualities)
	}
	if len(sc) != 0 && len(sc) != len(q) {
		return nil, wire.Invalid("%d scales for %d qualities: give one per quality, or none", len(sc), len(q))
	}
	out := make([]jpegPart, len(q))
	for i, v := range q {
		if v < 1 || v > 100 {
			return nil, wire.Invalid("jpeg quality %d is outside 1–100", v)
		}
		out[i] = jpegPart{quality: v, scale: 1}
		if len(sc) > 0 {
			if sc[i] != 1 && sc[i] != 2 {
				return nil, wire.Invalid("scale %d is not 1 or 2", sc[i])
			}
			out[i].scale = sc[i]
		}
	}
	return out, nil
}

// setParts records the parts in an update.
func setParts(u *wire.Update, ps []jpegPart) {
	u.Qualities, u.Scales = nil, nil
	half := false
	for _, p := range ps {
		u.Qualities = append(u.Qualities, p.quality)
		half = half || p.scale != 1
	}
	if half {
		for _, p := range ps {
			u.Scales = append(u.Scales, p.scale)
		}
	}
}

// reset makes the stream track a screen of w×h from epoch ep.
func (st *stream) reset(ep uint64, w, h int) {
	st.epoch, st.g = ep, newGrid(w, h)
	if cap(st.ref) < w*h*4 {
		st.ref = make([]byte, w*h*4)
	}
	st.ref = st.ref[:w*h*4]
	n := st.g.tiles()
	st.lossy, st.lossyAt = make([]bool, n), make([]time.Time, n)
	st.refreshedAt, st.backoff = make([]time.Time, n), make([]uint8, n)
	st.dirty, st.class, st.fill = make([]box, n), make([]int, n), make([]uint32, n)
}

// nextUpdate answers next_update on st: a keyframe when the host is out of step, else the
// next change (waiting for one) or the next lossless refresh.
func (s *screen) nextUpdate(ctx context.Context, st *stream, a wire.UpdateArgs) (wire.Update, error) {
	qs, err := parts(a.Qualities, a.Scales)
	if err != nil {
		return wire.Update{}, err
	}
	refresh := a.Refresh
	if refresh == 0 {
		refresh = defaultRefresh
	}
	if err := s.drawn(ctx); err != nil {
		return wire.Update{}, err
	}
	for {
		d, ep, err := s.get(ctx)
		if err != nil {
			return wire.Update{}, err
		}
		w, h := d.Size()
		st.mu.Lock()
		st.lastUsed = time.Now()
		if st.seq == 0 || a.After != st.seq || st.epoch != ep || st.g.w != w || st.g.h != h {
			u, err := s.keyUpdate(d, ep, st, qs)
			st.mu.Unlock()
			if err != nil && wire.CodeOf(err) == wire.CodeUnavailable && ctx.Err() == nil {
				continue // the display went away: start over on the next one
			}
			return u, err
		}
		refGen := st.gen
		due := st.refreshDue(refresh)
		st.mu.Unlock()

		// Wait for a change, or until the next lossless refresh is due.
		if err := d.SyncEvents(ctx); err != nil {
			if ctx.Err() != nil {
				return wire.Update{}, ctx.Err()
			}
			continue
		}
		gen, _, next := d.Generation()
		if gen == refGen {
			var timer *time.Timer
			var fire <-chan time.Time
			if !due.IsZero() {
				timer = time.NewTimer(max(time.Until(due), 0))
				fire = timer.C
			}
			refreshNow, kicked := false, false
			select {
			case <-ctx.Done():
			case <-d.Done():
			case <-next:
			case <-fire:
				refreshNow = true
			case <-st.kick:
				kicked = true
			}
			if timer != nil {
				timer.Stop()
			}
			if ctx.Err() != nil {
				return wire.Update{}, ctx.Err()
			}
			if refreshNow {
				st.mu.Lock()
				if st.seq != a.After {
					st.mu.Unlock()
					continue
				}
				u, ok, err := s.refreshUpdate(st, refresh, ep)
				st.mu.Unlock()
				if err != nil || ok {
					return u, err
				}
				continue
			}
			if kicked {
				continue
			}
			select {
			case <-d.Done():
				continue
			default:
			}
		}
		st.mu.Lock()
		if st.seq != a.After || st.epoch != ep {
			st.mu.Unlock()
			continue // someone else moved the stream on: the loop answers with a keyframe
		}
		u, ok, err := s.deltaUpdate(d, ep, st, qs)
		st.mu.Unlock()
		if err != nil {
			if wire.CodeOf(err) == wire.CodeUnavailable && ctx.Err() == nil {
				continue
			}
			return u, err
		}
		if ok {
			return u, nil
		}
		// Damage without a visible difference: keep waiting.
	}
}

// refreshDue returns when the earliest lossy tile becomes due for its refresh (zero: none,
// or refreshes are off). st.mu held.
func (st *stream) refreshDue(refresh time.Duration) time.Time {
	if refresh < 0 {
		return time.Time{}
	}
	var due time.Time
	for i, l := range st.lossy {
		if !l {
			continue
		}
		if at := st.lossyAt[i].Add(refresh << st.backoff[i]); due.IsZero() || at.Before(due) {
			due = at
		}
	}
	return due
}

// Refresh backoff: a tile that changes again within refreshChurn of its refresh waits twice as
// long for the next one (up to 2^maxBackoff times); one that stayed unchanged for refreshCalm
// before its refresh starts over.
const (
	refreshChurn = 2 * time.Second
	refreshCalm  = 10 * time.Second
	maxBackoff   = 4
)

// frameID is the frame id of generation gen on epoch ep.
func frameID(ep, gen uint64) uint64 { return ep<<epochShift | gen }

// keyUpdate captures the screen into ref and encodes all of it. st.mu held.
func (s *screen) keyUpdate(d *x11.Display, ep uint64, st *stream, qs []jpegPart) (wire.Update, error) {
	w, h := d.Size()
	if st.epoch != ep || st.g.w != w || st.g.h != h || st.ref == nil {
		st.reset(ep, w, h)
	}
	var gen uint64
	var captured time.Time
	err := d.WithCapture(func(raw []byte, g uint64) error {
		gen, captured = g, time.Now()
		copy(st.ref, raw[:len(st.ref)])
		return nil
	})
	if err != nil {
		return wire.Update{}, unavailable(err)
	}
	st.gen = gen
	st.seq++
	for i := range st.dirty {
		st.dirty[i] = st.g.tile(i)
		st.lossy[i] = false
	}
	u := wire.Update{Stream: st.id, Seq: st.seq, FrameID: frameID(ep, gen), Width: w, Height: h, Key: true, Captured: captured}
	return s.encodeDirty(st, u, qs, false, true)
}

// keyframe answers the keyframe op: all of ref at the stream's current Seq, for a viewer
// joining; JPEG tiles are marked lossy, so the stream refreshes them for everyone.
func (s *screen) keyframe(st *stream, a wire.KeyframeArgs) (wire.Update, error) {
	qs, err := parts(a.Qualities, a.Scales)
	if err != nil {
		return wire.Update{}, err
	}
	st.mu.Lock()
	defer st.mu.Unlock()
	st.lastUsed = time.Now()
	if st.seq == 0 {
		return wire.Update{}, wire.Conflict("region stream %d has sent nothing yet; ask next_update for its first (key) update", st.id)
	}
	for i := range st.dirty {
		st.dirty[i] = st.g.tile(i)
	}
	u := wire.Update{Stream: st.id, Seq: st.seq, FrameID: frameID(st.epoch, st.gen), Width: st.g.w, Height: st.g.h, Key: true,
		Captured: time.Now()}
	u, err = s.encodeDirty(st, u, qs, false, false)
	select {
	case st.kick <- struct{}{}:
	default:
	}
	return u, err
}

// deltaUpdate captures the screen, finds what changed against ref (a scroll first) and
// encodes it; ok is false when nothing visibly changed. st.mu held.
func (s *screen) deltaUpdate(d *x11.Display, ep uint64, st *stream, qs []jpegPart) (u wire.Update, ok bool, err error) {
	var (
		gen      uint64
		captured time.Time
		copies   []wire.Region
		changed  bool
	)
	err = d.WithCapture(func(raw []byte, g uint64) error {
		gen, captured = g, time.Now()
		copies, changed = st.absorb(raw[:len(st.ref)])
		return nil
	})
	if err != nil {
		return wire.Update{}, false, unavailable(err)
	}
	st.gen = gen
	if !changed {
		return wire.Update{}, false, nil
	}
	st.seq++
	u = wire.Update{Stream: st.id, Seq: st.seq, FrameID: frameID(ep, gen), Width: st.g.w, Height: st.g.h, Captured: captured,
		Regions: copies}
	now := time.Now()
	for i, b := range st.dirty {
		if b.empty() {
			continue
		}
		if st.lossy[i] {
			st.lossyAt[i] = now // changed again: its refresh waits
		}
		if r := st.refreshedAt[i]; !r.IsZero() && now.Sub(r) < refreshChurn {
			st.backoff[i] = min(st.backoff[i]+1, maxBackoff)
			st.refreshedAt[i] = time.Time{} // counted once per refresh
		}
	}
	u, err = s.encodeDirty(st, u, qs, false, true)
	return u, err == nil, err
}

// absorb compares a capture with ref: it finds a scroll (applied to ref, returned as a copy
// region) and then the changed tiles (st.dirty), and brings ref up to date with cur. changed
// is false when no pixel differs. st.mu held.
func (st *stream) absorb(cur []byte) (copies []wire.Region, changed bool) {
	stride := st.g.w * 4
	if !diffTiles(st.g, cur, st.ref, st.dirty) {
		return nil, false
	}
	var area box
	n := 0
	for _, b := range st.dirty {
		if !b.empty() {
			area = area.union(b)
			n++
		}
	}
	if n >= 8 {
		if dst, dy, found := findScroll(st.g, cur, st.ref, area, st.scroll); found {
			copies = append(copies, wire.Region{X: dst.x0, Y: dst.y0, W: dst.w(), H: dst.h(), Enc: wire.EncCopy,
				SrcX: dst.x0, SrcY: dst.y0 - dy})
			st.copyLossy(dst, dy)
			applyCopy(st.ref, stride, dst, dy)
			diffTiles(st.g, cur, st.ref, st.dirty)
		}
	}
	for _, b := range st.dirty {
		if !b.empty() {
			copyBox(st.ref, cur, stride, b)
		}
	}
	return copies, true
}

// copyLossy marks the tiles a copy lands on lossy when any tile it reads from was. st.mu held.
func (st *stream) copyLossy(dst box, dy int) {
	now := time.Now()
	src := box{dst.x0, dst.y0 - dy, dst.x1, dst.y1 - dy}
	was := make([]bool, len(st.lossy))
	copy(was, st.lossy)
	for i := range st.lossy {
		t := st.g.tile(i)
		if !overlaps(t, dst) {
			continue
		}
		// The rows of this tile inside dst come from these source rows.
		part := box{max(t.x0, dst.x0), max(t.y0, dst.y0), min(t.x1, dst.x1), min(t.y1, dst.y1)}
		from := box{part.x0, part.y0 - dy, part.x1, part.y1 - dy}
		lossy := false
		for j := range was {
			if was[j] && overlaps(st.g.tile(j), from) && overlaps(from, src) {
				lossy = true
				break
			}
		}
		if lossy {
			st.lossy[i], st.lossyAt[i] = true, now
		}
	}
}

func overlaps(a, b box) bool {
	return a.x0 < b.x1 && b.x0 < a.x1 && a.y0 < b.y1 && b.y0 < a.y1
}

// refreshUpdate sends, losslessly, the lossy tiles that have not changed for refresh; ok is
// false when none is due yet. st.mu held.
func (s *screen) refreshUpdate(st *stream, refresh time.Duration, ep uint64) (u wire.Update, ok bool, err error) {
	if st.epoch != ep {
		return wire.Update{}, false, nil
	}
	now := time.Now()
	any := false
	for i := range st.dirty {
		st.dirty[i] = box{}
		if st.lossy[i] && now.Sub(st.lossyAt[i]) >= refresh<<st.backoff[i] {
			st.dirty[i] = st.g.tile(i)
			st.refreshedAt[i] = now
			if now.Sub(st.lossyAt[i]) >= refreshCalm {
				st.backoff[i] = 0 // it calmed down
			}
			any = true
		}
	}
	if !any {
		return wire.Update{}, false, nil
	}
	st.seq++
	u = wire.Update{Stream: st.id, Seq: st.seq, FrameID: frameID(st.epoch, st.gen), Width: st.g.w, Height: st.g.h,
		Refresh: true, Captured: now}
	u, err = s.encodeDirty(st, u, nil, true, true)
	return u, err == nil, err
}

// encodeDirty classifies the dirty tiles of st, merges them into rectangles, encodes each
// from ref into u and updates the lossy marks. lossless forbids JPEG. shared: the update goes
// to every viewer of the stream (not only to one joining), so tiles it sends losslessly are
// no longer lossy. st.mu held.
func (s *screen) encodeDirty(st *stream, u wire.Update, qs []jpegPart, lossless, shared bool) (wire.Update, error) {
	stride := st.g.w * 4
	for i, b := range st.dirty {
		if !b.empty() {
			st.class[i], st.fill[i] = classify(st.ref, stride, b, &st.enc.pal)
		}
	}
	st.rects = mergeTiles(st.g, st.dirty, st.class, st.fill, st.rects)
	var blob []byte
	now := time.Now()
	emit := func(b box, class int, fill uint32) error {
		var (
			r     wire.Region
			lossy bool
			err   error
		)
		blob, r, lossy, err = st.enc.encode(blob, st.ref, stride, b, class, fill, qs, lossless)
		if err != nil {
			return err
		}
		u.Regions = append(u.Regions, r)
		if lossy {
			for i := range st.lossy {
				if overlaps(st.g.tile(i), b) {
					st.lossy[i], st.lossyAt[i] = true, now
				}
			}
		}
		return nil
	}
	for _, r := range st.rects {
		if r.class == classFill && !uniform(st.ref, stride, r.b, r.fill) {
			// The union of the tiles' boxes holds other colours: one fill per tile.
			for ty := r.r0; ty < r.r1; ty++ {
				for tx := r.t0; tx < r.t1; tx++ {
					if b := st.dirty[ty*st.g.tw+tx]; !b.empty() {
						if err := emit(b, classFill, r.fill); err != nil {
							return wire.Update{}, err
						}
					}
				}
			}
			continue
		}
		if err := emit(r.b, r.class, r.fill); err != nil {
			return wire.Update{}, err
		}
	}
	if shared {
		// Whole tiles sent losslessly are exact now for every viewer, unless another region
		// of this update made them lossy again.
		for i, b := range st.dirty {
			if b.empty() || !st.lossy[i] || st.lossyAt[i].Equal(now) {
				continue
			}
			if b == st.g.tile(i) {
				st.lossy[i] = false
			}
		}
	}
	u.Lossless = true
	for _, l := range st.lossy {
		if l {
			u.Lossless = false
			break
		}
	}
	if len(qs) > 0 {
		setParts(&u, qs)
	}
	u.Data = blob
	return u, nil
}
