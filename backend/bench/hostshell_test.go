package bench

import (
	"context"
	"log/slog"
	"testing"

	"cubicle/backend/sandbox"
)

// TestHostShellRow measures the host_shell_sandboxed row on its own (it needs no desktop), for
// each Linux sandbox kind, and logs its p50s; the 30 ms target is read from the log, never
// asserted (shared machines are noisy).
func TestHostShellRow(t *testing.T) {
	if testing.Short() {
		t.Skip("measures real processes; run without -short")
	}
	for _, kind := range []sandbox.Kind{sandbox.Bwrap, sandbox.Landlock} {
		t.Run(string(kind), func(t *testing.T) {
			t.Setenv(sandbox.EnvMode, string(kind))
			r := &runner{cfg: Config{Counts: Counts{Fast: 30}, WorkDir: t.TempDir()}, log: slog.New(slog.DiscardHandler), rep: &Report{}}
			if err := r.hostShell(context.Background(), nil); err != nil {
				t.Fatal(err)
			}
			if len(r.rep.Rows) != 1 {
				t.Fatalf("rows: %+v", r.rep.Rows)
			}
			row := r.rep.Rows[0]
			row.finish()
			if row.Skipped || row.ID != RowHostShellSandboxed || row.Peer == nil || len(row.Ours.Samples) != 30 || len(row.Peer.Samples) != 30 {
				t.Fatalf("row: %+v", row)
			}
			t.Logf("%s: sandboxed p50 %.1f ms, plain p50 %.1f ms, added %.1f ms (target ≤ 30 ms)", kind,
				row.Ours.Summary.P50, row.Peer.Summary.P50, row.Ours.Summary.P50-row.Peer.Summary.P50)
		})
	}
}
