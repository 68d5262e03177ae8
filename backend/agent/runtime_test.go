package agent_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"cubicle/backend/agent"
	"cubicle/backend/agent/openai"
	"cubicle/backend/fault"
)

// scripted is an OpenAI-compatible chat-completions server that answers each request with
// the next scripted reply and keeps the requests it got.
type scripted struct {
	t       *testing.T
	mu      sync.Mutex
	replies [][]string // SSE data payloads per request
	reqs    []map[string]any
}

func (s *scripted) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path != "/v1/chat/completions" || r.Header.Get("Authorization") != "Bearer test-key" {
		http.Error(w, "bad path or key", 401)
		return
	}
	var body map[string]any
	raw, _ := io.ReadAll(r.Body)
	if err := json.Unmarshal(raw, &body); err != nil {
		http.Error(w, err.Error(), 400)
		return
	}
	s.mu.Lock()
	s.reqs = append(s.reqs, body)
	if len(s.replies) == 0 {
		s.mu.Unlock()
		http.Error(w, "script exhausted", 500)
		return
	}
	reply := s.replies[0]
	s.replies = s.replies[1:]
	s.mu.Unlock()
	w.Header().Set("Content-Type", "text/event-stream")
	for _, d := range reply {
		fmt.Fprintf(w, "data: %s\n\n", d)
		w.(http.Flusher).Flush()
	}
	fmt.Fprint(w, "data: [DONE]\n\n")
}

func (s *scripted) request(i int) map[string]any {
	s.mu.Lock()
	defer s.mu.Unlock()
	if i >= len(s.reqs) {
		s.t.Fatalf("model got %d requests, want more than %d", len(s.reqs), i)
	}
	return s.reqs[i]
}

func textReply(parts ...string) []string {
	var out []string
	for _, p := range parts {
		b, _ := json.Marshal(p)
		out = append(out, `{"choices":[{"delta":{"content":`+string(b)+`}}]}`)
	}
	return append(out, `{"choices":[{"delta":{},"finish_reason":"stop"}],"usage":{"prompt_tokens":11,"completion_tokens":7,"total_tokens":18}}`)
}

func toolReply(id, name, args string) []string {
	half := len(args) / 2
	a1, _ := json.Marshal(args[:half])
	a2, _ := json.Marshal(args[half:])
	return []string{
		`{"choices":[{"delta":{"reasoning_content":"I should use a tool."}}]}`,
		`{"choices":[{"delta":{"tool_calls":[{"index":0,"id":"` + id + `","type":"function","function":{"name":"` + name + `","arguments":""}}]}}]}`,
		`{"choices":[{"delta":{"tool_calls":[{"index":0,"function":{"arguments":` + string(a1) + `}}]}}]}`,
		`{"choices":[{"delta":{"tool_calls":[{"index":0,"function":{"arguments":` + string(a2) + `}}]}}]}`,
		`{"choices":[{"delta":{},"finish_reason":"tool_calls"}],"usage":{"prompt_tokens":20,"completion_tokens":5,"total_tokens":25}}`,
	}
}

// tools is a Toolbox whose tools echo their input; "slow" blocks until cancelled and
// "shot" returns an image.
type tools struct {
	mu    sync.Mutex
	calls []agent.ToolCall
}

func (tb *tools) Tools(ctx context.Context, t agent.TurnInfo) []agent.ToolSpec {
	return []agent.ToolSpec{{Name: "echo", Description: "echo", Parameters: json.RawMessage(`{"type":"object"}`)}}
}

func (tb *tools) Call(ctx context.Context, t agent.TurnInfo, c agent.ToolCall, out *agent.ToolOutput) string {
	tb.mu.Lock()
	tb.calls = append(tb.calls, c)
	tb.mu.Unlock()
	switch c.Name {
	case "slow":
		<-ctx.Done()
		return agent.StateInterrupted
	case "shot":
		out.Image("image/png", "iVBORw0KGgo=")
		return agent.StateSuccess
	}
	b, _ := json.Marshal(c.Input)
	out.Text("ran " + c.Name + " " + string(b))
	return agent.StateSuccess
}

func (tb *tools) called() []agent.ToolCall {
	tb.mu.Lock()
	defer tb.mu.Unlock()
	return append([]agent.ToolCall(nil), tb.calls...)
}

