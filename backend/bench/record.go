package bench

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"image/jpeg"
	"image/png"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"cubicle/backend/guest"
	"cubicle/backend/recording"
	"cubicle/backend/screen"
)

// Recording (issue 24, docs/recording.md): what recording a desktop costs — the extra CPU of
// a recorded desktop doing the terminal workload next to the same desktop unrecorded, the
// bytes a recording takes per hour for the terminal and the scrolling workloads — and how
// fast a replay reaches a random moment.

// Row ids of the recording step.
const (
	RowRecordCPU           = "record_cpu"
	RowRecordBytesTerminal = "record_bytes_terminal"
	RowRecordBytesScroll   = "record_bytes_scroll"
	RowReplaySeek          = "replay_seek"
)

// Units of the recording rows.
const (
	UnitCorePct = "% of a core"
	UnitMBh     = "MB/h"
)

// recorder is a recording service on the desktop's driver, in a directory of the run.
type recorder struct {
	hubs *screen.Hubs
	svc  *recording.Service
	dir  string
}

func (r *runner) newRecorder(d *desktop) (*recorder, error) {
	dir, err := os.MkdirTemp(r.runRoot, "recordings-")
	if err != nil {
		return nil, err
	}
	hubs := screen.New(screen.Config{Logger: r.log})
	svc, err := recording.New(recording.Config{Dir: dir, Screens: hubs, Logger: r.log,
		Link: func(context.Context, string) (screen.RegionSource, error) { return d.client, nil }})
	if err != nil {
		hubs.Close()
		return nil, err
	}
	return &recorder{hubs: hubs, svc: svc, dir: dir}, nil
}

func (rc *recorder) close() {
	rc.svc.Close()
	rc.hubs.Close()
	os.RemoveAll(rc.dir)
}

// record records the desktop for window and returns the recording's metadata.
func (rc *recorder) record(ctx context.Context, d *desktop, window time.Duration) (recording.Info, error) {
	rc.svc.StartDesktop(recording.Desktop{ID: d.instance, Node: "local", AccountID: "bench", AgentID: d.agent})
	id := rc.svc.Recording(d.instance)
	err := sleepCtx(ctx, window)
	rc.svc.StopDesktop(d.instance, "bench")
	if err != nil {
		return recording.Info{}, err
	}
	return rc.svc.Get("bench", d.agent, id)
}

// perHour is recording i's bytes per hour of recording (MB/h), from a window of el: the
// bytes after its first keyframe at the window's rate, plus the full keyframes an hour of
// recording starts its segments with (one every recording.DefaultSegmentEvery, each as large
// as the window's first; the window itself is shorter than a segment). raw is the window's
// bytes scaled to an hour as they are: its first keyframe, made once per recording, counted
// as often as the window fits in an hour.
func (rc *recorder) perHour(i recording.Info, el time.Duration) (model, raw float64, err error) {
	r, err := rc.svc.Open(i.ID)
	if err != nil {
		return 0, 0, err
	}
	recs, err := r.Seek(0)
	r.Close()
	if err != nil {
		return 0, 0, err
	}
	if len(recs) == 0 || !recs[0].Key() {
		return 0, 0, fmt.Errorf("recording %s holds no keyframe", i.ID)
	}
	const recordOverhead = 20 // a record's header and checksum
	first := float64(len(recs[0].Data) + recordOverhead)
	segments := float64(time.Hour / recording.DefaultSegmentEvery)
	model = ((float64(i.Bytes)-first)/el.Hours() + first*segments) / 1e6
	raw = float64(i.Bytes) / 1e6 / el.Hours()
	return model, raw, nil
}

// selfCPU is this process's CPU time (Linux: /proc/self/stat; elsewhere 0).
func selfCPU() time.Duration {
	raw, err := os.ReadFile("/proc/self/stat")
	if err != nil {
		return 0
	}
	return ticks(string(raw))
}

// ticks reads utime+stime of one /proc/<pid>/stat line, in time (100 ticks a second).
func ticks(stat string) time.Duration {
	i := strings.LastIndexByte(stat, ')')
	if i < 0 {
		return 0
	}
	f := strings.Fields(stat[i+1:])
	if len(f) < 13 {
		return 0
	}
	u, _ := strconv.ParseInt(f[11], 10, 64)
	s, _ := strconv.ParseInt(f[12], 10, 64)
	return time.Duration(u+s) * 10 * time.Millisecond
}

