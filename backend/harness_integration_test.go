package backend

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"cubicle/backend/agent"
	"cubicle/backend/models"
	"cubicle/backend/store"
)

// seedEventTypes are the 31 event types of seed 002's chat stream (SPEC §2.1).
var seedEventTypes = []string{
	agent.AgentStart, agent.ModelCallStart, agent.ModelCallEnd,
	agent.ThinkingBlockStart, agent.ThinkingBlockDelta, agent.ThinkingBlockEnd,
	agent.ToolCallStart, agent.ToolCallDelta, agent.ToolCallEnd,
	agent.ToolResultStart, agent.ToolResultTextDelta, agent.ToolResultDataDelta, agent.ToolResultEnd,
	agent.DataBlockStart, agent.DataBlockDelta, agent.DataBlockEnd,
	agent.TextBlockStart, agent.TextBlockDelta, agent.TextBlockEnd,
	agent.AgentResult, agent.AgentEnd, agent.ExceedMaxIters,
	agent.RequireUserConfirm, agent.UserConfirmResult, agent.AllToolsDenied,
	agent.RequireExternalExec, agent.ExternalExecutionResult,
	agent.RequestStop, agent.SubagentExposed, agent.HintBlock, agent.Custom,
}

// thinkingStep streams reasoning, then text, then a tool call (one model reply).
func thinkingStep(thought, text, id, name string, args map[string]any) string {
	th, _ := json.Marshal(thought)
	tx, _ := json.Marshal(text)
	return `data: {"choices":[{"delta":{"reasoning_content":` + string(th) + `}}]}` + "\n\n" +
		`data: {"choices":[{"delta":{"content":` + string(tx) + `}}]}` + "\n\n" + callStep(id, name, args)
}

