package native_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"image"
	"image/color"
	"image/jpeg"
	"io"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"

	"cubicle/backend/agent"
	"cubicle/backend/agent/anthropic"
	"cubicle/backend/agent/anthropic/anthropictest"
	"cubicle/backend/agent/native"
	"cubicle/backend/agent/native/nativetest"
	"cubicle/backend/agent/openai"
	"cubicle/backend/agent/responses"
	"cubicle/backend/agent/responses/responsestest"
)

// screenshot is a 1280x800 JPEG with some structure (as the desktop's tools return it).
func screenshot(seed int) string {
	img := image.NewRGBA(image.Rect(0, 0, 1280, 800))
	for y := 0; y < 800; y++ {
		for x := 0; x < 1280; x++ {
			img.SetRGBA(x, y, color.RGBA{uint8(x*7 + seed), uint8(y * 3), uint8((x ^ y) + seed), 255})
		}
	}
	var buf bytes.Buffer
	jpeg.Encode(&buf, img, &jpeg.Options{Quality: 75})
	return base64.StdEncoding.EncodeToString(buf.Bytes())
}

// history is a conversation after a screenshot: what each step's model call sends.
func history(shot string) []agent.Msg {
	return []agent.Msg{
		{Role: "user", Content: []agent.ContentBlock{{Type: "text", Text: "click the button"}}},
		// The metadata and Meta are what the Responses adapter kept from its previous call.
		{Role: "assistant", Metadata: map[string]any{"responseId": "resp_0"}, Content: []agent.ContentBlock{{Type: "tool_use", ToolCallID: "c1",
			Name: "computer_screenshot", Input: map[string]any{}, Meta: map[string]any{"computer": map[string]any{"id": "cu_1"}}}}},
		{Role: "user", Content: []agent.ContentBlock{{Type: "tool_result", ToolCallID: "c1", Name: "computer_screenshot", State: agent.StateSuccess,
			Content: []agent.ContentBlock{{Type: "text", Text: "Screenshot 1280x800 (frame 1)."}, {Type: "image", MediaType: "image/jpeg", Data: shot}}}}},
	}
}

var specs = []agent.ToolSpec{
	{Name: "computer_screenshot", Parameters: []byte(`{"type":"object","properties":{}}`)},
	{Name: "computer_click", Parameters: []byte(`{"type":"object","properties":{"x":{"type":"integer"},"y":{"type":"integer"}}}`)},
}

// BenchmarkModelStep is one model call of an agent step (the conversation holding the last
// screenshot; the reply a click) through each adapter against a scripted server on loopback:
// what an adapter adds to a step. bytes/step is the screenshot data the request carries.
func BenchmarkModelStep(b *testing.B) {
	shot := screenshot(1)
	ctx := context.Background()
	run := func(b *testing.B, m agent.Model, sent *atomic.Int64) {
		req := agent.ModelRequest{System: "You operate a desktop.", Messages: history(shot), Tools: specs}
		if _, err := m.Stream(ctx, req, func(agent.ModelDelta) {}); err != nil {
			b.Fatal(err)
		}
		sent.Store(0)
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			reply, err := m.Stream(ctx, req, func(agent.ModelDelta) {})
			if err != nil || len(reply.ToolCalls) != 1 {
				b.Fatalf("%v %+v", err, reply)
			}
		}
		b.ReportMetric(float64(sent.Load())/float64(b.N), "bytes/step")
	}
	b.Run("openai-compatible", func(b *testing.B) {
		var sent atomic.Int64
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			raw, _ := io.ReadAll(r.Body)
			sent.Add(int64(nativetest.DataURIBytes(string(raw))))
			w.Header().Set("Content-Type", "text/event-stream")
			io.WriteString(w, `data: {"choices":[{"delta":{"tool_calls":[{"index":0,"id":"c2","type":"function","function":{"name":"computer_click","arguments":"{\"x\":640,\"y\":400}"}}]}}]}`+"\n\n"+
				`data: {"choices":[{"delta":{},"finish_reason":"tool_calls"}]}`+"\n\ndata: [DONE]\n\n")
		}))
		defer srv.Close()
		m, _ := openai.New(openai.Config{BaseURL: srv.URL + "/v1", Model: "m", HTTP: srv.Client()})
		run(b, m, &sent)
	})
	b.Run("anthropic", func(b *testing.B) {
		var sent atomic.Int64
		srv := anthropictest.New("")
		defer srv.Close()
		step := anthropictest.Call("c2", "computer", func(s anthropictest.Seen) any {
			for _, im := range anthropictest.Images(s.Body) {
				sent.Add(int64(len(im)))
			}
			return map[string]any{"action": "left_click", "coordinate": []int{640, 400}}
		})
		for i := 0; i < 1+b.N; i++ {
			srv.Push(step)
		}
		m, _ := anthropic.New(anthropic.Config{BaseURL: srv.URL, Model: "claude-sonnet-4-5", HTTP: srv.Client(), Screen: native.Size{W: 1280, H: 800}})
		run(b, m, &sent)
	})
	b.Run("openai-responses", func(b *testing.B) {
		var sent atomic.Int64
		srv := responsestest.New("k")
		defer srv.Close()
		step := responsestest.ComputerCall("c2", func(s responsestest.Seen) map[string]any {
			sent.Add(int64(nativetest.DataURIBytes(string(s.Raw))))
			return map[string]any{"type": "click", "button": "left", "x": 500, "y": 300}
		})
		for i := 0; i < 1+b.N; i++ {
			srv.Push(step)
		}
		m, _ := responses.New(responses.Config{BaseURL: srv.URL + "/v1", APIKey: "k", Model: "computer-use-preview", HTTP: srv.Client()})
		run(b, m, &sent)
	})
}
