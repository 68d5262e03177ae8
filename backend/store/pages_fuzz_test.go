package store

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// The page headers of a data file, fuzzed against both checks (issue 31 item 2): the
// pre-open check of Open (serve refuses a damaged file before it starts) and the full check
// of Check (`cubicle doctor --check-store`). Each input overwrites one field of one page — a
// meta, branch, leaf or freelist page — with a value; whatever it is, both checks end
// promptly and agree: Open refuses the file with a *DamagedError exactly when Check reports
// damage (other than records that are not JSON, which Check alone reads). A short run:
//
//	go test ./backend/store -run '^$' -fuzz '^FuzzPageHeaders$' -fuzztime=20s
//
// Without -fuzz, `go test` runs the seed corpus below.

// Page kinds a fuzz input picks from.
const (
	kindMeta = iota
	kindBranch
	kindLeaf
	kindFreelist
	kindCount
)

// fuzzFile is the data file the inputs damage, made once per process.
var fuzzFile = sync.OnceValues(func() ([]byte, error) {
	dir, err := os.MkdirTemp("", "cubicle-fuzz-store-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	path := filepath.Join(dir, "cubicle.db")
	s, err := Open(path, Options{KeepBackups: -1})
	if err != nil {
		return nil, err
	}
	if err := s.CreateAccount(Account{ID: "a1", Username: "alice", CreatedAt: t0}); err != nil {
		return nil, err
	}
	hist, _ := json.Marshal([]map[string]string{{"role": "user", "text": strings.Repeat("hello ", 150)}})
	for i := range 80 {
		if err := s.PutChatSession(ChatSession{UserID: "a1", SessionID: fmt.Sprintf("s%03d", i), Title: "chat",
			History: hist, CreatedAt: t0, UpdatedAt: t0}); err != nil {
			return nil, err
		}
		if err := s.PutToolRun(ToolRun{ID: fmt.Sprintf("r%03d", i), SessionID: "s000", Tool: "computer_shell",
			Status: RunSuccess, CreatedAt: t0.Add(time.Duration(i) * time.Second)}); err != nil {
			return nil, err
		}
	}
	// Shrinking records leaves free pages, so the freelist has entries.
	for i := 0; i < 80; i += 3 {
		if err := s.PutChatSession(ChatSession{UserID: "a1", SessionID: fmt.Sprintf("s%03d", i), Title: "chat",
			CreatedAt: t0, UpdatedAt: t0}); err != nil {
			return nil, err
		}
	}
	if err := s.Close(); err != nil {
		return nil, err
	}
	return os.ReadFile(path)
})

// pagesOf lists the ids of the pages of a kind in the sound file raw (page size ps).
func pagesOf(raw []byte, ps int, kind int) []int {
	var out []int
	want := map[int]uint16{kindMeta: 0x04, kindBranch: branchPageFlag, kindLeaf: leafPageFlag, kindFreelist: freelistPageFlag}[kind]
	for id := 0; (id+1)*ps <= len(raw); id++ {
		p := raw[id*ps:]
		if binary.NativeEndian.Uint64(p) == uint64(id) && binary.NativeEndian.Uint16(p[8:]) == want {
			out = append(out, id)
		}
	}
	return out
}

// damagePage overwrites one field of page id of raw (in place). field picks the field among
// the page's header (id, flags, count, overflow) and the fields of its kind; elem picks the
// element of a branch, leaf or freelist page; fixsum recomputes a meta page's checksum so the
// damaged meta is the one bbolt believes.
func damagePage(raw []byte, ps, id, kind int, field uint8, elem uint16, value uint64, fixsum bool) {
	p := raw[id*ps : (id+1)*ps]
	ne := binary.NativeEndian
	put := func(off, width int) {
		switch width {
		case 2:
			ne.PutUint16(p[off:], uint16(value))
		case 4:
			ne.PutUint32(p[off:], uint32(value))
		default:
			ne.PutUint64(p[off:], value)
		}
	}
	header := []struct{ off, width int }{{0, 8}, {8, 2}, {10, 2}, {12, 4}}
	var fields []struct{ off, width int }
	count := int(ne.Uint16(p[10:]))
	switch kind {
	case kindMeta: // magic, version, page size, flags, root, sequence, freelist, pgid, txid, checksum
		fields = []struct{ off, width int }{{16, 4}, {20, 4}, {24, 4}, {28, 4}, {32, 8}, {40, 8}, {48, 8}, {56, 8}, {64, 8}, {72, 8}}
	case kindBranch: // pos, ksize, pgid
		e := pageHeaderSize + int(elem)%max(count, 1)*elemSize
		fields = []struct{ off, width int }{{e, 4}, {e + 4, 4}, {e + 8, 8}}
	case kindLeaf: // flags, pos, ksize, vsize
		e := pageHeaderSize + int(elem)%max(count, 1)*elemSize
		fields = []struct{ off, width int }{{e, 4}, {e + 4, 4}, {e + 8, 4}, {e + 12, 4}}
	case kindFreelist: // the page ids it lists (the count is the header's)
		fields = []struct{ off, width int }{{pageHeaderSize + int(elem)%max(count, 1)*8, 8}}
	}
	all := append(header, fields...)
	f := all[int(field)%len(all)]
	if f.off+f.width <= len(p) {
		put(f.off, f.width)
	}
	if kind == kindMeta && fixsum {
		h := fnv.New64a()
		h.Write(p[pageHeaderSize : pageHeaderSize+metaChecksumOff])
		ne.PutUint64(p[pageHeaderSize+metaChecksumOff:], h.Sum64())
	}
}

func FuzzPageHeaders(f *testing.F) {
	raw, err := fuzzFile()
	if err != nil {
		f.Fatal(err)
	}
	// The seed corpus: each kind of page, each of its fields, with the values damage takes
	// (all ones, zero, one past the file, a page id of itself); the first is issue 31's file
	// (a leaf page whose overflow says 0xFFFFFFFF).
	f.Add(uint8(kindLeaf), uint16(0), uint8(3), uint16(0), uint64(0xFFFFFFFF), false)
	for kind, fields := range []int{kindMeta: 14, kindBranch: 7, kindLeaf: 8, kindFreelist: 5} {
		for field := range fields {
			for _, v := range []uint64{0xFFFFFFFFFFFFFFFF, 3} {
				f.Add(uint8(kind), uint16(field), uint8(field), uint16(field*7), v, kind == kindMeta)
			}
		}
	}
	f.Fuzz(func(t *testing.T, kind uint8, nth uint16, field uint8, elem uint16, value uint64, fixsum bool) {
		const ps = 4096
		k := int(kind) % kindCount
		ids := pagesOf(raw, ps, k)
		if len(ids) == 0 {
			t.Skipf("the seed file has no page of kind %d", k) // never for the file above: see TestFuzzFileHasEveryKind
		}
		bad := append([]byte(nil), raw...)
		damagePage(bad, ps, ids[int(nth)%len(ids)], k, field, elem, value, fixsum)
		checkBoth(t, bad)
	})
}

// checkBoth runs the full check and the pre-open check on a copy of data each and fails
// unless both end promptly and agree.
func checkBoth(t *testing.T, data []byte) {
	t.Helper()
	dir := t.TempDir()
	path := filepath.Join(dir, "cubicle.db")
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	start := time.Now()
	r, err := CheckContext(ctx, path, time.Second)
	if err != nil {
		t.Fatalf("Check: %v (after %s)", err, time.Since(start))
	}
	var damage []string
	for _, p := range r.Problems {
		if !strings.Contains(p, "is not valid JSON") {
			damage = append(damage, p)
		}
	}
	s, err := Open(path, Options{KeepBackups: -1})
	var d *DamagedError
	switch {
	case errors.As(err, &d):
		if len(damage) == 0 {
			t.Fatalf("Open refuses the file (%v) but Check finds it sound: %+v", err, r)
		}
	case err != nil:
		t.Fatalf("Open: %v, want a *DamagedError or a store", err)
	default:
		// The reads a start makes answer (an error is fine) without crashing the process.
		s.Account("a1")
		s.ChatSessions("a1")
		s.ChatSessionsWithActiveTurn()
		s.ToolRuns("a1", "s000")
		s.Close()
		if len(damage) > 0 {
			t.Fatalf("Check finds damage %q but Open accepts the file", damage)
		}
	}
}

// TestFuzzFileHasEveryKind: the file FuzzPageHeaders damages has pages of every kind, so no
// input is skipped.
func TestFuzzFileHasEveryKind(t *testing.T) {
	raw, err := fuzzFile()
	if err != nil {
		t.Fatal(err)
	}
	for k := range kindCount {
		if len(pagesOf(raw, 4096, k)) == 0 {
			t.Errorf("no page of kind %d in the fuzzed file", k)
		}
	}
}

// TestLeafOverflowIsDamage is issue 31's file: an in-use leaf page whose overflow field says
// 0xFFFFFFFF (one `dd` of four bytes). Check reports the page at once (it ran for minutes
// and grew past 2.9 GB), Open refuses the file with the damage message naming the newest
// sound backup (it accepted it), and a check whose context ends returns at once.
func TestLeafOverflowIsDamage(t *testing.T) {
	path, raw := seeded(t)
	leaves := pagesOf(raw, 4096, kindLeaf)
	if len(leaves) == 0 {
		t.Fatal("no leaf page")
	}
	bad := append([]byte(nil), raw...)
	binary.NativeEndian.PutUint32(bad[leaves[len(leaves)/2]*4096+12:], 0xFFFFFFFF)
	if err := os.WriteFile(path, bad, 0o600); err != nil {
		t.Fatal(err)
	}
	type result struct {
		r   CheckReport
		err error
	}
	done := make(chan result, 1)
	go func() {
		r, err := Check(path, time.Second)
		done <- result{r, err}
	}()
	select {
	case res := <-done:
		if res.err != nil || res.r.OK() || !strings.Contains(strings.Join(res.r.Problems, ";"), fmt.Sprintf("page %d", leaves[len(leaves)/2])) {
			t.Fatalf("Check: %+v, %v; want the page %d reported", res.r, res.err, leaves[len(leaves)/2])
		}
	case <-time.After(30 * time.Second):
		t.Fatal("Check of a leaf page with overflow 0xFFFFFFFF did not end within 30 s") // the process ends with the test binary
	}
	_, err := Open(path, testOpts(t, nil))
	wantDamaged(t, err, path, fmt.Sprintf("page %d", leaves[len(leaves)/2]))
	unchanged(t, path, bad)

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := CheckContext(ctx, path, time.Second); !errors.Is(err, context.Canceled) {
		t.Fatalf("Check after its context ended: %v, want context.Canceled", err)
	}
}