// TestHarnessEvents is the conformance of the chat stream (issue 27 items 2, 3, 7, 8): real
// turns of the real runtime on a real desktop (the standard image in Podman, the real driver),
// with the scripted OpenAI-compatible server as the only stand-in, emit each of the seed's 31
// event types; and the execution history of those turns tells the truth — a command queued
// behind a confirmation is PENDING, then SUCCESS; a command its deadline killed is TIMEOUT,
// as is a file nobody picked in time; a memory-hungry command's recorded peak memory is
// within 10% of the high-water mark its own process reports.
func TestHarnessEvents(t *testing.T) {
	b, _, _ := startOnRealDesktop(t, slog.LevelWarn)
	admin, err := b.Auth.Admin()
	if err != nil {
		t.Fatal(err)
	}
	ag, err := b.Profiles.Create(admin.ID, "Ada")
	if err != nil {
		t.Fatal(err)
	}
	model := &scriptedModel{}
	srv := httptest.NewServer(model)
	defer srv.Close()
	if _, err := b.Models.Set(models.Update{BaseURL: srv.URL + "/v1", Model: "scripted", AllowPrivate: &allowLoopback}); err != nil {
		t.Fatal(err)
	}

	seen := map[string]int{}
	var mu sync.Mutex
	var got []agent.Event
	run := func(input string, external func(agent.Event)) []agent.Event {
		t.Helper()
		got = nil
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
		defer cancel()
		err := b.Chat.Run(ctx, agent.Turn{SessionID: "conf", UserID: admin.ID, AgentID: ag.ID, AgentName: "Ada", Input: input,
			ClientTools: []string{agent.PickFileTool}}, func(e agent.Event) {
			mu.Lock()
			seen[e.Type]++
			got = append(got, e)
			mu.Unlock()
			if e.Type == agent.RequireExternalExec && external != nil {
				go external(e)
			}
		})
		if err != nil {
			t.Fatal(err)
		}
		return got
	}
	runs := func() []store.ToolRun {
		r, err := b.Store.ToolRuns(admin.ID, "conf")
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	runOf := func(tool string, n int) store.ToolRun {
		t.Helper()
		for _, r := range runs() {
			if r.Tool == tool {
				if n == 0 {
					return r
				}
				n--
			}
		}
		t.Fatalf("no run %d of %s in %+v", n, tool, runs())
		return store.ToolRun{}
	}

	// Turn 1: thinking and text and a screenshot (the desktop starts: a hint), a memory-hungry
	// command, a CSV handed to the person, a file asked of the person's client (answered), a
	// helper, a command its deadline kills, then a dangerous command that waits for a person.
	csv := "city,people\nOslo,709000\nBergen,291000\n"
	model.push(
		thinkingStep("I should look first.", "Looking.", "c1", "computer_screenshot", map[string]any{}),
		callStep("c2", "computer_shell", map[string]any{"command": `awk 'BEGIN { s = "0123456789abcdef"; while (length(s) < 100000000) s = s s; while ((getline l < "/proc/self/status") > 0) if (l ~ /^VmHWM/) print l }'`}),
		callStep("c3", "computer_write_file", map[string]any{"path": "cities.csv", "content": csv}),
		callStep("c4", "computer_share_file", map[string]any{"path": "cities.csv"}),
		callStep("c5", agent.PickFileTool, map[string]any{"prompt": "your notes", "timeout_seconds": 120}),
		callStep("c6", agent.HelperTool, map[string]any{"name": "scout", "task": "say hello"}),
		textStep("hello from the helper"), // the helper's one model call
		callStep("c7", "computer_shell", map[string]any{"command": "sleep 30", "timeout": 1}),
		callStep("c8", "computer_shell", map[string]any{"command": "pkill -x nosuchproc; rm -rf /home/cua/workspace/scratch && echo removed"}),
	)
	picked := base64.StdEncoding.EncodeToString([]byte("my notes: buy milk"))
	evs := run("work", func(e agent.Event) {
		err := b.Chat.ExternalResult(admin.ID, "conf", agent.ExternalResult{ToolCallID: e.ToolCallID, State: agent.StateSuccess,
			Content: []agent.ContentBlock{{Type: "file", Name: "notes.txt", MediaType: "text/plain", Data: picked}}})
		if err != nil {
			t.Errorf("external result: %v", err)
		}
	})
	res := results(evs)
	for _, id := range []string{"c1", "c2", "c3", "c4", "c5", "c6"} {
		if res[id][0] != agent.StateSuccess {
			t.Fatalf("%s: %q %q", id, res[id][0], res[id][1])
		}
	}
	if !strings.Contains(res["c5"][1], "buy milk") {
		t.Fatalf("the picked file did not reach the model: %q", res["c5"][1])
	}
	var data strings.Builder
	var start *agent.Event
	for i, e := range evs {
		switch e.Type {
		case agent.DataBlockStart:
			start = &evs[i]
		case agent.DataBlockDelta:
			raw, err := base64.StdEncoding.DecodeString(e.Delta)
			if err != nil {
				t.Fatal(err)
			}
			data.Write(raw)
		}
	}
	if start == nil || start.Data.MediaType != "text/csv" || start.Data.Name != "cities.csv" || start.Data.Size != int64(len(csv)) || data.String() != csv {
		t.Fatalf("data block: %+v %q", start, data.String())
	}
	// The command's own memory, next to what its process says of itself.
	var kib int64
	out := res["c2"][1]
	if i := strings.Index(out, "VmHWM:"); i < 0 {
		t.Fatalf("no VmHWM in %q", out)
	} else if _, err := fmt.Sscanf(strings.Fields(out[i:])[1], "%d", &kib); err != nil {
		t.Fatalf("VmHWM in %q: %v", out, err)
	}
	hwm := kib << 10
	mem := runOf("computer_shell", 0)
	t.Logf("memory-hungry command: recorded %d bytes, its own high-water mark %d bytes; CPU %d ms", mem.MemoryBytes, hwm, mem.CPUMillis)
	if hwm < 100e6 || mem.MemoryBytes < hwm-hwm/10 || mem.MemoryBytes > hwm+hwm/10 {
		t.Errorf("recorded peak memory %d bytes is not within 10%% of the command's own %d bytes", mem.MemoryBytes, hwm)
	}
	if mem.CPUMillis <= 0 || mem.CPUMillis > 60_000 || mem.StartedAt.IsZero() {
		t.Errorf("recorded CPU %d ms, started %v", mem.CPUMillis, mem.StartedAt)
	}
	if shot := runOf("computer_screenshot", 0); shot.MemoryBytes != 0 || shot.Status != store.RunSuccess {
		t.Errorf("a screenshot runs no command, so it has no memory figure (not the server's): %+v", shot)
	}
	if r := runOf("computer_shell", 1); r.Status != store.RunTimeout || r.OutputSHA256 != nil {
		t.Errorf("a command its deadline killed: %+v", r)
	}
	// The dangerous command waits for a person: PENDING, and the stop says why.
	pending := runOf("computer_shell", 2)
	if pending.Status != store.RunPending || !pending.StartedAt.IsZero() {
		t.Fatalf("a command queued behind a confirmation: %+v", pending)
	}
	var stop *agent.Event
	for i := range evs {
		if evs[i].Type == agent.RequestStop {
			stop = &evs[i]
		}
	}
	if stop == nil || stop.GenerateReason != agent.StopPermission {
		t.Fatalf("REQUEST_STOP of the pause: %+v", stop)
	}

	// Turn 2: the person confirms; the queued command runs: SUCCESS, same run.
	model.push(textStep("all done"))
	evs = run("yes", nil)
	if r := results(evs)["c8"]; r[0] != agent.StateSuccess || !strings.Contains(r[1], "removed") {
		t.Fatalf("confirmed command: %+v", r)
	}
	if r := runOf("computer_shell", 2); r.ID != pending.ID || r.Status != store.RunSuccess || r.OutputSHA256 == nil || r.StartedAt.IsZero() {
		t.Fatalf("the confirmed command's run: %+v (was %+v)", r, pending)
	}

	// Turn 3: a file nobody picks before its deadline (TIMEOUT), then calls the policy denies
	// until the turn's model calls run out.
	model.push(callStep("p1", agent.PickFileTool, map[string]any{"prompt": "anything", "timeout_seconds": 1}))
	for i := 0; i < 24; i++ {
		model.push(callStep(fmt.Sprintf("x%d", i), "no_such_tool", map[string]any{}))
	}
	evs = run("more", nil)
	if r := results(evs)["p1"]; r[0] != agent.StateError || !strings.Contains(r[1], "nobody answered") {
		t.Fatalf("a file nobody picked: %+v", r)
	}
	if r := runOf(agent.PickFileTool, 1); r.Status != store.RunTimeout {
		t.Fatalf("its run: %+v", r)
	}
	for _, e := range evs {
		if e.Type == agent.ExternalExecutionResult && e.ToolCallID == "p1" && e.State != agent.StateError {
			t.Fatalf("EXTERNAL_EXECUTION_RESULT after the deadline: %+v", e)
		}
	}

	var missing []string
	for _, ty := range seedEventTypes {
		if seen[ty] == 0 {
			missing = append(missing, ty)
		}
	}
	t.Logf("event counts: %v", seen)
	if len(seedEventTypes) != 31 || len(missing) > 0 {
		t.Fatalf("%d types listed; not emitted by the real turns: %v", len(seedEventTypes), missing)
	}
}
