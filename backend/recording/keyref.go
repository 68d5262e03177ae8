package recording

import (
	"cmp"
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"slices"

	"cubicle/backend/computerwire"
)

// Reference keyframes (segment version 2, docs/recording.md). A keyframe every KeyEvery lets
// a seek start near any moment, but a whole-screen keyframe from the driver costs a full
// encode and hundreds of kilobytes, most of them the same pixels as the last one. Everything
// the screen shows since the segment's first (full) keyframe is already in the segment: the
// recorder keeps, per 64-pixel cell (the driver's tile), which regions of which update
// records paint it now, and a reference keyframe names exactly those regions. A seek reads
// them back from the same segment file and sends them as one ordinary keyframe message —
// the regions in the order they were recorded, so each cell ends painted by its newest
// region: the very pixels the recorded stream drew, without decoding or encoding anything.
//
// What cannot be followed this way — a copy (a scroll reads pixels the cells do not name), a
// cell painted in part by more than maxCellRefs regions (none covering another) since it was
// last painted whole, a change of the screen's size — makes the tracker give up until the
// next full keyframe: the recorder then asks the driver for one, as it always did.
//
//	payload: the keyframe's update header (computerwire.HeaderLen bytes, its region count n)
//	         | n × (record offset in the segment (uint32) | region index in that record's message (uint16))
//
// Entries are in recording order (by record offset, then region index).

const (
	// cellSize is the tracker's cell: the driver's tile (images/guest/regions.go), so that
	// the driver's regions cover whole cells.
	cellSize = 64
	// maxCellRefs bounds the regions one cell may need before the tracker gives up.
	maxCellRefs = 16
	refEntryLen = 6
)

// regionRef names one region of an update record of the segment.
type regionRef struct {
	rec int64  // the record's offset in the segment file
	idx uint16 // the region's index in the record's update message
	// The region's box, clipped to the screen (for the cells it paints in part).
	x0, y0, x1, y1 uint16
}

// covers reports whether r paints all of what o paints inside the cell box.
func (r regionRef) covers(o regionRef, cx0, cy0, cx1, cy1 uint16) bool {
	ox0, oy0, ox1, oy1 := max(o.x0, cx0), max(o.y0, cy0), min(o.x1, cx1), min(o.y1, cy1)
	return r.x0 <= ox0 && r.y0 <= oy0 && r.x1 >= ox1 && r.y1 >= oy1
}

// span is one region of an update message: its bytes are msg[start:end] (header and data).
type span struct {
	start, end int
	x, y, w, h int
	enc        byte
}

// regionSpans splits an update message of the computer channel into its regions.
func regionSpans(msg []byte, out []span) ([]span, error) {
	out = out[:0]
	if len(msg) < computerwire.HeaderLen || string(msg[:4]) != computerwire.Magic {
		return out, fmt.Errorf("not an update message")
	}
	off := int(msg[5])
	n := int(binary.BigEndian.Uint32(msg[24:]))
	for i := range n {
		if off+computerwire.RegionHeaderLen > len(msg) {
			return out, fmt.Errorf("region %d of %d cut short", i, n)
		}
		rh := msg[off:]
		size := int(binary.BigEndian.Uint32(rh[12:]))
		end := off + computerwire.RegionHeaderLen + size
		if size < 0 || end > len(msg) {
			return out, fmt.Errorf("region %d of %d cut short", i, n)
		}
		out = append(out, span{start: off, end: end, enc: rh[8],
			x: int(binary.BigEndian.Uint16(rh[0:])), y: int(binary.BigEndian.Uint16(rh[2:])),
			w: int(binary.BigEndian.Uint16(rh[4:])), h: int(binary.BigEndian.Uint16(rh[6:]))})
		off = end
	}
	return out, nil
}

// The region encoding codes of the wire that the tracker tells apart.
const encCopy = 4

// keyTracker follows which recorded regions paint each cell of the screen, for reference
// keyframes. Only the recording's goroutine uses it.
type keyTracker struct {
	ok     bool // cells draw the whole screen: a full keyframe and nothing untrackable since
	w, h   int
	tw, th int
	cells  [][]regionRef
	last   [computerwire.HeaderLen]byte // the header of the newest update message
	spans  []span
}

