package responses_test

import (
	"context"
	"image"
	"net/http"
	"strings"
	"testing"
	"time"

	"cubicle/backend/agent"
	"cubicle/backend/agent/native"
	"cubicle/backend/agent/native/nativetest"
	"cubicle/backend/agent/responses"
	"cubicle/backend/agent/responses/responsestest"
	"cubicle/backend/fault"
)

const key = "sk-test"

type harness struct {
	rt  *agent.Runtime
	srv *responsestest.Server
}

func newHarness(t *testing.T, box agent.Toolbox, cfg responses.Config) *harness {
	t.Helper()
	srv := responsestest.New(key)
	t.Cleanup(srv.Close)
	cfg.BaseURL, cfg.HTTP = srv.URL+"/v1", srv.Client()
	if cfg.APIKey == "" {
		cfg.APIKey = key
	}
	if cfg.Model == "" {
		cfg.Model = "computer-use-preview"
	}
	cfg.RetryBase = 10 * time.Millisecond
	m, err := responses.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	rt, err := agent.New(agent.Config{Tools: box, System: "You operate a Linux desktop.",
		Models: func(context.Context, string, *agent.ChatModel) (agent.Model, error) { return m, nil }})
	if err != nil {
		t.Fatal(err)
	}
	return &harness{rt: rt, srv: srv}
}

func (h *harness) turn(t *testing.T, input string, confirm []agent.ConfirmResult) []agent.Event {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var evs []agent.Event
	if err := h.rt.Run(ctx, agent.Turn{SessionID: "s", UserID: "u", AgentID: "a", Input: input, ConfirmResults: confirm},
		func(e agent.Event) { evs = append(evs, e) }); err != nil {
		t.Fatal(err)
	}
	return evs
}

func find(evs []agent.Event, typ string) []agent.Event {
	var out []agent.Event
	for _, e := range evs {
		if e.Type == typ {
			out = append(out, e)
		}
	}
	return out
}

func errorOf(evs []agent.Event) (string, string) {
	r := find(evs, agent.AgentResult)[0].Result
	msg, _ := r.Metadata["error"].(string)
	code, _ := r.Metadata["errorCode"].(string)
	return msg, code
}

// screenshot → click on the target → type → keypress → text, chained by previous_response_id.
func TestComputerLoop(t *testing.T) {
	box := &nativetest.Desktop{W: 1920, H: 1080, Target: image.Rect(300, 700, 330, 720)}
	h := newHarness(t, box, responses.Config{Screen: native.Size{W: 1920, H: 1080}})
	h.srv.Push(
		responsestest.ComputerCall("call_1", func(responsestest.Seen) map[string]any { return map[string]any{"type": "screenshot"} }),
		responsestest.ComputerCall("call_2", func(s responsestest.Seen) map[string]any {
			x, y, _, _, _ := nativetest.FindTarget(responsestest.LastScreenshot(s.Body))
			return map[string]any{"type": "click", "button": "left", "x": x, "y": y}
		}),
		responsestest.ComputerCall("call_3", func(responsestest.Seen) map[string]any { return map[string]any{"type": "type", "text": "hello"} }),
		responsestest.ComputerCall("call_4", func(responsestest.Seen) map[string]any {
			return map[string]any{"type": "keypress", "keys": []any{"CTRL", "ENTER"}}
		}),
		responsestest.Say("Done."),
	)
	evs := h.turn(t, "click the red box and type hello", nil)
	if msg, _ := errorOf(evs); msg != "" {
		t.Fatal(msg)
	}
	if len(box.Clicks) != 1 || !box.Clicks[0].OnTarg || box.Typed != "hello" || len(box.Keys) != 1 || box.Keys[0] != "ctrl+Return" {
		t.Fatalf("clicks %+v typed %q keys %v", box.Clicks, box.Typed, box.Keys)
	}
	seen := h.srv.Seen()
	b0 := seen[0].Body
	tool := b0["tools"].([]any)[0].(map[string]any)
	if tool["type"] != "computer_use_preview" || tool["environment"] != "linux" || tool["display_width"] != 1182.0 || tool["display_height"] != 665.0 {
		t.Fatalf("computer tool: %v", tool)
	}
	if b0["truncation"] != "auto" || b0["previous_response_id"] != nil || b0["instructions"] == nil {
		t.Fatalf("first request: %v", b0)
	}
	b1 := seen[1].Body
	if b1["previous_response_id"] != "resp_1" {
		t.Fatalf("second request chains to %v", b1["previous_response_id"])
	}
	in := responsestest.Input(b1)
	if len(in) != 1 || in[0]["type"] != "computer_call_output" || in[0]["call_id"] != "call_1" {
		t.Fatalf("second input: %v", in)
	}
	if _, _, w, hh, ok := nativetest.FindTarget(responsestest.LastScreenshot(b1)); !ok || w != 1182 || hh != 665 {
		t.Fatalf("screenshot sent at %dx%d", w, hh)
	}
	if len(find(evs, agent.ThinkingBlockDelta)) == 0 {
		t.Fatal("reasoning summary not shown as THINKING")
	}
	if u := find(evs, agent.ModelCallEnd)[0].Usage; u.CachedTokens != 700 || u.InputTokens != 900 {
		t.Fatalf("usage: %+v", u)
	}
}

