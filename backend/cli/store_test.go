package cli

import (
	"bytes"
	"context"
	"encoding/binary"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"cubicle/backend/store"
)

// serveOnce starts `cubicle serve` on dir, logs in as boss (checking the data is there),
// and stops it.
func serveOnce(t *testing.T, dir string) {
	t.Helper()
	vars := map[string]string{"CUBICLE_ADMIN_USER": "boss", "CUBICLE_ADMIN_PASSWORD": "pass-word-1"}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	e, out, errb := testEnv(vars)
	done := make(chan int, 1)
	go func() { done <- run(ctx, e, []string{"serve", "--listen", "127.0.0.1:0", "--data-dir", dir}) }()
	url := regexp.MustCompile(`http://127\.0\.0\.1:\d+/`).FindString(waitFor(t, out, "is running at"))
	resp, err := http.Post(url+"api/auth/login", "application/json", strings.NewReader(`{"username":"boss","password":"pass-word-1"}`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("login: %d", resp.StatusCode)
	}
	cancel()
	if code := <-done; code != 0 {
		t.Fatalf("serve exit %d: %s", code, errb)
	}
}

// TestDamagedDataFile: `cubicle serve` on an emptied, truncated or garbled data file refuses
// to start (exit 3), leaves the file as it is and says which backup to restore with which
// command; `cubicle doctor --check-store` reports the damage; `cubicle restore-backup`
// restores the newest sound backup (keeping the damaged file), after which serve starts with
// the data back.
func TestDamagedDataFile(t *testing.T) {
	tests := []struct {
		name    string
		damage  func([]byte) []byte
		problem string
	}{
		{"zero length", func([]byte) []byte { return []byte{} }, "the file is empty"},
		{"truncated", func(b []byte) []byte { return b[:len(b)/2] }, "truncated"},
		{"header garbled", func(b []byte) []byte {
			out := bytes.Clone(b)
			copy(out[16:80], bytes.Repeat([]byte{0xEE}, 64))
			copy(out[4096+16:4096+80], bytes.Repeat([]byte{0x11}, 64))
			return out
		}, "no valid header"},
		// Issue 31 item 2: one `dd` of four bytes, an in-use leaf page's overflow 0xFFFFFFFF.
		{"leaf page overflow", func(b []byte) []byte {
			out := bytes.Clone(b)
			var leaves []int
			for id := 2; (id+1)*4096 <= len(out); id++ {
				if binary.NativeEndian.Uint64(out[id*4096:]) == uint64(id) && binary.NativeEndian.Uint16(out[id*4096+8:]) == 0x02 {
					leaves = append(leaves, id)
				}
			}
			binary.NativeEndian.PutUint32(out[leaves[len(leaves)/2]*4096+12:], 0xFFFFFFFF)
			return out
		}, "overflow of 4294967295 pages"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			serveOnce(t, dir) // creates the data file
			serveOnce(t, dir) // an existing file: backed up at start
			path := filepath.Join(dir, "cubicle.db")
			raw, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			bad := tc.damage(raw)
			if err := os.WriteFile(path, bad, 0o600); err != nil {
				t.Fatal(err)
			}
			bs, err := store.Backups(path)
			if err != nil || len(bs) == 0 {
				t.Fatalf("no backup to name: %v, %v", bs, err)
			}

			e, _, errb := testEnv(nil)
			code := run(context.Background(), e, []string{"serve", "--listen", "127.0.0.1:0", "--data-dir", dir})
			msg := errb.String()
			t.Logf("serve said:\n%s", msg)
			if code != 3 {
				t.Errorf("serve on a damaged file: exit %d, want 3", code)
			}
			for _, want := range []string{tc.problem, "Cubicle has not changed it", bs[0].Path, "cubicle restore-backup --data-dir " + dir} {
				if !strings.Contains(msg, want) {
					t.Errorf("serve's message does not say %q", want)
				}
			}
			if strings.Contains(msg, "panic") || strings.Contains(msg, "goroutine ") {
				t.Errorf("serve crashed: %s", msg)
			}
			if got, _ := os.ReadFile(path); !bytes.Equal(got, bad) {
				t.Fatalf("serve changed the damaged file (%d bytes, was %d)", len(got), len(bad))
			}

			e, out, _ := testEnv(nil)
			if code := run(context.Background(), e, []string{"doctor", "--check-store", "--data-dir", dir}); code != 1 ||
				!strings.Contains(out.String(), "DAMAGED") || !strings.Contains(out.String(), "cubicle restore-backup --data-dir "+dir) {
				t.Errorf("doctor --check-store: exit %d, %s", code, out)
			}
			e, out, _ = testEnv(nil)
			if code := run(context.Background(), e, []string{"restore-backup", "--list", "--data-dir", dir}); code != 0 ||
				!strings.Contains(out.String(), bs[0].Path) || !strings.Contains(out.String(), "sound") {
				t.Errorf("restore-backup --list: exit %d, %s", code, out)
			}
			e, out, errb = testEnv(nil)
			if code := run(context.Background(), e, []string{"restore-backup", "--data-dir", dir}); code != 0 {
				t.Fatalf("restore-backup: exit %d, %s %s", code, out, errb)
			}
			kept := regexp.MustCompile(`kept as (\S+)`).FindStringSubmatch(out.String())
			if kept == nil {
				t.Fatalf("restore-backup does not say where the replaced file is: %s", out)
			}
			if got, _ := os.ReadFile(kept[1]); !bytes.Equal(got, bad) {
				t.Errorf("the replaced file %s does not hold the damaged bytes", kept[1])
			}
			e, out, _ = testEnv(nil)
			if code := run(context.Background(), e, []string{"doctor", "--check-store", "--data-dir", dir}); code != 0 ||
				!strings.Contains(out.String(), "is sound") {
				t.Errorf("doctor --check-store after restore: exit %d, %s", code, out)
			}
			serveOnce(t, dir) // the admin account is back
		})
	}
	e, _, errb := testEnv(nil)
	if code := run(context.Background(), e, []string{"restore-backup", "--data-dir", t.TempDir()}); code != 6 ||
		!strings.Contains(errb.String(), "no backup") {
		t.Errorf("restore-backup without backups: exit %d, %s", code, errb)
	}
}

// TestCheckStoreStops: a SIGTERM or Ctrl-C (the context run gets) ends
// `cubicle doctor --check-store` at once, with exit 130, whatever part of the check runs.
func TestCheckStoreStops(t *testing.T) {
	dir := t.TempDir()
	serveOnce(t, dir)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	e, _, errb := testEnv(nil)
	if code := run(ctx, e, []string{"doctor", "--check-store", "--data-dir", dir}); code != 130 || !strings.Contains(errb.String(), "stopped") {
		t.Fatalf("doctor --check-store after SIGTERM: exit %d, %s", code, errb)
	}
}
