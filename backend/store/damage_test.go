package store

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.etcd.io/bbolt"

	"cubicle/backend/fault"
)

// fill writes enough records (accounts, chats with 2 KiB of history each, tool runs) that the
// file has dozens of pages, several of them per bucket.
func fill(t *testing.T, s *Store) {
	t.Helper()
	if err := s.CreateAccount(Account{ID: "a1", Username: "alice", CreatedAt: t0}); err != nil {
		t.Fatal(err)
	}
	hist, _ := json.Marshal([]map[string]string{{"role": "user", "text": strings.Repeat("hello ", 350)}})
	for i := range 120 {
		c := ChatSession{UserID: "a1", SessionID: fmt.Sprintf("s%03d", i), Title: "chat", History: hist, CreatedAt: t0, UpdatedAt: t0}
		if err := s.PutChatSession(c); err != nil {
			t.Fatal(err)
		}
		r := ToolRun{ID: fmt.Sprintf("r%03d", i), SessionID: "s000", Tool: "computer_shell", Status: RunSuccess,
			CreatedAt: t0.Add(time.Duration(i) * time.Second)}
		if err := s.PutToolRun(r); err != nil {
			t.Fatal(err)
		}
	}
}

var t0 = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

// seeded makes a data file with records and, by opening it a second time, one rolling
// backup; it returns the file's path and its bytes.
func seeded(t *testing.T) (string, []byte) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "cubicle.db")
	s, err := Open(path, testOpts(t, nil))
	if err != nil {
		t.Fatal(err)
	}
	fill(t, s)
	if bs, _ := Backups(path); len(bs) != 0 {
		t.Fatalf("a new file was backed up: %v", bs)
	}
	s.Close()
	s, err = Open(path, testOpts(t, nil)) // an existing file: backed up at start
	if err != nil {
		t.Fatal(err)
	}
	s.Close()
	bs, err := Backups(path)
	if err != nil || len(bs) != 1 || bs[0].Migration {
		t.Fatalf("backups after the second open: %+v, %v", bs, err)
	}
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return path, raw
}

// wantDamaged checks that err is a *DamagedError about path saying problem, naming the
// newest backup and the commands, with class unavailable.
func wantDamaged(t *testing.T, err error, path, problem string) *DamagedError {
	t.Helper()
	var d *DamagedError
	if !errors.As(err, &d) {
		t.Fatalf("error %v (%T), want a *DamagedError", err, err)
	}
	if !errors.Is(err, fault.ErrUnavailable) {
		t.Errorf("class %v, want unavailable", fault.Class(err))
	}
	msg := err.Error()
	for _, want := range []string{path, problem, "has not changed it", "cubicle restore-backup --data-dir " + filepath.Dir(path),
		"cubicle doctor --check-store"} {
		if !strings.Contains(msg, want) {
			t.Errorf("message does not say %q:\n%s", want, msg)
		}
	}
	bs, _ := Backups(path)
	if len(bs) == 0 || d.Backup == nil || d.Backup.Path != bs[0].Path || !strings.Contains(msg, bs[0].Path) {
		t.Errorf("the message names backup %+v, want the newest %+v", d.Backup, bs)
	}
	return d
}

// unchanged fails unless the file at path still holds want.
func unchanged(t *testing.T, path string, want []byte) {
	t.Helper()
	got, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("the data file is gone: %v", err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("the data file was changed (%d bytes, was %d)", len(got), len(want))
	}
}

func TestOpenRefusesDamagedFiles(t *testing.T) {
	tests := []struct {
		name    string
		damage  func(raw []byte) []byte
		problem string
	}{
		{"zero length", func([]byte) []byte { return nil }, "the file is empty (0 bytes)"},
		{"truncated to half", func(raw []byte) []byte { return raw[:len(raw)/2] }, "truncated"},
		{"truncated to one page", func(raw []byte) []byte { return raw[:4096] }, "truncated"},
		{"both meta pages overwritten", func(raw []byte) []byte {
			out := bytes.Clone(raw)
			for i := 16; i < 80; i++ {
				out[i], out[4096+i] = 0xAA, 0x55
			}
			return out
		}, "no valid header"},
		{"not a database", func([]byte) []byte { return []byte(strings.Repeat("not a bbolt file\n", 1000)) }, "no valid header"},
		{"root page of a bucket garbled", func(raw []byte) []byte {
			return garble(t, raw, "chat_sessions")
		}, "cannot be read"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			path, raw := seeded(t)
			bad := tc.damage(raw)
			if err := os.WriteFile(path, bad, 0o600); err != nil {
				t.Fatal(err)
			}
			s, err := Open(path, testOpts(t, nil))
			if err == nil {
				s.Close()
				t.Fatal("Open accepted a damaged file")
			}
			t.Logf("refused with:\n%v", err)
			wantDamaged(t, err, path, tc.problem)
			unchanged(t, path, bad)
			if _, err := os.Stat(path + ".new"); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("a new file was begun next to the damaged one: %v", err)
			}
			// The full check agrees, and changes nothing either.
			r, err := Check(path, time.Second)
			if err != nil || r.OK() {
				t.Errorf("Check = %+v, %v; want problems", r, err)
			}
			unchanged(t, path, bad)

			// Restoring the newest backup brings the data back; the damaged file is kept.
			bs, _ := Backups(path)
			replaced, err := Restore(path, bs[0].Path)
			if err != nil {
				t.Fatal(err)
			}
			unchanged(t, replaced, bad)
			s, err = Open(path, testOpts(t, nil))
			if err != nil {
				t.Fatalf("Open after restore: %v", err)
			}
			defer s.Close()
			if cs, err := s.ChatSessions("a1"); err != nil || len(cs) != 120 {
				t.Errorf("after restore: %d chats, %v", len(cs), err)
			}
		})
	}
}

