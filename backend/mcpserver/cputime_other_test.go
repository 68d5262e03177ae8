//go:build !unix

package mcpserver

import "time"

// cpuTime is not measured here (no getrusage): BenchmarkClickCall reports 0 CPU per call.
func cpuTime() time.Duration { return 0 }
