package recording

import (
	"bytes"
	"context"
	"errors"
	"image"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"cubicle/backend/computerwire"
	"cubicle/backend/guest"
	"cubicle/backend/screen"
	"cubicle/backend/screen/screentest"
)

// player plays records as a viewer playing on from a segment's start does: every update in
// order onto one canvas.
type player struct {
	t *testing.T
	c screentest.Canvas
}

func (p *player) apply(data []byte) {
	p.t.Helper()
	u, err := screentest.ParseUpdate(data)
	if err != nil {
		p.t.Fatalf("an update does not parse: %v", err)
	}
	if err := p.c.Apply(u); err != nil {
		p.t.Fatalf("an update does not apply: %v", err)
	}
}

func (p *player) snapshot() *image.RGBA {
	if p.c.Img == nil {
		return nil
	}
	img := *p.c.Img
	img.Pix = slices.Clone(p.c.Img.Pix)
	return &img
}

// drawn is the picture records draw on an empty canvas.
func drawn(t *testing.T, recs ...Record) *image.RGBA {
	t.Helper()
	p := &player{t: t}
	for _, r := range recs {
		if r.Kind == KindUpdate {
			p.apply(r.Data)
		}
	}
	if p.c.Img == nil {
		t.Fatal("nothing drawn")
	}
	return p.c.Img
}

func samePixels(a, b *image.RGBA) bool {
	return a != nil && b != nil && a.Rect == b.Rect && bytes.Equal(a.Pix, b.Pix)
}

// segmentPlay is what one segment holds, played in order.
type segmentPlay struct {
	refs, fulls int             // reference and full keyframes
	sizes       []image.Point   // the screen size of each keyframe, in order
	refAt       []time.Duration // the reference keyframes' times
}

// playSegment plays segment path in order and checks, at every reference keyframe, that the
// keyframe it names draws on an empty canvas exactly — pixel for pixel — the picture the
// updates before it drew. at lists moments to take a picture of (the screen after every
// update at or before the moment), up to end (the next segment's start).
func playSegment(t *testing.T, path string, at []time.Duration, end time.Duration, pics map[time.Duration]*image.RGBA) segmentPlay {
	t.Helper()
	s, err := openSegment(path)
	if err != nil {
		t.Fatal(err)
	}
	defer s.close()
	var sp segmentPlay
	p := &player{t: t}
	var last time.Duration
	take := func(upTo time.Duration) { // pictures of the moments before upTo
		for _, m := range at {
			if m >= last && m < upTo && pics[m] == nil && p.c.Img != nil {
				pics[m] = p.snapshot()
			}
		}
	}
	for {
		rec, off, err := s.next(false)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("%s: %v", filepath.Base(path), err)
		}
		take(rec.At)
		last = rec.At
		switch {
		case rec.Kind == KindKeyRef:
			key, err := s.resolve(rec, off)
			if err != nil {
				t.Fatalf("%s: the reference keyframe at %v does not resolve: %v", filepath.Base(path), rec.At, err)
			}
			if !key.Key() || key.Kind != KindUpdate || key.At != rec.At {
				t.Fatalf("resolved to %+v", key)
			}
			if got := drawn(t, key); !samePixels(got, p.c.Img) {
				t.Fatalf("%s: the reference keyframe at %v draws %d pixels other than the recorded stream", filepath.Base(path), rec.At, p.c.Differ(got))
			}
			sp.refs++
			sp.refAt = append(sp.refAt, rec.At)
			sp.sizes = append(sp.sizes, image.Pt(computerwire.Size(key.Data)))
		case rec.Kind == KindUpdate:
			if rec.Key() {
				sp.fulls++
				sp.sizes = append(sp.sizes, image.Pt(computerwire.Size(rec.Data)))
			}
			p.apply(rec.Data)
		}
	}
	take(end)
	return sp
}

