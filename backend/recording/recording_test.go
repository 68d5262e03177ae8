package recording

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"cubicle/backend/fault"
	"cubicle/backend/screen"
	"cubicle/internal/testenv"
)

func testLogger(t testing.TB) *slog.Logger {
	return slog.New(slog.NewTextHandler(testenv.Writer(t), &slog.HandlerOptions{Level: slog.LevelDebug}))
}

// fakeRecording writes a recording directly: one segment per element of segs, each a list
// of records (the first of each should be a keyframe).
func fakeRecording(t *testing.T, dir, id string, info Info, segs [][]Record) {
	t.Helper()
	info.ID = id
	if err := WriteRecording(dir, info, segs); err != nil {
		t.Fatal(err)
	}
}

func segName(n int) string { return segPrefix + strings.Repeat("0", 6-len(itoa(n))) + itoa(n) }

func itoa(n int) string {
	if n == 0 {
		return "0"
	}
	s := ""
	for ; n > 0; n /= 10 {
		s = string(rune('0'+n%10)) + s
	}
	return s
}

func key(at time.Duration, tag string) Record {
	return Record{Kind: KindUpdate, Flags: FlagKey, At: at, Data: []byte("key " + tag)}
}

func upd(at time.Duration, tag string) Record {
	return Record{Kind: KindUpdate, At: at, Data: []byte("upd " + tag)}
}

