package store

import (
	"bytes"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
	"unicode"

	"go.etcd.io/bbolt"

	"cubicle/backend/fault"
)

// writeRaw builds a bbolt file by hand: bucket → key → value.
func writeRaw(t *testing.T, path string, buckets map[string]map[string]string) {
	t.Helper()
	db, err := bbolt.Open(path, 0o600, &bbolt.Options{Timeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	err = db.Update(func(tx *bbolt.Tx) error {
		for name, kv := range buckets {
			b, err := tx.CreateBucketIfNotExists([]byte(name))
			if err != nil {
				return err
			}
			for k, v := range kv {
				if err := b.Put([]byte(k), []byte(v)); err != nil {
					return err
				}
			}
		}
		return nil
	})
	if cerr := db.Close(); err != nil || cerr != nil {
		t.Fatalf("write %s: %v, %v", path, err, cerr)
	}
}

// readRaw returns the value of bucket/key in the file at path ("" when absent).
func readRaw(t *testing.T, path, bucket, key string) string {
	t.Helper()
	db, err := bbolt.Open(path, 0o600, &bbolt.Options{Timeout: time.Second, ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var v string
	db.View(func(tx *bbolt.Tx) error {
		if b := tx.Bucket([]byte(bucket)); b != nil {
			v = string(b.Get([]byte(key)))
		}
		return nil
	})
	return v
}

func testOpts(t *testing.T, logs *bytes.Buffer) Options {
	var w = t.Output()
	if logs != nil {
		w = logs
	}
	return Options{Logger: slog.New(slog.NewTextHandler(w, nil))}
}

const (
	legacyHybrid = `{"id":"gh","accountId":"a1","name":"Hybrid bot","computer":"hybrid","workDir":"/srv/p",` +
		`"createdAt":"2025-05-01T10:00:00Z","updatedAt":"2025-05-02T10:00:00Z","legacyNote":"kept"}`
	legacyBrowser = `{"id":"gb","accountId":"a1","name":"Browser bot","computer":"browser",` +
		`"createdAt":"2025-05-03T10:00:00Z","updatedAt":"2025-05-03T10:00:00Z"}`
	legacyVM = `{"id":"gv","accountId":"a1","name":"VM bot","computer":"vm","allowHostEnvironment":false,` +
		`"createdAt":"2025-05-04T10:00:00Z","updatedAt":"2025-05-04T10:00:00Z"}`
	legacyAccount = `{"id":"a1","username":"Admin","passwordHash":"h","role":"admin","createdAt":"2025-05-01T09:00:00Z"}`
)

// TestMigrateLegacyHybrid opens a hand-written schema v1 file (SPEC §1.11): hybrid agents
// become vm + allowHostEnvironment, the rest stays as it was, a backup holds the original, and
// a second Open migrates nothing.
func TestMigrateLegacyHybrid(t *testing.T) {
	path := filepath.Join(t.TempDir(), "cubicle.db")
	writeRaw(t, path, map[string]map[string]string{
		"meta":              {"version": "1"},
		"accounts":          {"a1": legacyAccount},
		"account_usernames": {"admin": "a1"},
		"agents":            {"gh": legacyHybrid, "gb": legacyBrowser, "gv": legacyVM},
	})

	var logs bytes.Buffer
	s, err := Open(path, testOpts(t, &logs))
	if err != nil {
		t.Fatalf("Open legacy file: %v", err)
	}
	t.Log(logs.String())
	if v, err := s.SchemaVersion(); err != nil || v != len(migrations)+1 {
		t.Fatalf("SchemaVersion = %d, %v; want %d", v, err, len(migrations)+1)
	}
	created := time.Date(2025, 5, 1, 10, 0, 0, 0, time.UTC)
	tests := []struct {
		id       string
		computer string
		allow    bool
	}{
		{"gh", "vm", true},
		{"gb", "browser", false},
		{"gv", "vm", false},
	}
	for _, tc := range tests {
		a, err := s.Agent(tc.id)
		if err != nil {
			t.Fatalf("Agent(%s): %v", tc.id, err)
		}
		if a.Computer != tc.computer || a.AllowHostEnvironment != tc.allow {
			t.Errorf("agent %s: computer %q allowHost %v; want %q %v", tc.id, a.Computer, a.AllowHostEnvironment, tc.computer, tc.allow)
		}
	}
	h, _ := s.Agent("gh")
	if h.Name != "Hybrid bot" || h.WorkDir != "/srv/p" || h.AccountID != "a1" || !h.CreatedAt.Equal(created) {
		t.Errorf("migrated agent lost fields: %+v", h)
	}
	if a, err := s.AccountByUsername("admin"); err != nil || a.ID != "a1" {
		t.Errorf("legacy account after migration: %+v, %v", a, err)
	}
	if _, err := s.UpdateNodeSettings("n1", func(n *NodeSettings) error { n.MaxInstances = 3; return nil }); err != nil {
		t.Errorf("node settings after migration: %v", err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}

	// Untouched records are byte for byte the same; the migrated one keeps unknown fields.
	if got := readRaw(t, path, "agents", "gb"); got != legacyBrowser {
		t.Errorf("non-hybrid record changed:\n got  %s\n want %s", got, legacyBrowser)
	}
	if got := readRaw(t, path, "agents", "gv"); got != legacyVM {
		t.Errorf("vm record changed:\n got  %s\n want %s", got, legacyVM)
	}
	if got := readRaw(t, path, "agents", "gh"); !strings.Contains(got, `"legacyNote":"kept"`) {
		t.Errorf("migrated record lost an unknown field: %s", got)
	}

	// The backup is the original v1 file.
	bak := path + ".bak-v1"
	st, err := os.Stat(bak)
	if err != nil {
		t.Fatalf("backup: %v", err)
	}
	if st.Mode().Perm() != 0o600 {
		t.Errorf("backup mode %v, want 0600", st.Mode().Perm())
	}
	if got := readRaw(t, bak, "agents", "gh"); got != legacyHybrid {
		t.Errorf("backup's hybrid record = %s, want the legacy record", got)
	}
	if got := readRaw(t, bak, "meta", "version"); got != "1" {
		t.Errorf("backup's version = %q, want 1", got)
	}
	if got := readRaw(t, bak, "node_settings", "n1"); got != "" {
		t.Errorf("backup has later data: %s", got)
	}
	bakBytes, _ := os.ReadFile(bak)

	// A second Open finds version 2 and migrates nothing.
	logs.Reset()
	s, err = Open(path, testOpts(t, &logs))
	if err != nil {
		t.Fatalf("second Open: %v", err)
	}
	defer s.Close()
	if strings.Contains(logs.String(), "migrat") {
		t.Errorf("second Open migrated again: %s", logs.String())
	}
	if b, _ := os.ReadFile(bak); !bytes.Equal(b, bakBytes) {
		t.Error("second Open rewrote the backup")
	}
	if baks, _ := filepath.Glob(path + ".bak*"); len(baks) != 1 {
		t.Errorf("backups after the second Open: %v, want only %s", baks, bak)
	}
	if a, _ := s.Agent("gh"); a.Computer != "vm" || !a.AllowHostEnvironment {
		t.Errorf("agent after the second Open: %+v", a)
	}
}

// TestMigrationFramework runs the framework with a list of test migrations: order, one
// transaction per step, a failure stopping at the last completed version, backups per start
// version, and a new file starting at the latest version without migrating.
func TestMigrationFramework(t *testing.T) {
	var ran []string
	step := func(name string, fail *bool) migration {
		return migration{name: name, run: func(tx *bbolt.Tx) error {
			b, err := tx.CreateBucketIfNotExists([]byte("steps"))
			if err != nil {
				return err
			}
			if err := b.Put([]byte(name), []byte("done")); err != nil {
				return err
			}
			if fail != nil && *fail {
				return errors.New("step " + name + " broke")
			}
			ran = append(ran, name)
			return nil
		}}
	}
	failSecond := true
	migs := []migration{step("one", nil), step("two", &failSecond), step("three", nil)}

	t.Run("new file starts at latest", func(t *testing.T) {
		ran = nil
		path := filepath.Join(t.TempDir(), "a", "b", "cubicle.db")
		s, err := open(path, testOpts(t, nil), migs)
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		if v, _ := s.SchemaVersion(); v != 4 {
			t.Errorf("new file version %d, want 4", v)
		}
		if len(ran) != 0 {
			t.Errorf("a new file ran migrations %v", ran)
		}
		if baks, _ := filepath.Glob(path + ".bak*"); len(baks) != 0 {
			t.Errorf("a new file was backed up: %v", baks)
		}
		for p, want := range map[string]os.FileMode{path: 0o600, filepath.Dir(path): 0o700, filepath.Dir(filepath.Dir(path)): 0o700} {
			if st, err := os.Stat(p); err != nil || st.Mode().Perm() != want {
				t.Errorf("%s: mode %v (%v), want %v", p, st.Mode().Perm(), err, want)
			}
		}
	})

	path := filepath.Join(t.TempDir(), "cubicle.db")
	writeRaw(t, path, map[string]map[string]string{"meta": {"version": "1"}})

	t.Run("failure stops at the last completed version", func(t *testing.T) {
		ran = nil
		_, err := open(path, testOpts(t, nil), migs)
		if err == nil || !strings.Contains(err.Error(), "step two broke") || !strings.Contains(err.Error(), ".bak-v1") {
			t.Fatalf("Open with a failing migration: %v", err)
		}
		if got := readRaw(t, path, "meta", "version"); got != "2" {
			t.Errorf("version after failure %q, want 2", got)
		}
		if got := readRaw(t, path, "steps", "two"); got != "" {
			t.Error("the failed step's writes were committed")
		}
		if got := readRaw(t, path+".bak-v1", "steps", "one"); got != "" {
			t.Error("the backup was taken after migrating")
		}
		if strings.Join(ran, ",") != "one" {
			t.Errorf("ran %v, want [one]", ran)
		}
	})

	t.Run("resume from the stopped version", func(t *testing.T) {
		ran = nil
		failSecond = false
		s, err := open(path, testOpts(t, nil), migs)
		if err != nil {
			t.Fatal(err)
		}
		if v, _ := s.SchemaVersion(); v != 4 {
			t.Errorf("version %d, want 4", v)
		}
		s.Close()
		if strings.Join(ran, ",") != "two,three" {
			t.Errorf("ran %v, want [two three]", ran)
		}
		if got := readRaw(t, path+".bak-v2", "steps", "one"); got != "done" {
			t.Error("backup of version 2 missing or wrong")
		}
		if got := readRaw(t, path+".bak-v2", "steps", "two"); got != "" {
			t.Error("backup of version 2 holds later data")
		}
		if _, err := os.Stat(path + ".bak-v2.tmp"); !os.IsNotExist(err) {
			t.Errorf("temporary backup left behind: %v", err)
		}
	})
}

func TestOpenRefusesStrangeFiles(t *testing.T) {
	tests := []struct {
		name    string
		buckets map[string]map[string]string
		class   error
	}{
		{"not a Cubicle file", map[string]map[string]string{"other": {"k": "v"}}, fault.ErrConflict},
		{"corrupt version", map[string]map[string]string{"meta": {"version": "two"}}, nil},
		{"zero version", map[string]map[string]string{"meta": {"version": "0"}}, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "cubicle.db")
			writeRaw(t, path, tc.buckets)
			s, err := Open(path, testOpts(t, nil))
			if err == nil {
				s.Close()
				t.Fatal("Open succeeded")
			}
			if fault.Class(err) != tc.class {
				t.Errorf("error %v has class %v, want %v", err, fault.Class(err), tc.class)
			}
			if got := readRaw(t, path, "meta", "version"); tc.class != nil && got != "" {
				t.Errorf("Open wrote a version %q into a file it refused", got)
			}
		})
	}
	if _, err := Open("", Options{}); !errors.Is(err, fault.ErrInvalid) {
		t.Errorf("Open(\"\") = %v, want invalid", err)
	}
	dir := t.TempDir()
	if _, err := Open(dir, Options{}); !errors.Is(err, fault.ErrUnavailable) {
		t.Errorf("Open(a directory) = %v, want unavailable", err)
	}
}

func TestFoldKeyMatchesEqualFold(t *testing.T) {
	tests := []struct{ a, b string }{
		{"Admin", "admin"}, {"ADMIN", "admin"}, {"\u212aim", "kim"}, {"straße", "STRASSE"},
		{"Σίσυφος", "ΣΊΣΥΦΟΣ"}, {"ǅ", "ǆ"}, {"bob", "bób"}, {"", ""},
	}
	for _, tc := range tests {
		if got, want := foldKey(tc.a) == foldKey(tc.b), strings.EqualFold(tc.a, tc.b); got != want {
			t.Errorf("foldKey(%q) == foldKey(%q) is %v; EqualFold says %v", tc.a, tc.b, got, want)
		}
	}
	// Every rune of the Basic Multilingual Plane folds to one key per orbit.
	for r := rune(0); r < 0x10000; r++ {
		for f := unicode.SimpleFold(r); f != r; f = unicode.SimpleFold(f) {
			if foldKey(string(r)) != foldKey(string(f)) {
				t.Fatalf("%U and %U fold differently", r, f)
			}
		}
	}
}
