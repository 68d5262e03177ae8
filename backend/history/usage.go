package history

import (
	"os"

	"cubicle/backend/agent"
)

// ProcessUsage is what a finished host command cost, from its process state (wait4): the CPU
// time of the process and of the descendants it waited for, and — where the OS reports it —
// the peak resident memory of the largest of them. This is the tool call's own figure, not
// the server's: it is what the history records for a host command.
func ProcessUsage(ps *os.ProcessState) agent.ToolUsage {
	if ps == nil {
		return agent.ToolUsage{}
	}
	return agent.ToolUsage{CPU: ps.UserTime() + ps.SystemTime(), MemoryBytes: peakRSS(ps)}
}