// TestReferenceKeyframes records a real driver's screen (flat areas, a picture, a ticking
// clock, a picture changing now and then) with a keyframe due every 300 ms, and checks that
// keyframes after a segment's first are references, that each draws exactly the
// picture the recorded stream drew at its moment, and that seeks into the middle of a
// segment, after several of them, draw exactly what playing the segment from its start draws.
func TestReferenceKeyframes(t *testing.T) {
	d := screentest.Start(t, 153, 320, 200)
	p := screentest.NewPainter(t, d)
	hubs := screen.New(screen.Config{Logger: testLogger(t)})
	t.Cleanup(func() { hubs.Close() })
	dir := t.TempDir()
	s, err := New(Config{Dir: dir, Screens: hubs, Logger: testLogger(t), KeyEvery: 300 * time.Millisecond, FlushEvery: 100 * time.Millisecond,
		SegmentEvery: 2 * time.Second, Link: func(context.Context, string) (screen.RegionSource, error) { return d.Client, nil }})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	p.Fill(0, 0, 320, 200)
	p.Noise(200, 100, 100, 80)
	s.StartDesktop(Desktop{ID: "desk-1", Node: "local", AccountID: "acc", AgentID: "a1"})
	id := s.Recording("desk-1")
	for i := range 50 {
		p.Fill(20+(i%8)*12, 20, 12, 16) // a clock
		if i%10 == 5 {
			p.Noise(10, 120, 60, 40) // a picture changes
		}
		if i%7 == 3 {
			p.Fill(100+i, 90, 70, 30) // a window moves, across tiles
		}
		time.Sleep(100 * time.Millisecond)
	}
	s.StopDesktop("desk-1", "done")
	info, err := s.Get("acc", "a1", id)
	if err != nil {
		t.Fatal(err)
	}
	segs, _ := listSegments(filepath.Join(dir, id))
	// Moments to seek to: random ones, and each just after a reference keyframe.
	rng := rand.New(rand.NewPCG(1, 2))
	var moments []time.Duration
	for range 12 {
		moments = append(moments, time.Duration(rng.Int64N(info.DurationMs+1))*time.Millisecond)
	}
	pics := map[time.Duration]*image.RGBA{}
	var all segmentPlay
	var refAt []time.Duration
	for _, seg := range segs {
		sp := playSegment(t, seg, nil, 0, nil)
		t.Logf("%s: %d full keyframes, %d reference keyframes", filepath.Base(seg), sp.fulls, sp.refs)
		all.refs += sp.refs
		all.fulls += sp.fulls
		for i, at := range sp.refAt {
			if i >= 2 {
				refAt = append(refAt, at)
				moments = append(moments, at, at+50*time.Millisecond)
			}
		}
	}
	t.Logf("recording: %d ms, %d bytes, %d keyframes, %d segments", info.DurationMs, info.Bytes, info.Keyframes, len(segs))
	// Each segment starts with a full keyframe; the others are references (a stream that
	// starts over on a loaded machine adds a full one now and then).
	if all.refs < 2*len(segs) || all.refs <= all.fulls || len(refAt) == 0 {
		t.Fatalf("%d reference and %d full keyframes in %d segments (%d references after a segment's third keyframe), want several references per segment",
			all.refs, all.fulls, len(segs), len(refAt))
	}
	for i, seg := range segs {
		end := time.Duration(1 << 62)
		if i+1 < len(segs) {
			next, err := openSegment(segs[i+1])
			if err != nil {
				t.Fatal(err)
			}
			end = next.start
			next.close()
		}
		playSegment(t, seg, moments, end, pics)
	}
	startedAtRef := 0
	for _, m := range moments {
		r, err := s.Open(id)
		if err != nil {
			t.Fatal(err)
		}
		recs, err := r.Seek(m)
		notes := r.Notes()
		r.Close()
		if err != nil || len(notes) > 0 {
			t.Fatalf("seek %v: %v %q", m, err, notes)
		}
		if len(recs) == 0 || !recs[0].Key() || recs[0].Kind != KindUpdate {
			t.Fatalf("seek %v: starts with %+v, want a keyframe message", m, recs[0])
		}
		if slices.Contains(refAt, recs[0].At) {
			startedAtRef++
		}
		want := pics[m]
		if got := drawn(t, recs...); !samePixels(got, want) {
			t.Errorf("seek %v (from the keyframe at %v, %d records): differs from playing its segment from the start", m, recs[0].At, len(recs))
		}
	}
	if startedAtRef < len(refAt) {
		t.Errorf("%d seeks started at a reference keyframe after a segment's third keyframe, want at least %d", startedAtRef, len(refAt))
	}
	// Playing on after a seek: a reader never hands out a reference keyframe.
	r, _ := s.Open(id)
	defer r.Close()
	if _, err := r.Seek(0); err != nil {
		t.Fatal(err)
	}
	for {
		rec, err := r.Next()
		if err != nil {
			break
		}
		if rec.Kind == KindKeyRef {
			t.Fatal("Next returned a reference keyframe")
		}
	}
}