// forget gives up until the next full keyframe (a new segment starts with one).
func (k *keyTracker) forget() { k.ok = false }

// add notes the update message msg, written as the record at off of the current segment.
func (k *keyTracker) add(off int64, msg []byte) {
	spans, err := regionSpans(msg, k.spans)
	k.spans = spans
	if err != nil {
		k.ok = false
		return
	}
	w, h := computerwire.Size(msg)
	if msg[7]&computerwire.FlagKey != 0 {
		k.start(w, h)
	} else if !k.ok || w != k.w || h != k.h {
		k.ok = false
		return
	}
	copy(k.last[:], msg[:computerwire.HeaderLen])
	if len(spans) > 1<<16 {
		k.ok = false
		return
	}
	for i, sp := range spans {
		if sp.enc == encCopy {
			k.ok = false // a copy reads pixels: what it shows is not named by any region
			return
		}
		x0, y0, x1, y1 := sp.x, sp.y, min(sp.x+sp.w, w), min(sp.y+sp.h, h)
		if x0 >= x1 || y0 >= y1 {
			continue
		}
		ref := regionRef{rec: off, idx: uint16(i), x0: uint16(x0), y0: uint16(y0), x1: uint16(x1), y1: uint16(y1)}
		for ty := y0 / cellSize; ty <= (y1-1)/cellSize; ty++ {
			for tx := x0 / cellSize; tx <= (x1-1)/cellSize; tx++ {
				c := ty*k.tw + tx
				cx0, cy0 := tx*cellSize, ty*cellSize
				cx1, cy1 := min(cx0+cellSize, w), min(cy0+cellSize, h)
				if x0 <= cx0 && y0 <= cy0 && x1 >= cx1 && y1 >= cy1 {
					k.cells[c] = append(k.cells[c][:0], ref) // painted whole: nothing before matters
					continue
				}
				// Painted in part: the regions of the cell it paints over entirely go.
				b := [4]uint16{uint16(cx0), uint16(cy0), uint16(cx1), uint16(cy1)}
				k.cells[c] = slices.DeleteFunc(k.cells[c], func(o regionRef) bool { return ref.covers(o, b[0], b[1], b[2], b[3]) })
				if len(k.cells[c]) >= maxCellRefs {
					k.ok = false
					return
				}
				k.cells[c] = append(k.cells[c], ref)
			}
		}
	}
	if msg[7]&computerwire.FlagKey != 0 {
		for _, c := range k.cells {
			if len(c) == 0 {
				k.ok = false // a keyframe that leaves a cell unpainted: do not build on it
				return
			}
		}
	}
}

// start begins following a w×h screen from a full keyframe.
func (k *keyTracker) start(w, h int) {
	k.ok = w > 0 && h > 0
	k.w, k.h = w, h
	k.tw, k.th = (w+cellSize-1)/cellSize, (h+cellSize-1)/cellSize
	n := k.tw * k.th
	if cap(k.cells) < n {
		k.cells = make([][]regionRef, n)
	}
	k.cells = k.cells[:n]
	for i := range k.cells {
		k.cells[i] = k.cells[i][:0]
	}
}

// keyframe returns the payload of a reference keyframe of the screen as it is now; ok is
// false while the tracker cannot name it.
func (k *keyTracker) keyframe() (payload []byte, ok bool) {
	if !k.ok {
		return nil, false
	}
	var refs []regionRef
	for _, c := range k.cells {
		refs = append(refs, c...)
	}
	slices.SortFunc(refs, func(a, b regionRef) int {
		return cmp.Or(cmp.Compare(a.rec, b.rec), cmp.Compare(a.idx, b.idx))
	})
	refs = slices.CompactFunc(refs, func(a, b regionRef) bool { return a.rec == b.rec && a.idx == b.idx })
	if len(refs) == 0 || refs[len(refs)-1].rec > 1<<32-1 {
		return nil, false
	}
	payload = make([]byte, computerwire.HeaderLen, computerwire.HeaderLen+refEntryLen*len(refs))
	copy(payload, k.last[:])
	payload[7] = (payload[7] | computerwire.FlagKey) &^ computerwire.FlagRefresh
	binary.BigEndian.PutUint32(payload[24:], uint32(len(refs)))
	for _, r := range refs {
		payload = binary.BigEndian.AppendUint32(payload, uint32(r.rec))
		payload = binary.BigEndian.AppendUint16(payload, r.idx)
	}
	return payload, true
}