// garble overwrites the header of bucket's root page (a branch page of a bucket with many
// records) so that bbolt panics when it reads it.
func garble(t *testing.T, raw []byte, bucket string) []byte {
	t.Helper()
	path := filepath.Join(t.TempDir(), "probe.db")
	if err := os.WriteFile(path, raw, 0o600); err != nil {
		t.Fatal(err)
	}
	db, err := bbolt.Open(path, 0o600, &bbolt.Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	var root uint64
	var pageSize int
	db.View(func(tx *bbolt.Tx) error {
		root = uint64(tx.Bucket([]byte(bucket)).Root())
		pageSize = tx.DB().Info().PageSize
		return nil
	})
	db.Close()
	if root < 2 {
		t.Fatalf("bucket %s is inline; fill more records", bucket)
	}
	out := bytes.Clone(raw)
	off := int(root) * pageSize
	binary.NativeEndian.PutUint16(out[off+8:], 0x40)   // no such page type
	binary.NativeEndian.PutUint16(out[off+10:], 60000) // and far too many elements
	return out
}

// TestDamageFoundLater opens a file whose damage the start-up checks do not see (the page
// walk is off, as for a file above the walk limit): the request that meets the damaged page
// gets an error instead of a crash, later writes are refused, and the file is left as it was.
func TestDamageFoundLater(t *testing.T) {
	path, raw := seeded(t)
	bad := garble(t, raw, "chat_sessions")
	if err := os.WriteFile(path, bad, 0o600); err != nil {
		t.Fatal(err)
	}
	opts := testOpts(t, nil)
	opts.walkLimit = -1
	opts.KeepBackups = -1
	s, err := Open(path, opts)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	if _, err := s.Account("a1"); err != nil {
		t.Fatalf("an intact part of the file: %v", err)
	}
	_, err = s.ChatSessions("a1")
	wantDamaged(t, err, path, "cannot be read")
	if s.Damaged() == nil {
		t.Error("the store does not remember the damage")
	}
	err = s.PutChatSession(ChatSession{UserID: "a1", SessionID: "new", CreatedAt: t0})
	wantDamaged(t, err, path, "cannot be read")
	if err := s.CreateAccount(Account{ID: "a2", Username: "bob"}); err == nil {
		t.Error("a write was accepted after the damage was found")
	}
	if _, err := s.Account("a1"); err != nil {
		t.Errorf("reads of intact parts fail after the damage: %v", err)
	}
	if err := s.Close(); err != nil {
		t.Errorf("Close: %v", err)
	}
	unchanged(t, path, bad)
}

// TestPanicInCallbackIsNotDamage: a bug (a panic in the store's own code) on a sound file is
// an internal error, not damage; the store keeps working.
func TestPanicInCallbackIsNotDamage(t *testing.T) {
	s, err := Open(filepath.Join(t.TempDir(), "cubicle.db"), testOpts(t, nil))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	err = s.view("test", func(tx *bbolt.Tx) error { var m map[string]int; m["x"] = 1; return nil })
	if err == nil || !strings.Contains(err.Error(), "internal error") || fault.Class(err) != nil {
		t.Errorf("panic in a callback = %v, want an unclassified internal error", err)
	}
	if s.Damaged() != nil {
		t.Error("a sound file was marked damaged")
	}
	if err := s.CreateAccount(Account{ID: "a1", Username: "alice"}); err != nil {
		t.Errorf("write after the panic: %v", err)
	}
}

func TestNewFileNeverEmpty(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "cubicle.db")
	s, err := Open(path, testOpts(t, nil))
	if err != nil {
		t.Fatal(err)
	}
	s.Close()
	if fi, err := os.Stat(path); err != nil || fi.Size() == 0 {
		t.Fatalf("new file: %v, %v", fi, err)
	}
	if _, err := os.Stat(path + ".new"); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("temporary file left: %v", err)
	}
	// A half-made new file of an earlier, interrupted start is replaced, not used.
	path2 := filepath.Join(dir, "other.db")
	if err := os.WriteFile(path2+".new", []byte("half"), 0o600); err != nil {
		t.Fatal(err)
	}
	s, err = Open(path2, testOpts(t, nil))
	if err != nil {
		t.Fatal(err)
	}
	s.Close()
	if r, err := Check(path2, time.Second); err != nil || !r.OK() {
		t.Errorf("Check of a new file: %+v, %v", r, err)
	}
}

