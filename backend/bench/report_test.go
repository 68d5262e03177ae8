package bench

import (
	"bytes"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata/")

func TestSummarize(t *testing.T) {
	tests := []struct {
		name    string
		samples []float64
		want    Summary
	}{
		{"none", nil, Summary{}},
		{"one", []float64{7}, Summary{N: 1, P50: 7, P95: 7, Min: 7, Max: 7, Mean: 7}},
		{"even count takes the lower middle", []float64{4, 1, 3, 2}, Summary{N: 4, P50: 2, P95: 4, Min: 1, Max: 4, Mean: 2.5}},
		{"odd count", []float64{5, 1, 3}, Summary{N: 3, P50: 3, P95: 5, Min: 1, Max: 5, Mean: 3}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := Summarize(tt.samples); got != tt.want {
				t.Fatalf("Summarize(%v) = %+v, want %+v", tt.samples, got, tt.want)
			}
		})
	}
	// 1..100: nearest rank p50 is 50, p95 is 95.
	s := make([]float64, 100)
	for i := range s {
		s[len(s)-1-i] = float64(i + 1)
	}
	if got := Summarize(s); got.P50 != 50 || got.P95 != 95 || got.Min != 1 || got.Max != 100 {
		t.Fatalf("1..100: %+v", got)
	}
	if s[0] != 100 {
		t.Fatal("Summarize sorted its input in place")
	}
}

// sampleReport is a report with a paired row, a row without a peer, and a higher-is-better row.
func sampleReport() *Report {
	r := &Report{Schema: 1, Mode: "quick", Command: "cubicle bench --quick", Started: time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC),
		Seconds: 42, Machine: Machine{Cores: 2, Kernel: "6.1.0", OS: "linux", Arch: "amd64", Go: "go1.26", Cubicle: "test",
			Engine: "podman", EngineVersion: "4.3.1"},
		Images: Images{Standard: "localhost/cubicle-desktop:standard-abc", Peers: "localhost/cubicle-bench-peers:def", PeersKept: true},
		Rows: []Row{
			{ID: "exec", Title: "exec round trip (true)", Unit: UnitMS, Better: "lower",
				Ours:     Side{Method: "driver exec", Samples: []float64{2, 3, 1, 4}},
				PeerName: "podman exec", Peer: &Side{Method: "podman exec CONTAINER true", Samples: []float64{200, 250, 300}}},
			{ID: "cold_start", Title: "desktop cold start", Unit: UnitMS, Better: "lower",
				Ours: Side{Method: "create → screenshot", Samples: []float64{2100, 2400}}},
			{ID: "live_fps", Title: "live view fps", Unit: UnitFPS, Better: "higher",
				Ours: Side{Method: "frames per second", Samples: []float64{29, 30, 30}}},
			{ID: "live_bytes_terminal", Title: "live bytes, terminal", Unit: UnitBPS, Better: "lower",
				Ours:     Side{Method: "v2", Samples: []float64{12000, 13000, 11000}},
				PeerName: "x11vnc", Peer: &Side{Method: "x11vnc", Samples: []float64{15000, 16000}},
				Others: []OtherPeer{{Name: "v1 frames", Side: Side{Method: "v1", Samples: []float64{1.2e6, 1.3e6, 1.4e6}}}}},
		}}
	for i := range r.Rows {
		r.Rows[i].finish()
	}
	return r
}

func TestRowRatio(t *testing.T) {
	r := sampleReport()
	ex := r.Row("exec")
	if ex.Ratio == nil || *ex.Ratio != 2.0/250 {
		t.Fatalf("exec ratio %v, want ours p50 / peer p50 = %v", ex.Ratio, 2.0/250)
	}
	if r.Row("cold_start").Ratio != nil || r.Row("cold_start").Peer != nil {
		t.Fatal("a row without a peer has a ratio")
	}
	if r.Row("nope") != nil {
		t.Fatal("Row found a missing id")
	}
}

func golden(t *testing.T, name string, got []byte) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if *update {
		if err := os.MkdirAll("testdata", 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test -run %s -update to create it)", err, t.Name())
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("%s differs (go test -update rewrites it):\n--- got\n%s\n--- want\n%s", name, got, want)
	}
}