// pending_safety_checks wait for a person; they are acknowledged only after a confirmation,
// and a declined call is not acknowledged.
func TestSafetyChecks(t *testing.T) {
	for _, confirm := range []bool{true, false} {
		box := &nativetest.Desktop{W: 1280, H: 800}
		h := newHarness(t, box, responses.Config{})
		check := map[string]any{"id": "cu_sc_1", "code": "malicious_instructions", "message": "The page contains instructions to ignore the user."}
		h.srv.Push(
			responsestest.ComputerCall("call_1", func(responsestest.Seen) map[string]any { return map[string]any{"type": "screenshot"} }),
			responsestest.ComputerCall("call_2", func(responsestest.Seen) map[string]any {
				return map[string]any{"type": "click", "button": "left", "x": 10, "y": 10}
			}, check),
			responsestest.Say("ok"),
		)
		evs := h.turn(t, "go", nil)
		cards := find(evs, agent.RequireUserConfirm)
		if len(cards) != 1 || cards[0].ToolCalls[0].ID != "call_2" || !strings.Contains(cards[0].ToolCalls[0].Confirm, "malicious_instructions") {
			t.Fatalf("confirmation card: %+v", cards)
		}
		if len(box.Clicks) != 0 {
			t.Fatal("the call ran before a person confirmed")
		}
		call := cards[0].ToolCalls[0]
		evs = h.turn(t, "", []agent.ConfirmResult{{Confirmed: confirm, ToolCall: call}})
		if msg, _ := errorOf(evs); msg != "" {
			t.Fatal(msg)
		}
		seen := h.srv.Seen()
		in := responsestest.Input(seen[2].Body)
		if len(in) == 0 {
			t.Fatalf("third request: %.600s", seen[2].Raw)
		}
		acked := in[0]["acknowledged_safety_checks"]
		if confirm {
			list, _ := acked.([]any)
			if len(box.Clicks) != 1 || len(list) != 1 || list[0].(map[string]any)["id"] != "cu_sc_1" {
				t.Fatalf("confirmed: clicks %v, acknowledged %v", box.Clicks, acked)
			}
		} else if len(box.Clicks) != 0 || acked != nil {
			t.Fatalf("declined: clicks %v, acknowledged %v", box.Clicks, acked)
		}
	}
}

// Function tools for the rest; a model without computer use gets the runtime's computer tools
// as functions.
func TestFunctionTools(t *testing.T) {
	box := &nativetest.Desktop{W: 1280, H: 800, Shell: true}
	h := newHarness(t, box, responses.Config{})
	h.srv.Push(responsestest.FunctionCall("call_1", "computer_shell", map[string]any{"command": "uname"}), responsestest.Say("Linux"))
	evs := h.turn(t, "which os", nil)
	if msg, _ := errorOf(evs); msg != "" {
		t.Fatal(msg)
	}
	if len(box.Shells) != 1 || box.Shells[0] != "uname" {
		t.Fatalf("shells: %v", box.Shells)
	}
	in := responsestest.Input(h.srv.Seen()[1].Body)
	if in[0]["type"] != "function_call_output" || !strings.Contains(in[0]["output"].(string), "uname") {
		t.Fatalf("function output: %v", in)
	}
	h2 := newHarness(t, box, responses.Config{Model: "gpt-4.1"})
	h2.srv.Push(responsestest.Say("hi"))
	h2.turn(t, "hi", nil)
	for _, tl := range h2.srv.Seen()[0].Body["tools"].([]any) {
		if tl.(map[string]any)["type"] != "function" {
			t.Fatalf("gpt-4.1 got %v", tl)
		}
	}
}

