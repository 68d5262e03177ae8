package agent_test

import (
	"context"
	"encoding/json"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"cubicle/backend/agent"
	"cubicle/backend/agent/openai"
)

// deskTools offers computer and host tools like the real toolbox and records the turn of
// every call; computer_wait blocks until cancelled.
type deskTools struct {
	mu    sync.Mutex
	calls []agent.TurnInfo
	names []string
	lists []agent.TurnInfo // turns Tools was asked for
}

func (d *deskTools) Tools(ctx context.Context, t agent.TurnInfo) []agent.ToolSpec {
	d.mu.Lock()
	d.lists = append(d.lists, t)
	d.mu.Unlock()
	var out []agent.ToolSpec
	for _, n := range []string{"computer_screenshot", "computer_shell", "computer_wait", "host_shell", "computer_copy_file"} {
		out = append(out, agent.ToolSpec{Name: n, Description: n, Parameters: json.RawMessage(`{"type":"object"}`)})
	}
	return out
}

func (d *deskTools) Call(ctx context.Context, t agent.TurnInfo, c agent.ToolCall, out *agent.ToolOutput) string {
	d.mu.Lock()
	d.calls = append(d.calls, t)
	d.names = append(d.names, c.Name)
	d.mu.Unlock()
	if c.Name == "computer_wait" {
		<-ctx.Done()
		out.Text("Interrupted.")
		return agent.StateInterrupted
	}
	out.Text("ran " + c.Name)
	return agent.StateSuccess
}

func (d *deskTools) called() ([]agent.TurnInfo, []string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	return append([]agent.TurnInfo(nil), d.calls...), append([]string(nil), d.names...)
}

// recorder keeps the turns of recorded calls.
type recorder struct {
	mu    sync.Mutex
	begun []agent.TurnInfo
	ended []string
}

func (r *recorder) Begin(t agent.TurnInfo, c agent.ToolCall) string {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.begun = append(r.begun, t)
	return c.ID
}

func (r *recorder) Running(string) {}

func (r *recorder) End(id string, e agent.RunEnd) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.ended = append(r.ended, id+":"+e.State)
}

type helperHarness struct {
	t     *testing.T
	model *scripted
	tools *deskTools
	rec   *recorder
	rt    *agent.Runtime

	mu    sync.Mutex
	ended []agent.TurnInfo // helper tasks that ended
}

func newHelperHarness(t *testing.T, hc agent.HelperConfig) *helperHarness {
	h := &helperHarness{t: t, model: &scripted{t: t}, tools: &deskTools{}, rec: &recorder{}}
	srv := httptest.NewServer(h.model)
	t.Cleanup(srv.Close)
	hc.Ended = func(ti agent.TurnInfo) {
		h.mu.Lock()
		h.ended = append(h.ended, ti)
		h.mu.Unlock()
	}
	rt, err := agent.New(agent.Config{Tools: h.tools, Guard: &askGuard{}, Recorder: h.rec, System: "MAIN PROMPT", Helpers: &hc,
		Models: func(ctx context.Context, agentID string, chat *agent.ChatModel) (agent.Model, error) {
			return openai.New(openai.Config{BaseURL: srv.URL + "/v1", APIKey: "test-key", Model: "scripted", AllowPrivate: true})
		}})
	if err != nil {
		t.Fatal(err)
	}
	h.rt = rt
	return h
}

func (h *helperHarness) endedTasks() []agent.TurnInfo {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]agent.TurnInfo(nil), h.ended...)
}

func helperCall(id, name, task string) []string {
	a, _ := json.Marshal(map[string]string{"name": name, "task": task})
	return toolReply(id, agent.HelperTool, string(a))
}

func fmtJSON(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}

func toolNames(req map[string]any) []string {
	var out []string
	tools, _ := req["tools"].([]any)
	for _, t := range tools {
		f := t.(map[string]any)["function"].(map[string]any)
		out = append(out, f["name"].(string))
	}
	return out
}

func systemOf(req map[string]any) string {
	msgs := req["messages"].([]any)
	m := msgs[0].(map[string]any)
	if m["role"] != "system" {
		return ""
	}
	s, _ := m["content"].(string)
	return s
}

