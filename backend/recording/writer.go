package recording

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"cubicle/backend/computerwire"
	"cubicle/backend/guest"
	"cubicle/backend/screen"
)

// A recording being written: its session (the goroutine that owns it) and its writer (the
// segments, the keyframes, the metadata).

// session is one recording being written. Its goroutine (run) owns the segment writer.
type session struct {
	s       *Service
	id      string
	desktop string
	dir     string
	began   time.Time
	cancel  context.CancelFunc
	done    chan struct{}

	mu  sync.Mutex
	why string // guarded by mu: the last marker's label, the first one given
}

// ending gives the label of the recording's last marker (the first label given wins).
func (ss *session) ending(why string) {
	ss.mu.Lock()
	if ss.why == "" {
		ss.why = why
	}
	ss.mu.Unlock()
}

// endLabel is the label ending gave ("" when none).
func (ss *session) endLabel() string {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	return ss.why
}

func (ss *session) stop(why string) {
	ss.ending(why)
	ss.cancel()
	<-ss.done
}

// run writes the recording until ctx ends: it watches the desktop's region stream (again,
// after a pause, when the stream fails while the desktop runs) and writes what it sends.
func (ss *session) run(ctx context.Context) {
	s := ss.s
	defer s.wg.Done()
	defer close(ss.done)
	w := &writer{ss: ss}
	defer func() {
		w.finish()
		s.mu.Lock()
		if s.active[ss.desktop] == ss {
			delete(s.active, ss.desktop)
		}
		s.mu.Unlock()
	}()
	backoff := 500 * time.Millisecond
	for ctx.Err() == nil {
		err := w.watch(ctx)
		if ctx.Err() != nil {
			return
		}
		if errors.Is(err, screen.ErrNoRegions) {
			s.log.Info("this desktop's driver sends no region updates (an older image): it is not recorded", "desktop", ss.desktop)
			w.note("the desktop's image is too old to be recorded")
			<-ctx.Done()
			return
		}
		s.log.Debug("recording: the screen stream ended; watching again", "desktop", ss.desktop, "err", err)
		t := time.NewTimer(backoff)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
		backoff = min(2*backoff, 10*time.Second)
	}
}

// writer writes one recording's segments. Only its session's goroutine uses it.
type writer struct {
	ss      *session
	seg     *segmentWriter
	segN    int
	bytes   int64 // of closed segments
	keys    int   // of closed segments
	lastKey time.Time
	changed bool // updates written since the last keyframe
	lossy   bool // refreshes were skipped since the last keyframe
	w, h    int
	cursor  []byte // the newest cursor and pointer messages (written again after a keyframe)
	pointer []byte
	last    time.Duration
	metaAt  time.Time
	notes   []string
	track   keyTracker // what paints the screen now, for reference keyframes
}

func (w *writer) note(n string) {
	w.notes = append(w.notes, n)
}

// watch is one region viewer's life: it writes what the viewer takes until the viewer or
// ctx ends.
func (w *writer) watch(ctx context.Context) error {
	s := w.ss.s
	lctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	src, err := s.cfg.Link(lctx, w.ss.desktop)
	cancel()
	if err != nil {
		return fmt.Errorf("recording: reach the desktop: %w", err)
	}
	v, err := s.cfg.Screens.WatchRegions(w.ss.desktop, src)
	if err != nil {
		return err
	}
	defer v.Close()
	// The recorder takes no lossless refreshes: while it alone watches the driver makes none
	// (they are whole PNGs of what stopped changing), and what it keeps stays at the best
	// JPEG level the live view starts at.
	v.SetRefresh(false)
	w.lastKey = time.Time{} // a new viewer starts from a keyframe
	w.track.forget()
	flush := time.NewTicker(s.cfg.FlushEvery)
	defer flush.Stop()
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-v.Done():
			if b, ok := v.Take(); ok {
				w.batch(v, b)
			}
			return v.Err()
		case <-v.Ready():
			if b, ok := v.Take(); ok {
				w.batch(v, b)
			}
		case <-flush.C:
			w.flush()
			if w.changed && !w.lastKey.IsZero() && time.Since(w.lastKey) >= s.cfg.KeyEvery && !w.refKey() {
				v.Refresh() // a full keyframe from the driver (it starts a new segment when due)
			}
		}
	}
}

