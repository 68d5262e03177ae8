//go:build unix

package history

import (
	"os"
	"runtime"
	"syscall"
)

// peakRSS is the process's peak resident memory in bytes, max over it and its waited-for
// descendants. The kernel counts it in KiB on Linux and the BSDs, in bytes on macOS.
func peakRSS(ps *os.ProcessState) int64 {
	ru, ok := ps.SysUsage().(*syscall.Rusage)
	if !ok || ru == nil {
		return 0
	}
	if runtime.GOOS == "darwin" || runtime.GOOS == "ios" {
		return int64(ru.Maxrss)
	}
	return int64(ru.Maxrss) * 1024
}