// desktopCPU is the CPU time of every process in the desktop (its driver's capture and
// encoding included).
func desktopCPU(ctx context.Context, c *guest.Client) (time.Duration, error) {
	res, err := c.Exec(ctx, guest.ExecRequest{Shell: `cat /proc/[0-9]*/stat 2>/dev/null | sed 's/^.*) //' | awk '{s+=$12+$13} END {print s}'`})
	if err != nil {
		return 0, err
	}
	n, err := strconv.ParseInt(strings.TrimSpace(string(res.Stdout)), 10, 64)
	if err != nil {
		return 0, fmt.Errorf("desktop CPU: %q: %w", res.Stdout, err)
	}
	return time.Duration(n) * 10 * time.Millisecond, nil
}

// recordingRows measures record_cpu, record_bytes_terminal, record_bytes_scroll and
// replay_seek.
func (r *runner) recordingRows(ctx context.Context, d *desktop) error {
	// Quick: one short window each (the first keyframe weighs more in it than in an hour);
	// full: windows long enough for the keyframes every 10 s to count as they do.
	rounds, window := 1, 5*time.Second
	if !r.cfg.Quick {
		rounds, window = 3, 30*time.Second
	}
	rc, err := r.newRecorder(d)
	if err != nil {
		return err
	}
	defer rc.close()

	// The terminal workload, recorded and not, in turns.
	r.progress("  a terminal running watch -n 0.1 date, recorded and not")
	stop := program(ctx, d.client, "exec xfce4-terminal --disable-server --geometry 80x24+100+100 -x watch -n 0.1 date +%T.%N")
	if err := sleepCtx(ctx, 3*time.Second); err != nil {
		stop()
		return err
	}
	var with, without, mbh, mbhRaw []float64
	var last recording.Info
	cpu := func(recorded bool) (float64, error) {
		d0, err := desktopCPU(ctx, d.client)
		if err != nil {
			return 0, err
		}
		s0, t0 := selfCPU(), time.Now()
		if recorded {
			i, err := rc.record(ctx, d, window)
			if err != nil {
				return 0, err
			}
			last = i
			model, raw, err := rc.perHour(i, time.Since(t0))
			if err != nil {
				return 0, err
			}
			mbh, mbhRaw = append(mbh, model), append(mbhRaw, raw)
		} else if err := sleepCtx(ctx, window); err != nil {
			return 0, err
		}
		el := time.Since(t0)
		d1, err := desktopCPU(ctx, d.client)
		if err != nil {
			return 0, err
		}
		return 100 * float64(d1-d0+selfCPU()-s0) / float64(el), nil
	}
	for range rounds {
		for _, rec := range []bool{false, true} {
			v, err := cpu(rec)
			if err != nil {
				stop()
				return err
			}
			if rec {
				with = append(with, v)
			} else {
				without = append(without, v)
			}
		}
	}
	stop()
	cpuRow := Row{ID: RowRecordCPU, Title: "recording: CPU of a desktop running a terminal (watch -n 0.1 date), recorded", Unit: UnitCorePct, Better: "lower",
		Ours: Side{Method: "CPU time of every process in the desktop (its driver captures and encodes for the recorder, the only viewer) plus this process (the recorder) over " +
			window.String() + ", as a share of one core; recorded and unrecorded windows take turns", Samples: with},
		PeerName: "unrecorded", Peer: &Side{Method: "the same desktop and workload with nobody watching, measured the same way", Samples: without}}
	extra := median(with) - median(without)
	cpuRow.Target = fmt.Sprintf("%.1f%% of a core extra (target ≤ 5%%)", extra)
	r.add(cpuRow)
	r.add(Row{ID: RowRecordBytesTerminal, Title: "recording: megabytes per hour, a terminal printing the time 10×/s", Unit: UnitMBh, Better: "lower",
		Ours: Side{Method: "the bytes of a recording (segments, keyframes at least every 10 s while the screen changes) of xfce4-terminal running `watch -n 0.1 date +%T.%N`, " +
			window.String() + " each, per hour of recording: " + perHourMethod(), Samples: mbh},
		Note:   rawNote(window, mbhRaw),
		Target: fmt.Sprintf("%.1f MB/h (target ≤ 60 MB/h)", median(mbh))})

	// The scrolling workload.
	r.progress("  a browser scrolling a long page, recorded")
	if err := d.client.WriteFile(ctx, scrollPagePath, []byte(scrollPage()), 0o644); err != nil {
		return err
	}
	stop = program(ctx, d.client, "exec chromium --no-first-run --no-default-browser-check --disable-gpu --user-data-dir=/tmp/cubicle-bench-chromium-rec "+
		"--window-position=0,0 --window-size=1280,760 --app=file://"+scrollPagePath)
	if err := sleepCtx(ctx, 5*time.Second); err != nil {
		stop()
		return err
	}
	var scroll, scrollRaw []float64
	var seekFrom recording.Info
	for range rounds {
		t0 := time.Now()
		i, err := rc.record(ctx, d, window)
		if err != nil {
			stop()
			return err
		}
		model, raw, err := rc.perHour(i, time.Since(t0))
		if err != nil {
			stop()
			return err
		}
		scroll, scrollRaw = append(scroll, model), append(scrollRaw, raw)
		seekFrom = i
	}
	stop()
	r.add(Row{ID: RowRecordBytesScroll, Title: "recording: megabytes per hour, a browser scrolling a long page", Unit: UnitMBh, Better: "lower",
		Ours: Side{Method: "the bytes of a recording of Chromium scrolling a long page of text and pictures (4 px per animation frame), " + window.String() + " each, per hour of recording: " + perHourMethod(), Samples: scroll},
		Note: rawNote(window, scrollRaw)})

	// Seeks to random moments of the scrolling recording (the busiest).
	if seekFrom.ID == "" {
		seekFrom = last
	}
	n := 15
	if !r.cfg.Quick {
		n = 60
	}
	var seeks []float64
	for range n {
		at := time.Duration(rand.Int64N(max(seekFrom.DurationMs, 1))) * time.Millisecond
		t0 := time.Now()
		rd, err := rc.svc.Open(seekFrom.ID)
		if err != nil {
			return err
		}
		recs, err := rd.Seek(at)
		rd.Close()
		if err != nil {
			return err
		}
		if err := decodeAll(recs); err != nil {
			return fmt.Errorf("replay_seek: %w", err)
		}
		seeks = append(seeks, float64(time.Since(t0).Microseconds())/1000)
	}
	r.add(Row{ID: RowReplaySeek, Title: "replay: a random moment → its first full picture decoded", Unit: UnitMS, Better: "lower",
		Ours: Side{Method: "open the recording of the scrolling page, seek to a random moment (the keyframe before it and the updates up to it, read from the segment files) " +
			"and decode every JPEG and PNG region of them, as the player draws them", Samples: seeks},
		Target: fmt.Sprintf("p50 %.0f ms (target ≤ 300 ms)", median(seeks))})
	return nil
}

