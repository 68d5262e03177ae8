package engine

import (
	"bufio"
	"strconv"
	"strings"
)

// Rlimit ceilings used when a spec leaves NoFile or NProc at zero: the values Podman gives a
// rootful container by default, which stay in force only where the host allows them.
const (
	DefaultNoFile uint64 = 1 << 20
	DefaultNProc  uint64 = 1 << 22
)

// HostLimits are the hard RLIMIT_NOFILE and RLIMIT_NPROC limits a container's rlimits must
// stay at or below. Without CAP_SYS_RESOURCE the OCI runtime cannot raise a limit above the
// hard limit of the process that starts it ("error setting rlimit type 7"), so adapters clamp
// to these. Zero means unknown: the value is then not set at all.
type HostLimits struct {
	NoFile uint64
	NProc  uint64
}

// ClampRlimits returns the RLIMIT_NOFILE and RLIMIT_NPROC values (soft = hard) a container
// is created with: the requested value, or DefaultNoFile/DefaultNProc when zero, never above
// the host's limit. A zero result means "do not set"; that happens only when the host limit is
// unknown and nothing was requested.
func ClampRlimits(want Limits, host HostLimits) (nofile, nproc uint64) {
	return clampOne(want.NoFile, host.NoFile, DefaultNoFile), clampOne(want.NProc, host.NProc, DefaultNProc)
}

func clampOne(want, host, def uint64) uint64 {
	switch {
	case host == 0:
		return want
	case want == 0:
		return min(def, host)
	default:
		return min(want, host)
	}
}

// minKnown is the smaller of two limits where zero means unknown.
func minKnown(a, b uint64) uint64 {
	switch {
	case a == 0:
		return b
	case b == 0:
		return a
	default:
		return min(a, b)
	}
}

// parseProcLimits reads the hard "Max open files" and "Max processes" limits from the text
// of /proc/PID/limits. "unlimited" maps to the largest value; unreadable lines to zero.
func parseProcLimits(text string) HostLimits {
	var h HostLimits
	sc := bufio.NewScanner(strings.NewReader(text))
	for sc.Scan() {
		line := sc.Text()
		var dst *uint64
		var rest string
		switch {
		case strings.HasPrefix(line, "Max open files"):
			dst, rest = &h.NoFile, strings.TrimPrefix(line, "Max open files")
		case strings.HasPrefix(line, "Max processes"):
			dst, rest = &h.NProc, strings.TrimPrefix(line, "Max processes")
		default:
			continue
		}
		f := strings.Fields(rest)
		if len(f) < 2 {
			continue
		}
		if f[1] == "unlimited" {
			*dst = ^uint64(0)
			continue
		}
		if v, err := strconv.ParseUint(f[1], 10, 64); err == nil {
			*dst = v
		}
	}
	return h
}