// askGuard asks about every "rm" call and allows the rest; it records the answers people give.
type askGuard struct {
	rules     []string
	confirmed []string // "<user> <confirmed> <tool> <reason>"
	denyRm    bool     // the settings changed: rm is now denied
}

func (g *askGuard) Confirmed(t agent.TurnInfo, r agent.ConfirmResult, reason string) {
	g.confirmed = append(g.confirmed, fmt.Sprintf("%s %v %s %s", t.UserID, r.Confirmed, r.ToolCall.Name, reason))
}

func (g *askGuard) Check(t agent.TurnInfo, c agent.ToolCall) (agent.Decision, string) {
	if c.Name == "denied" {
		return agent.Deny, "denied tool"
	}
	if cmd, _ := c.Input["command"].(string); g.denyRm && strings.Contains(cmd, "rm ") {
		return agent.Deny, "rm is denied now"
	}
	if cmd, _ := c.Input["command"].(string); strings.Contains(cmd, "rm ") {
		return agent.Ask, "dangerous rm"
	}
	return agent.Allow, ""
}

func (g *askGuard) AllowRule(t agent.TurnInfo, c agent.ToolCall, rule string) error {
	g.rules = append(g.rules, rule)
	return nil
}

type harness struct {
	t      *testing.T
	model  *scripted
	tools  *tools
	guard  *askGuard
	rt     *agent.Runtime
	server *httptest.Server
}

func newHarness(t *testing.T, withModel bool, maxIters int) *harness {
	h := &harness{t: t, model: &scripted{t: t}, tools: &tools{}, guard: &askGuard{}}
	h.server = httptest.NewServer(h.model)
	t.Cleanup(h.server.Close)
	var resolve agent.ModelResolver = func(ctx context.Context, agentID string, chat *agent.ChatModel) (agent.Model, error) {
		if !withModel {
			return nil, agent.ErrNoModel
		}
		return openai.New(openai.Config{BaseURL: h.server.URL + "/v1", APIKey: "test-key", Model: "scripted", AllowPrivate: true})
	}
	rt, err := agent.New(agent.Config{Tools: h.tools, Models: resolve, Guard: h.guard, MaxIters: maxIters})
	if err != nil {
		t.Fatal(err)
	}
	h.rt = rt
	return h
}

func (h *harness) run(session, input string) []agent.Event {
	h.t.Helper()
	var evs []agent.Event
	err := h.rt.Run(context.Background(), agent.Turn{SessionID: session, UserID: "u1", AgentID: "a1", AgentName: "Ada", Input: input}, func(e agent.Event) {
		evs = append(evs, e)
	})
	if err != nil {
		h.t.Fatal(err)
	}
	checkEnvelope(h.t, evs)
	return evs
}

var hex32 = regexp.MustCompile(`^[0-9a-f]{32}$`)

// checkEnvelope checks what every stream promises: ids, UTC times, start and end.
func checkEnvelope(t *testing.T, evs []agent.Event) {
	t.Helper()
	if len(evs) < 3 || evs[0].Type != agent.AgentStart || evs[len(evs)-1].Type != agent.AgentEnd || evs[len(evs)-2].Type != agent.AgentResult {
		t.Fatalf("stream shape: %v", types(evs))
	}
	for _, e := range evs {
		if !hex32.MatchString(e.ID) || e.CreatedAt.Location() != time.UTC || e.CreatedAt.IsZero() {
			t.Fatalf("bad envelope %+v", e)
		}
	}
}

func types(evs []agent.Event) []string {
	var out []string
	for _, e := range evs {
		out = append(out, e.Type)
	}
	return out
}

func find(evs []agent.Event, typ string) *agent.Event {
	for i := range evs {
		if evs[i].Type == typ {
			return &evs[i]
		}
	}
	return nil
}

