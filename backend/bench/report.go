package bench

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"cubicle/backend/fault"
)

// Units of a row's samples.
const (
	UnitMS  = "ms"
	UnitFPS = "fps"
	UnitBPS = "B/s"
	UnitMiB = "MiB"
	UnitKiB = "KiB"
	// UnitMBps is megabytes (10^6 bytes) per second.
	UnitMBps = "MB/s"
)

// Summary condenses samples. Percentiles are nearest-rank: p50 of 1, 2, 3, 4 is 2, p95 of
// fewer than 20 samples is the largest.
type Summary struct {
	N    int     `json:"n"`
	P50  float64 `json:"p50"`
	P95  float64 `json:"p95"`
	Min  float64 `json:"min"`
	Max  float64 `json:"max"`
	Mean float64 `json:"mean"`
}

// Summarize returns the summary of samples (the zero Summary for none).
func Summarize(samples []float64) Summary {
	if len(samples) == 0 {
		return Summary{}
	}
	s := slices.Clone(samples)
	slices.Sort(s)
	sum := 0.0
	for _, v := range s {
		sum += v
	}
	return Summary{N: len(s), P50: Percentile(s, 50), P95: Percentile(s, 95), Min: s[0], Max: s[len(s)-1], Mean: sum / float64(len(s))}
}

// Percentile returns the nearest-rank p-th percentile (0 < p ≤ 100) of sorted samples.
func Percentile(sorted []float64, p float64) float64 {
	if len(sorted) == 0 {
		return 0
	}
	rank := int(math.Ceil(p / 100 * float64(len(sorted))))
	return sorted[min(max(rank, 1), len(sorted))-1]
}

// Side is one side of a row: how it was measured and the raw samples.
type Side struct {
	// Method says what was timed, precisely enough to reproduce it.
	Method  string    `json:"method"`
	Samples []float64 `json:"samples"`
	Summary Summary   `json:"summary"`
}

// Row is one measurement: ours, and the peer's when there is one in the same run.
type Row struct {
	ID    string `json:"id"`
	Title string `json:"title"`
	Unit  string `json:"unit"`
	// Better is "lower" or "higher".
	Better string `json:"better"`
	Ours   Side   `json:"ours"`
	// PeerName is the short name of the peer ("podman exec"); "" when there is none.
	PeerName string `json:"peerName,omitempty"`
	Peer     *Side  `json:"peer,omitempty"`
	// Ratio is ours p50 / peer p50; absent without a peer.
	Ratio *float64 `json:"ratio,omitempty"`
	// Others are further peers measured in the same run (e.g. the previous protocol next to
	// another product's); each has its own ratio.
	Others []OtherPeer `json:"otherPeers,omitempty"`
	Note   string      `json:"note,omitempty"`
	// Target says how the row stands against its target (the relay rows), printed under the
	// table.
	Target string `json:"target,omitempty"`
	// Skipped: the row could not be measured here (no samples; Note says why). It is never
	// a pass.
	Skipped bool `json:"skipped,omitempty"`
}

// OtherPeer is a further peer of a row.
type OtherPeer struct {
	Name  string   `json:"name"`
	Side  Side     `json:"side"`
	Ratio *float64 `json:"ratio,omitempty"`
}

// finish computes the summaries and the ratios.
func (r *Row) finish() {
	r.Ours.Summary = Summarize(r.Ours.Samples)
	ratio := func(s *Side) *float64 {
		s.Summary = Summarize(s.Samples)
		if s.Summary.P50 > 0 {
			v := r.Ours.Summary.P50 / s.Summary.P50
			return &v
		}
		return nil
	}
	for i := range r.Others {
		r.Others[i].Ratio = ratio(&r.Others[i].Side)
	}
	if r.Peer != nil {
		r.Ratio = ratio(r.Peer)
	}
}

// lines returns the table lines of the row: the row itself, then one per other peer
// (measurement, ours p50, ours p95, peer, peer p50, peer p95, ours/peer).
func (r *Row) lines() [][7]string {
	line := func(title, peer string, s *Side, ratio *float64) [7]string {
		op50, op95 := oursCells(*r)
		l := [7]string{title, op50, op95, "—", "—", "—", "—"}
		if s != nil {
			l[3], l[4], l[5] = peer, num(s.Summary.P50), num(s.Summary.P95)
		}
		if ratio != nil {
			l[6] = num(*ratio)
		}
		return l
	}
	title := fmt.Sprintf("%s (%s)", r.Title, r.Unit)
	out := [][7]string{line(title, r.PeerName, r.Peer, r.Ratio)}
	for i := range r.Others {
		o := &r.Others[i]
		out = append(out, line("↳ "+title, o.Name, &o.Side, o.Ratio))
	}
	return out
}

// Machine describes where the run happened.
type Machine struct {
	Cores         int    `json:"cores"`
	Kernel        string `json:"kernel"`
	OS            string `json:"os"`
	Arch          string `json:"arch"`
	CPU           string `json:"cpu,omitempty"`
	MemoryMiB     int64  `json:"memoryMiB,omitempty"`
	Go            string `json:"go"`
	Cubicle       string `json:"cubicle"`
	Engine        string `json:"engine"`
	EngineVersion string `json:"engineVersion"`
	LoadAvg       string `json:"loadAvg,omitempty"` // /proc/loadavg at the start
}

