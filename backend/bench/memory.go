package bench

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"cubicle/backend/fault"
	"cubicle/backend/guest"
)

// memUsage is the resident (RSS) and proportional (PSS) set size of processes, in KiB.
type memUsage struct{ rss, pss int64 }

// readRollup reads /proc/<pid>/smaps_rollup ("self" for this process).
func readRollup(proc string, pid string) (memUsage, error) {
	data, err := os.ReadFile(filepath.Join(proc, pid, "smaps_rollup"))
	if err != nil {
		return memUsage{}, err
	}
	return parseRollup(data), nil
}

// parseRollup picks the Rss and Pss lines (kB) of a smaps_rollup file.
func parseRollup(data []byte) memUsage {
	var m memUsage
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 2 {
			continue
		}
		v, err := strconv.ParseInt(f[1], 10, 64)
		if err != nil {
			continue
		}
		switch f[0] {
		case "Rss:":
			m.rss = v
		case "Pss:":
			m.pss = v
		}
	}
	return m
}

// parseStat returns the parent pid from a /proc/<pid>/stat line.
func parseStat(data []byte) (ppid int, ok bool) {
	i := bytes.LastIndexByte(data, ')') // the command may hold spaces and parentheses
	if i < 0 {
		return 0, false
	}
	f := strings.Fields(string(data[i+1:]))
	if len(f) < 2 {
		return 0, false
	}
	ppid, err := strconv.Atoi(f[1])
	return ppid, err == nil
}

// descendants returns root and every process below it, from the proc file system at proc.
func descendants(proc string, root int) []int {
	entries, _ := os.ReadDir(proc)
	children := map[int][]int{}
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		data, err := os.ReadFile(filepath.Join(proc, e.Name(), "stat"))
		if err != nil {
			continue // gone meanwhile
		}
		if ppid, ok := parseStat(data); ok {
			children[ppid] = append(children[ppid], pid)
		}
	}
	out := []int{root}
	for i := 0; i < len(out); i++ {
		out = append(out, children[out[i]]...)
	}
	return out
}

// desktopMemory sums the memory of the container's processes (its init, seen from the host,
// and all below it).
func desktopMemory(proc string, initPID int) (memUsage, []Process, error) {
	var total memUsage
	var list []Process
	for _, pid := range descendants(proc, initPID) {
		p := strconv.Itoa(pid)
		m, err := readRollup(proc, p)
		if err != nil {
			if os.IsNotExist(err) {
				continue // ended meanwhile
			}
			return memUsage{}, nil, fault.Unavailable("read the memory of desktop process %d: %v (run the benchmark as the user the engine runs containers as, e.g. root for rootful Podman)", pid, err)
		}
		comm, _ := os.ReadFile(filepath.Join(proc, p, "comm"))
		total.rss += m.rss
		total.pss += m.pss
		list = append(list, Process{PID: pid, Comm: strings.TrimSpace(string(comm)), RSSKiB: m.rss, PSSKiB: m.pss})
	}
	if len(list) == 0 {
		return memUsage{}, nil, fault.Unavailable("no processes found under the desktop's init (pid %d)", initPID)
	}
	return total, list, nil
}

// memory measures the idle desktop: once its screen has been quiet for a second, the PSS and
// RSS of the container's processes, read on the host.
func (r *runner) memory(ctx context.Context, d *desktop) error {
	if _, err := d.client.WaitSettled(ctx, guest.SettleOptions{Quiet: time.Second, Max: 10 * time.Second,
		Screenshot: guest.ScreenshotOptions{MaxWidth: 64}}); err != nil {
		return err
	}
	st, err := r.cfg.Engine.InspectContainer(ctx, d.id)
	if err != nil {
		return err
	}
	if st.PID <= 0 {
		return fault.Unavailable("the engine reports no process id for desktop %s", d.name)
	}
	total, procs, err := desktopMemory("/proc", st.PID)
	if err != nil {
		return err
	}
	r.rep.Desktop = procs
	names := make([]string, 0, len(procs))
	for _, p := range procs {
		names = append(names, p.Comm)
	}
	method := fmt.Sprintf("sum over the container's %d processes (%s) of /proc/PID/smaps_rollup, read on the host, after 1 s without screen change",
		len(procs), strings.Join(names, ", "))
	r.add(Row{ID: "memory_desktop_pss", Title: "idle desktop memory, PSS (Xvfb + XFCE + driver)", Unit: UnitMiB, Better: "lower",
		Ours: Side{Method: method, Samples: []float64{float64(total.pss) / 1024}}})
	r.add(Row{ID: "memory_desktop_rss", Title: "idle desktop memory, RSS (Xvfb + XFCE + driver)", Unit: UnitMiB, Better: "lower",
		Ours: Side{Method: method + " (RSS counts shared pages once per process)", Samples: []float64{float64(total.rss) / 1024}}})
	return nil
}

// selfMemory measures this process, after the live view ran (it then holds what a serving
// Cubicle holds for one desktop: engine client, driver connection, screen hub, websocket
// server and client).
func (r *runner) selfMemory(context.Context, *desktop) error {
	m, err := readRollup("/proc", "self")
	if err != nil {
		return fault.Unavailable("read this process's memory: %v", err)
	}
	method := "/proc/self/smaps_rollup of the cubicle bench process at the end of the run"
	r.add(Row{ID: "memory_cubicle_pss", Title: "cubicle process memory, PSS", Unit: UnitMiB, Better: "lower",
		Ours: Side{Method: method, Samples: []float64{float64(m.pss) / 1024}}})
	r.add(Row{ID: "memory_cubicle_rss", Title: "cubicle process memory, RSS", Unit: UnitMiB, Better: "lower",
		Ours: Side{Method: method, Samples: []float64{float64(m.rss) / 1024}}})
	return nil
}