func TestTextTurn(t *testing.T) {
	h := newHarness(t, true, 0)
	h.model.replies = [][]string{textReply("Hel", "lo!")}
	evs := h.run("s1", "hi")
	want := []string{"AGENT_START", "MODEL_CALL_START", "TEXT_BLOCK_START", "TEXT_BLOCK_DELTA", "TEXT_BLOCK_DELTA", "TEXT_BLOCK_END", "MODEL_CALL_END", "AGENT_RESULT", "AGENT_END"}
	if got := types(evs); strings.Join(got, ",") != strings.Join(want, ",") {
		t.Fatalf("events:\n got %v\nwant %v", got, want)
	}
	if u := find(evs, agent.ModelCallEnd).Usage; u.InputTokens != 11 || u.OutputTokens != 7 || u.TotalTokens != 18 || u.Time <= 0 {
		t.Fatalf("usage = %+v", u)
	}
	res := find(evs, agent.AgentResult).Result
	if res.Role != "assistant" || res.Name != "Ada" || res.Content[0].Text != "Hello!" {
		t.Fatalf("result = %+v", res)
	}
	if s := find(evs, agent.AgentStart); s.SessionID != "s1" || s.ReplyID != res.ID {
		t.Fatalf("start = %+v", s)
	}
	// The wire format: one JSON object per event with the SPEC's field names.
	raw, _ := json.Marshal(evs[0])
	for _, f := range []string{`"type":"AGENT_START"`, `"sessionId":"s1"`, `"replyId"`, `"createdAt"`} {
		if !strings.Contains(string(raw), f) {
			t.Fatalf("%s lacks %s", raw, f)
		}
	}
	if strings.Contains(string(raw), "metadata") {
		t.Fatalf("empty metadata not omitted: %s", raw)
	}
}

func TestToolLoopAndContext(t *testing.T) {
	h := newHarness(t, true, 0)
	h.model.replies = [][]string{
		toolReply("call_1", "echo", `{"msg":"你好"}`),
		textReply("done"),
		textReply("second turn"),
	}
	evs := h.run("s1", "use the tool")
	got := types(evs)
	for _, w := range []string{"THINKING_BLOCK_START", "THINKING_BLOCK_DELTA", "THINKING_BLOCK_END", "TOOL_CALL_START", "TOOL_CALL_DELTA", "TOOL_CALL_END", "TOOL_RESULT_START", "TOOL_RESULT_TEXT_DELTA", "TOOL_RESULT_END"} {
		if find(evs, w) == nil {
			t.Fatalf("no %s in %v", w, got)
		}
	}
	if calls := h.tools.called(); len(calls) != 1 || calls[0].Input["msg"] != "你好" {
		t.Fatalf("tool calls = %+v", calls)
	}
	if e := find(evs, agent.ToolResultEnd); e.State != agent.StateSuccess || e.ToolCallID != "call_1" {
		t.Fatalf("result end = %+v", e)
	}
	// The second model call carries the tool result.
	msgs := h.model.request(1)["messages"].([]any)
	last := msgs[len(msgs)-1].(map[string]any)
	if last["role"] != "tool" || last["tool_call_id"] != "call_1" || !strings.Contains(last["content"].(string), "你好") {
		t.Fatalf("tool message = %v", last)
	}
	// A second turn in the same session keeps the context; another session does not.
	h.run("s1", "again")
	if n := len(h.model.request(2)["messages"].([]any)); n != 5 {
		t.Fatalf("second turn sent %d messages, want 5 (user, assistant+call, tool, assistant, user)", n)
	}
}

func TestScreenshotGoesToModelAsImage(t *testing.T) {
	h := newHarness(t, true, 0)
	h.model.replies = [][]string{toolReply("c1", "shot", `{}`), textReply("I see it")}
	evs := h.run("s1", "look")
	if d := find(evs, agent.ToolResultDataDelta); d == nil || d.Data.Type != "image" || d.Data.MediaType != "image/png" {
		t.Fatalf("data delta = %+v", d)
	}
	raw, _ := json.Marshal(h.model.request(1)["messages"])
	if !strings.Contains(string(raw), `"image_url":{"url":"data:image/png;base64,iVBORw0KGgo="}`) {
		t.Fatalf("image not sent to the model: %s", raw)
	}
}