func TestTables(t *testing.T) {
	r := sampleReport()
	var text, md bytes.Buffer
	if err := r.WriteTable(&text); err != nil {
		t.Fatal(err)
	}
	if err := r.WriteMarkdown(&md); err != nil {
		t.Fatal(err)
	}
	golden(t, "table.txt", text.Bytes())
	golden(t, "table.md", md.Bytes())
	// Every row is printed once, with "—" where there is no peer, and once more per further
	// peer (↳).
	for _, row := range r.Rows {
		if n := strings.Count(text.String(), row.Title+" ("+row.Unit+")"); n != 1+len(row.Others) {
			t.Errorf("row %q printed %d times", row.ID, n)
		}
	}
	if !strings.Contains(md.String(), "| ↳ live bytes, terminal (B/s) | 12000 | 13000 | v1 frames | 1300000 | 1400000 | 0.009 |") {
		t.Errorf("markdown line of a further peer:\n%s", md.String())
	}
	if ob := r.Row("live_bytes_terminal").Others[0]; ob.Ratio == nil || *ob.Ratio != 12000.0/1.3e6 || ob.Side.Summary.N != 3 {
		t.Errorf("further peer: %+v", ob)
	}
	if !strings.Contains(md.String(), "| desktop cold start (ms) | 2100 | 2400 | — | — | — | — |") {
		t.Errorf("markdown row without a peer:\n%s", md.String())
	}
	if !strings.Contains(md.String(), "| exec round trip (true) (ms) | 2.00 | 4.00 | podman exec | 250 | 300 | 0.008 |") {
		t.Errorf("markdown paired row:\n%s", md.String())
	}
}

func TestWriteJSON(t *testing.T) {
	r := sampleReport()
	path := filepath.Join(t.TempDir(), "sub", "bench.json")
	if err := r.WriteJSON(path); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var back Report
	if err := json.Unmarshal(data, &back); err != nil {
		t.Fatal(err)
	}
	if len(back.Rows) != 4 || back.Machine.Cores != 2 || !back.Images.PeersKept {
		t.Fatalf("round trip lost data: %+v", back)
	}
	ex := back.Row("exec")
	if len(ex.Ours.Samples) != 4 || len(ex.Peer.Samples) != 3 || ex.Ours.Summary.P50 != 2 || ex.Ratio == nil {
		t.Fatalf("exec row after the round trip: %+v", ex)
	}
	// Rows without a peer carry neither peer nor ratio in the JSON.
	var raw struct {
		Rows []map[string]any `json:"rows"`
	}
	json.Unmarshal(data, &raw)
	if _, ok := raw.Rows[1]["peer"]; ok {
		t.Fatal("cold_start has a peer in the JSON")
	}
	if _, ok := raw.Rows[1]["ratio"]; ok {
		t.Fatal("cold_start has a ratio in the JSON")
	}
	if _, ok := raw.Rows[1]["otherPeers"]; ok {
		t.Fatal("cold_start has further peers in the JSON")
	}
	if o := back.Row("live_bytes_terminal").Others; len(o) != 1 || o[0].Name != "v1 frames" || len(o[0].Side.Samples) != 3 || o[0].Ratio == nil {
		t.Fatalf("further peer after the round trip: %+v", o)
	}
}