func TestHelperRunsTaskAndReports(t *testing.T) {
	h := newHelperHarness(t, agent.HelperConfig{System: "HELPER PROMPT"})
	h.model.replies = [][]string{
		helperCall("h1", "researcher", "count the files"),
		toolReply("c1", "computer_shell", `{"command":"ls | wc -l"}`),
		textReply("There are ", "42 files."),
		textReply("The helper found 42 files."),
	}
	var evs []agent.Event
	err := h.rt.Run(context.Background(), agent.Turn{SessionID: "s1", UserID: "u1", AgentID: "a1", AgentName: "Ada", Input: "go"},
		func(e agent.Event) { evs = append(evs, e) })
	if err != nil {
		t.Fatal(err)
	}
	checkEnvelope(t, evs)

	// The main agent is offered task_helper and its host tools; the helper gets the computer
	// tools only, under its own prompt.
	main, helper := toolNames(h.model.request(0)), toolNames(h.model.request(1))
	if !strings.Contains(strings.Join(main, ","), agent.HelperTool) || !strings.Contains(strings.Join(main, ","), "host_shell") {
		t.Fatalf("main tools %v", main)
	}
	if got := strings.Join(helper, ","); got != "computer_screenshot,computer_shell,computer_wait" {
		t.Fatalf("helper tools %v", helper)
	}
	if systemOf(h.model.request(0)) != "MAIN PROMPT" || systemOf(h.model.request(1)) != "HELPER PROMPT" {
		t.Fatalf("prompts %q / %q", systemOf(h.model.request(0)), systemOf(h.model.request(1)))
	}
	// The helper's conversation is the task alone.
	if msgs := h.model.request(1)["messages"].([]any); len(msgs) != 2 || !strings.Contains(fmtJSON(msgs[1]), "count the files") {
		t.Fatalf("helper messages %v", msgs)
	}

	// Events: SUBAGENT_EXPOSED, then the helper's events with its source; the parent's own
	// events have none.
	ex := find(evs, agent.SubagentExposed)
	if ex == nil || ex.Source != "main/researcher" || ex.Name != "researcher" || ex.ToolCallID != "h1" || ex.Metadata["task"] != "count the files" {
		t.Fatalf("exposed %+v", ex)
	}
	var helperTypes []string
	for _, e := range evs {
		if e.Source == "main/researcher" {
			helperTypes = append(helperTypes, e.Type)
		} else if e.Source != "" {
			t.Fatalf("unexpected source %q", e.Source)
		}
		if (e.ToolCallID == "c1") != (e.Source == "main/researcher" && e.ToolCallID != "") && e.Type != agent.SubagentExposed {
			t.Fatalf("event %s of call %s has source %q", e.Type, e.ToolCallID, e.Source)
		}
		if (e.Type == agent.AgentStart || e.Type == agent.AgentEnd || e.Type == agent.AgentResult) && e.Source != "" {
			t.Fatalf("helper emitted %s", e.Type)
		}
	}
	for _, w := range []string{agent.SubagentExposed, agent.ModelCallStart, agent.ToolCallStart, agent.ToolResultEnd, agent.TextBlockDelta, agent.ModelCallEnd} {
		if !strings.Contains(strings.Join(helperTypes, ","), w) {
			t.Fatalf("no helper %s in %v", w, helperTypes)
		}
	}
	// The parent's task_helper result is the helper's report.
	var result string
	var state string
	for _, e := range evs {
		if e.ToolCallID == "h1" && e.Source == "" {
			switch e.Type {
			case agent.ToolResultTextDelta:
				result += e.Delta
			case agent.ToolResultEnd:
				state = e.State
			}
		}
	}
	if state != agent.StateSuccess || result != "There are 42 files." {
		t.Fatalf("task_helper result %q %q", state, result)
	}
	msgs := h.model.request(3)["messages"].([]any)
	if last := msgs[len(msgs)-1].(map[string]any); last["tool_call_id"] != "h1" || !strings.Contains(fmtJSON(last), "42 files") {
		t.Fatalf("parent's next call did not get the report: %v", last)
	}

	// The toolbox saw the helper's turn: its name and its own task, not the parent's turn.
	calls, names := h.tools.called()
	if len(calls) != 1 || names[0] != "computer_shell" || calls[0].Helper != "researcher" || calls[0].TaskID == "" || calls[0].SessionID != "s1" {
		t.Fatalf("tool calls %v %+v", names, calls)
	}
	parentTurn := h.rec.begun[0].TurnID
	if calls[0].TaskID == parentTurn || calls[0].TurnID == parentTurn {
		t.Fatalf("helper shares the parent's turn id %s", parentTurn)
	}
	// Both calls are in the history, the helper's with its source.
	if len(h.rec.begun) != 2 || h.rec.begun[0].Source() != "" || h.rec.begun[1].Source() != "main/researcher" {
		t.Fatalf("recorded %+v", h.rec.begun)
	}
	if ended := h.endedTasks(); len(ended) != 1 || ended[0].TaskID != calls[0].TaskID {
		t.Fatalf("ended %+v", ended)
	}
}

