//go:build linux

package main

import (
	"bytes"
	"os"
	"strconv"
)

// activity returns the CPU time (user + system, in clock ticks) used so far by the driver's
// descendants — the desktop session and everything started in it — and their process ids,
// read from /proc. Settle waits use it to tell "nothing happened" from "a program is still
// working on it": time used since, or a program started since (on a loaded machine a program
// with work to do may not have had the CPU yet). The time of the driver's own children that
// ended (and were reaped) stays in the sum, so it never goes down while the desktop runs.
// Errors count as no time and no process.
func activity() (ticks uint64, pids map[int]bool) {
	self := os.Getpid()
	dir, err := os.ReadDir("/proc")
	if err != nil {
		return 0, nil
	}
	type proc struct {
		ppid  int
		ticks uint64
	}
	procs := make(map[int]proc, len(dir))
	var buf [512]byte
	for _, e := range dir {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
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
		var used uint64
		for _, f := range fields[11:15] {
			v, _ := strconv.ParseInt(string(f), 10, 64)
			used += uint64(max(v, 0))
		}
		if pid == self { // only the children it reaped: cutime + cstime
			used = 0
			for _, f := range fields[13:15] {
				v, _ := strconv.ParseInt(string(f), 10, 64)
				used += uint64(max(v, 0))
			}
			ticks += used
			continue
		}
		procs[pid] = proc{ppid: ppid, ticks: used}
	}
	pids = make(map[int]bool)
	for pid, p := range procs {
		// Count p when its ancestry reaches us (bounded: pid chains are short).
		for q, hops := p.ppid, 0; q > 0 && hops < 64; hops++ {
			if q == self {
				ticks += p.ticks
				pids[pid] = true
				break
			}
			pq, ok := procs[q]
			if !ok {
				break
			}
			q = pq.ppid
		}
	}
	return ticks, pids
}

// started reports whether now holds a process that before does not.
func started(before, now map[int]bool) bool {
	for pid := range now {
		if !before[pid] {
			return true
		}
	}
	return false
}
