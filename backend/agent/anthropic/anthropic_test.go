package anthropic_test

import (
	"context"
	"encoding/json"
	"fmt"
	"image"
	"net/http"
	"strings"
	"testing"
	"time"

	"cubicle/backend/agent"
	"cubicle/backend/agent/anthropic"
	"cubicle/backend/agent/anthropic/anthropictest"
	"cubicle/backend/agent/native"
	"cubicle/backend/agent/native/nativetest"
	"cubicle/backend/fault"
)

const key = "sk-ant-test"

// run drives one turn of the real runtime with the adapter against srv.
func run(t *testing.T, srv *anthropictest.Server, box agent.Toolbox, cfg anthropic.Config, guard agent.Guard, input string) []agent.Event {
	t.Helper()
	if cfg.BaseURL == "" {
		cfg.BaseURL = srv.URL
	}
	if cfg.APIKey == "" {
		cfg.APIKey = key
	}
	if cfg.Model == "" {
		cfg.Model = "claude-sonnet-4-5"
	}
	cfg.HTTP = srv.Client()
	if cfg.RetryBase == 0 {
		cfg.RetryBase = 10 * time.Millisecond
	}
	m, err := anthropic.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	rt, err := agent.New(agent.Config{Tools: box, Guard: guard, System: "You operate a Linux desktop.",
		Models: func(context.Context, string, *agent.ChatModel) (agent.Model, error) { return m, nil }})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var evs []agent.Event
	if err := rt.Run(ctx, agent.Turn{SessionID: "s", UserID: "u", AgentID: "a", Input: input}, func(e agent.Event) { evs = append(evs, e) }); err != nil {
		t.Fatal(err)
	}
	if ctx.Err() != nil {
		t.Fatal("the turn did not end in time")
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

func result(t *testing.T, evs []agent.Event) *agent.Msg {
	t.Helper()
	r := find(evs, agent.AgentResult)
	if len(r) != 1 {
		t.Fatalf("AGENT_RESULT events: %d", len(r))
	}
	return r[0].Result
}

func states(evs []agent.Event) map[string]string {
	out := map[string]string{}
	for _, e := range find(evs, agent.ToolResultEnd) {
		out[e.ToolCallID] = e.State
	}
	return out
}

// The whole loop: screenshot → click on the target as the model sees it → type → key → text;
// thinking, caching, scaling, the beta header and the tool_result shapes on the wire.
func TestComputerLoop(t *testing.T) {
	srv := anthropictest.New(key)
	defer srv.Close()
	box := &nativetest.Desktop{W: 1920, H: 1080, Target: image.Rect(1500, 900, 1540, 930)}
	srv.Push(
		func(s anthropictest.Seen, w http.ResponseWriter) {
			evs := []anthropictest.Event{anthropictest.Start(anthropictest.Usage{Input: 1200, CacheRead: 1000, CacheWrite: 100})}
			evs = append(evs, anthropictest.ThinkingBlock(0, "I should look first.", "sig-1")...)
			evs = append(evs, anthropictest.ToolUse(1, "toolu_1", "computer", map[string]any{"action": "screenshot"})...)
			anthropictest.Write(w, append(evs, anthropictest.Stop("tool_use", 30)...)...)
		},
		anthropictest.Call("toolu_2", "computer", func(s anthropictest.Seen) any {
			imgs := anthropictest.Images(s.Body)
			x, y, _, _, ok := nativetest.FindTarget(imgs[len(imgs)-1])
			if !ok {
				return map[string]any{"action": "screenshot"}
			}
			return map[string]any{"action": "left_click", "coordinate": []int{x, y}}
		}),
		anthropictest.Call("toolu_3", "computer", anthropictest.Fixed(map[string]any{"action": "type", "text": "hello"})),
		anthropictest.Call("toolu_4", "computer", anthropictest.Fixed(map[string]any{"action": "key", "text": "Return"})),
		anthropictest.Say("Typed it."),
	)
	evs := run(t, srv, box, anthropic.Config{Screen: native.Size{W: 1920, H: 1080}}, nil, "click the red box and type hello")
	if r := result(t, evs); r.Metadata["error"] != nil {
		t.Fatalf("turn failed: %v", r.Metadata["error"])
	}
	if len(box.Clicks) != 1 || !box.Clicks[0].OnTarg {
		t.Fatalf("clicks on the real screen: %+v (target %v)", box.Clicks, box.Target)
	}
	if box.Typed != "hello" || len(box.Keys) != 1 || box.Keys[0] != "Return" {
		t.Fatalf("typed %q keys %v", box.Typed, box.Keys)
	}
	seen := srv.Seen()
	if len(seen) != 5 {
		t.Fatalf("requests: %d", len(seen))
	}
	h := seen[0].Header
	if h.Get("anthropic-version") == "" || !strings.Contains(h.Get("anthropic-beta"), "computer-use-2025-01-24") || h.Get("x-api-key") != key {
		t.Fatalf("headers: %v", h)
	}
	tools := anthropictest.Tools(seen[0].Body)
	if tools[0]["type"] != "computer_20250124" || tools[0]["display_width_px"] != 1366.0 || tools[0]["display_height_px"] != 768.0 {
		t.Fatalf("computer tool: %v", tools[0])
	}
	for _, tl := range tools {
		if n, _ := tl["name"].(string); strings.HasPrefix(n, "computer_") {
			t.Fatalf("a runtime computer tool is offered next to the native one: %v", n)
		}
	}
	if tools[len(tools)-1]["cache_control"] == nil {
		t.Fatal("no cache breakpoint on the tools")
	}
	if sys := seen[0].Body["system"].([]any)[0].(map[string]any); sys["cache_control"] == nil {
		t.Fatal("no cache breakpoint on the system prompt")
	}
	if th := seen[0].Body["thinking"].(map[string]any); th["type"] != "enabled" {
		t.Fatalf("thinking: %v", th)
	}
	// The second request: the screenshot scaled to 1366x768, the signed thinking and the
	// native tool_use sent back, a breakpoint on the newest turn.
	msgs := seen[1].Body["messages"].([]any)
	asst := msgs[1].(map[string]any)["content"].([]any)
	if th := asst[0].(map[string]any); th["type"] != "thinking" || th["signature"] != "sig-1" {
		t.Fatalf("thinking not sent back: %v", th)
	}
	if tu := asst[1].(map[string]any); tu["name"] != "computer" || tu["input"].(map[string]any)["action"] != "screenshot" {
		t.Fatalf("tool_use not native: %v", tu)
	}
	last := msgs[len(msgs)-1].(map[string]any)["content"].([]any)
	tr := last[0].(map[string]any)
	if tr["type"] != "tool_result" || tr["tool_use_id"] != "toolu_1" || tr["cache_control"] == nil {
		t.Fatalf("tool_result: %v", tr)
	}
	imgs := anthropictest.Images(seen[1].Body)
	if _, _, w, hh, ok := nativetest.FindTarget(imgs[0]); !ok || w != 1366 || hh != 768 {
		t.Fatalf("screenshot sent at %dx%d (target found %v)", w, hh, ok)
	}
	if !strings.Contains(string(seen[1].Raw), "Screenshot 1366x768") {
		t.Fatal("the screenshot's caption still names the screen's size")
	}
	// Events: thinking, usage with cache reads.
	if len(find(evs, agent.ThinkingBlockDelta)) == 0 {
		t.Fatal("no THINKING events")
	}
	end := find(evs, agent.ModelCallEnd)[0]
	if end.Usage.CachedTokens != 1000 || end.Usage.InputTokens != 2300 || end.Usage.OutputTokens != 30 {
		t.Fatalf("usage: %+v", end.Usage)
	}
}

// The scaling round trip for three screen sizes: the model clicks at its coordinates of the
// target it sees; the pixel under the real pointer is the target.
func TestScalingRoundTrip(t *testing.T) {
	for _, sz := range []struct {
		w, h   int
		mw, mh int
	}{{1280, 800, 1280, 800}, {1920, 1080, 1366, 768}, {2560, 1600, 1280, 800}, {1024, 768, 1024, 768}, {3000, 2000, 1313, 875}} {
		srv := anthropictest.New(key)
		box := &nativetest.Desktop{W: sz.w, H: sz.h, Target: image.Rect(sz.w-37, sz.h/3, sz.w-25, sz.h/3+9)}
		var declared [2]float64
		srv.Push(anthropictest.Call("t1", "computer", anthropictest.Fixed(map[string]any{"action": "screenshot"})),
			anthropictest.Call("t2", "computer", func(s anthropictest.Seen) any {
				tl := anthropictest.Tools(s.Body)[0]
				declared = [2]float64{tl["display_width_px"].(float64), tl["display_height_px"].(float64)}
				imgs := anthropictest.Images(s.Body)
				x, y, _, _, _ := nativetest.FindTarget(imgs[len(imgs)-1])
				return map[string]any{"action": "left_click", "coordinate": []int{x, y}}
			}), anthropictest.Say("ok"))
		run(t, srv, box, anthropic.Config{Screen: native.Size{W: sz.w, H: sz.h}}, nil, "click")
		srv.Close()
		if declared != [2]float64{float64(sz.mw), float64(sz.mh)} {
			t.Errorf("%dx%d: declared %v, want %dx%d", sz.w, sz.h, declared, sz.mw, sz.mh)
		}
		if len(box.Clicks) != 1 || !box.Clicks[0].OnTarg {
			t.Errorf("%dx%d: clicks %+v, target %v", sz.w, sz.h, box.Clicks, box.Target)
		}
	}
}

// bash and the text editor run as the desktop's shell and file tools, through the guard.
func TestBashAndEditor(t *testing.T) {
	srv := anthropictest.New(key)
	defer srv.Close()
	box := &nativetest.Desktop{W: 1280, H: 800, Shell: true}
	srv.Push(
		anthropictest.Call("t1", "bash", anthropictest.Fixed(map[string]any{"command": "ls -la"})),
		anthropictest.Call("t2", "str_replace_based_edit_tool", anthropictest.Fixed(map[string]any{"command": "create", "path": "a.txt", "file_text": "hi"})),
		anthropictest.Call("t3", "str_replace_based_edit_tool", anthropictest.Fixed(map[string]any{"command": "view", "path": "a.txt"})),
		anthropictest.Call("t4", "str_replace_based_edit_tool", anthropictest.Fixed(map[string]any{"command": "str_replace", "path": "a.txt", "old_str": "hi", "new_str": "ho"})),
		anthropictest.Call("t6", "str_replace_based_edit_tool", anthropictest.Fixed(map[string]any{"command": "insert", "path": "a.txt", "insert_line": 1, "insert_text": "second"})),
		anthropictest.Call("t7", "str_replace_based_edit_tool", anthropictest.Fixed(map[string]any{"command": "undo_edit", "path": "a.txt"})),
		anthropictest.Call("t5", "bash", anthropictest.Fixed(map[string]any{"command": "rm -rf /"})),
		anthropictest.Say("done"),
	)
	evs := run(t, srv, box, anthropic.Config{}, denyRm{}, "files")
	st := states(evs)
	if st["t1"] != agent.StateSuccess || st["t2"] != agent.StateSuccess || st["t3"] != agent.StateSuccess || st["t4"] != agent.StateSuccess ||
		st["t6"] != agent.StateSuccess || st["t7"] != agent.StateError || st["t5"] != agent.StateDenied {
		t.Fatalf("states: %v", st)
	}
	// str_replace and insert are edits in place of the desktop's write_file tool
	if len(box.Edits) != 2 || box.Edits[0]["old_str"] != "hi" || box.Edits[0]["new_str"] != "ho" || box.Edits[0]["path"] != "a.txt" ||
		fmt.Sprint(box.Edits[1]["insert_line"]) != "1" || box.Edits[1]["text"] != "second" {
		t.Fatalf("edits: %v", box.Edits)
	}
	if len(box.Shells) != 1 || box.Shells[0] != "ls -la" || box.Files["a.txt"] != "hi" {
		t.Fatalf("shells %v files %v", box.Shells, box.Files)
	}
	names := anthropictest.Tools(srv.Seen()[0].Body)
	if names[1]["type"] != "bash_20250124" || names[2]["type"] != "text_editor_20250728" || names[2]["name"] != "str_replace_based_edit_tool" {
		t.Fatalf("tools: %v", names)
	}
	// The refusal reaches the model as an is_error tool_result.
	body := srv.Seen()[7].Raw
	if !strings.Contains(string(body), `"is_error":true`) || !strings.Contains(string(body), "Refused by the safety policy") {
		t.Fatalf("last request: %s", body)
	}
}

type denyRm struct{}

func (denyRm) Check(_ agent.TurnInfo, c agent.ToolCall) (agent.Decision, string) {
	if cmd, _ := c.Input["command"].(string); strings.Contains(cmd, "rm -rf") {
		return agent.Deny, "rm -rf /"
	}
	return agent.Allow, ""
}
func (denyRm) AllowRule(agent.TurnInfo, agent.ToolCall, string) error { return nil }

func TestToolVersions(t *testing.T) {
	for model, want := range map[string]string{
		"claude-opus-4-5":            "computer_20251124",
		"claude-opus-4-5-20251101":   "computer_20251124",
		"claude-sonnet-4-6":          "computer_20251124",
		"claude-sonnet-4-5-20250929": "computer_20250124",
		"claude-haiku-4-5":           "computer_20250124",
		"claude-sonnet-4-20250514":   "computer_20250124",
		"claude-opus-4-1":            "computer_20250124",
		"claude-3-7-sonnet-20250219": "computer_20250124",
		"claude-3-5-sonnet-20241022": "computer_20241022",
	} {
		if got := anthropic.ToolsFor(model); got.Computer != want {
			t.Errorf("%s: %s, want %s", model, got.Computer, want)
		}
	}
	if tl := anthropic.ToolsFor("claude-3-7-sonnet-20250219"); tl.EditName != "str_replace_editor" {
		t.Errorf("3.7 editor: %+v", tl)
	}
}

// The newest model gets computer_20251124 and its beta flag on the wire.
func TestNewestToolOnTheWire(t *testing.T) {
	srv := anthropictest.New(key)
	defer srv.Close()
	srv.Push(anthropictest.Say("hi"))
	evs := run(t, srv, &nativetest.Desktop{W: 1280, H: 800}, anthropic.Config{Model: "claude-opus-4-5"}, nil, "hi")
	if r := result(t, evs); r.Metadata["error"] != nil {
		t.Fatal(r.Metadata["error"])
	}
	s := srv.Seen()[0]
	if anthropictest.Tools(s.Body)[0]["type"] != "computer_20251124" || !strings.Contains(s.Header.Get("anthropic-beta"), "computer-use-2025-11-24") {
		t.Fatalf("tool %v beta %q", anthropictest.Tools(s.Body)[0], s.Header.Get("anthropic-beta"))
	}
}

func errorOf(t *testing.T, evs []agent.Event) (string, string) {
	t.Helper()
	r := result(t, evs)
	msg, _ := r.Metadata["error"].(string)
	code, _ := r.Metadata["errorCode"].(string)
	return msg, code
}

func TestErrors(t *testing.T) {
	cases := []struct {
		name  string
		steps []anthropictest.Step
		key   string
		code  string
		says  string
	}{
		{"bad key", nil, "wrong", "forbidden", "API key was refused"},
		{"forbidden", []anthropictest.Step{anthropictest.Error(403, "permission_error", "no access to this model")}, "", "forbidden", "may not use model"},
		{"unknown model", []anthropictest.Step{anthropictest.Error(404, "not_found_error", "model: claude-nope")}, "", "invalid", `model "claude-sonnet-4-5" was not found`},
		{"quota", []anthropictest.Step{
			anthropictest.Error(429, "rate_limit_error", "quota", "retry-after", "0"),
			anthropictest.Error(429, "rate_limit_error", "quota", "retry-after", "0"),
			anthropictest.Error(429, "rate_limit_error", "quota", "retry-after", "0")}, "", "unavailable", "rate limit or quota exceeded"},
		{"too long", []anthropictest.Step{
			anthropictest.Error(400, "invalid_request_error", "prompt is too long: 250000 tokens > 200000 maximum"),
			anthropictest.Error(400, "invalid_request_error", "prompt is too long: 210000 tokens > 200000 maximum"),
			anthropictest.Error(400, "invalid_request_error", "prompt is too long: 205000 tokens > 200000 maximum")}, "", "invalid", "too long for model"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			srv := anthropictest.New(key)
			defer srv.Close()
			srv.Push(c.steps...)
			evs := run(t, srv, &nativetest.Desktop{W: 1280, H: 800}, anthropic.Config{APIKey: c.key, Attempts: 3}, nil, "hi")
			msg, code := errorOf(t, evs)
			if code != c.code || !strings.Contains(msg, c.says) {
				t.Fatalf("error %q (%s), want %s containing %q", msg, code, c.code, c.says)
			}
			if srv.Left() != 0 {
				t.Fatalf("%d scripted answers unused", srv.Left())
			}
		})
	}
}

// 429 and 529 with retry-after are retried, each wait shown as a HINT_BLOCK; an overloaded
// error event before any content is retried too.
func TestRetries(t *testing.T) {
	srv := anthropictest.New(key)
	defer srv.Close()
	srv.Push(
		anthropictest.Error(429, "rate_limit_error", "Number of request tokens has exceeded your per-minute rate limit", "retry-after", "0.05"),
		anthropictest.Error(529, "overloaded_error", "Overloaded"),
		func(s anthropictest.Seen, w http.ResponseWriter) {
			anthropictest.Write(w, anthropictest.Start(anthropictest.Usage{Input: 5}),
				anthropictest.Event{Name: "error", Data: map[string]any{"type": "error", "error": map[string]any{"type": "overloaded_error", "message": "Overloaded"}}})
		},
		anthropictest.Say("finally"),
	)
	start := time.Now()
	evs := run(t, srv, &nativetest.Desktop{W: 1280, H: 800}, anthropic.Config{Attempts: 4}, nil, "hi")
	if msg, _ := errorOf(t, evs); msg != "" {
		t.Fatal(msg)
	}
	hints := find(evs, agent.HintBlock)
	if len(hints) != 3 || !strings.Contains(hints[0].Delta, "rate limited (HTTP 429)") || !strings.Contains(hints[1].Delta, "overloaded") {
		t.Fatalf("hints: %+v", hints)
	}
	if time.Since(start) < 50*time.Millisecond {
		t.Fatal("retry-after was not waited for")
	}
	if txt := result(t, evs).Content; len(txt) == 0 || txt[len(txt)-1].Text != "finally" {
		t.Fatalf("reply: %+v", txt)
	}
}

// A context-too-long answer is retried with fewer screenshots.
func TestTooLongDropsScreenshots(t *testing.T) {
	srv := anthropictest.New(key)
	defer srv.Close()
	box := &nativetest.Desktop{W: 1280, H: 800}
	srv.Push(
		anthropictest.Call("t1", "computer", anthropictest.Fixed(map[string]any{"action": "screenshot"})),
		anthropictest.Call("t2", "computer", anthropictest.Fixed(map[string]any{"action": "screenshot"})),
		anthropictest.Call("t3", "computer", anthropictest.Fixed(map[string]any{"action": "screenshot"})),
		anthropictest.Error(400, "invalid_request_error", "prompt is too long: 250000 tokens > 200000 maximum"),
		anthropictest.Say("fits now"),
	)
	evs := run(t, srv, box, anthropic.Config{}, nil, "look thrice")
	if msg, _ := errorOf(t, evs); msg != "" {
		t.Fatal(msg)
	}
	seen := srv.Seen()
	if a, b := len(anthropictest.Images(seen[3].Body)), len(anthropictest.Images(seen[4].Body)); a != 3 || b != 1 {
		t.Fatalf("screenshots sent: %d then %d", a, b)
	}
	if !strings.Contains(string(seen[4].Raw), "an older screenshot was left out") {
		t.Fatal("no note where screenshots were dropped")
	}
}

// A stream that breaks mid-reply ends the turn interrupted with the text that arrived; one that
// goes silent does too, after the idle limit.
func TestBrokenStream(t *testing.T) {
	for _, silent := range []bool{false, true} {
		srv := anthropictest.New(key)
		hold := make(chan struct{})
		srv.Push(func(s anthropictest.Seen, w http.ResponseWriter) {
			evs := []anthropictest.Event{anthropictest.Start(anthropictest.Usage{Input: 5})}
			evs = append(evs, anthropictest.TextBlock(0, "Half of")[:2]...)
			anthropictest.Write(w, evs...)
			if silent {
				<-hold // the connection stays open, silent
			}
			// return: the connection ends without message_stop
		})
		done := make(chan []agent.Event)
		go func() {
			done <- run(t, srv, &nativetest.Desktop{W: 1280, H: 800}, anthropic.Config{Idle: 300 * time.Millisecond}, nil, "hi")
		}()
		var evs []agent.Event
		select {
		case evs = <-done:
		case <-time.After(20 * time.Second):
			t.Fatal("the turn hangs")
		}
		close(hold)
		srv.Close()
		r := result(t, evs)
		if r.Metadata["interrupted"] != true || r.Metadata["errorCode"] != "interrupted" {
			t.Fatalf("silent=%v metadata: %v", silent, r.Metadata)
		}
		if r.Content[0].Text != "Half of" {
			t.Fatalf("kept: %+v", r.Content)
		}
	}
}

// Test says exactly what is wrong.
func TestTest(t *testing.T) {
	srv := anthropictest.New(key)
	defer srv.Close()
	srv.Push(anthropictest.Say("p"), anthropictest.Error(404, "not_found_error", "model: nope"))
	m, _ := anthropic.New(anthropic.Config{BaseURL: srv.URL, APIKey: key, Model: "claude-haiku-4-5", HTTP: srv.Client()})
	if err := m.Test(context.Background()); err != nil {
		t.Fatal(err)
	}
	var body map[string]any
	json.Unmarshal(srv.Seen()[0].Raw, &body)
	if body["max_tokens"] != 1.0 {
		t.Fatalf("test request: %v", body)
	}
	if err := m.Test(context.Background()); fault.Class(err) != fault.ErrInvalid || !strings.Contains(err.Error(), "was not found") {
		t.Fatalf("404: %v", err)
	}
	bad, _ := anthropic.New(anthropic.Config{BaseURL: srv.URL, APIKey: "nope", Model: "claude-haiku-4-5", HTTP: srv.Client()})
	if err := bad.Test(context.Background()); fault.Class(err) != fault.ErrForbidden || !strings.Contains(err.Error(), "API key") {
		t.Fatalf("401: %v", err)
	}
}
