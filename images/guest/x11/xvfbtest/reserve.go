package xvfbtest

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"
)

// Reserve returns a display number no other test of any process on this machine holds,
// starting the search at hint, and holds it until the test ends. `go test ./...` runs
// packages in parallel processes, so fixed numbers alone collide; every test that starts an
// X server (directly or through the driver) takes its number here. The hold is an flock on
// a file in the temp dir: the kernel releases it when the process dies, so a crashed run
// never blocks the next one. Numbers whose X lock file names a live process are skipped too.
func Reserve(t testing.TB, hint int) int {
	t.Helper()
	if hint <= 0 {
		hint = 100
	}
	for n := hint; n < hint+400; n++ {
		f, err := os.OpenFile(filepath.Join(os.TempDir(), fmt.Sprintf("cubicle-xvfbtest-%d.lock", n)), os.O_CREATE|os.O_RDWR, 0o600)
		if err != nil {
			t.Fatalf("reserve display: %v", err)
		}
		if !tryLock(f) {
			f.Close()
			continue
		}
		if displayBusy(n) {
			f.Close()
			continue
		}
		t.Cleanup(func() { f.Close() })
		return n
	}
	t.Fatalf("no free X display in %d..%d", hint, hint+399)
	return 0
}

// displayBusy reports whether an X server we do not own serves display n: its lock file
// names a live process. A stale lock (dead process) is removed.
func displayBusy(n int) bool {
	lock := fmt.Sprintf("/tmp/.X%d-lock", n)
	b, err := os.ReadFile(lock)
	if err != nil {
		return false
	}
	var pid int
	if _, err := fmt.Sscanf(string(b), "%d", &pid); err == nil && pid > 0 && alive(pid) {
		return true
	}
	os.Remove(lock)
	os.Remove(filepath.Join("/tmp/.X11-unix", fmt.Sprintf("X%d", n)))
	return false
}
