//go:build unix

package bench

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"

	"cubicle/backend/fault"
)

// peersLock is the file whose flock stands for the peers image ref on this machine: runs
// that use the image hold it shared (usePeers), a run removing earlier peers images takes it
// exclusively first (claimUnused). The kernel drops a dead process's hold.
func peersLock(ref string) string {
	tag := ref[strings.LastIndex(ref, ":")+1:]
	return filepath.Join(os.TempDir(), "cubicle-bench-peers-"+tag+".lock")
}

// usePeers claims the peers image ref for this run until release: another run (with another
// standard image) building its own peers image then keeps this one (prunePeers). Taken before
// the image is looked up or built, so it is never removed between the two.
func usePeers(ref string) (release func(), err error) {
	f, err := os.OpenFile(peersLock(ref), os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return nil, fault.Unavailable("bench: the peer tools image's lock: %v", err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_SH); err != nil {
		f.Close()
		return nil, fault.Unavailable("bench: the peer tools image's lock: %v", err)
	}
	return func() { f.Close() }, nil
}

// claimUnused claims the peers image ref for its removal when no run uses it; ok is false
// when one does (or the lock cannot be had).
func claimUnused(ref string) (release func(), ok bool) {
	f, err := os.OpenFile(peersLock(ref), os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return nil, false
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		return nil, false
	}
	return func() { f.Close() }, true
}