// TestResizeForcesAFullKeyframe changes the real screen's size while it is recorded: the
// first keyframe of the new size is a full one, and no reference keyframe names the old
// size's regions after the change.
func TestResizeForcesAFullKeyframe(t *testing.T) {
	d := screentest.Start(t, 154, 640, 400)
	if !d.Client.Has(guest.FeatureResize) {
		t.Fatal("the test driver cannot resize its screen")
	}
	p := screentest.NewPainter(t, d)
	hubs := screen.New(screen.Config{Logger: testLogger(t)})
	t.Cleanup(func() { hubs.Close() })
	dir := t.TempDir()
	s, err := New(Config{Dir: dir, Screens: hubs, Logger: testLogger(t), KeyEvery: 300 * time.Millisecond, FlushEvery: 100 * time.Millisecond,
		SegmentEvery: time.Minute, Link: func(context.Context, string) (screen.RegionSource, error) { return d.Client, nil }})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	p.Fill(0, 0, 640, 400)
	s.StartDesktop(Desktop{ID: "desk-1", Node: "local", AccountID: "acc", AgentID: "a1"})
	id := s.Recording("desk-1")
	tick := func(n int) {
		for i := range n {
			p.Fill(20+(i%8)*12, 20, 12, 16)
			time.Sleep(100 * time.Millisecond)
		}
	}
	tick(12)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	size, err := d.Client.Resize(ctx, 512, 320)
	if err != nil {
		t.Fatalf("resize: %v", err)
	}
	t.Logf("resized to %dx%d", size.Width, size.Height)
	tick(15)
	s.StopDesktop("desk-1", "done")
	segs, _ := listSegments(filepath.Join(dir, id))
	var sizes []image.Point
	var kinds []bool // true: a reference
	for _, seg := range segs {
		f, _ := openSegment(seg)
		for {
			rec, _, err := f.next(false)
			if err != nil {
				break
			}
			if rec.Key() {
				kinds = append(kinds, rec.Kind == KindKeyRef)
				// A reference keyframe's payload starts with the header of the keyframe it names.
				sizes = append(sizes, image.Pt(computerwire.Size(rec.Data)))
			}
		}
		f.close()
		playSegment(t, seg, nil, 0, nil) // every reference still draws exactly
	}
	t.Logf("keyframes: sizes %v, references %v", sizes, kinds)
	newSize := image.Pt(size.Width, size.Height)
	first := slices.Index(sizes, newSize)
	if first < 0 {
		t.Fatalf("no keyframe of the new size %v: %v", newSize, sizes)
	}
	if kinds[first] {
		t.Errorf("the first keyframe of the new size is a reference, want a full one")
	}
	if !slices.Contains(kinds[:first], true) || !slices.Contains(kinds[first:], true) {
		t.Errorf("want reference keyframes before and after the resize: %v", kinds)
	}
	for i := first; i < len(sizes); i++ {
		if sizes[i] != newSize {
			t.Errorf("keyframe %d after the resize has the size %v", i, sizes[i])
		}
	}
}

