//go:build unix

package store

import (
	"errors"
	"os"
	"syscall"
)

// inUse reports whether another open of the data file at path holds bbolt's lock (an
// advisory flock on the file), without opening it with bbolt (a damaged file could crash it).
func inUse(path string) (bool, error) {
	f, err := os.Open(path)
	if err != nil {
		return false, err
	}
	defer f.Close()
	err = syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
	if errors.Is(err, syscall.EWOULDBLOCK) {
		return true, nil
	}
	if err != nil {
		return false, err
	}
	syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
	return false, nil
}
