//go:build unix

package xvfbtest

import (
	"os"
	"syscall"
)

// tryLock takes an exclusive flock on f without waiting; false when another holds it.
func tryLock(f *os.File) bool {
	return syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB) == nil
}

// alive reports whether process pid exists.
func alive(pid int) bool { return syscall.Kill(pid, 0) == nil }
