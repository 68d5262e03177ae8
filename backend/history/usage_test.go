package history

import (
	"crypto/sha256"
	"runtime"
	"testing"
	"time"
)

// TestProcessUsage checks the per-OS process figures: CPU time grows while this process
// works, and the peak resident memory covers at least what it holds right now.
func TestProcessUsage(t *testing.T) {
	// A process that has just started may have used less CPU than the clock's grain (15.6 ms
	// on Windows; under Wine with a warm prefix the test binary starts in less): zero is
	// possible here, a negative figure is not. Growth is what is checked below.
	before := cpuTime()
	if before < 0 {
		t.Fatalf("cpuTime = %v, want ≥ 0", before)
	}
	ballast := make([]byte, 64<<20)
	for i := range ballast {
		ballast[i] = byte(i)
	}
	sum := sha256.New()
	for deadline := time.Now().Add(5 * time.Second); cpuTime()-before < 20*time.Millisecond; {
		if time.Now().After(deadline) {
			t.Fatalf("cpuTime did not grow by 20 ms in 5 s of hashing: %v -> %v", before, cpuTime())
		}
		sum.Write(ballast[:1<<20])
	}
	if rss := maxRSS(); rss < int64(len(ballast)) {
		t.Fatalf("maxRSS = %d bytes, below the %d bytes of ballast this process touched", rss, len(ballast))
	}
	runtime.KeepAlive(ballast)
}