// TestVersion1RecordingStillPlays plays testdata/v1, a recording of a real screen written
// by the segment format's version 1 (before reference keyframes): it is listed, and every
// seek draws exactly what playing it from its start draws.
func TestVersion1RecordingStillPlays(t *testing.T) {
	dir := t.TempDir()
	if err := os.CopyFS(dir, os.DirFS("testdata/v1")); err != nil {
		t.Fatal(err)
	}
	s := newService(t, dir)
	all := s.List("acc", "a1")
	if len(all) != 1 {
		t.Fatalf("%d recordings, want 1", len(all))
	}
	info := all[0]
	segs, _ := listSegments(filepath.Join(dir, info.ID))
	if len(segs) < 2 {
		t.Fatalf("%d segments", len(segs))
	}
	for _, seg := range segs {
		raw, _ := os.ReadFile(seg)
		if raw[4] != 1 {
			t.Fatalf("%s is of version %d, want the old version 1", filepath.Base(seg), raw[4])
		}
	}
	// Playing the whole recording from its start, a picture at each moment (from its first
	// record on, every 250 ms).
	pics := map[time.Duration]*image.RGBA{}
	pl := &player{t: t}
	r, _ := s.Open(info.ID)
	recs, err := r.Seek(0)
	if err != nil || len(recs) == 0 {
		t.Fatal(err, len(recs))
	}
	var moments []time.Duration
	for m := recs[0].At; m <= time.Duration(info.DurationMs)*time.Millisecond; m += 250 * time.Millisecond {
		moments = append(moments, m)
	}
	var last time.Duration
	for i := 0; ; i++ {
		var rec Record
		if i < len(recs) {
			rec = recs[i]
		} else if rec, err = r.Next(); err != nil {
			if !errors.Is(err, io.EOF) {
				t.Fatal(err)
			}
			break
		}
		for _, m := range moments {
			if m >= last && m < rec.At && pics[m] == nil && pl.c.Img != nil {
				pics[m] = pl.snapshot()
			}
		}
		last = rec.At
		if rec.Kind == KindUpdate {
			pl.apply(rec.Data)
		}
	}
	r.Close()
	for _, m := range moments {
		if pics[m] == nil {
			pics[m] = pl.snapshot()
		}
		r, _ := s.Open(info.ID)
		recs, err := r.Seek(m)
		notes := r.Notes()
		r.Close()
		if err != nil || len(notes) > 0 {
			t.Fatalf("seek %v: %v %q", m, err, notes)
		}
		if got := drawn(t, recs...); !samePixels(got, pics[m]) {
			t.Errorf("seek %v: differs from playing the recording from its start", m)
		}
	}
}

// fillUpdate is an update message of fills (x, y, w, h, colour) on a w×h screen.
func fillUpdate(key bool, w, h int, fills ...[5]int) []byte {
	u := &guest.Update{Key: key, Width: w, Height: h, Lossless: true}
	for _, f := range fills {
		u.Regions = append(u.Regions, guest.Region{X: f[0], Y: f[1], W: f[2], H: f[3], Enc: guest.EncFill, Color: uint32(f[4])})
	}
	return computerwire.Update([]*guest.Update{u}, 0, false)
}

func copyUpdate(w, h int) []byte {
	u := &guest.Update{Width: w, Height: h, Regions: []guest.Region{{X: 0, Y: 0, W: w, H: h - 8, Enc: guest.EncCopy, SrcX: 0, SrcY: 8}}}
	return computerwire.Update([]*guest.Update{u}, 0, false)
}

