package bench

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"sync/atomic"

	"cubicle/backend/agent"
	"cubicle/backend/agent/anthropic"
	"cubicle/backend/agent/anthropic/anthropictest"
	"cubicle/backend/agent/native"
	"cubicle/backend/agent/native/nativetest"
	"cubicle/backend/agent/openai"
	"cubicle/backend/agent/responses"
	"cubicle/backend/agent/responses/responsestest"
	"cubicle/backend/agent/tools"
	"cubicle/backend/fault"
	"cubicle/backend/guest"
)

// Rows of an agent step through the native model adapters (issue 22).
const (
	RowAgentStepAnthropic = "agent_step_anthropic"
	RowAgentStepResponses = "agent_step_responses"
)

// nativeModel is one adapter under measurement: its model against its scripted server, and
// the screenshot bytes its requests carried so far.
type nativeModel struct {
	model agent.Model
	sent  *atomic.Int64
	push  func() // queues the scripted server's answer of one more call (a click)
	close func()
}

// openaiCompatible is today's path (the agent_step row's tool behind an OpenAI-compatible
// function call), the peer of both native rows: a scripted Chat Completions server answering
// every call with a computer_click at the centre of the screen.
func openaiCompatible() (nativeModel, error) {
	var sent atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		raw, _ := io.ReadAll(r.Body)
		sent.Add(int64(nativetest.DataURIBytes(string(raw))))
		w.Header().Set("Content-Type", "text/event-stream")
		io.WriteString(w, `data: {"choices":[{"delta":{"tool_calls":[{"index":0,"id":"c2","type":"function","function":{"name":"computer_click","arguments":"{\"x\":640,\"y\":400}"}}]}}]}`+"\n\n"+
			`data: {"choices":[{"delta":{},"finish_reason":"tool_calls"}]}`+"\n\ndata: [DONE]\n\n")
	}))
	m, err := openai.New(openai.Config{BaseURL: srv.URL + "/v1", Model: "bench", AllowPrivate: true, HTTP: srv.Client()})
	if err != nil {
		srv.Close()
		return nativeModel{}, err
	}
	return nativeModel{model: m, sent: &sent, push: func() {}, close: srv.Close}, nil
}

// anthropicNative is Anthropic's Messages API with its own computer tool (left_click at the
// centre of the screen, in the model's coordinates; the adapter scales it back).
func anthropicNative(screen native.Size) (nativeModel, error) {
	var sent atomic.Int64
	srv := anthropictest.New("k")
	step := anthropictest.Call("c2", "computer", func(s anthropictest.Seen) any {
		for _, im := range anthropictest.Images(s.Body) {
			sent.Add(int64(len(im)))
		}
		w, h := screen.W, screen.H
		if sz, ok := anthropicDisplay(s.Body); ok {
			w, h = sz.W, sz.H
		}
		return map[string]any{"action": "left_click", "coordinate": []int{w / 2, h / 2}}
	})
	m, err := anthropic.New(anthropic.Config{BaseURL: srv.URL, APIKey: "k", Model: "claude-sonnet-4-5", AllowPrivate: true,
		HTTP: srv.Client(), Screen: screen})
	if err != nil {
		srv.Close()
		return nativeModel{}, err
	}
	return nativeModel{model: m, sent: &sent, push: func() { srv.Push(step) }, close: srv.Close}, nil
}

// anthropicDisplay is the display size the request declared for the computer tool.
func anthropicDisplay(body map[string]any) (native.Size, bool) {
	for _, t := range anthropictest.Tools(body) {
		w, okw := t["display_width_px"].(float64)
		h, okh := t["display_height_px"].(float64)
		if okw && okh {
			return native.Size{W: int(w), H: int(h)}, true
		}
	}
	return native.Size{}, false
}

// responsesNative is OpenAI's Responses API with computer_use_preview (a click in screen
// coordinates).
func responsesNative(screen native.Size) (nativeModel, error) {
	var sent atomic.Int64
	srv := responsestest.New("k")
	step := responsestest.ComputerCall("c2", func(s responsestest.Seen) map[string]any {
		sent.Add(int64(nativetest.DataURIBytes(string(s.Raw))))
		return map[string]any{"type": "click", "button": "left", "x": screen.W / 2, "y": screen.H / 2}
	})
	m, err := responses.New(responses.Config{BaseURL: srv.URL + "/v1", APIKey: "k", Model: "computer-use-preview", AllowPrivate: true,
		HTTP: srv.Client(), Screen: screen})
	if err != nil {
		srv.Close()
		return nativeModel{}, err
	}
	return nativeModel{model: m, sent: &sent, push: func() { srv.Push(step) }, close: srv.Close}, nil
}

// modelStepper runs whole agent steps through one model adapter on the benchmark's desktop:
// the model call (the conversation holds the previous step's screenshot), the click it answers
// with through the agent's computer_click tool (input, settle, the screenshot), and that
// screenshot becoming the next call's tool result.
type modelStepper struct {
	m     nativeModel
	box   *tools.Box
	turn  agent.TurnInfo
	specs []agent.ToolSpec
	last  []agent.ContentBlock // the previous step's tool result
	steps int
}

