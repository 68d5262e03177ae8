//go:build unix

package guesttest

import (
	"syscall"
	"time"
)

// killAndWait kills process pid with SIGKILL and waits up to 5 s for it to be gone.
func killAndWait(pid int) {
	syscall.Kill(pid, syscall.SIGKILL)
	for i := 0; i < 500 && syscall.Kill(pid, 0) == nil; i++ {
		time.Sleep(10 * time.Millisecond)
	}
}