// TestKeyTracker feeds the tracker update messages and checks when it can name the screen —
// and, when it can, that the reference keyframe it makes, written into a real segment and
// resolved, draws exactly what the messages drew.
func TestKeyTracker(t *testing.T) {
	const w, h = 200, 130 // cells of 64: 4×3, the last row and column cut
	full := fillUpdate(true, w, h, [5]int{0, 0, w, h, 0x102030})
	var partial [][5]int
	for i := range maxCellRefs + 1 {
		partial = append(partial, [5]int{i, i, 8, 8, 0x405060 + i}) // all inside cell 0, none whole
	}
	var clock [][]byte // a clock repainting the same few spots of one cell, again and again
	clock = append(clock, full)
	for i := range 5 * maxCellRefs {
		clock = append(clock, fillUpdate(false, w, h, [5]int{4 + (i%4)*12, 20, 12, 16, 0x111111 * (i%7 + 1)}))
	}
	tests := []struct {
		name string
		msgs [][]byte
		ok   bool
	}{
		{"a full keyframe", [][]byte{full}, true},
		{"updates after it, whole cells and parts of cells", [][]byte{full,
			fillUpdate(false, w, h, [5]int{64, 0, 64, 64, 0xff0000}, [5]int{10, 70, 100, 20, 0x00ff00}),
			fillUpdate(false, w, h, [5]int{0, 0, w, h, 0x0000ff}, [5]int{150, 100, 50, 30, 0x777777}),
			fillUpdate(false, w, h, [5]int{190, 120, 10, 10, 0xabcdef})}, true},
		{"nothing before a full keyframe", [][]byte{fillUpdate(false, w, h, [5]int{0, 0, w, h, 1})}, false},
		{"a copy", [][]byte{full, copyUpdate(w, h)}, false},
		{"a full keyframe after a copy", [][]byte{full, copyUpdate(w, h), full, fillUpdate(false, w, h, [5]int{3, 3, 5, 5, 9})}, true},
		{"a new size", [][]byte{full, fillUpdate(false, 256, 160, [5]int{0, 0, 10, 10, 1})}, false},
		{"a new size's full keyframe", [][]byte{full, fillUpdate(false, 256, 160, [5]int{0, 0, 10, 10, 1}),
			fillUpdate(true, 256, 160, [5]int{0, 0, 256, 160, 2})}, true},
		{"a clock", clock, true},
		{"too many parts of one cell", [][]byte{full, fillUpdate(false, w, h, partial...)}, false},
		{"a keyframe that leaves a cell unpainted", [][]byte{fillUpdate(true, w, h, [5]int{0, 0, w, 64, 3})}, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "seg")
			sw, err := createSegment(path, time.Now(), 0)
			if err != nil {
				t.Fatal(err)
			}
			var k keyTracker
			var recs []Record
			for i, m := range tc.msgs {
				rec := Record{Kind: KindUpdate, At: time.Duration(i) * time.Millisecond, Data: m}
				if m[7]&computerwire.FlagKey != 0 {
					rec.Flags = FlagKey
				}
				off := sw.bytes
				if err := sw.write(rec); err != nil {
					t.Fatal(err)
				}
				k.add(off, m)
				recs = append(recs, rec)
			}
			payload, ok := k.keyframe()
			if ok != tc.ok {
				t.Fatalf("the tracker can name the screen: %v, want %v", ok, tc.ok)
			}
			if !ok {
				return
			}
			off := sw.bytes
			ref := Record{Kind: KindKeyRef, Flags: FlagKey, At: time.Second, Data: payload}
			if err := sw.write(ref); err != nil {
				t.Fatal(err)
			}
			sw.close()
			sr, err := openSegment(path)
			if err != nil {
				t.Fatal(err)
			}
			defer sr.close()
			key, err := sr.resolve(ref, off)
			if err != nil {
				t.Fatal(err)
			}
			// Draw from the last full keyframe, as a player would.
			from := 0
			for i, r := range recs {
				if r.Key() {
					from = i
				}
			}
			want := drawn(t, recs[from:]...)
			if got := drawn(t, key); !samePixels(got, want) {
				t.Errorf("the reference keyframe draws something else than the updates")
			}
			if n := len(key.Data); n >= len(slices.Concat(tc.msgs...))+computerwire.HeaderLen {
				t.Errorf("the keyframe message has %d bytes: it should hold only the regions that show", n)
			}
			// A damaged reference (a record it names that is not there) is an error, not garbage.
			bad := Record{Kind: KindKeyRef, Flags: FlagKey, At: time.Second, Data: slices.Clone(payload)}
			bad.Data[computerwire.HeaderLen+3]++ // the first entry's record offset
			if _, err := sr.resolve(bad, off); !errors.Is(err, ErrDamaged) {
				t.Errorf("a reference to no record resolved: %v", err)
			}
		})
	}
}

