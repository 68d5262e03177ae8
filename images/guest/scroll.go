//go:build linux

package main

import (
	"bytes"
	"hash/maphash"
)

// Scrolling moves most of a window's pixels up or down. Sent as changed rectangles that is
// the whole window every frame; found as a shift, it is one "copy" region plus the strip that
// came into view. findScroll looks for such a shift (vertical only: what scrolling pages,
// terminals and lists do) inside the area that changed.
const (
	scrollChunk   = 32  // column chunks hashed and compared (pixels)
	scrollMinRows = 32  // a copy shorter than this is not worth it
	scrollMinArea = 128 // the changed area must be at least this high and wide to look
)

// scrollScratch holds findScroll's buffers between calls.
type scrollScratch struct {
	seed  maphash.Seed
	cur   []uint64 // hashes [chunk][row] of cur
	ref   []uint64 // of ref
	votes map[int]int
	rows  map[uint64]int32 // ref hash → row (−1: not unique) for one chunk
	good  []bool
}

func newScrollScratch() *scrollScratch {
	return &scrollScratch{seed: maphash.MakeSeed(), votes: map[int]int{}, rows: map[uint64]int32{}}
}

// findScroll returns a box of cur whose rows equal the rows of ref dy pixels above (dy > 0:
// the content moved down) or below (dy < 0), within the changed area; ok is false when there
// is no such shift worth a copy.
func findScroll(g grid, cur, ref []byte, area box, s *scrollScratch) (dst box, dy int, ok bool) {
	if area.h() < scrollMinArea || area.w() < scrollMinArea {
		return box{}, 0, false
	}
	stride := g.w * 4
	nc := (area.w() + scrollChunk - 1) / scrollChunk
	nr := area.h()
	if cap(s.cur) < nc*nr {
		s.cur, s.ref = make([]uint64, nc*nr), make([]uint64, nc*nr)
	}
	s.cur, s.ref = s.cur[:nc*nr], s.ref[:nc*nr]
	chunk := func(c int) (int, int) {
		x0 := area.x0 + c*scrollChunk
		return x0 * 4, min(x0+scrollChunk, area.x1) * 4
	}
	// A cheap look first: do rows of three columns (a quarter, half and three quarters across)
	// reappear shifted? Most changes (video, a new window) are no scroll, and end here.
	if !s.probe(cur, ref, stride, area, nr, []int{nc / 4, nc / 2, nc * 3 / 4}, chunk) {
		return box{}, 0, false
	}
	for c := 0; c < nc; c++ {
		a, b := chunk(c)
		for r := 0; r < nr; r++ {
			o := (area.y0 + r) * stride
			s.cur[c*nr+r] = maphash.Bytes(s.seed, cur[o+a:o+b])
			s.ref[c*nr+r] = maphash.Bytes(s.seed, ref[o+a:o+b])
		}
	}
	// Vote: a row of cur whose content is a row of ref that is unique in its chunk column
	// says "shifted by the distance between them".
	clear(s.votes)
	for c := 0; c < nc; c++ {
		clear(s.rows)
		for r := 0; r < nr; r++ {
			h := s.ref[c*nr+r]
			if _, seen := s.rows[h]; seen {
				s.rows[h] = -1
			} else {
				s.rows[h] = int32(r)
			}
		}
		for r := 0; r < nr; r += 2 {
			if rr, found := s.rows[s.cur[c*nr+r]]; found && rr >= 0 && int(rr) != r {
				s.votes[r-int(rr)]++
			}
		}
	}
	best, bestN := 0, 0
	for d, n := range s.votes {
		if n > bestN || (n == bestN && abs(d) < abs(best)) {
			best, bestN = d, n
		}
	}
	if bestN < 8 {
		return box{}, 0, false
	}
	dy = best
	// Which chunks moved by dy: most of their rows (whose source lies in the area) match.
	r0, r1 := max(0, dy), min(nr, nr+dy) // rows of cur whose source row r-dy is in the area
	if r1-r0 < scrollMinRows {
		return box{}, 0, false
	}
	match := func(c, r int) bool {
		if s.cur[c*nr+r] != s.ref[c*nr+r-dy] {
			return false
		}
		a, b := chunk(c)
		o, p := (area.y0+r)*stride, (area.y0+r-dy)*stride
		return bytes.Equal(cur[o+a:o+b], ref[p+a:p+b])
	}
	if cap(s.good) < nc {
		s.good = make([]bool, nc)
	}
	s.good = s.good[:nc]
	for c := 0; c < nc; c++ {
		n := 0
		for r := r0; r < r1; r++ {
			if s.cur[c*nr+r] == s.ref[c*nr+r-dy] {
				n++
			}
		}
		s.good[c] = n*10 >= (r1-r0)*9
	}
	// The longest run of good chunks gives the columns.
	c0, c1 := 0, 0
	for c := 0; c < nc; {
		if !s.good[c] {
			c++
			continue
		}
		e := c
		for e < nc && s.good[e] {
			e++
		}
		if e-c > c1-c0 {
			c0, c1 = c, e
		}
		c = e
	}
	if c1 == c0 {
		return box{}, 0, false
	}
	// The longest run of rows where every chunk in those columns matches gives the rows.
	y0, y1 := 0, 0
	for r := r0; r < r1; {
		e := r
		for e < r1 && func() bool {
			for c := c0; c < c1; c++ {
				if !match(c, e) {
					return false
				}
			}
			return true
		}() {
			e++
		}
		if e-r > y1-y0 {
			y0, y1 = r, e
		}
		r = e + 1
	}
	if y1-y0 < scrollMinRows {
		return box{}, 0, false
	}
	x0 := area.x0 + c0*scrollChunk
	x1 := min(area.x0+c1*scrollChunk, area.x1)
	return box{x0, area.y0 + y0, x1, area.y0 + y1}, dy, true
}

// probe reports whether rows of the chunk columns cs of cur appear elsewhere in the same
// columns of ref often enough to look like a scroll.
func (s *scrollScratch) probe(cur, ref []byte, stride int, area box, nr int, cs []int, chunk func(int) (int, int)) bool {
	clear(s.votes)
	for _, c := range cs {
		a, b := chunk(c)
		clear(s.rows)
		for r := 0; r < nr; r++ {
			o := (area.y0 + r) * stride
			h := maphash.Bytes(s.seed, ref[o+a:o+b])
			if _, seen := s.rows[h]; seen {
				s.rows[h] = -1
			} else {
				s.rows[h] = int32(r)
			}
		}
		for r := 0; r < nr; r += 2 {
			o := (area.y0 + r) * stride
			if rr, found := s.rows[maphash.Bytes(s.seed, cur[o+a:o+b])]; found && rr >= 0 && int(rr) != r {
				s.votes[r-int(rr)]++
			}
		}
	}
	for _, n := range s.votes {
		if n >= 4 {
			return true
		}
	}
	return false
}

// applyCopy moves the rows of ref that dst was copied from (dst shifted by −dy) into dst,
// as the host will.
func applyCopy(ref []byte, stride int, dst box, dy int) {
	a, b := dst.x0*4, dst.x1*4
	if dy > 0 { // the source is above: copy from the bottom up
		for y := dst.y1 - 1; y >= dst.y0; y-- {
			copy(ref[y*stride+a:y*stride+b], ref[(y-dy)*stride+a:(y-dy)*stride+b])
		}
		return
	}
	for y := dst.y0; y < dst.y1; y++ {
		copy(ref[y*stride+a:y*stride+b], ref[(y-dy)*stride+a:(y-dy)*stride+b])
	}
}
