//go:build windows

package store

import (
	"errors"
	"os"

	"golang.org/x/sys/windows"
)

// inUse reports whether another open of the data file at path holds bbolt's lock (the byte
// range -1..0, see bbolt's bolt_windows.go), without opening it with bbolt.
func inUse(path string) (bool, error) {
	f, err := os.Open(path)
	if err != nil {
		return false, err
	}
	defer f.Close()
	const m1 = (1 << 32) - 1
	ov := &windows.Overlapped{Offset: m1, OffsetHigh: m1}
	err = windows.LockFileEx(windows.Handle(f.Fd()), windows.LOCKFILE_EXCLUSIVE_LOCK|windows.LOCKFILE_FAIL_IMMEDIATELY, 0, 1, 0, ov)
	if errors.Is(err, windows.ERROR_LOCK_VIOLATION) {
		return true, nil
	}
	if err != nil {
		return false, err
	}
	windows.UnlockFileEx(windows.Handle(f.Fd()), 0, 1, 0, ov)
	return false, nil
}
