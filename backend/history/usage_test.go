package history

import (
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"testing"
	"time"
)

// TestMain lets the test binary stand in for a memory-hungry command (childEnv set): it
// touches the given MiB and burns CPU for a while, then exits.
func TestMain(m *testing.M) {
	if v := os.Getenv(childEnv); v != "" {
		mib, _ := strconv.Atoi(v)
		ballast := make([]byte, mib<<20)
		for i := range ballast {
			ballast[i] = byte(i)
		}
		// A fixed amount of work, not a wall-clock time: on a loaded machine a timed spin gets
		// little CPU, and the test would measure the machine's load.
		for range 100 {
			for i := 0; i < len(ballast); i += 4096 {
				ballast[i]++
			}
		}
		runtime.KeepAlive(ballast)
		os.Exit(0)
	}
	os.Exit(m.Run())
}

const childEnv = "CUBICLE_HISTORY_TEST_CHILD_MIB"

// TestProcessUsage runs a child that touches 200 MiB and burns CPU, and checks the figures the
// history records for a host command: the child's CPU time, and (where the OS reports it)
// its peak memory within 10% above the 200 MiB it touched — the child's, not this process's.
func TestProcessUsage(t *testing.T) {
	const mib = 200
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), fmt.Sprintf("%s=%d", childEnv, mib))
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("child: %v\n%s", err, out)
	}
	u := ProcessUsage(cmd.ProcessState)
	if runtime.GOOS == "windows" {
		// Windows' process times come from GetProcessTimes; under Wine (where CI runs this)
		// they are coarse (20 ms for the child's ≈ 0.3 s), so only their presence is checked.
		if u.CPU <= 0 {
			t.Errorf("CPU = %v, want > 0", u.CPU)
		}
		if u.MemoryBytes != 0 {
			t.Errorf("memory on Windows = %d, want 0 (not measured)", u.MemoryBytes)
		}
		return
	}
	if u.CPU < 50*time.Millisecond {
		t.Errorf("CPU = %v, want ≥ 50 ms (the child touched 200 MiB and then 100 × 51,200 pages)", u.CPU)
	}
	want := int64(mib << 20)
	if u.MemoryBytes < want || u.MemoryBytes > want+want/10 {
		t.Errorf("peak memory = %.1f MiB, want %d MiB … +10%%", float64(u.MemoryBytes)/(1<<20), mib)
	}
}