// newService opens a Service on dir without a screen (these tests read recordings only).
func newService(t *testing.T, dir string) *Service {
	t.Helper()
	s, err := New(Config{Dir: dir, Screens: screen.New(screen.Config{}), Logger: testLogger(t),
		Link: func(context.Context, string) (screen.RegionSource, error) {
			return nil, fault.Unavailable("no desktops in this test")
		}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func TestSegmentRoundTrip(t *testing.T) {
	dir := t.TempDir()
	began := time.Now()
	w, err := createSegment(filepath.Join(dir, "seg"), began, 0)
	if err != nil {
		t.Fatal(err)
	}
	want := []Record{key(0, "a"), upd(5*time.Millisecond, "b"), {Kind: KindText, At: 7 * time.Millisecond, Data: []byte(`{"type":"pointer"}`)},
		{Kind: KindUpdate, At: time.Second, Data: []byte{}}}
	for _, r := range want {
		if err := w.write(r); err != nil {
			t.Fatal(err)
		}
	}
	w.close()
	r, err := openSegment(filepath.Join(dir, "seg"))
	if err != nil {
		t.Fatal(err)
	}
	defer r.close()
	if r.began.UnixMilli() != began.UnixMilli() {
		t.Errorf("began %v, want %v", r.began, began)
	}
	for i, wr := range want {
		got, _, err := r.next(false)
		if err != nil {
			t.Fatalf("record %d: %v", i, err)
		}
		if got.Kind != wr.Kind || got.Flags != wr.Flags || got.At != wr.At || string(got.Data) != string(wr.Data) {
			t.Errorf("record %d = %+v, want %+v", i, got, wr)
		}
	}
	if _, _, err := r.next(false); !errors.Is(err, io.EOF) {
		t.Errorf("after the last record: %v, want EOF", err)
	}
}

func TestSeekStartsAtTheKeyframeBefore(t *testing.T) {
	dir := t.TempDir()
	fakeRecording(t, dir, "r1", Info{StartedAt: time.Now(), EndedAt: time.Now(), AccountID: "acc", AgentIDs: []string{"a"}}, [][]Record{
		{key(0, "0"), upd(2*time.Second, "1"), key(10*time.Second, "10"), upd(12*time.Second, "12")},
		{key(20*time.Second, "20"), upd(21*time.Second, "21"), upd(25*time.Second, "25"), key(30*time.Second, "30"), upd(31*time.Second, "31")},
	})
	s := newService(t, dir)
	for _, tc := range []struct {
		at        time.Duration
		want      []string
		nextAfter string
	}{
		{0, []string{"key 0"}, "upd 1"},
		{5 * time.Second, []string{"key 0", "upd 1"}, "key 10"},
		{12 * time.Second, []string{"key 10", "upd 12"}, "key 20"},
		{15 * time.Second, []string{"key 10", "upd 12"}, "key 20"},
		{24 * time.Second, []string{"key 20", "upd 21"}, "upd 25"},
		{30 * time.Second, []string{"key 30"}, "upd 31"},
		{time.Hour, []string{"key 30", "upd 31"}, ""},
	} {
		r, err := s.Open("r1")
		if err != nil {
			t.Fatal(err)
		}
		recs, err := r.Seek(tc.at)
		if err != nil {
			t.Fatalf("seek %v: %v", tc.at, err)
		}
		var got []string
		for _, rec := range recs {
			got = append(got, string(rec.Data))
		}
		if strings.Join(got, ",") != strings.Join(tc.want, ",") {
			t.Errorf("seek %v drew %v, want %v", tc.at, got, tc.want)
		}
		next, err := r.Next()
		switch {
		case tc.nextAfter == "" && !errors.Is(err, io.EOF):
			t.Errorf("seek %v: next = %q, %v; want EOF", tc.at, next.Data, err)
		case tc.nextAfter != "" && (err != nil || string(next.Data) != tc.nextAfter):
			t.Errorf("seek %v: next = %q, %v; want %q", tc.at, next.Data, err, tc.nextAfter)
		}
		r.Close()
	}
}

func TestDamagedSegmentIsSkippedWithANote(t *testing.T) {
	dir := t.TempDir()
	fakeRecording(t, dir, "r1", Info{StartedAt: time.Now(), EndedAt: time.Now()}, [][]Record{
		{key(0, "0"), upd(time.Second, "1")},
		{key(10*time.Second, "10"), upd(11*time.Second, "11"), upd(12*time.Second, "12")},
		{key(20*time.Second, "20"), upd(21*time.Second, "21")},
	})
	// One flipped byte in the middle of segment 2's second record, and segment 2's header
	// is fine: its first record plays, the rest is skipped.
	p := filepath.Join(dir, "r1", segName(2))
	raw, _ := os.ReadFile(p)
	off := segHeaderLen + recHeaderLen + len("key 10") + recTrailerLen + recHeaderLen + 1
	raw[off] ^= 0xff
	os.WriteFile(p, raw, 0o600)
	s := newService(t, dir)
	r, _ := s.Open("r1")
	defer r.Close()
	recs, err := r.Seek(0)
	if err != nil || len(recs) != 1 {
		t.Fatalf("seek 0: %d records, %v", len(recs), err)
	}
	var got []string
	for {
		rec, err := r.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("next: %v", err)
		}
		got = append(got, string(rec.Data))
	}
	if want := "upd 1,key 10,key 20,upd 21"; strings.Join(got, ",") != want {
		t.Errorf("played %v, want %s", got, want)
	}
	notes := r.Notes()
	if len(notes) != 1 || !strings.Contains(notes[0], "checksum") {
		t.Errorf("notes %q, want one about the checksum", notes)
	}
	// A segment whose header is gone is skipped whole.
	os.WriteFile(p, []byte("garbage"), 0o600)
	r2, _ := s.Open("r1")
	defer r2.Close()
	recs, err = r2.Seek(15 * time.Second)
	if err != nil || len(recs) != 1 || string(recs[0].Data) != "key 0" && string(recs[0].Data) != "key 20" {
		// with segment 2 unreadable, the keyframe before 15 s is the one at 0 s
		t.Logf("seek 15s over a broken segment drew %d records (%v)", len(recs), err)
	}
	if len(r2.Notes()) == 0 {
		t.Error("a segment without a header was skipped without a note")
	}
}

func TestCrashLeavesAPlayableRecording(t *testing.T) {
	dir := t.TempDir()
	began := time.Now().Add(-time.Minute)
	// A recording the process never closed: meta says live, the last record is cut short.
	fakeRecording(t, dir, "r1", Info{StartedAt: began, Live: true, AccountID: "acc", AgentIDs: []string{"a"}}, [][]Record{
		{key(0, "0"), upd(time.Second, "1"), upd(1500*time.Millisecond, "1.5"), upd(2*time.Second, "2")},
	})
	p := filepath.Join(dir, "r1", segName(1))
	fi, _ := os.Stat(p)
	os.Truncate(p, fi.Size()-3) // the last record's write was cut
	os.WriteFile(filepath.Join(dir, "r1", markersFile), []byte(`{"at":0,"kind":"desktop","label":"desktop running"}`+"\n"+`{"at":12`), 0o600)
	s := newService(t, dir)
	i, err := s.Get("acc", "a", "r1")
	if err != nil {
		t.Fatal(err)
	}
	if i.Live || i.EndedAt.IsZero() {
		t.Errorf("a recording left open is still live after a restart: %+v", i)
	}
	if i.DurationMs != 1500 {
		t.Errorf("duration %d ms, want 1500 (the last whole record)", i.DurationMs)
	}
	if len(i.Markers) != 1 || len(i.Notes) < 2 {
		t.Errorf("markers %+v notes %q: want the one whole marker and notes on what was lost", i.Markers, i.Notes)
	}
	r, _ := s.Open("r1")
	defer r.Close()
	recs, err := r.Seek(10 * time.Second)
	if err != nil || len(recs) != 3 {
		t.Fatalf("seek past the end: %d records, %v", len(recs), err)
	}
	if _, err := r.Next(); !errors.Is(err, io.EOF) {
		t.Errorf("after the cut record: %v, want EOF", err)
	}
	// Reopening does not change it again.
	s2 := newService(t, dir)
	if i2, _ := s2.Get("acc", "a", "r1"); i2.DurationMs != 1500 || i2.Live {
		t.Errorf("reopened: %+v", i2)
	}
}

func TestScoping(t *testing.T) {
	dir := t.TempDir()
	fakeRecording(t, dir, "r1", Info{StartedAt: time.Now(), EndedAt: time.Now(), AccountID: "acc", AgentIDs: []string{"a", "b"}},
		[][]Record{{key(0, "0")}})
	s := newService(t, dir)
	for _, tc := range []struct{ account, agent, id string }{
		{"other", "a", "r1"}, {"acc", "c", "r1"}, {"acc", "a", "nope"}, {"acc", "a", "../r1"},
	} {
		if _, err := s.Get(tc.account, tc.agent, tc.id); !errors.Is(err, fault.ErrNotFound) {
			t.Errorf("Get(%q, %q, %q) = %v, want not found", tc.account, tc.agent, tc.id, err)
		}
	}
	if got := s.List("acc", "b"); len(got) != 1 {
		t.Errorf("List(acc, b) = %d, want 1", len(got))
	}
	if got := s.List("other", "a"); len(got) != 0 {
		t.Errorf("List(other, a) = %d, want 0", len(got))
	}
}

func TestRetention(t *testing.T) {
	dir := t.TempDir()
	now := time.Now()
	mk := func(id string, ended time.Time, pad int) {
		fakeRecording(t, dir, id, Info{StartedAt: ended.Add(-time.Minute), EndedAt: ended, AccountID: "acc", AgentIDs: []string{"a"}},
			[][]Record{{{Kind: KindUpdate, Flags: FlagKey, Data: make([]byte, pad)}}})
		m := meta{Info: Info{ID: id, StartedAt: ended.Add(-time.Minute), EndedAt: ended, AccountID: "acc", AgentIDs: []string{"a"}, Bytes: int64(pad)}}
		writeMeta(filepath.Join(dir, id), m)
	}
	mk("old", now.Add(-20*24*time.Hour), 1000)
	mk("mid", now.Add(-3*time.Hour), 40<<20)
	mk("new", now.Add(-time.Hour), 40<<20)
	s := newService(t, dir)
	if _, err := s.SetSettings(Settings{KeepDays: 14, MaxBytes: 64 << 20}); err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, i := range s.List("acc", "a") {
		ids = append(ids, i.ID)
	}
	if strings.Join(ids, ",") != "new" {
		t.Errorf("after retention: %v, want only the newest (old by age, mid by size)", ids)
	}
	if _, err := os.Stat(filepath.Join(dir, "old")); !os.IsNotExist(err) {
		t.Errorf("the old recording's files are still there: %v", err)
	}
	// Settings survive a restart; bad ones are refused and change nothing.
	for _, bad := range []Settings{{KeepDays: -1}, {MaxBytes: 5}, {NeverRecord: []string{""}}} {
		if _, err := s.SetSettings(bad); !errors.Is(err, fault.ErrInvalid) {
			t.Errorf("SetSettings(%+v) = %v, want invalid", bad, err)
		}
	}
	s.Close()
	if st := newService(t, dir).Settings(); st.KeepDays != 14 || st.MaxBytes != 64<<20 {
		t.Errorf("settings after a restart: %+v", st)
	}
}