// perHourMethod says how perHour counts.
func perHourMethod() string {
	return fmt.Sprintf("the bytes after the recording's first keyframe at the window's rate, plus one full keyframe "+
		"(as large as the window's first) for each segment an hour of recording starts (one every %v)", recording.DefaultSegmentEvery)
}

// rawNote gives the windows' bytes scaled to an hour as they are, next to perHour's count.
func rawNote(window time.Duration, raw []float64) string {
	return fmt.Sprintf("the windows' bytes scaled to an hour as they are — the recording's first keyframe, made once, counted %d times an hour: p50 %.1f MB/h",
		int(time.Hour/window), median(raw))
}

// decodeAll decodes every image region of the update records (what a client draws).
func decodeAll(recs []recording.Record) error {
	for _, rec := range recs {
		if rec.Kind != recording.KindUpdate {
			continue
		}
		b := rec.Data
		if len(b) < 32 {
			return fmt.Errorf("a short update")
		}
		n := int(binary.BigEndian.Uint32(b[24:]))
		off := int(b[5])
		for range n {
			if off+16 > len(b) {
				return fmt.Errorf("an update cut short")
			}
			enc, size := b[off+8], int(binary.BigEndian.Uint32(b[off+12:]))
			data := b[off+16 : off+16+size]
			var err error
			switch enc {
			case 1:
				_, err = jpeg.Decode(bytes.NewReader(data))
			case 2:
				_, err = png.Decode(bytes.NewReader(data))
			}
			if err != nil {
				return err
			}
			off += 16 + size
		}
	}
	return nil
}

func median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}
