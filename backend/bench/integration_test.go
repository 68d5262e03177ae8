package bench_test

// Integration test of `cubicle bench --quick` against the real Podman service, the real
// standard image (built or reused through images.Builder, with the driver built the way
// scripts/build.sh builds it) and real desktops. It skips when Podman is missing, and fails
// instead when CUBICLE_REQUIRE_ALL=1. It asserts what was measured, never how fast.
//
//	go test ./backend/bench/ -run TestQuickRun -v -timeout 20m

import (
	"cmp"
	"context"
	"encoding/json"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"cubicle/backend/bench"
	"cubicle/backend/engine"
	"cubicle/backend/engine/podman"
	"cubicle/backend/guest/guesttest"
	"cubicle/images"
	"cubicle/internal/testenv"
)

// The Podman adapter is a bench.Engine.
var _ bench.Engine = (*podman.Client)(nil)

func connect(t *testing.T) *podman.Client {
	t.Helper()
	sock := os.Getenv("CUBICLE_PODMAN_SOCKET")
	if sock == "" {
		sock = "unix:///run/podman/podman.sock"
	}
	if _, err := os.Stat(strings.TrimPrefix(sock, "unix://")); err != nil {
		testenv.Missing(t, "no Podman service at %s: %v", sock, err)
	}
	if _, err := exec.LookPath("podman"); err != nil {
		testenv.Missing(t, "the podman CLI (the exec peer) is not installed: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := podman.Connect(ctx, sock, podman.Options{Logger: testLogger(t)})
	if err != nil {
		testenv.Missing(t, "Podman at %s does not answer: %v", sock, err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func testLogger(t *testing.T) *slog.Logger {
	return testenv.Logger(t, slog.LevelWarn)
}

// progress logs progress lines and calls on for each.
type progress struct {
	t  *testing.T
	mu sync.Mutex
	on func(line string)
}

func (p *progress) Write(b []byte) (int, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, line := range strings.Split(strings.TrimRight(string(b), "\n"), "\n") {
		p.t.Log(line)
		if p.on != nil {
			p.on(line)
		}
	}
	return len(b), nil
}

func config(t *testing.T, eng *podman.Client, quick bool) bench.Config {
	bin, err := os.ReadFile(guesttest.Binary(t))
	if err != nil {
		t.Fatal(err)
	}
	b, err := images.New(images.Config{Engine: eng, Logger: testLogger(t), WorkDir: t.TempDir(), Driver: bin})
	if err != nil {
		t.Fatal(err)
	}
	return bench.Config{Engine: eng, Images: b, EngineKind: engine.Podman, Logger: testLogger(t),
		Progress: &progress{t: t}, Quick: quick, WorkDir: t.TempDir(), Version: "test"}
}

// leftovers lists the containers and volumes of run id.
func leftovers(t *testing.T, eng *podman.Client, id string) []string {
	t.Helper()
	ctrs, err := eng.ListContainers(context.Background(), map[string]string{bench.LabelRun: id})
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, c := range ctrs {
		names = append(names, c.Name)
	}
	vols, err := eng.ListVolumes(context.Background(), map[string]string{bench.LabelRun: id})
	if err != nil {
		t.Fatal(err)
	}
	return append(names, vols...)
}

// TestQuickRun runs the quick benchmark, writes its JSON like `cubicle bench --quick --json`
// and checks that every row is there with real samples and the named peers are present.
func TestQuickRun(t *testing.T) {
	eng := connect(t)
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	cfg := config(t, eng, true)
	runnerCommand(&cfg)
	rep, err := bench.Run(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	// CI keeps this run's report ($CUBICLE_BENCH_JSON): the quick benchmark runs once, here
	path := cmp.Or(os.Getenv("CUBICLE_BENCH_JSON"), filepath.Join(t.TempDir(), "bench.json"))
	if err := rep.WriteJSON(path); err != nil {
		t.Fatal(err)
	}
	var sb strings.Builder
	rep.WriteTable(&sb)
	t.Logf("%.0f s\n%s", rep.Seconds, sb.String())

	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var got bench.Report
	if err := json.Unmarshal(data, &got); err != nil {
		t.Fatal(err)
	}
	if got.Mode != "quick" || got.Machine.Cores < 1 || got.Machine.Kernel == "" || got.Machine.EngineVersion == "" {
		t.Errorf("machine/mode not recorded: mode %q, %+v", got.Mode, got.Machine)
	}
	if !strings.HasPrefix(got.Images.Standard, "localhost/cubicle-desktop:standard-") ||
		!regexp.MustCompile(`^localhost/cubicle-bench-peers:[0-9a-f]{12}$`).MatchString(got.Images.Peers) || !got.Images.PeersKept {
		t.Errorf("images not recorded: %+v", got.Images)
	}
	peers := map[string]string{ // rows the issues pair with a peer → the peer's name
		"screenshot_jpeg": "scrot + convert", "screenshot_png": "scrot + convert", "click": "xdotool",
		"exec": "podman exec", "agent_step": "xdotool + 2 s + scrot", "live_input": "v1 frames",
		// An MCP client over streamable HTTP next to the in-app step.
		bench.RowMCPStep: "in-app agent_step",
		// The native model adapters' steps next to the OpenAI-compatible step.
		bench.RowAgentStepAnthropic: "OpenAI-compatible agent_step", bench.RowAgentStepResponses: "OpenAI-compatible agent_step",
		// A host command in the host sandbox next to the same command without one.
		bench.RowHostShellSandboxed: "host_shell",
		// Workspace snapshots next to the engine's volume export and import of the same volume.
		bench.RowSnapshot1Pct: "podman volume export", bench.RowRestore1G: "podman volume import",
		// A real `cubicle serve` to its first /api/health answer, next to the same program
		// with the engine off and node local direct (the floor of a start here).
		bench.RowServerStart: "serve, engine off", bench.RowServerRestart: "serve, engine off",
		bench.RowLiveFirstFrame: "x11vnc", "live_bytes_terminal": "x11vnc", "live_bytes_scroll": "x11vnc", "live_fps_throttled": "v1 frames",
		// The exec link next to the socket link, in the same run.
		"exec_link_exec": "podman exec", "exec_link_screenshot_jpeg": "socket link", "exec_link_live_input": "socket link",
		// A runner in another network namespace next to the local desktop.
		bench.RowRunnerExec: "local desktop", bench.RowRunnerLiveInput: "local desktop",
		// A recorded desktop next to the same desktop unrecorded.
		bench.RowRecordCPU: "unrecorded",
		// The product's resume of a paused desktop next to the engine's unpause; an upload
		// through the app's route next to the engine's cp of the same file.
		bench.RowResume: "podman unpause", bench.RowUploadThroughput: "podman cp",
		// The product's restart of a stopped desktop next to the engine's start of it.
		"restart": "podman start",
		// The clipboard through the live view next to xclip in the same desktop.
		bench.RowClipboardRoundtrip: "xclip",
	}
	others := map[string]string{ // rows with a further peer in the same run
		"live_bytes_terminal": "v1 frames", "live_bytes_scroll": "v1 frames",
	}
	solo := []string{"cold_start", "stop", "live_pointer", "live_fps", "live_frame_size", "live_idle",
		"memory_desktop_pss", "memory_desktop_rss", "memory_cubicle_pss", "memory_cubicle_rss",
		bench.RowRecordBytesTerminal, bench.RowRecordBytesScroll, bench.RowReplaySeek, bench.RowSnapshotStore}
	// Without a cluster the Kubernetes rows are listed without samples, saying why.
	unmeasured := []string{bench.RowK8sColdStart, bench.RowK8sExec}
	if want := len(peers) + len(solo) + len(unmeasured); len(got.Rows) != want {
		t.Errorf("%d rows, want %d", len(got.Rows), want)
	}
	for _, id := range unmeasured {
		if row := got.Row(id); row == nil || len(row.Ours.Samples) != 0 || !strings.Contains(row.Note, "no Kubernetes cluster") {
			t.Errorf("row %s without a cluster: %+v, want no samples and a note saying why", id, row)
		}
	}
	positive := func(id, side string, s *bench.Side) {
		if s == nil || len(s.Samples) == 0 || s.Summary.N != len(s.Samples) || s.Method == "" {
			t.Errorf("row %s, %s: no samples or method: %+v", id, side, s)
			return
		}
		for _, v := range s.Samples {
			// Idle traffic may really be zero: nothing changes, nothing is sent. Through a
			// slow link on a loaded machine a second may pass without a picture.
			if v < 0 || (v == 0 && id != "live_idle" && id != "live_fps_throttled") {
				t.Errorf("row %s, %s: sample %v", id, side, v)
				return
			}
		}
		if s.Summary.P50 > s.Summary.P95 || s.Summary.Min > s.Summary.P50 || s.Summary.P95 > s.Summary.Max {
			t.Errorf("row %s, %s: summary out of order: %+v", id, side, s.Summary)
		}
	}
	for id, name := range peers {
		row := got.Row(id)
		if row == nil {
			t.Errorf("row %s missing", id)
			continue
		}
		positive(id, "ours", &row.Ours)
		positive(id, "peer", row.Peer)
		if row.PeerName != name || row.Ratio == nil || *row.Ratio <= 0 {
			t.Errorf("row %s: peer %q ratio %v, want peer %q and a ratio", id, row.PeerName, row.Ratio, name)
		}
	}
	for id, name := range others {
		row := got.Row(id)
		if row == nil {
			continue
		}
		if len(row.Others) != 1 || row.Others[0].Name != name || row.Others[0].Ratio == nil {
			t.Errorf("row %s: further peers %+v, want %q with a ratio", id, row.Others, name)
			continue
		}
		positive(id, name, &row.Others[0].Side)
	}
	for _, id := range solo {
		row := got.Row(id)
		if row == nil {
			t.Errorf("row %s missing", id)
			continue
		}
		positive(id, "ours", &row.Ours)
		if row.Peer != nil || row.Ratio != nil {
			t.Errorf("row %s has a peer, but nothing comparable runs in the same run", id)
		}
	}
	// The rows with a target say how they stand against it; the upload is in MB/s.
	for id, target := range map[string]string{bench.RowResume: "100", bench.RowLiveFirstFrame: "300", "cold_start": "1200", "restart": "800"} {
		if row := got.Row(id); row != nil && !regexp.MustCompile(`^target ≤ `+target+` ms p50: (met|missed)$`).MatchString(row.Target) {
			t.Errorf("row %s: target %q", id, row.Target)
		}
	}
	if row := got.Row(bench.RowUploadThroughput); row != nil && (row.Unit != bench.UnitMBps || row.Better != "higher") {
		t.Errorf("upload row: unit %q, better %q", row.Unit, row.Better)
	}
	if row := got.Row("cold_start"); row != nil && row.Ours.Summary.N != bench.QuickCounts.ColdStarts {
		t.Errorf("cold starts: %d samples, want %d", row.Ours.Summary.N, bench.QuickCounts.ColdStarts)
	}
	for _, w := range got.Warnings {
		if strings.Contains(w, "fonts") { // the bench's desktops must start as the product's do
			t.Errorf("warning: %s", w)
		}
	}
	if len(got.Desktop) == 0 || !strings.Contains(got.Row("memory_desktop_pss").Ours.Method, "Xvfb") {
		t.Errorf("the desktop's processes were not found (want Xvfb among them): %+v", got.Desktop)
	}
	if left := leftovers(t, eng, got.RunID); len(left) > 0 {
		t.Errorf("the run left containers or volumes behind: %v", left)
	}
	if _, err := eng.InspectImage(ctx, got.Images.Peers); err != nil {
		t.Errorf("the peers image was not kept: %v", err)
	}
}

// TestCancelCleansUp cancels a run while it measures and checks that it returns the
// context's error and removes its containers.
func TestCancelCleansUp(t *testing.T) {
	eng := connect(t)
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	cfg := config(t, eng, true)
	var id string
	idRe := regexp.MustCompile(`^bench run ([0-9a-f]+) `)
	cfg.Progress = &progress{t: t, on: func(line string) {
		if m := idRe.FindStringSubmatch(line); m != nil {
			id = m[1]
		}
		if strings.HasPrefix(line, "measuring memory") { // the kept desktop runs now
			cancel()
		}
	}}
	_, err := bench.Run(ctx, cfg)
	if err == nil || ctx.Err() == nil {
		t.Fatalf("Run = %v after cancel, want the context's error", err)
	}
	if id == "" {
		t.Fatal("no run id in the progress")
	}
	if left := leftovers(t, eng, id); len(left) > 0 {
		t.Fatalf("a cancelled run left containers or volumes behind: %v", left)
	}
}