// readAt reads the whole record at off, checked, without moving the reader.
func (s *segmentReader) readAt(off int64) (Record, error) {
	var h [recHeaderLen]byte
	if _, err := s.f.ReadAt(h[:], off); err != nil {
		return Record{}, fmt.Errorf("%w: record at %d: %v", ErrDamaged, off, err)
	}
	size := binary.BigEndian.Uint32(h[0:])
	if size > maxRecord {
		return Record{}, fmt.Errorf("%w: record at %d claims %d bytes", ErrDamaged, off, size)
	}
	buf := make([]byte, int(size)+recTrailerLen)
	if _, err := s.f.ReadAt(buf, off+recHeaderLen); err != nil {
		return Record{}, fmt.Errorf("%w: record at %d cut short", ErrDamaged, off)
	}
	crc := crc32.NewIEEE()
	crc.Write(h[:])
	crc.Write(buf[:size])
	if crc.Sum32() != binary.BigEndian.Uint32(buf[size:]) {
		return Record{}, fmt.Errorf("%w: record at %d fails its checksum", ErrDamaged, off)
	}
	return Record{Kind: h[4], Flags: h[5], At: recAt(h), Data: buf[:size:size]}, nil
}

// resolve turns the reference keyframe ref, the record at refOff of this segment, into the
// keyframe message it names (a KindUpdate keyframe record).
func (s *segmentReader) resolve(ref Record, refOff int64) (Record, error) {
	p := ref.Data
	if len(p) < computerwire.HeaderLen || (len(p)-computerwire.HeaderLen)%refEntryLen != 0 {
		return Record{}, fmt.Errorf("%w: reference keyframe at %d: %d bytes", ErrDamaged, refOff, len(p))
	}
	n := (len(p) - computerwire.HeaderLen) / refEntryLen
	if int(binary.BigEndian.Uint32(p[24:])) != n {
		return Record{}, fmt.Errorf("%w: reference keyframe at %d: %d regions named, %d counted", ErrDamaged, refOff, n, binary.BigEndian.Uint32(p[24:]))
	}
	msg := append(make([]byte, 0, 64<<10), p[:computerwire.HeaderLen]...)
	var (
		cur    Record
		curOff int64 = -1
		spans  []span
		err    error
	)
	for i := range n {
		e := p[computerwire.HeaderLen+i*refEntryLen:]
		off, idx := int64(binary.BigEndian.Uint32(e)), int(binary.BigEndian.Uint16(e[4:]))
		if off != curOff {
			if off < curOff || off < segHeaderLen || off >= refOff {
				return Record{}, fmt.Errorf("%w: reference keyframe at %d names a record at %d", ErrDamaged, refOff, off)
			}
			if cur, err = s.readAt(off); err != nil {
				return Record{}, err
			}
			if cur.Kind != KindUpdate {
				return Record{}, fmt.Errorf("%w: reference keyframe at %d names a record of kind %d at %d", ErrDamaged, refOff, cur.Kind, off)
			}
			if spans, err = regionSpans(cur.Data, spans); err != nil {
				return Record{}, fmt.Errorf("%w: the update at %d: %v", ErrDamaged, off, err)
			}
			curOff = off
		}
		if idx >= len(spans) {
			return Record{}, fmt.Errorf("%w: reference keyframe at %d names region %d of the %d at %d", ErrDamaged, refOff, idx, len(spans), off)
		}
		msg = append(msg, cur.Data[spans[idx].start:spans[idx].end]...)
	}
	return Record{Kind: KindUpdate, Flags: FlagKey, At: ref.At, Data: msg}, nil
}