// batch writes what the viewer took.
func (w *writer) batch(v *screen.RegionViewer, b screen.Batch) {
	now := time.Now()
	at := now.Sub(w.ss.began)
	if n := len(b.Updates); n > 0 {
		// The moment the screen was captured, not when the batch reached the recorder (on a
		// busy machine that is later): a replay at T shows the screen as it was at T.
		if c := b.Updates[n-1].Captured; !c.IsZero() && c.Before(now) && c.After(w.ss.began) {
			at = c.Sub(w.ss.began)
		}
	}
	at = max(at, w.last) // records stay in order
	if b.Cursor != nil {
		w.cursor = computerwire.Cursor(b.Cursor)
		w.text(at, w.cursor)
	}
	if b.Pointer != nil {
		w.pointer = computerwire.Pointer(b.Pointer)
		w.text(at, w.pointer)
	}
	us := b.Updates
	if n := len(us); n > 0 {
		us = slices.DeleteFunc(slices.Clone(us), func(u *guest.Update) bool { return u.Refresh && !u.Key })
		w.lossy = w.lossy || len(us) < n
	}
	if len(us) == 0 {
		return
	}
	key := us[0].Key
	if !key && w.seg == nil {
		return // nothing can be drawn before the first keyframe
	}
	if key {
		w.lossy = false
		if w.seg == nil || at-w.seg.start >= w.ss.s.cfg.SegmentEvery || w.seg.bytes > maxSegmentBytes {
			if err := w.rotate(at); err != nil {
				w.ss.s.log.Warn("recording: new segment", "recording", w.ss.id, "err", err)
				return
			}
		}
	}
	msg := computerwire.Update(us, 0, w.lossy)
	var flags byte
	if key {
		flags = FlagKey
	}
	off := w.seg.bytes
	if err := w.write(Record{Kind: KindUpdate, Flags: flags, At: at, Data: msg}); err != nil {
		w.track.forget()
		return
	}
	w.track.add(off, msg)
	if key {
		w.keyWritten(now, at)
	} else {
		w.changed = true
	}
	if ww, hh := computerwire.Size(msg); ww != w.w || hh != w.h {
		if !key {
			v.Refresh() // a new size: a keyframe, so that a seek finds one
		}
		w.w, w.h = ww, hh
	}
}

// keyWritten notes a keyframe written at at: the next one is due KeyEvery after now, and the
// pointer as it is goes right after it (a seek starts at a keyframe).
func (w *writer) keyWritten(now time.Time, at time.Duration) {
	w.lastKey, w.changed = now, false
	if w.cursor != nil {
		w.text(at, w.cursor)
	}
	if w.pointer != nil {
		w.text(at, w.pointer)
	}
}

// refKey writes a reference keyframe (keyref.go) of the screen as the last update left it,
// when the tracker can name it and the segment is not due to end; false: the caller asks
// the driver for a full keyframe instead.
func (w *writer) refKey() bool {
	if w.seg == nil || w.last-w.seg.start >= w.ss.s.cfg.SegmentEvery || w.seg.bytes > maxSegmentBytes {
		return false
	}
	payload, ok := w.track.keyframe()
	if !ok {
		return false
	}
	if err := w.write(Record{Kind: KindKeyRef, Flags: FlagKey, At: w.last, Data: payload}); err != nil {
		w.track.forget()
		return false
	}
	w.keyWritten(time.Now(), w.last)
	return true
}