func TestConfirmationPausesAndResumes(t *testing.T) {
	h := newHarness(t, true, 0)
	h.model.replies = [][]string{toolReply("c1", "echo", `{"command":"rm -rf build"}`), textReply("cleaned")}
	evs := h.run("s1", "clean up")
	req := find(evs, agent.RequireUserConfirm)
	if req == nil || len(req.ToolCalls) != 1 || req.ToolCalls[0].ID != "c1" {
		t.Fatalf("no confirmation request: %v", types(evs))
	}
	if req.Reason != "echo: dangerous rm" {
		t.Errorf("confirmation request's reason %q, want the guard's, per call (the card shows it)", req.Reason)
	}
	if len(h.tools.called()) != 0 {
		t.Fatal("tool ran before confirmation")
	}
	// Resume with a structured answer that adds an allow rule.
	var evs2 []agent.Event
	err := h.rt.Run(context.Background(), agent.Turn{SessionID: "s1", UserID: "u1", ConfirmResults: []agent.ConfirmResult{
		{Confirmed: true, ToolCall: agent.ToolCall{ID: "c1"}, Rules: []string{"rm -rf build"}},
	}}, func(e agent.Event) { evs2 = append(evs2, e) })
	if err != nil {
		t.Fatal(err)
	}
	checkEnvelope(t, evs2)
	if r := find(evs2, agent.UserConfirmResult); r == nil || !r.ConfirmResults[0].Confirmed || r.ConfirmResults[0].ToolCall.Name != "echo" {
		t.Fatalf("confirm result: %v", types(evs2))
	}
	if len(h.tools.called()) != 1 || len(h.guard.rules) != 1 {
		t.Fatalf("after confirm: calls %v rules %v", h.tools.called(), h.guard.rules)
	}
	if find(evs2, agent.AgentResult).Result.Content[0].Text != "cleaned" {
		t.Fatalf("model did not continue: %v", types(evs2))
	}
	// The answer is on record: who, the call and why it was asked.
	if len(h.guard.confirmed) != 1 || h.guard.confirmed[0] != "u1 true echo dangerous rm" {
		t.Fatalf("confirmations recorded: %q", h.guard.confirmed)
	}
}

// A call confirmed after the settings changed to deny it does not run (issue 15: what is
// denied stays denied whatever the answer), and the answer is still recorded.
func TestConfirmedCallDeniedSinceIsRefused(t *testing.T) {
	h := newHarness(t, true, 0)
	h.model.replies = [][]string{toolReply("c1", "echo", `{"command":"rm -rf build"}`), textReply("ok")}
	h.run("s1", "clean up")
	h.guard.denyRm = true
	evs := h.run("s1", "yes")
	if len(h.tools.called()) != 0 {
		t.Fatalf("a call denied since ran: %v", h.tools.called())
	}
	if e := find(evs, agent.ToolResultEnd); e == nil || e.State != agent.StateDenied {
		t.Fatalf("state: %v", types(evs))
	}
	if len(h.guard.confirmed) != 1 || !strings.HasPrefix(h.guard.confirmed[0], "u1 true echo rm is denied now") {
		t.Fatalf("confirmations recorded: %q", h.guard.confirmed)
	}
}

func TestDeclineAndDeny(t *testing.T) {
	h := newHarness(t, true, 0)
	h.model.replies = [][]string{toolReply("c1", "echo", `{"command":"rm -rf /"}`), textReply("ok, not doing it")}
	h.run("s1", "wipe")
	evs := h.run("s1", "no")
	if find(evs, agent.AllToolsDenied) == nil || len(h.tools.called()) != 0 {
		t.Fatalf("decline: %v calls=%v", types(evs), h.tools.called())
	}
	if e := find(evs, agent.ToolResultEnd); e.State != agent.StateDenied {
		t.Fatalf("state = %q", e.State)
	}
	h.model.replies = [][]string{toolReply("c2", "denied", `{}`), textReply("fine")}
	evs = h.run("s2", "x")
	if find(evs, agent.AllToolsDenied) == nil || len(h.tools.called()) != 0 {
		t.Fatalf("deny: %v", types(evs))
	}
}

func TestMaxIterations(t *testing.T) {
	h := newHarness(t, true, 2)
	h.model.replies = [][]string{toolReply("c1", "echo", `{}`), toolReply("c2", "echo", `{}`), toolReply("c3", "echo", `{}`)}
	evs := h.run("s1", "loop")
	e := find(evs, agent.ExceedMaxIters)
	if e == nil || e.MaxIters != 2 || e.CurrentIter != 2 {
		t.Fatalf("exceed: %+v in %v", e, types(evs))
	}
}