// Images names the images a run used.
type Images struct {
	Standard   string `json:"standard"`
	StandardID string `json:"standardId"`
	// Peers is the derived image with the peer tools; it is kept for the next run (remove it
	// with `podman rmi` to free the space).
	Peers       string `json:"peers"`
	PeersID     string `json:"peersId"`
	PeersReused bool   `json:"peersReused"`
	PeersKept   bool   `json:"peersKept"`
}

// Process is one process of the idle desktop and its memory.
type Process struct {
	PID    int    `json:"pid"`
	Comm   string `json:"comm"`
	RSSKiB int64  `json:"rssKiB"`
	PSSKiB int64  `json:"pssKiB"`
}

// Report is the result of a run: every raw sample, the summaries and where they were taken.
type Report struct {
	Schema   int       `json:"schema"` // 1
	RunID    string    `json:"runId"`  // in the names and labels of the containers the run made
	Mode     string    `json:"mode"`   // "quick" or "full"
	Command  string    `json:"command,omitempty"`
	Started  time.Time `json:"started"`
	Seconds  float64   `json:"seconds"` // wall time of the whole run, image preparation included
	Machine  Machine   `json:"machine"`
	Images   Images    `json:"images"`
	Rows     []Row     `json:"rows"`
	Desktop  []Process `json:"desktopProcesses,omitempty"`
	Warnings []string  `json:"warnings,omitempty"`
}

// Row returns the row with id, or nil.
func (r *Report) Row(id string) *Row {
	for i := range r.Rows {
		if r.Rows[i].ID == id {
			return &r.Rows[i]
		}
	}
	return nil
}

// WriteJSON writes the report as indented JSON to path (created with its directory).
func (r *Report) WriteJSON(path string) error {
	data, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return fmt.Errorf("bench: encode report: %w", err)
	}
	if dir := filepath.Dir(path); dir != "" {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return fault.Invalid("bench: create the directory of %s: %v", path, err)
		}
	}
	if err := os.WriteFile(path, append(data, '\n'), 0o644); err != nil {
		return fault.Invalid("bench: write %s: %v", path, err)
	}
	return nil
}

// WriteTable prints the rows as an aligned text table: measurement (unit), ours p50/p95, the
// peer and its p50/p95, and ours/peer at p50; a further peer of a row gets a line of its own
// (↳). "—" marks a row without a peer.
func (r *Report) WriteTable(w io.Writer) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "measurement\tours p50\tours p95\tpeer\tpeer p50\tpeer p95\tours/peer")
	for _, row := range r.Rows {
		for _, l := range row.lines() {
			fmt.Fprintln(tw, strings.Join(l[:], "\t"))
		}
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	return writeNotMeasured(w, r.Rows)
}

// WriteMarkdown prints the rows as a Markdown table (the README's Performance section).
func (r *Report) WriteMarkdown(w io.Writer) error {
	var b strings.Builder
	b.WriteString("| measurement | ours p50 | ours p95 | peer | peer p50 | peer p95 | ours/peer |\n")
	b.WriteString("| --- | ---: | ---: | --- | ---: | ---: | ---: |\n")
	for _, row := range r.Rows {
		for _, l := range row.lines() {
			b.WriteString("| " + strings.Join(l[:], " | ") + " |\n")
		}
	}
	if _, err := io.WriteString(w, b.String()); err != nil {
		return err
	}
	return writeNotMeasured(w, r.Rows)
}

// oursCells are a row's p50 and p95 cells: "—" when it has no samples (not measured).
func oursCells(row Row) (string, string) {
	if len(row.Ours.Samples) == 0 {
		return "—", "—"
	}
	return num(row.Ours.Summary.P50), num(row.Ours.Summary.P95)
}

// writeNotMeasured lists the rows without samples and why, under the table: a row never
// vanishes silently. Rows with a target say how they stand against it.
func writeNotMeasured(w io.Writer, rows []Row) error {
	for _, row := range rows {
		line := ""
		switch {
		case len(row.Ours.Samples) == 0:
			line = fmt.Sprintf("— %s: %s\n", row.ID, row.Note)
		case row.Target != "":
			line = fmt.Sprintf("%s: %s\n", row.ID, row.Target)
		}
		if _, err := io.WriteString(w, line); err != nil {
			return err
		}
	}
	return nil
}

// num formats a value with about three significant digits.
func num(v float64) string {
	switch a := math.Abs(v); {
	case a == 0:
		return "0"
	case a >= 100:
		return fmt.Sprintf("%.0f", v)
	case a >= 10:
		return fmt.Sprintf("%.1f", v)
	case a >= 1:
		return fmt.Sprintf("%.2f", v)
	default:
		return fmt.Sprintf("%.3f", v)
	}
}

// ms converts a duration to milliseconds.
func ms(d time.Duration) float64 { return float64(d.Nanoseconds()) / 1e6 }
