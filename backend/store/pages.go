package store

import (
	"context"
	"encoding/binary"
	"fmt"
	"os"
)

// The page walk: every page the tree of buckets reaches, read with plain reads (never bbolt's
// memory map) and bounded by the file: a page's id, type, overflow and element count, and
// every element's key and value, must lie inside the pages the header says are in use
// before anything follows them. bbolt itself trusts these fields — a leaf page whose
// overflow says 0xFFFFFFFF made its consistency check (tx.Check) loop over four billion
// page ids — so both the pre-open check of Open and the full check of Check run this walk
// before bbolt reads the tree. The walk reads each page once, keeps one bit per page, and
// returns at the first damage it finds or when ctx ends.

const (
	elemSize       = 16   // branch and leaf page elements are both 16 bytes
	bucketLeafFlag = 0x01 // a leaf element that holds a bucket
	bucketHdrSize  = 16   // a bucket's root page id and sequence
	maxDepth       = 64   // branch pages plus nested buckets; bbolt's trees are far shallower
)

// pageWalk is the state of one walk over a file.
type pageWalk struct {
	ctx  context.Context
	f    *os.File
	ps   int64
	high uint64 // the meta's high water mark: pages [0, high) are in use
	seen []uint64
}

// walkPages walks every page the tree of the file with meta m reaches (see above) and
// checks that each page in [0, m.pgid) is reached once, or is free, or is a meta or
// freelist page. free are the freelist's page ids (checkHeader read them). It returns what
// is wrong, or "".
func walkPages(ctx context.Context, f *os.File, m boltMeta, free []uint64) string {
	w := &pageWalk{ctx: ctx, f: f, ps: int64(m.pageSize), high: m.pgid, seen: make([]uint64, (m.pgid+63)/64)}
	w.mark(0)
	w.mark(1)
	if m.freelist != noFreelist {
		_, _, _, overflow, err := pageHeader(f, int64(m.freelist)*w.ps)
		if err != nil {
			return "its freelist page cannot be read: " + err.Error()
		}
		for i := uint64(0); i <= uint64(overflow); i++ { // checkHeader bounded overflow
			w.mark(m.freelist + i)
		}
	}
	if p := w.page(m.root, 0); p != "" {
		return p
	}
	for _, id := range free {
		if w.marked(id) {
			return fmt.Sprintf("page %d is both in use and listed as free", id)
		}
		w.mark(id)
	}
	if m.freelist == noFreelist {
		return "" // the free pages are not on record: bbolt finds them by elimination
	}
	for id := uint64(0); id < m.pgid; id++ {
		if !w.marked(id) {
			return fmt.Sprintf("page %d is neither in use nor free (unreachable unfreed)", id)
		}
	}
	return ""
}

func (w *pageWalk) mark(id uint64)        { w.seen[id/64] |= 1 << (id % 64) }
func (w *pageWalk) marked(id uint64) bool { return w.seen[id/64]&(1<<(id%64)) != 0 }

// page checks the branch or leaf page id and everything below it.
func (w *pageWalk) page(id uint64, depth int) string {
	if err := w.ctx.Err(); err != nil {
		return "the check was stopped: " + err.Error()
	}
	if depth > maxDepth {
		return fmt.Sprintf("page %d: the tree is more than %d levels deep", id, maxDepth)
	}
	if id < 2 || id >= w.high {
		return fmt.Sprintf("a page refers to page %d, outside the file's %d pages", id, w.high)
	}
	flags, hid, count, overflow, err := pageHeader(w.f, int64(id)*w.ps)
	switch {
	case err != nil:
		return fmt.Sprintf("page %d cannot be read: %v", id, err)
	case hid != id:
		return fmt.Sprintf("page %d is damaged: its header says page %d", id, hid)
	case flags != branchPageFlag && flags != leafPageFlag:
		return fmt.Sprintf("page %d is damaged: type %#x where a branch or leaf page belongs", id, flags)
	case uint64(overflow) >= w.high-id:
		return fmt.Sprintf("page %d is damaged: its overflow of %d pages runs past the file's %d pages", id, overflow, w.high)
	}
	for i := uint64(0); i <= uint64(overflow); i++ {
		if w.marked(id + i) {
			return fmt.Sprintf("page %d is reached twice", id+i)
		}
		w.mark(id + i)
	}
	buf := make([]byte, (int64(overflow)+1)*w.ps)
	if _, err := w.f.ReadAt(buf, int64(id)*w.ps); err != nil {
		return fmt.Sprintf("page %d cannot be read: %v", id, err)
	}
	return w.elements(fmt.Sprintf("page %d", id), buf, flags, count, depth)
}

// elements checks the count elements of the page in buf (a page of the file, or a bucket's
// inline page) and follows them.
func (w *pageWalk) elements(where string, buf []byte, flags, count uint16, depth int) string {
	if pageHeaderSize+int(count)*elemSize > len(buf) {
		return fmt.Sprintf("%s is damaged: %d elements do not fit in its %d bytes", where, count, len(buf))
	}
	if flags == branchPageFlag && count == 0 {
		return fmt.Sprintf("%s is damaged: a branch page without elements", where)
	}
	ne := binary.NativeEndian
	var prev []byte
	for i := 0; i < int(count); i++ {
		off := pageHeaderSize + i*elemSize
		e := buf[off : off+elemSize]
		var pos, ksize, vsize uint64
		if flags == branchPageFlag {
			pos, ksize = uint64(ne.Uint32(e[0:])), uint64(ne.Uint32(e[4:]))
		} else {
			pos, ksize, vsize = uint64(ne.Uint32(e[4:])), uint64(ne.Uint32(e[8:])), uint64(ne.Uint32(e[12:]))
		}
		start := uint64(off) + pos
		if start+ksize+vsize > uint64(len(buf)) {
			return fmt.Sprintf("%s is damaged: element %d lies outside the page", where, i)
		}
		key := buf[start : start+ksize]
		if prev != nil && string(prev) >= string(key) {
			return fmt.Sprintf("%s is damaged: its keys are out of order at element %d", where, i)
		}
		prev = key
		if flags == branchPageFlag {
			if p := w.page(ne.Uint64(e[8:]), depth+1); p != "" {
				return p
			}
			continue
		}
		if ne.Uint32(e[0:])&bucketLeafFlag == 0 {
			continue
		}
		v := buf[start+ksize : start+ksize+vsize]
		if len(v) < bucketHdrSize {
			return fmt.Sprintf("%s is damaged: bucket %q has a %d-byte header", where, key, len(v))
		}
		if root := ne.Uint64(v[0:]); root != 0 {
			if p := w.page(root, depth+1); p != "" {
				return p
			}
			continue
		}
		// An inline bucket: its page follows the bucket header inside the value.
		in := v[bucketHdrSize:]
		if len(in) < pageHeaderSize {
			return fmt.Sprintf("%s is damaged: bucket %q has a truncated inline page", where, key)
		}
		if f := ne.Uint16(in[8:]); f != leafPageFlag {
			return fmt.Sprintf("%s is damaged: bucket %q has an inline page of type %#x", where, key, f)
		}
		if p := w.elements(fmt.Sprintf("%s (bucket %q)", where, key), in, leafPageFlag, ne.Uint16(in[10:]), depth+1); p != "" {
			return p
		}
	}
	return ""
}
