package recording

import (
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"time"
)

// Reader reads a recording's records in order from any moment. A damaged segment is skipped
// with a note (Notes); a segment cut short at its end (a crash) ends early with one. Reading
// a recording that is still being written follows it (Next waits for more).
type Reader struct {
	s     *Service
	id    string
	dir   string
	segs  []string
	seg   int            // index of the segment being read
	cur   *segmentReader // nil before the first read or after the last segment
	held  *Record        // a record read ahead by Seek
	notes []string
	noted map[string]bool
}

// Open returns a Reader of recording id (checked with Get by the caller).
func (s *Service) Open(id string) (*Reader, error) {
	if _, ok := s.cat.get(id); !ok || !validID(id) {
		return nil, fmt.Errorf("recording %s: %w", id, errNotFound)
	}
	return &Reader{s: s, id: id, dir: filepath.Join(s.cfg.Dir, id), noted: map[string]bool{}}, nil
}

var errNotFound = errors.New("not found")

// Close releases the open segment.
func (r *Reader) Close() error {
	if r.cur != nil {
		r.cur.close()
		r.cur = nil
	}
	return nil
}

// Notes returns (and forgets) what was found damaged since the last call.
func (r *Reader) Notes() []string {
	n := r.notes
	r.notes = nil
	return n
}

func (r *Reader) note(key, msg string) {
	if !r.noted[key] {
		r.noted[key] = true
		r.notes = append(r.notes, msg)
	}
}

func (r *Reader) live() bool {
	i, ok := r.s.cat.get(r.id)
	return ok && i.Live
}

// Seek positions the reader at the last keyframe at or before at and returns the records from
// it up to at (draw them at once: the screen as it was at at), then Next continues after at.
// Before the first keyframe it starts at the first one. A reference keyframe (KindKeyRef) is
// returned resolved, as the keyframe message it names; if it cannot be resolved (a damaged
// record it names) the seek starts at the segment's full keyframe before it, with a note.
func (r *Reader) Seek(at time.Duration) ([]Record, error) {
	r.Close()
	r.held = nil
	segs, err := listSegments(r.dir)
	if err != nil {
		return nil, fmt.Errorf("recording %s: %w", r.id, err)
	}
	r.segs = segs
	// The segment to start in: the last whose start is at or before at and that has a
	// keyframe at or before at (each segment starts with one).
	type pos struct {
		seg  int
		off  int64
		ref  bool  // a reference keyframe
		full int64 // the segment's last full keyframe before it (-1: none)
	}
	var found *pos
	for i, p := range segs {
		s, err := openSegment(p)
		if err != nil {
			r.note(p, fmt.Sprintf("%s skipped: %v", filepath.Base(p), err))
			continue
		}
		if s.start > at && found != nil {
			s.close()
			break
		}
		full := int64(-1)
		for {
			rec, off, err := s.next(true)
			if err != nil {
				break
			}
			if rec.Key() {
				if rec.At <= at || found == nil {
					found = &pos{i, off, rec.Kind == KindKeyRef, full}
					if rec.At > at {
						break
					}
				}
				if rec.Kind == KindUpdate {
					full = off
				}
			}
			if rec.At > at && found != nil {
				break
			}
		}
		s.close()
	}
	if found == nil {
		r.seg = len(segs)
		return nil, nil // nothing recorded (yet)
	}
	s, err := openSegment(segs[found.seg])
	if err != nil {
		return nil, err
	}
	r.seg, r.cur = found.seg, s
	var out []Record
	if found.ref {
		key, err := r.resolveAt(found.off)
		switch {
		case err == nil:
			out = append(out, key)
		case found.full >= 0:
			r.note(fmt.Sprintf("%s@%d", segs[found.seg], found.off), fmt.Sprintf("%s: a keyframe could not be read (%v); the seek starts at the one before it", filepath.Base(segs[found.seg]), err))
			if err := s.seek(found.full); err != nil {
				return nil, err
			}
		default:
			// No full keyframe before it in its segment: the segment is damaged; play on
			// with the next one (it starts with a keyframe).
			r.note(segs[found.seg], fmt.Sprintf("%s: the rest was skipped: a keyframe could not be read (%v)", filepath.Base(segs[found.seg]), err))
			r.cur.close()
			r.cur = nil
			r.seg++
		}
	} else if err := s.seek(found.off); err != nil {
		return nil, err
	}
	for {
		rec, err := r.next()
		if err != nil {
			if errors.Is(err, io.EOF) {
				return out, nil
			}
			return out, err
		}
		if rec.At > at && len(out) > 0 {
			r.held = &rec
			return out, nil
		}
		out = append(out, rec)
	}
}

// resolveAt reads the reference keyframe at off of the current segment and resolves it; the
// reader is left after it.
func (r *Reader) resolveAt(off int64) (Record, error) {
	if err := r.cur.seek(off); err != nil {
		return Record{}, err
	}
	ref, _, err := r.cur.next(false)
	if err != nil {
		return Record{}, err
	}
	return r.cur.resolve(ref, off)
}

// ErrLater is Next's answer at the end of a recording still being written: more may come.
var ErrLater = errors.New("recording: nothing more yet")

// Next returns the next record; io.EOF after the last one of a recording that has ended,
// ErrLater after the last one so far of a recording still being written.
func (r *Reader) Next() (Record, error) {
	if r.held != nil {
		rec := *r.held
		r.held = nil
		return rec, nil
	}
	rec, err := r.next()
	if err == nil {
		return rec, nil
	}
	if errors.Is(err, io.EOF) && r.live() {
		// Look for segments written meanwhile.
		if segs, lerr := listSegments(r.dir); lerr == nil {
			r.segs = segs
		}
		return Record{}, ErrLater
	}
	return Record{}, err
}

// next reads on through the segments, skipping damaged ones; io.EOF at the end of the last.
func (r *Reader) next() (Record, error) {
	for {
		if r.cur == nil {
			if r.seg >= len(r.segs) {
				return Record{}, io.EOF
			}
			s, err := openSegment(r.segs[r.seg])
			if err != nil {
				if r.seg == len(r.segs)-1 && r.live() {
					return Record{}, io.EOF // its header is not written yet
				}
				r.note(r.segs[r.seg], fmt.Sprintf("%s skipped: %v", filepath.Base(r.segs[r.seg]), err))
				r.seg++
				continue
			}
			r.cur = s
		}
		rec, off, err := r.cur.next(false)
		if err == nil {
			if rec.Kind == KindKeyRef {
				continue // a reader playing on has the screen already
			}
			return rec, nil
		}
		last := r.seg == len(r.segs)-1
		if last && r.live() {
			// The writer is in the middle of this record (or has written nothing more):
			// read it again later.
			r.cur.seek(off)
			return Record{}, io.EOF
		}
		if !errors.Is(err, io.EOF) {
			r.note(r.segs[r.seg], fmt.Sprintf("%s: the rest was skipped: %v", filepath.Base(r.segs[r.seg]), err))
		}
		r.cur.close()
		r.cur = nil
		r.seg++
	}
}
