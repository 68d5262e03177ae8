package history

import (
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"cubicle/backend/agent"
	"cubicle/backend/store"
)

func TestRecordAndQuery(t *testing.T) {
	st, err := store.Open(filepath.Join(t.TempDir(), "c.db"), store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	r := New(st, nil)
	turn := agent.TurnInfo{SessionID: "s1", UserID: "u", TurnID: "t1", Step: 1}
	a := r.Begin(turn, agent.ToolCall{Name: "computer_shell", Input: map[string]any{"command": "ls"}})
	// Queued, the run is PENDING; once started, RUNNING.
	tl, err := Query(st, "u", "s1")
	if err != nil || len(tl.Runs) != 1 || tl.Runs[0].Status != store.RunPending || tl.Runs[0].OutputSHA256 != nil || !tl.Runs[0].StartedAt.IsZero() {
		t.Fatalf("pending: %+v %v", tl, err)
	}
	r.Running(a)
	tl, err = Query(st, "u", "s1")
	if err != nil || len(tl.Runs) != 1 || tl.Runs[0].Status != store.RunRunning || tl.Runs[0].StartedAt.IsZero() {
		t.Fatalf("running: %+v %v", tl, err)
	}
	r.End(a, agent.RunEnd{State: agent.StateSuccess, Output: []agent.ContentBlock{{Type: "text", Text: "a b"}}, Elapsed: 120 * time.Millisecond,
		Usage: agent.ToolUsage{CPU: 40 * time.Millisecond, MemoryBytes: 5 << 20}})
	turn.Step = 2
	time.Sleep(time.Millisecond)
	b := r.Begin(turn, agent.ToolCall{Name: "computer_shell", Input: map[string]any{"command": "false"}})
	r.Running(b)
	r.End(b, agent.RunEnd{State: agent.StateError, Elapsed: 30 * time.Millisecond})
	turn.Step = 3
	time.Sleep(time.Millisecond)
	c := r.Begin(turn, agent.ToolCall{Name: "computer_screenshot", Input: map[string]any{}})
	r.Running(c)
	r.End(c, agent.RunEnd{State: agent.StateInterrupted, Elapsed: 5 * time.Millisecond})
	r.Begin(agent.TurnInfo{SessionID: "other"}, agent.ToolCall{Name: "x"})
	// Another account's run under the same session id is never part of "u"'s timeline.
	r.Begin(agent.TurnInfo{SessionID: "s1", UserID: "intruder", TurnID: "t9"}, agent.ToolCall{Name: "computer_shell", Input: map[string]any{"command": "id"}})

	tl, err = Query(st, "u", "s1")
	if err != nil {
		t.Fatal(err)
	}
	if tl.Total != 3 || tl.Failed != 2 || tl.DurationMs != 155 || tl.FailureRate < 0.66 || tl.FailureRate > 0.67 {
		t.Fatalf("timeline totals: %+v", tl)
	}
	want := []struct {
		step   int
		status string
		out    bool
	}{{1, store.RunSuccess, true}, {2, store.RunFailed, false}, {3, store.RunInterrupted, false}}
	for i, w := range want {
		got := tl.Runs[i]
		if got.Step != w.step || got.Status != w.status || (got.OutputSHA256 != nil) != w.out || len(got.InputSHA256) != 64 || got.TurnID != "t1" {
			t.Fatalf("run %d = %+v", i, got)
		}
	}
	if tl.Runs[0].CPUMillis != 40 || tl.Runs[0].MemoryBytes != 5<<20 || tl.Runs[1].MemoryBytes != 0 {
		t.Fatalf("measured usage not kept as given: %+v", tl.Runs[:2])
	}
	if tl.Runs[0].InputSHA256 == tl.Runs[1].InputSHA256 {
		t.Fatal("different inputs hash alike")
	}
	if len(tl.ByTool) != 2 || tl.ByTool[0].Tool != "computer_screenshot" || tl.ByTool[1].Count != 2 || tl.ByTool[1].MaxMs != 120 {
		t.Fatalf("by tool: %+v", tl.ByTool)
	}
	if empty, _ := Query(st, "u", "none"); empty.Total != 0 || empty.Runs == nil {
		t.Fatalf("empty: %+v", empty)
	}
	// The other account sees only its own run of "s1", never u's.
	if other, _ := Query(st, "intruder", "s1"); other.Total != 1 || other.Runs[0].TurnID != "t9" {
		t.Fatalf("intruder's view of s1: %+v", other)
	}

	// A run left RUNNING by a process that ended becomes INTERRUPTED at the next start, and
	// counts as failed; finished runs are left as they were.
	r.Begin(turn, agent.ToolCall{Name: "computer_shell", Input: map[string]any{"command": "sleep 100"}})
	n, err := st.InterruptRuns(time.Now())
	if err != nil || n != 3 { // this one, the "other" session's and the intruder's
		t.Fatalf("InterruptRuns = %d, %v; want 3", n, err)
	}
	tl, err = Query(st, "u", "s1")
	if err != nil || tl.Total != 4 || tl.Runs[3].Status != store.RunInterrupted || tl.Failed != 3 || tl.Runs[0].Status != store.RunSuccess {
		t.Fatalf("after InterruptRuns: %+v, %v", tl, err)
	}
	if n, err := st.InterruptRuns(time.Now()); err != nil || n != 0 {
		t.Errorf("InterruptRuns again = %d, %v; want 0", n, err)
	}
}

// TestStatuses: a call its deadline ended is TIMEOUT (failed, no output hash), one a person
// declined is FAILED and marked denied; the JSON Lines export has one run per line, in order,
// only the caller's.
func TestStatuses(t *testing.T) {
	st, err := store.Open(filepath.Join(t.TempDir(), "c.db"), store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	r := New(st, nil)
	turn := agent.TurnInfo{SessionID: "s", UserID: "u", TurnID: "t", Step: 1}
	a := r.Begin(turn, agent.ToolCall{Name: "computer_shell", Input: map[string]any{"command": "sleep 9"}})
	r.Running(a)
	r.End(a, agent.RunEnd{State: agent.StateError, TimedOut: true, Elapsed: time.Second})
	time.Sleep(time.Millisecond)
	turn.Step = 2
	b := r.Begin(turn, agent.ToolCall{Name: "computer_shell", Input: map[string]any{"command": "rm -rf x"}})
	r.End(b, agent.RunEnd{State: agent.StateDenied})
	r.Begin(agent.TurnInfo{SessionID: "s", UserID: "other"}, agent.ToolCall{Name: "x"})

	tl, err := Query(st, "u", "s")
	if err != nil || tl.Total != 2 || tl.Failed != 2 {
		t.Fatalf("timeline: %+v %v", tl, err)
	}
	if got := tl.Runs[0]; got.Status != store.RunTimeout || got.OutputSHA256 != nil || got.DurationMs != 1000 {
		t.Fatalf("timed out run: %+v", got)
	}
	if got := tl.Runs[1]; got.Status != store.RunFailed || !got.Denied || !got.StartedAt.IsZero() {
		t.Fatalf("declined run: %+v", got)
	}
	var buf strings.Builder
	if err := Export(st, "u", "s", &buf); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSuffix(buf.String(), "\n"), "\n")
	if len(lines) != 2 {
		t.Fatalf("export: %d lines:\n%s", len(lines), buf.String())
	}
	for i, l := range lines {
		var run store.ToolRun
		if err := json.Unmarshal([]byte(l), &run); err != nil || run.ID != tl.Runs[i].ID || run.UserID != "u" {
			t.Fatalf("line %d: %v %+v", i, err, run)
		}
	}
	buf.Reset()
	if err := Export(st, "u", "none", &buf); err != nil || buf.Len() != 0 {
		t.Fatalf("empty export: %q %v", buf.String(), err)
	}
}