func TestHelperRefusals(t *testing.T) {
	h := newHelperHarness(t, agent.HelperConfig{})
	h.model.replies = [][]string{
		helperCall("h1", "tester", "try everything"),
		toolReply("c1", "host_shell", `{"command":"id"}`),
		toolReply("c2", agent.HelperTool, `{"name":"nested","task":"recurse"}`),
		toolReply("c3", "computer_copy_file", `{"from":"vm","source":"a","target":"b"}`),
		toolReply("c4", "computer_shell", `{"command":"rm -rf build"}`),
		textReply("nothing worked"),
		textReply("ok"),
	}
	var evs []agent.Event
	if err := h.rt.Run(context.Background(), agent.Turn{SessionID: "s1", UserID: "u1", AgentID: "a1", Input: "go"},
		func(e agent.Event) { evs = append(evs, e) }); err != nil {
		t.Fatal(err)
	}
	if _, names := h.tools.called(); len(names) != 0 {
		t.Fatalf("refused tools ran: %v", names)
	}
	res := map[string]string{}
	text := map[string]string{}
	for _, e := range evs {
		if e.Type == agent.ToolResultTextDelta {
			text[e.ToolCallID] += e.Delta
		}
		if e.Type == agent.ToolResultEnd {
			res[e.ToolCallID] = e.State
		}
	}
	for _, id := range []string{"c1", "c2", "c3"} {
		if res[id] != agent.StateDenied || !strings.Contains(text[id], "not available to helpers") {
			t.Fatalf("%s: %s %q", id, res[id], text[id])
		}
	}
	// A call the guard would ask about is refused: a helper cannot pause its parent.
	if res["c4"] != agent.StateDenied || !strings.Contains(text["c4"], "cannot ask") {
		t.Fatalf("c4: %s %q", res["c4"], text["c4"])
	}
	if find(evs, agent.RequireUserConfirm) != nil || find(evs, agent.SubagentExposed).Name != "tester" {
		t.Fatalf("events %v", types(evs))
	}
	if res["h1"] != agent.StateSuccess || text["h1"] != "nothing worked" {
		t.Fatalf("h1: %s %q", res["h1"], text["h1"])
	}
	if len(h.endedTasks()) != 1 {
		t.Fatalf("ended %v", h.endedTasks())
	}
	// Bad arguments never start a helper.
	h.model.replies = [][]string{helperCall("h2", "Not A Role!", "x"), textReply("fine")}
	evs = nil
	h.rt.Run(context.Background(), agent.Turn{SessionID: "s2", UserID: "u1", AgentID: "a1", Input: "go"}, func(e agent.Event) { evs = append(evs, e) })
	if find(evs, agent.SubagentExposed) != nil || len(h.endedTasks()) != 1 {
		t.Fatalf("invalid helper name started a helper: %v", types(evs))
	}
}

func TestHelperStopsWithParent(t *testing.T) {
	h := newHelperHarness(t, agent.HelperConfig{})
	h.model.replies = [][]string{
		helperCall("h1", "waiter", "wait"),
		toolReply("c1", "computer_wait", `{}`),
		textReply("resumed"),
	}
	done := make(chan []agent.Event)
	go func() {
		var evs []agent.Event
		h.rt.Run(context.Background(), agent.Turn{SessionID: "s1", UserID: "u1", AgentID: "a1", Input: "go"}, func(e agent.Event) { evs = append(evs, e) })
		done <- evs
	}()
	deadline := time.Now().Add(10 * time.Second)
	for {
		if _, names := h.tools.called(); len(names) > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("helper's tool never started")
		}
		time.Sleep(5 * time.Millisecond)
	}
	if !h.rt.Stop("u1", "s1") {
		t.Fatal("no turn to stop")
	}
	evs := <-done
	checkEnvelope(t, evs)
	stops := 0
	for _, e := range evs {
		if e.Type == agent.RequestStop {
			stops++
			if e.Source != "" {
				t.Fatalf("stop reported by the helper: %+v", e)
			}
		}
		if e.Type == agent.ToolResultEnd && e.ToolCallID == "h1" && e.State != agent.StateInterrupted {
			t.Fatalf("task_helper state %s", e.State)
		}
		if e.Type == agent.ToolResultEnd && e.ToolCallID == "c1" && (e.State != agent.StateInterrupted || e.Source != "main/waiter") {
			t.Fatalf("helper tool %+v", e)
		}
	}
	if stops != 1 {
		t.Fatalf("%d REQUEST_STOP events", stops)
	}
	if len(h.endedTasks()) != 1 {
		t.Fatal("the stopped helper's task did not end")
	}
	// The conversation resumes; the helper is gone.
	var evs2 []agent.Event
	h.rt.Run(context.Background(), agent.Turn{SessionID: "s1", UserID: "u1", AgentID: "a1", Input: "continue"}, func(e agent.Event) { evs2 = append(evs2, e) })
	if find(evs2, agent.AgentResult).Result.Content[0].Text != "resumed" || find(evs2, agent.SubagentExposed) != nil {
		t.Fatalf("resume: %v", types(evs2))
	}
}