func (s *modelStepper) step(ctx context.Context) error {
	s.m.push()
	msgs := []agent.Msg{
		{Role: "user", Content: []agent.ContentBlock{{Type: "text", Text: "click the middle of the screen"}}},
		{Role: "assistant", Metadata: map[string]any{"responseId": "resp_0"}, Content: []agent.ContentBlock{{Type: "tool_use", ToolCallID: "c1",
			Name: "computer_click", Input: map[string]any{"x": 640, "y": 400}, Meta: map[string]any{"computer": map[string]any{"id": "cu_1"}}}}},
		{Role: "user", Content: []agent.ContentBlock{{Type: "tool_result", ToolCallID: "c1", Name: "computer_click", State: agent.StateSuccess, Content: s.last}}},
	}
	reply, err := s.m.model.Stream(ctx, agent.ModelRequest{System: "You operate a desktop.", Messages: msgs, Tools: s.specs}, func(agent.ModelDelta) {})
	if err != nil {
		return err
	}
	if len(reply.ToolCalls) != 1 || reply.ToolCalls[0].Name != "computer_click" || reply.ToolCalls[0].Unsupported != "" {
		return fault.Unavailable("the model's reply is not one computer_click: %+v", reply.ToolCalls)
	}
	call := reply.ToolCalls[0]
	out := agent.NewToolOutput(call.ID, func(agent.Event) {})
	if st := s.box.Call(ctx, s.turn, call, out); st != agent.StateSuccess {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return fault.Unavailable("computer_click ended %s: %v", st, out.Blocks())
	}
	s.last = out.Blocks()
	s.steps++
	return nil
}

// bytesPerStep is the screenshot data (base64) the adapter's requests carried per step.
func (s *modelStepper) bytesPerStep() int64 {
	if s.steps == 0 {
		return 0
	}
	return s.m.sent.Load() / int64(s.steps)
}

// nativeSteps: an agent step through Anthropic's and OpenAI's computer-use adapters (each
// against a scripted server that speaks its wire format, on loopback) next to the same step
// through today's OpenAI-compatible function call, in the same run and on the same desktop.
// What a row's two sides differ by is what the adapter adds: request building (screenshot
// scaling, the vendor's tool definitions), the vendor's SDK, and mapping the answer back.
func (r *runner) nativeSteps(ctx context.Context, d *desktop) error {
	box, err := tools.New(tools.Config{Desktops: benchDesktops{d.client}, Environments: benchEnv{}, Logger: r.log})
	if err != nil {
		return err
	}
	turn := agent.TurnInfo{SessionID: "bench", UserID: "bench", AgentID: "bench", TurnID: "bench"}
	specs := box.Tools(ctx, turn)
	shot := agent.NewToolOutput("shot", func(agent.Event) {})
	if st := box.Call(ctx, turn, agent.ToolCall{ID: "shot", Name: "computer_screenshot", Input: map[string]any{}}, shot); st != agent.StateSuccess {
		return fault.Unavailable("computer_screenshot ended %s: %v", st, shot.Blocks())
	}
	screen := native.Size{W: 1280, H: 800}
	if f, err := d.client.Screenshot(ctx, guest.ScreenshotOptions{}); err == nil && f.Width > 0 {
		screen = native.Size{W: f.Width, H: f.Height}
	}
	rows := []struct {
		id, title, name, method string
		open                    func(native.Size) (nativeModel, error)
	}{
		{RowAgentStepAnthropic, "agent step through Anthropic's computer tool: model call + click + screenshot", "anthropic",
			"Anthropic's Messages API (official Go SDK) with its computer tool, a scripted server on loopback answering left_click " +
				"in the model's coordinates; the adapter scales the screenshot to the model's size and the click back, then the agent's computer_click tool",
			func(s native.Size) (nativeModel, error) { return anthropicNative(s) }},
		{RowAgentStepResponses, "agent step through OpenAI's computer_use_preview: model call + click + screenshot", "openai-responses",
			"OpenAI's Responses API (official Go SDK) with computer_use_preview, a scripted server on loopback answering a click; " +
				"the adapter maps it to the agent's computer_click tool",
			func(s native.Size) (nativeModel, error) { return responsesNative(s) }},
	}
	for _, row := range rows {
		nm, err := row.open(screen)
		if err != nil {
			return err
		}
		peer, err := openaiCompatible()
		if err != nil {
			nm.close()
			return err
		}
		ours := &modelStepper{m: nm, box: box, turn: turn, specs: specs, last: shot.Blocks()}
		base := &modelStepper{m: peer, box: box, turn: turn, specs: specs, last: shot.Blocks()}
		err = func() error {
			defer nm.close()
			defer peer.close()
			if err := ours.step(ctx); err != nil {
				return fmt.Errorf("%s: %w", row.name, err)
			}
			if err := base.step(ctx); err != nil {
				return fmt.Errorf("openai-compatible: %w", err)
			}
			var o, p []float64
			if err := interleave(ctx, r.cfg.Counts.AgentSteps, r.cfg.Counts.AgentSteps,
				func(int) error { return timed(&o, func() error { return ours.step(ctx) }) },
				func(int) error { return timed(&p, func() error { return base.step(ctx) }) }); err != nil {
				return err
			}
			r.add(Row{ID: row.id, Title: row.title, Unit: UnitMS, Better: "lower",
				Ours:     Side{Method: row.method, Samples: o},
				PeerName: "OpenAI-compatible agent_step", Peer: &Side{Method: "today's path: Chat Completions function calling (our " +
					"streaming client) against a scripted server on loopback answering computer_click, then the same tool", Samples: p},
				Note: fmt.Sprintf("the target is at most 5 ms p50 more than the OpenAI-compatible step; screenshot bytes sent per step "+
					"(base64): %s %d, OpenAI-compatible %d", row.name, ours.bytesPerStep(), base.bytesPerStep())})
			return nil
		}()
		if err != nil {
			return err
		}
	}
	return nil
}
