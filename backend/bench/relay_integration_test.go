package bench_test

import (
	"context"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"testing"
	"time"

	"cubicle/backend/bench"
	"cubicle/backend/cli"
	"cubicle/backend/vm"
	"cubicle/internal/testenv"
)

// envChild makes the test binary run the command line given as its arguments: the relay rows'
// real `cubicle runner` process.
const envChild = "CUBICLE_BENCH_TEST_CHILD"

func TestMain(m *testing.M) {
	if os.Getenv(envChild) == "1" {
		os.Exit(cli.Main(os.Args[1:], cli.DesktopShell{}))
	}
	os.Exit(m.Run())
}

// runnerCommand lets a run start this test binary as `cubicle runner`.
func runnerCommand(cfg *bench.Config) {
	cfg.RunnerCommand = []string{os.Args[0]}
	cfg.RunnerEnv = []string{envChild + "=1"}
}

// TestRelayRows measures only the relay rows: a real runner process in its own network
// namespace, a desktop on it driven through the relay, next to a local desktop in the same
// run. Afterwards the node's containers, volumes and the namespace are gone.
//
//	go test ./backend/bench/ -run TestRelayRows -v -timeout 20m
func TestRelayRows(t *testing.T) {
	eng := connect(t)
	if os.Geteuid() != 0 {
		testenv.Missing(t, "the relay rows need root (network namespaces)")
	}
	if _, err := exec.LookPath("ip"); err != nil {
		testenv.Missing(t, "the relay rows need iproute2: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	cfg := config(t, eng, true)
	runnerCommand(&cfg)
	cfg.Only = []string{bench.RowRunnerExec, bench.RowRunnerLiveInput}
	var node, ns string
	re := regexp.MustCompile(`runner (r-[0-9a-f]+) in namespace (\S+) `)
	cfg.Progress = &progress{t: t, on: func(line string) {
		if m := re.FindStringSubmatch(line); m != nil {
			node, ns = m[1], m[2]
		}
	}}
	rep, err := bench.Run(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	var sb strings.Builder
	rep.WriteTable(&sb)
	t.Logf("%.0f s\n%s", rep.Seconds, sb.String())
	if len(rep.Rows) != 2 {
		t.Fatalf("%d rows, want the 2 relay rows: %+v", len(rep.Rows), rep.Rows)
	}
	for _, id := range []string{bench.RowRunnerExec, bench.RowRunnerLiveInput} {
		row := rep.Row(id)
		if row == nil || row.Skipped || row.Peer == nil || row.PeerName != "local desktop" || row.Ratio == nil {
			t.Fatalf("row %s: %+v, want samples next to the local desktop", id, row)
		}
		for side, s := range map[string]bench.Side{"relay": row.Ours, "local": *row.Peer} {
			if s.Summary.N == 0 || s.Summary.Min <= 0 || s.Summary.P50 > s.Summary.P95 {
				t.Errorf("row %s, %s side: %+v", id, side, s.Summary)
			}
		}
		if !regexp.MustCompile(`^the relay adds -?[0-9.]+ ms to the p50 \(-?[0-9.]+ ms to the p95\); target ≤ 5 ms p50 on a loopback-class link: (met|missed)$`).MatchString(row.Target) {
			t.Errorf("row %s: target %q", id, row.Target)
		}
	}
	if n := bench.QuickCounts.Fast; rep.Row(bench.RowRunnerExec).Ours.Summary.N != n || rep.Row(bench.RowRunnerExec).Peer.Summary.N != n {
		t.Errorf("exec samples: %d relayed, %d local; want %d each", rep.Row(bench.RowRunnerExec).Ours.Summary.N,
			rep.Row(bench.RowRunnerExec).Peer.Summary.N, n)
	}
	if !strings.Contains(sb.String(), "runner_exec: the relay adds") {
		t.Errorf("the table does not say how the relay stands against its target:\n%s", sb.String())
	}
	if node == "" {
		t.Fatal("no runner node in the progress")
	}
	sel := map[string]string{vm.LabelNode: node}
	if cs, _ := eng.ListContainers(context.Background(), sel); len(cs) > 0 {
		t.Errorf("the runner's containers are left: %+v", cs)
	}
	if vs, _ := eng.ListVolumes(context.Background(), sel); len(vs) > 0 {
		t.Errorf("the runner's volumes are left: %v", vs)
	}
	if out, _ := exec.Command("ip", "netns", "list").Output(); strings.Contains(string(out), ns) {
		t.Errorf("the namespace %s is left", ns)
	}
	if left := leftovers(t, eng, rep.RunID); len(left) > 0 {
		t.Errorf("the run left containers or volumes behind: %v", left)
	}
}

// TestRelayRowsSkipped: without a program to start the runner from, the relay rows are kept,
// without samples, marked skipped and saying why; the run still succeeds.
func TestRelayRowsSkipped(t *testing.T) {
	eng := connect(t)
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	cfg := config(t, eng, true)
	cfg.Only = []string{bench.RowRunnerExec, bench.RowRunnerLiveInput}
	rep, err := bench.Run(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range cfg.Only {
		row := rep.Row(id)
		if row == nil || !row.Skipped || len(row.Ours.Samples) != 0 || row.Peer != nil || !strings.Contains(row.Note, "RunnerCommand") {
			t.Errorf("row %s: %+v, want skipped without samples, saying why", id, row)
		}
	}
	var sb strings.Builder
	rep.WriteTable(&sb)
	if !strings.Contains(sb.String(), "— runner_exec: skipped: ") {
		t.Errorf("the table does not say why runner_exec was skipped:\n%s", sb.String())
	}
}

// TestRelayCancelCleansUp cancels a run while it measures through the runner (Ctrl+C): Run
// returns the context's error, and the runner's desktop, volumes, process and namespace are
// gone.
func TestRelayCancelCleansUp(t *testing.T) {
	eng := connect(t)
	if os.Geteuid() != 0 {
		testenv.Missing(t, "the relay rows need root (network namespaces)")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	cfg := config(t, eng, true)
	runnerCommand(&cfg)
	cfg.Only = []string{bench.RowRunnerExec, bench.RowRunnerLiveInput}
	var node, ns string
	re := regexp.MustCompile(`runner (r-[0-9a-f]+) in namespace (\S+) `)
	cfg.Progress = &progress{t: t, on: func(line string) {
		if m := re.FindStringSubmatch(line); m != nil {
			node, ns = m[1], m[2]
			cancel() // the runner's desktop is up and the measuring starts
		}
	}}
	if _, err := bench.Run(ctx, cfg); err == nil || ctx.Err() == nil {
		t.Fatalf("Run = %v after cancel, want the context's error", err)
	}
	if node == "" {
		t.Fatal("the run was not cancelled while the runner ran")
	}
	sel := map[string]string{vm.LabelNode: node}
	if cs, _ := eng.ListContainers(context.Background(), sel); len(cs) > 0 {
		t.Errorf("the runner's containers are left: %+v", cs)
	}
	if vs, _ := eng.ListVolumes(context.Background(), sel); len(vs) > 0 {
		t.Errorf("the runner's volumes are left: %v", vs)
	}
	if out, _ := exec.Command("ip", "netns", "list").Output(); strings.Contains(string(out), ns) {
		t.Errorf("the namespace %s is left", ns)
	}
	if out, _ := exec.Command("pgrep", "-f", "runner --server http://10.231.[0-9.]+:[0-9]+ --data-dir "+regexp.QuoteMeta(cfg.WorkDir)).Output(); len(out) > 0 {
		t.Errorf("the runner process still runs: %s", out)
	}
}