func TestCheck(t *testing.T) {
	path, _ := seeded(t)
	r, err := Check(path, time.Second)
	if err != nil || !r.OK() || r.Records < 240 || r.Buckets < 10 {
		t.Fatalf("Check of a sound file: %+v, %v", r, err)
	}
	// A record that is not JSON is found by the full check only.
	db, err := bbolt.Open(path, 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	db.Update(func(tx *bbolt.Tx) error { return tx.Bucket([]byte("agents")).Put([]byte("g1"), []byte("{half")) })
	db.Close()
	r, err = Check(path, time.Second)
	if err != nil || r.OK() || !strings.Contains(strings.Join(r.Problems, ";"), `record "g1" is not valid JSON`) {
		t.Errorf("Check with a broken record: %+v, %v", r, err)
	}
	// A file in use is refused, not reported damaged.
	s, err := Open(path, testOpts(t, nil))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Check(path, 100*time.Millisecond); !errors.Is(err, fault.ErrUnavailable) {
		t.Errorf("Check of a file in use: %v, want unavailable", err)
	}
	if _, err := Restore(path, path); !errors.Is(err, fault.ErrInvalid) {
		t.Errorf("Restore from the file itself: %v", err)
	}
	bs, _ := Backups(path)
	if _, err := Restore(path, bs[0].Path); !errors.Is(err, fault.ErrConflict) {
		t.Errorf("Restore over a file in use: %v, want conflict", err)
	}
	s.Close()
	if _, err := Check(filepath.Join(t.TempDir(), "none.db"), time.Second); !errors.Is(err, fault.ErrNotFound) {
		t.Errorf("Check of a missing file: %v", err)
	}
}

// TestRandomDamageNeverCrashes overwrites pages in the middle of the file with random bytes
// (several seeds): Open refuses the file, or opens it and every read answers (an error is
// fine) without crashing the process; the full check reports the damage; the file is never
// changed.
func TestRandomDamageNeverCrashes(t *testing.T) {
	path, raw := seeded(t)
	pages := len(raw) / 4096
	for seed := uint64(1); seed <= 8; seed++ {
		t.Run(fmt.Sprintf("seed %d", seed), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(seed, seed*7919))
			bad := bytes.Clone(raw)
			first := 2 + rng.IntN(pages-4)
			for i := first * 4096; i < (first+2)*4096 && i < len(bad); i++ {
				bad[i] = byte(rng.Uint32())
			}
			if err := os.WriteFile(path, bad, 0o600); err != nil {
				t.Fatal(err)
			}
			for _, walk := range []int64{0, -1} {
				opts := testOpts(t, nil)
				opts.walkLimit, opts.KeepBackups = walk, -1
				s, err := Open(path, opts)
				if err != nil {
					var d *DamagedError
					if !errors.As(err, &d) {
						t.Fatalf("Open (walk %d) = %v, want a *DamagedError", walk, err)
					}
					continue
				}
				s.Account("a1")
				s.ChatSessions("a1")
				s.ChatSession("a1", "s050")
				s.ToolRuns("a1", "s000")
				s.ChatSessionsWithActiveTurn()
				s.Agents("a1")
				s.Close()
			}
			unchanged(t, path, bad)
			if r, err := Check(path, time.Second); err != nil || r.OK() {
				t.Logf("pages %d-%d were not in use: Check finds nothing (%v)", first, first+1, err)
			}
		})
	}
}

func TestBackupsAreBounded(t *testing.T) {
	path := filepath.Join(t.TempDir(), "cubicle.db")
	opts := testOpts(t, nil)
	opts.KeepBackups = 3
	s, err := Open(path, opts)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for i := range 5 {
		if err := s.CreateAccount(Account{ID: fmt.Sprintf("a%d", i), Username: fmt.Sprintf("u%d", i)}); err != nil {
			t.Fatal(err)
		}
		if _, err := s.Backup(); err != nil {
			t.Fatal(err)
		}
	}
	bs, err := Backups(path)
	if err != nil || len(bs) != 3 {
		t.Fatalf("backups: %+v, %v; want the newest 3", bs, err)
	}
	// The newest holds the newest data.
	if got := readRaw(t, bs[0].Path, "accounts", "a4"); got == "" {
		t.Error("the newest backup lacks the newest record")
	}
	if _, taken, err := s.BackupIfDue(time.Hour); err != nil || taken {
		t.Errorf("BackupIfDue right after a backup: taken %v, %v", taken, err)
	}
	if _, taken, err := s.BackupIfDue(time.Nanosecond); err != nil || !taken {
		t.Errorf("BackupIfDue when due: taken %v, %v", taken, err)
	}
}
