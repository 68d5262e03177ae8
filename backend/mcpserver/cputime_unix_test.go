//go:build unix

package mcpserver

import (
	"syscall"
	"time"
)

// cpuTime is the CPU time this process used (BenchmarkClickCall reports it per call).
func cpuTime() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
