package main

import (
	"bytes"
	"os"
	"strconv"
)

// cpuTicks returns the CPU time (user + system, in clock ticks) used so far by the driver's
// descendants — the desktop session and everything started in it — read from /proc. Settle
// waits use it to tell "nothing happened" from "a program is still working on it". Errors
// count as no time.
func cpuTicks() uint64 {
	self := os.Getpid()
	dir, err := os.ReadDir("/proc")
	if err != nil {
		return 0
	}
	type proc struct {
		ppid  int
		ticks uint64
	}
	procs := make(map[int]proc, len(dir))
	var buf [512]byte
	for _, e := range dir {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == self {
			continue
		}
		f, err := os.Open("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		n, _ := f.Read(buf[:])
		f.Close()
		// pid (comm) state ppid … utime(14) stime(15) cutime(16) cstime(17); comm may hold
		// spaces and parentheses. The children's times count the short-lived programs a
		// script ran and waited for.
		line := buf[:n]
		i := bytes.LastIndexByte(line, ')')
		if i < 0 {
			continue
		}
		fields := bytes.Fields(line[i+1:])
		if len(fields) < 15 {
			continue
		}
		ppid, _ := strconv.Atoi(string(fields[1]))
		var ticks uint64
		for _, f := range fields[11:15] {
			v, _ := strconv.ParseInt(string(f), 10, 64)
			ticks += uint64(max(v, 0))
		}
		procs[pid] = proc{ppid: ppid, ticks: ticks}
	}
	var sum uint64
	for _, p := range procs {
		// Count p when its ancestry reaches us (bounded: pid chains are short).
		for q, hops := p.ppid, 0; q > 0 && hops < 64; hops++ {
			if q == self {
				sum += p.ticks
				break
			}
			pq, ok := procs[q]
			if !ok {
				break
			}
			q = pq.ppid
		}
	}
	return sum
}