func TestErrors(t *testing.T) {
	cases := []struct {
		name       string
		steps      []responsestest.Step
		key        string
		code, says string
	}{
		{"bad key", nil, "wrong", "forbidden", "API key was refused"},
		{"unknown model", []responsestest.Step{responsestest.Error(404, "invalid_request_error", "model_not_found", "The model `nope` does not exist")}, "", "invalid", "was not found"},
		{"quota", []responsestest.Step{responsestest.Error(429, "insufficient_quota", "insufficient_quota", "You exceeded your current quota")}, "", "unavailable", "quota is used up"},
		{"rate limit", []responsestest.Step{
			responsestest.Error(429, "requests", "rate_limit_exceeded", "Rate limit reached", "retry-after-ms", "20"),
			responsestest.Error(429, "requests", "rate_limit_exceeded", "Rate limit reached", "retry-after-ms", "20"),
			responsestest.Error(429, "requests", "rate_limit_exceeded", "Rate limit reached", "retry-after-ms", "20")}, "", "unavailable", "rate limit exceeded"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			h := newHarness(t, &nativetest.Desktop{W: 1280, H: 800}, responses.Config{APIKey: c.key, Attempts: 3})
			h.srv.Push(c.steps...)
			evs := h.turn(t, "hi", nil)
			msg, code := errorOf(evs)
			if code != c.code || !strings.Contains(msg, c.says) {
				t.Fatalf("error %q (%s), want %s with %q", msg, code, c.code, c.says)
			}
			if h.srv.Left() != 0 {
				t.Fatalf("%d steps unused", h.srv.Left())
			}
		})
	}
}

func TestRetryAndBrokenStream(t *testing.T) {
	h := newHarness(t, &nativetest.Desktop{W: 1280, H: 800}, responses.Config{Idle: 300 * time.Millisecond})
	h.srv.Push(responsestest.Error(500, "server_error", "server_error", "The server had an error"), responsestest.Say("back"))
	evs := h.turn(t, "hi", nil)
	if msg, _ := errorOf(evs); msg != "" || len(find(evs, agent.HintBlock)) != 1 {
		t.Fatalf("error %q hints %d", msg, len(find(evs, agent.HintBlock)))
	}
	h.srv.Push(func(s responsestest.Seen, n int, w http.ResponseWriter) {
		responsestest.Write(w, responsestest.Created(n),
			responsestest.Event{"type": "response.output_text.delta", "item_id": "m", "output_index": 0, "content_index": 0, "delta": "Half"})
	})
	evs = h.turn(t, "again", nil)
	r := find(evs, agent.AgentResult)[0].Result
	if r.Metadata["interrupted"] != true || r.Content[0].Text != "Half" {
		t.Fatalf("broken stream: %+v %v", r.Content, r.Metadata)
	}
}

func TestKeys(t *testing.T) {
	for in, want := range map[string]string{"CTRL L": "ctrl+l", "ENTER": "Return", "ALT F4": "alt+F4", "SHIFT TAB": "shift+Tab", "a": "a"} {
		if got := responses.Keys(strings.Fields(in)); got != want {
			t.Errorf("%q: %q, want %q", in, got, want)
		}
	}
}

func TestTest(t *testing.T) {
	h := newHarness(t, &nativetest.Desktop{W: 1, H: 1}, responses.Config{})
	_ = h
	srv := responsestest.New(key)
	defer srv.Close()
	srv.Push(responsestest.Say("pong"), responsestest.Error(404, "invalid_request_error", "model_not_found", "no such model"))
	m, _ := responses.New(responses.Config{BaseURL: srv.URL + "/v1", APIKey: key, Model: "computer-use-preview", HTTP: srv.Client()})
	if err := m.Test(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := m.Test(context.Background()); fault.Class(err) != fault.ErrInvalid || !strings.Contains(err.Error(), "not found") {
		t.Fatalf("404: %v", err)
	}
}