// TestDamagedReferenceFallsBack damages an update a reference keyframe names: a seek after it
// notes the damage and starts at the segment's full keyframe instead of drawing garbage.
func TestDamagedReferenceFallsBack(t *testing.T) {
	const w, h = 128, 128
	msgs := [][]byte{fillUpdate(true, w, h, [5]int{0, 0, w, h, 0x102030}),
		fillUpdate(false, w, h, [5]int{0, 0, 64, 64, 0xff0000}),
		fillUpdate(false, w, h, [5]int{64, 64, 64, 64, 0x00ff00})}
	// The segment as the recorder writes it: offsets follow from the records' sizes.
	var k keyTracker
	var recs []Record
	off := int64(segHeaderLen)
	for i, m := range msgs {
		r := Record{Kind: KindUpdate, At: time.Duration(i) * time.Second, Data: m}
		if i == 0 {
			r.Flags = FlagKey
		}
		k.add(off, m)
		off += int64(recHeaderLen + len(m) + recTrailerLen)
		recs = append(recs, r)
	}
	payload, ok := k.keyframe()
	if !ok {
		t.Fatal("the tracker cannot name the screen")
	}
	recs = append(recs, Record{Kind: KindKeyRef, Flags: FlagKey, At: 3 * time.Second, Data: payload})
	dir := t.TempDir()
	now := time.Now()
	fakeRecording(t, dir, "r1", Info{StartedAt: now, EndedAt: now, AccountID: "acc", AgentIDs: []string{"a"}}, [][]Record{recs})
	s := newService(t, dir)
	seek := func() ([]Record, []string) {
		r, err := s.Open("r1")
		if err != nil {
			t.Fatal(err)
		}
		defer r.Close()
		out, err := r.Seek(3 * time.Second)
		if err != nil {
			t.Fatalf("seek: %v", err)
		}
		return out, r.Notes()
	}
	out, notes := seek()
	if len(out) != 1 || out[0].At != 3*time.Second || out[0].Kind != KindUpdate || len(notes) > 0 {
		t.Fatalf("intact: %+v, notes %q; want the resolved reference alone", out, notes)
	}
	if !samePixels(drawn(t, out...), drawn(t, recs[:3]...)) {
		t.Fatal("the reference draws something else than the updates")
	}
	// Damage the last update's colour (the reference names it).
	path := filepath.Join(dir, "r1", segName(1))
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	i := bytes.LastIndex(raw, msgs[2])
	raw[i+len(msgs[2])-2] ^= 0xff
	if err := os.WriteFile(path, raw, 0o600); err != nil {
		t.Fatal(err)
	}
	out, notes = seek()
	t.Logf("damaged: %d records, notes %q", len(out), notes)
	if len(out) == 0 || out[0].At != 0 || !out[0].Key() || len(notes) == 0 {
		t.Fatalf("damaged: %d records, notes %q; want the seek to start at the full keyframe, with a note", len(out), notes)
	}
}
