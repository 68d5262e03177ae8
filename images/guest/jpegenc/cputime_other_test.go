//go:build !unix

package jpegenc

import "time"

// cpuTime is 0 where the benchmark does not read the process's CPU time (cpu-ms/op then
// reads 0).
func cpuTime() time.Duration { return 0 }
