//go:build unix

package jpegenc

import (
	"syscall"
	"time"
)

// cpuTime is the CPU time the process has used (all threads): what a loaded machine does
// not distort.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
