package history

import (
	"time"
	"unsafe"

	"golang.org/x/sys/windows"
)

// cpuTime is the process's user+kernel CPU time (the tool runs in or through this process).
func cpuTime() time.Duration {
	var creation, exit, kernel, user windows.Filetime
	if windows.GetProcessTimes(windows.CurrentProcess(), &creation, &exit, &kernel, &user) != nil {
		return 0
	}
	return time.Duration((filetime(kernel) + filetime(user)) * 100) // FILETIME counts 100 ns
}

func filetime(f windows.Filetime) int64 { return int64(f.HighDateTime)<<32 | int64(f.LowDateTime) }

// processMemoryCounters is PROCESS_MEMORY_COUNTERS (psapi.h).
type processMemoryCounters struct {
	cb                         uint32
	pageFaultCount             uint32
	peakWorkingSetSize         uintptr
	workingSetSize             uintptr
	quotaPeakPagedPoolUsage    uintptr
	quotaPagedPoolUsage        uintptr
	quotaPeakNonPagedPoolUsage uintptr
	quotaNonPagedPoolUsage     uintptr
	pagefileUsage              uintptr
	peakPagefileUsage          uintptr
}

// k32GetProcessMemoryInfo is GetProcessMemoryInfo as kernel32 exports it since Windows 7.
var k32GetProcessMemoryInfo = windows.NewLazySystemDLL("kernel32.dll").NewProc("K32GetProcessMemoryInfo")

// maxRSS is the process's peak working set (its peak resident memory) in bytes.
func maxRSS() int64 {
	var pmc processMemoryCounters
	pmc.cb = uint32(unsafe.Sizeof(pmc))
	if k32GetProcessMemoryInfo.Find() != nil {
		return 0
	}
	r, _, _ := k32GetProcessMemoryInfo.Call(uintptr(windows.CurrentProcess()), uintptr(unsafe.Pointer(&pmc)), uintptr(pmc.cb))
	if r == 0 {
		return 0
	}
	return int64(pmc.peakWorkingSetSize)
}