func TestStop(t *testing.T) {
	h := newHarness(t, true, 0)
	h.model.replies = [][]string{toolReply("c1", "slow", `{}`), textReply("resumed")}
	done := make(chan []agent.Event)
	go func() {
		var evs []agent.Event
		h.rt.Run(context.Background(), agent.Turn{SessionID: "s1", UserID: "u1", Input: "go"}, func(e agent.Event) { evs = append(evs, e) })
		done <- evs
	}()
	deadline := time.Now().Add(10 * time.Second)
	for len(h.tools.called()) == 0 {
		if time.Now().After(deadline) {
			t.Fatal("tool never started")
		}
		time.Sleep(5 * time.Millisecond)
	}
	if err := h.rt.Run(context.Background(), agent.Turn{SessionID: "s1", UserID: "u1", Input: "x"}, func(agent.Event) {}); !errors.Is(err, fault.ErrConflict) {
		t.Fatalf("concurrent turn: %v", err)
	}
	if !h.rt.Stop("u1", "s1") {
		t.Fatal("Stop found no running turn")
	}
	evs := <-done
	checkEnvelope(t, evs)
	if find(evs, agent.RequestStop) == nil || find(evs, agent.ToolResultEnd).State != agent.StateInterrupted {
		t.Fatalf("stop: %v", types(evs))
	}
	if evs := h.run("s1", "continue"); find(evs, agent.AgentResult).Result.Content[0].Text != "resumed" {
		t.Fatalf("resume: %v", types(evs))
	}
}

func TestOperatorMode(t *testing.T) {
	h := newHarness(t, false, 0)
	evs := h.run("s1", "/shell echo hi")
	if calls := h.tools.called(); len(calls) != 1 || calls[0].Name != "computer_shell" || calls[0].Input["command"] != "echo hi" {
		t.Fatalf("calls = %+v", calls)
	}
	for _, w := range []string{"TOOL_CALL_START", "TOOL_CALL_END", "TOOL_RESULT_START", "TOOL_RESULT_END", "TEXT_BLOCK_DELTA"} {
		if find(evs, w) == nil {
			t.Fatalf("no %s: %v", w, types(evs))
		}
	}
	evs = h.run("s1", "hello there")
	if txt := find(evs, agent.AgentResult).Result.Content[0].Text; !strings.Contains(txt, "/screenshot") {
		t.Fatalf("plain text in operator mode: %q", txt)
	}
	// Dangerous operator commands go through the guard too.
	evs = h.run("s1", "/shell rm -rf /tmp/x")
	if find(evs, agent.RequireUserConfirm) == nil || len(h.tools.called()) != 1 {
		t.Fatalf("guard skipped in operator mode: %v", types(evs))
	}
	evs = h.run("s1", "yes")
	if len(h.tools.called()) != 2 || find(evs, agent.UserConfirmResult) == nil {
		t.Fatalf("confirm in operator mode: %v", types(evs))
	}
}

func TestParseCommand(t *testing.T) {
	tests := []struct {
		in   string
		name string
		ok   bool
	}{
		{"/screenshot", "computer_screenshot", true},
		{"/type 你好 world", "computer_type", true},
		{"/key ctrl+l", "computer_key", true},
		{"/click 100 200", "computer_click", true},
		{"/click 100", "", false},
		{"/click a b", "", false},
		{"/scroll 1 2 -3", "computer_scroll", true},
		{"/write notes.txt hello", "computer_write_file", true},
		{"/write", "", false},
		{"/shell", "", false},
		{"/bogus", "", false},
		{"plain", "", false},
	}
	for _, tt := range tests {
		c, _, err := agent.ParseCommand(tt.in)
		if (err == nil) != tt.ok || c.Name != tt.name {
			t.Errorf("ParseCommand(%q) = %q, %v", tt.in, c.Name, err)
		}
	}
}

func TestValidation(t *testing.T) {
	h := newHarness(t, false, 0)
	for _, tr := range []agent.Turn{{UserID: "u", Input: "x"}, {SessionID: "s", Input: "x"}, {SessionID: "s", UserID: "u", Input: "  "}} {
		if err := h.rt.Run(context.Background(), tr, func(agent.Event) { t.Fatal("event before validation") }); !errors.Is(err, fault.ErrInvalid) {
			t.Fatalf("%+v: %v", tr, err)
		}
	}
}

func TestModelErrorsAreReported(t *testing.T) {
	h := newHarness(t, true, 0) // empty script: the server answers 500
	evs := h.run("s1", "hi")
	res := find(evs, agent.AgentResult).Result
	if res.Metadata["errorCode"] != "unavailable" || !strings.Contains(res.Content[0].Text, "HTTP 500") {
		t.Fatalf("result = %+v", res)
	}
}