func TestHelperTimeoutAndLimit(t *testing.T) {
	h := newHelperHarness(t, agent.HelperConfig{Timeout: 300 * time.Millisecond, MaxIters: 1})
	h.model.replies = [][]string{
		helperCall("h1", "slowpoke", "wait forever"),
		toolReply("c1", "computer_wait", `{}`),
		textReply("gave up"),
	}
	var evs []agent.Event
	h.rt.Run(context.Background(), agent.Turn{SessionID: "s1", UserID: "u1", AgentID: "a1", Input: "go"}, func(e agent.Event) { evs = append(evs, e) })
	var text, state string
	for _, e := range evs {
		if e.ToolCallID == "h1" && e.Type == agent.ToolResultTextDelta {
			text += e.Delta
		}
		if e.ToolCallID == "h1" && e.Type == agent.ToolResultEnd {
			state = e.State
		}
	}
	if state != agent.StateError || !strings.Contains(text, "ran out of time") {
		t.Fatalf("timeout: %s %q", state, text)
	}
	if len(h.endedTasks()) != 1 {
		t.Fatal("the timed-out helper's task did not end")
	}
	if find(evs, agent.AgentResult).Result.Content[0].Text != "gave up" {
		t.Fatalf("parent did not continue: %v", types(evs))
	}

	// The iteration limit ends a helper with a report saying so.
	h.model.replies = [][]string{
		helperCall("h2", "busy", "loop"),
		toolReply("c2", "computer_screenshot", `{}`),
		textReply("ok"),
	}
	evs = nil
	h.rt.Run(context.Background(), agent.Turn{SessionID: "s2", UserID: "u1", AgentID: "a1", Input: "go"}, func(e agent.Event) { evs = append(evs, e) })
	e := find(evs, agent.ExceedMaxIters)
	if e == nil || e.Source != "main/busy" || e.MaxIters != 1 {
		t.Fatalf("helper limit: %+v", e)
	}
}

// askHelpers asks before every task_helper call (like the STRICT level) and allows the rest.
type askHelpers struct{}

func (askHelpers) Check(t agent.TurnInfo, c agent.ToolCall) (agent.Decision, string) {
	if c.Name == agent.HelperTool {
		return agent.Ask, "strict"
	}
	return agent.Allow, ""
}
func (askHelpers) AllowRule(agent.TurnInfo, agent.ToolCall, string) error { return nil }

// TestConfirmedHelper: a task_helper call the person confirms runs when the conversation
// resumes (before the resumed turn's model call).
func TestConfirmedHelper(t *testing.T) {
	model := &scripted{t: t}
	srv := httptest.NewServer(model)
	defer srv.Close()
	tb := &deskTools{}
	ended := 0
	rt, err := agent.New(agent.Config{Tools: tb, Guard: askHelpers{}, Helpers: &agent.HelperConfig{Ended: func(agent.TurnInfo) { ended++ }},
		Models: func(ctx context.Context, agentID string, chat *agent.ChatModel) (agent.Model, error) {
			return openai.New(openai.Config{BaseURL: srv.URL + "/v1", APIKey: "test-key", Model: "scripted", AllowPrivate: true})
		}})
	if err != nil {
		t.Fatal(err)
	}
	model.replies = [][]string{
		helperCall("h1", "checker", "look"),
		toolReply("c1", "computer_screenshot", `{}`),
		textReply("looked"),
		textReply("thanks"),
	}
	var evs []agent.Event
	rt.Run(context.Background(), agent.Turn{SessionID: "s1", UserID: "u1", AgentID: "a1", Input: "go"}, func(e agent.Event) { evs = append(evs, e) })
	if find(evs, agent.RequireUserConfirm) == nil || find(evs, agent.SubagentExposed) != nil {
		t.Fatalf("no confirmation first: %v", types(evs))
	}
	evs = nil
	rt.Run(context.Background(), agent.Turn{SessionID: "s1", UserID: "u1", AgentID: "a1", Input: "yes"}, func(e agent.Event) { evs = append(evs, e) })
	checkEnvelope(t, evs)
	if _, names := tb.called(); len(names) != 1 || names[0] != "computer_screenshot" || ended != 1 {
		t.Fatalf("helper after confirmation: %v ended %d (%v)", names, ended, types(evs))
	}
	if find(evs, agent.AgentResult).Result.Content[0].Text != "thanks" {
		t.Fatalf("result %+v", find(evs, agent.AgentResult).Result)
	}
}