func TestParseProc(t *testing.T) {
	rollup := []byte(`55d6a0b2c000-7ffd5a3f1000 ---p 00000000 00:00 0                          [rollup]
Rss:               88888 kB
Pss:               81276 kB
Pss_Anon:          70000 kB
Shared_Clean:       1234 kB
`)
	if m := parseRollup(rollup); m.rss != 88888 || m.pss != 81276 {
		t.Fatalf("parseRollup = %+v", m)
	}
	for _, tt := range []struct {
		line string
		ppid int
		ok   bool
	}{
		{"123 (Xvfb) S 45 123 123 0 -1", 45, true},
		{"124 (a) b (c) S 46 1 1", 46, true}, // a command with spaces and parentheses
		{"garbage", 0, false},
	} {
		ppid, ok := parseStat([]byte(tt.line))
		if ppid != tt.ppid || ok != tt.ok {
			t.Errorf("parseStat(%q) = %d, %v; want %d, %v", tt.line, ppid, ok, tt.ppid, tt.ok)
		}
	}
	// A fake /proc: 10 → 11 → 12, and 20 unrelated.
	proc := t.TempDir()
	for pid, ppid := range map[string]string{"10": "1", "11": "10", "12": "11", "20": "1"} {
		os.MkdirAll(filepath.Join(proc, pid), 0o755)
		os.WriteFile(filepath.Join(proc, pid, "stat"), []byte(pid+" (p"+pid+") S "+ppid+" 0 0"), 0o644)
		os.WriteFile(filepath.Join(proc, pid, "comm"), []byte("p"+pid+"\n"), 0o644)
		os.WriteFile(filepath.Join(proc, pid, "smaps_rollup"), []byte("Rss: 100 kB\nPss: 10 kB\n"), 0o644)
	}
	total, procs, err := desktopMemory(proc, 10)
	if err != nil {
		t.Fatal(err)
	}
	if total.rss != 300 || total.pss != 30 || len(procs) != 3 || procs[0].Comm != "p10" {
		t.Fatalf("desktopMemory = %+v, %+v", total, procs)
	}
}

// TestTargetAndSkipped: a row with a target says how it stands under the table; a skipped row
// prints "—", says why under the table and is marked skipped in the JSON.
func TestTargetAndSkipped(t *testing.T) {
	rep := &Report{Rows: []Row{
		{ID: RowRunnerExec, Title: "relayed exec", Unit: UnitMS, Better: "lower", Ours: Side{Samples: []float64{2, 3}},
			PeerName: relayPeer, Peer: &Side{Samples: []float64{1, 2}}, Target: relayTarget([]float64{2, 3}, []float64{1, 2})},
	}}
	r := &runner{rep: rep, cfg: Config{Progress: &bytes.Buffer{}}}
	r.skipped("no namespaces here", RowRunnerLiveInput)
	for i := range rep.Rows {
		rep.Rows[i].finish()
	}
	var b strings.Builder
	if err := rep.WriteTable(&b); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	for _, want := range []string{
		"runner_exec: the relay adds 1.00 ms to the p50 (1.00 ms to the p95); target ≤ 5 ms p50 on a loopback-class link: met\n",
		"— runner_live_input: skipped: no namespaces here\n",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("table lacks %q:\n%s", want, out)
		}
	}
	if got := relayTarget([]float64{9}, []float64{3}); !strings.HasSuffix(got, ": missed") {
		t.Errorf("6 ms added: %q, want missed", got)
	}
	raw, err := json.Marshal(rep)
	if err != nil {
		t.Fatal(err)
	}
	var back Report
	if err := json.Unmarshal(raw, &back); err != nil {
		t.Fatal(err)
	}
	if row := back.Row(RowRunnerLiveInput); row == nil || !row.Skipped || len(row.Ours.Samples) != 0 {
		t.Errorf("skipped row in the JSON: %+v", row)
	}
	if row := back.Row(RowRunnerExec); row == nil || row.Skipped || row.Target == "" {
		t.Errorf("measured row in the JSON: %+v", row)
	}
}

// TestRowIDs: row ids are unique (--only and the JSON find rows by them), and the rows
// compared with a peer by issue keep their ids, next to their neighbours.
func TestRowIDs(t *testing.T) {
	ids := RowIDs()
	seen := map[string]bool{}
	for _, id := range ids {
		if seen[id] {
			t.Errorf("row id %q twice in %v", id, ids)
		}
		seen[id] = true
	}
	index := func(id string) int {
		for i, v := range ids {
			if v == id {
				return i
			}
		}
		t.Fatalf("no row %q in %v", id, ids)
		return -1
	}
	// The resume sits with the desktop's lifecycle and memory; the upload after the exec
	// round trip whose path (the driver's exec) it takes.
	if index(RowResume) != index("memory_desktop_rss")+1 || index(RowUploadThroughput) != index("exec")+1 {
		t.Errorf("resume and upload_throughput out of place: %v", ids)
	}
}