func (w *writer) text(at time.Duration, msg []byte) {
	if w.seg == nil {
		return
	}
	w.write(Record{Kind: KindText, At: at, Data: msg})
}

func (w *writer) write(r Record) error {
	if err := w.seg.write(r); err != nil {
		w.ss.s.log.Warn("recording: write", "recording", w.ss.id, "err", err)
		return err
	}
	w.last = r.At
	return nil
}

// rotate closes the current segment and starts the next at at.
func (w *writer) rotate(at time.Duration) error {
	if w.seg != nil {
		w.bytes += w.seg.bytes
		w.keys += w.seg.keys
		if err := w.seg.close(); err != nil {
			w.ss.s.log.Warn("recording: close segment", "recording", w.ss.id, "err", err)
		}
		w.seg = nil
	}
	w.segN++
	seg, err := createSegment(filepath.Join(w.ss.dir, fmt.Sprintf("%s%06d", segPrefix, w.segN)), w.ss.began, at)
	if err != nil {
		return err
	}
	w.seg = seg
	w.saveMeta(false)
	return nil
}

// flush makes what was written survive the process (and the machine).
func (w *writer) flush() {
	if w.seg != nil {
		if err := w.seg.flush(true); err != nil {
			w.ss.s.log.Warn("recording: flush", "recording", w.ss.id, "err", err)
		}
	}
	if time.Since(w.metaAt) >= 10*time.Second {
		w.saveMeta(false)
	} else {
		w.updateEntry(false)
	}
}

// updateEntry refreshes the catalog's numbers of the recording.
func (w *writer) updateEntry(ended bool) meta {
	bytes, keys := w.bytes, w.keys
	if w.seg != nil {
		bytes += w.seg.bytes
		keys += w.seg.keys
	}
	m, _ := w.ss.s.cat.update(w.ss.id, func(e *entry) {
		shots := dirExtraBytes(w.ss.dir)
		e.info.Bytes = bytes + shots
		e.info.Keyframes = keys
		e.info.DurationMs = max(e.info.DurationMs, w.last.Milliseconds())
		e.info.Width, e.info.Height = w.w, w.h
		for _, n := range w.notes {
			if !slices.Contains(e.info.Notes, n) {
				e.info.Notes = append(e.info.Notes, n)
			}
		}
		if ended {
			e.live, e.info.Live = false, false
			e.info.DurationMs = max(e.info.DurationMs, time.Since(w.ss.began).Milliseconds())
			e.info.EndedAt = w.ss.began.Add(time.Duration(e.info.DurationMs) * time.Millisecond).UTC()
		}
	})
	return m
}

func (w *writer) saveMeta(ended bool) {
	m := w.updateEntry(ended)
	w.metaAt = time.Now()
	if err := writeMeta(w.ss.dir, m); err != nil {
		w.ss.s.log.Warn("recording: metadata", "recording", w.ss.id, "err", err)
	}
}

// finish closes the recording: its last marker, its segment, its metadata.
func (w *writer) finish() {
	if why := w.ss.endLabel(); why != "" {
		w.ss.s.markSession(w.ss, Marker{Kind: MarkDesktop, Label: why})
	}
	if w.seg != nil {
		w.bytes += w.seg.bytes
		w.keys += w.seg.keys
		if err := w.seg.close(); err != nil {
			w.ss.s.log.Warn("recording: close segment", "recording", w.ss.id, "err", err)
		}
		w.seg = nil
	}
	w.saveMeta(true)
	w.ss.s.log.Debug("recording ended", "recording", w.ss.id, "desktop", w.ss.desktop)
}

// markSession adds a marker to a session directly (its own goroutine, at its end).
func (s *Service) markSession(ss *session, m Marker) {
	m.At = time.Since(ss.began).Milliseconds()
	if err := appendMarker(ss.dir, m); err != nil {
		return
	}
	s.cat.update(ss.id, func(e *entry) { e.info.Markers = append(e.info.Markers, m) })
}
