package bench_test

import (
	"context"
	"regexp"
	"strings"
	"testing"
	"time"

	"cubicle/backend/bench"
)

// TestResumeAndUploadRows measures only the resume and upload rows on a real desktop (after
// the one cold start every run makes): each has samples on both sides, the engine CLI as its
// peer, and the resume row says how it stands against its target. Nothing is left behind.
//
//	go test ./backend/bench/ -run TestResumeAndUploadRows -v -timeout 20m
func TestResumeAndUploadRows(t *testing.T) {
	eng := connect(t)
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	cfg := config(t, eng, true)
	cfg.Only = []string{bench.RowResume, bench.RowUploadThroughput}
	rep, err := bench.Run(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	var sb strings.Builder
	rep.WriteTable(&sb)
	t.Logf("%.0f s\n%s", rep.Seconds, sb.String())
	if len(rep.Rows) != 2 {
		t.Fatalf("%d rows, want the 2 rows asked for: %+v", len(rep.Rows), rep.Rows)
	}
	for id, want := range map[string]struct {
		peer string
		n    int
	}{
		bench.RowResume:           {"podman unpause", bench.QuickCounts.Resumes},
		bench.RowUploadThroughput: {"podman cp", bench.QuickCounts.Uploads},
	} {
		row := rep.Row(id)
		if row == nil || row.Peer == nil || row.PeerName != want.peer || row.Ratio == nil {
			t.Fatalf("row %s: %+v, want samples next to %q", id, row, want.peer)
		}
		for side, s := range map[string]bench.Side{"ours": row.Ours, "peer": *row.Peer} {
			if s.Summary.N != want.n || s.Summary.Min <= 0 || s.Summary.P50 > s.Summary.P95 {
				t.Errorf("row %s, %s: %+v, want %d positive samples", id, side, s.Summary, want.n)
			}
		}
	}
	if got := rep.Row(bench.RowResume).Target; !regexp.MustCompile(`^target ≤ 100 ms p50: (met|missed)$`).MatchString(got) {
		t.Errorf("resume target %q", got)
	}
	if row := rep.Row(bench.RowUploadThroughput); row.Unit != bench.UnitMBps || row.Better != "higher" {
		t.Errorf("upload row: unit %q, better %q", row.Unit, row.Better)
	}
	if left := leftovers(t, eng, rep.RunID); len(left) > 0 {
		t.Errorf("the run left containers or volumes behind: %v", left)
	}
}
