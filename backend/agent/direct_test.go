package agent_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"cubicle/backend/agent"
)

// recRecorder keeps the sources of the runs it records.
type recRecorder struct{ sources []string }

func (r *recRecorder) Begin(t agent.TurnInfo, c agent.ToolCall) string {
	r.sources = append(r.sources, t.Source())
	return "x"
}
func (r *recRecorder) Running(string) {}

func (r *recRecorder) End(string, agent.RunEnd) {}

func directRuntime(t *testing.T) (*agent.Runtime, *tools, *askGuard, *recRecorder, *[]string) {
	tb, g, rec := &tools{}, &askGuard{}, &recRecorder{}
	var lifecycle []string
	rt, err := agent.New(agent.Config{Tools: tb, Guard: g, Recorder: rec,
		Start: func(ctx context.Context, ti agent.TurnInfo) ([]agent.Notice, error) {
			lifecycle = append(lifecycle, "start "+ti.Via)
			return nil, nil
		},
		TurnEnded: func(ti agent.TurnInfo) { lifecycle = append(lifecycle, "end") }})
	if err != nil {
		t.Fatal(err)
	}
	return rt, tb, g, rec, &lifecycle
}

func TestDirectCallRunsThroughTheGate(t *testing.T) {
	rt, tb, _, rec, life := directRuntime(t)
	d := agent.DirectCall{SessionID: "mcp-1", UserID: "u1", AgentID: "a1", Via: "MCP: laptop",
		Call: agent.ToolCall{Name: "echo", Input: map[string]any{"x": 1.0}}}
	res, err := rt.Call(context.Background(), d, func(agent.Event) {})
	if err != nil || res.State != agent.StateSuccess || !strings.Contains(res.Content[0].Text, `ran echo {"x":1}`) {
		t.Fatalf("%v %+v", err, res)
	}
	if len(rec.sources) != 1 || rec.sources[0] != "MCP: laptop" {
		t.Fatalf("history sources: %v", rec.sources)
	}
	if strings.Join(*life, ",") != "start MCP: laptop,end" {
		t.Fatalf("lifecycle: %v", *life)
	}
	d.Call = agent.ToolCall{Name: "denied"}
	res, _ = rt.Call(context.Background(), d, func(agent.Event) {})
	if res.State != agent.StateDenied || len(tb.called()) != 1 {
		t.Fatalf("denied call: %+v, calls %d", res, len(tb.called()))
	}
}

func TestDirectCallWaitsForConfirmation(t *testing.T) {
	rt, tb, g, _, _ := directRuntime(t)
	d := agent.DirectCall{SessionID: "mcp-1", UserID: "u1", AgentID: "a1", Via: "MCP: laptop", ConfirmTimeout: 10 * time.Second,
		Call: agent.ToolCall{Name: "shell", Input: map[string]any{"command": "rm x"}}}
	asked := make(chan []agent.ToolCall, 1)
	done := make(chan agent.ContentBlock, 1)
	go func() {
		res, err := rt.Call(context.Background(), d, func(e agent.Event) {
			if e.Type == agent.RequireUserConfirm {
				asked <- e.ToolCalls
			}
		})
		if err != nil {
			t.Error(err)
		}
		done <- res
	}()
	calls := <-asked
	if len(tb.called()) != 0 {
		t.Fatal("the call ran before it was confirmed")
	}
	if w := rt.Waiting("u1", "mcp-1"); len(w) != 1 || w[0].ID != calls[0].ID {
		t.Fatalf("waiting: %+v", w)
	}
	// The person answers like in any chat: a turn with confirmResults for the session.
	var evs []agent.Event
	err := rt.Run(context.Background(), agent.Turn{SessionID: "mcp-1", UserID: "u1", AgentID: "a1",
		ConfirmResults: []agent.ConfirmResult{{Confirmed: true, ToolCall: calls[0]}}}, func(e agent.Event) { evs = append(evs, e) })
	if err != nil {
		t.Fatal(err)
	}
	checkEnvelope(t, evs)
	res := <-done
	if res.State != agent.StateSuccess || len(tb.called()) != 1 || len(g.confirmed) != 1 {
		t.Fatalf("confirmed call: %+v, calls %d, recorded %v", res, len(tb.called()), g.confirmed)
	}

	// Declined with "no".
	go func() {
		res, _ := rt.Call(context.Background(), d, func(e agent.Event) {
			if e.Type == agent.RequireUserConfirm {
				asked <- e.ToolCalls
			}
		})
		done <- res
	}()
	<-asked
	if err := rt.Run(context.Background(), agent.Turn{SessionID: "mcp-1", UserID: "u1", Input: "no"}, func(agent.Event) {}); err != nil {
		t.Fatal(err)
	}
	if res := <-done; res.State != agent.StateDenied || len(tb.called()) != 1 {
		t.Fatalf("declined call: %+v", res)
	}
}

func TestDirectCallTimesOutToDeny(t *testing.T) {
	rt, tb, _, _, _ := directRuntime(t)
	d := agent.DirectCall{SessionID: "mcp-1", UserID: "u1", AgentID: "a1", ConfirmTimeout: 200 * time.Millisecond,
		Call: agent.ToolCall{Name: "shell", Input: map[string]any{"command": "rm x"}}}
	began := time.Now()
	res, err := rt.Call(context.Background(), d, func(agent.Event) {})
	if err != nil || res.State != agent.StateDenied || !strings.Contains(res.Content[0].Text, "nobody confirmed") {
		t.Fatalf("%v %+v", err, res)
	}
	if time.Since(began) < 200*time.Millisecond || len(tb.called()) != 0 {
		t.Fatal("denied before the deadline, or ran")
	}
	if rt.Waiting("u1", "mcp-1") != nil {
		t.Fatal("still waiting after the deadline")
	}
	// A "yes" after the deadline is an ordinary chat input, not an answer to the expired call.
	if len(tb.called()) != 0 {
		t.Fatal("ran")
	}
}
