// Package anthropictest is a scripted Anthropic Messages API server for tests: it checks the
// headers the API requires (x-api-key, anthropic-version, the computer-use beta flag), keeps
// every request body, and answers each request with the next scripted step in the API's
// streaming wire format (message_start, content_block_start/delta/stop, message_delta,
// message_stop, ping, error events) or an error response with the API's error body. It stands in
// for the language model only.
package anthropictest

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"sync"
)

// Seen is one request the server received.
type Seen struct {
	Header http.Header
	Body   map[string]any
	Raw    []byte
}

// Step answers one request.
type Step func(s Seen, w http.ResponseWriter)

// Server is the scripted server.
type Server struct {
	*httptest.Server
	Key string // the API key it accepts ("" = any)

	mu     sync.Mutex
	steps  []Step
	seen   []Seen
	models []string // what GET /v1/models lists
}

// SetModels sets what GET /v1/models lists.
func (s *Server) SetModels(ids ...string) {
	s.mu.Lock()
	s.models = ids
	s.mu.Unlock()
}

func (s *Server) modelIDs() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.models
}

// New starts a server accepting key.
func New(key string) *Server {
	s := &Server{Key: key}
	s.Server = httptest.NewServer(http.HandlerFunc(s.serve))
	return s
}

// Push appends steps to the script.
func (s *Server) Push(steps ...Step) {
	s.mu.Lock()
	s.steps = append(s.steps, steps...)
	s.mu.Unlock()
}

// Seen returns the requests so far.
func (s *Server) Seen() []Seen {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Seen(nil), s.seen...)
}

// Left is how many scripted steps were not used.
func (s *Server) Left() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.steps)
}

func (s *Server) serve(w http.ResponseWriter, r *http.Request) {
	raw, _ := io.ReadAll(r.Body)
	if r.Method == http.MethodGet && r.URL.Path == "/v1/models" {
		s.listModels(w, r)
		return
	}
	if r.Method != http.MethodPost || r.URL.Path != "/v1/messages" {
		Error(404, "not_found_error", "Not found: "+r.URL.Path)(Seen{}, w)
		return
	}
	if r.Header.Get("anthropic-version") == "" {
		Error(400, "invalid_request_error", "anthropic-version: header is required")(Seen{}, w)
		return
	}
	if s.Key != "" && r.Header.Get("x-api-key") != s.Key {
		Error(401, "authentication_error", "invalid x-api-key")(Seen{}, w)
		return
	}
	seen := Seen{Header: r.Header.Clone(), Raw: raw}
	if err := json.Unmarshal(raw, &seen.Body); err != nil {
		Error(400, "invalid_request_error", "body is not JSON: "+err.Error())(seen, w)
		return
	}
	for _, t := range Tools(seen.Body) {
		if typ, _ := t["type"].(string); strings.HasPrefix(typ, "computer_") {
			want := map[string]string{"computer_20250124": "computer-use-2025-01-24", "computer_20251124": "computer-use-2025-11-24",
				"computer_20241022": "computer-use-2024-10-22"}[typ]
			if !strings.Contains(r.Header.Get("anthropic-beta"), want) {
				Error(400, "invalid_request_error", fmt.Sprintf("tools.0: %s requires the anthropic-beta header %s", typ, want))(seen, w)
				return
			}
		}
	}
	s.mu.Lock()
	s.seen = append(s.seen, seen)
	var step Step
	if len(s.steps) > 0 {
		step, s.steps = s.steps[0], s.steps[1:]
	}
	s.mu.Unlock()
	if step == nil {
		Error(500, "api_error", "script exhausted")(seen, w)
		return
	}
	step(seen, w)
}

// Tools returns the request's tools.
func Tools(body map[string]any) []map[string]any {
	var out []map[string]any
	ts, _ := body["tools"].([]any)
	for _, t := range ts {
		if m, ok := t.(map[string]any); ok {
			out = append(out, m)
		}
	}
	return out
}

// Images returns the base64 data of every image in the request's messages, oldest first.
func Images(body map[string]any) []string {
	var out []string
	var walk func(v any)
	walk = func(v any) {
		switch x := v.(type) {
		case map[string]any:
			if x["type"] == "image" {
				if src, ok := x["source"].(map[string]any); ok {
					d, _ := src["data"].(string)
					out = append(out, d)
				}
			}
			for _, k := range []string{"content"} {
				walk(x[k])
			}
		case []any:
			for _, e := range x {
				walk(e)
			}
		}
	}
	walk(body["messages"])
	return out
}

// Event is one SSE event.
type Event struct {
	Name string
	Data any
}

// Write streams events.
func Write(w http.ResponseWriter, evs ...Event) {
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("request-id", "req_scripted")
	for _, e := range evs {
		d, _ := json.Marshal(e.Data)
		fmt.Fprintf(w, "event: %s\ndata: %s\n\n", e.Name, d)
	}
	if f, ok := w.(http.Flusher); ok {
		f.Flush()
	}
}

// Usage of a scripted reply.
type Usage struct {
	Input, Output, CacheRead, CacheWrite int
}

// Start is message_start.
func Start(u Usage) Event {
	return Event{"message_start", map[string]any{"type": "message_start", "message": map[string]any{
		"id": "msg_scripted", "type": "message", "role": "assistant", "content": []any{}, "model": "claude-scripted",
		"stop_reason": nil, "stop_sequence": nil,
		"usage": map[string]any{"input_tokens": u.Input, "output_tokens": 1, "cache_read_input_tokens": u.CacheRead, "cache_creation_input_tokens": u.CacheWrite}}}}
}

// Stop is message_delta (stop_reason, output tokens) and message_stop.
func Stop(reason string, output int) []Event {
	return []Event{
		{"message_delta", map[string]any{"type": "message_delta", "delta": map[string]any{"stop_reason": reason, "stop_sequence": nil}, "usage": map[string]any{"output_tokens": output}}},
		{"message_stop", map[string]any{"type": "message_stop"}},
	}
}

// TextBlock is a text content block at index i, streamed in pieces.
func TextBlock(i int, pieces ...string) []Event {
	evs := []Event{{"content_block_start", map[string]any{"type": "content_block_start", "index": i, "content_block": map[string]any{"type": "text", "text": ""}}}}
	for _, p := range pieces {
		evs = append(evs, Event{"content_block_delta", map[string]any{"type": "content_block_delta", "index": i, "delta": map[string]any{"type": "text_delta", "text": p}}})
	}
	return append(evs, Event{"content_block_stop", map[string]any{"type": "content_block_stop", "index": i}})
}

// ThinkingBlock is a thinking block with its signature.
func ThinkingBlock(i int, thinking, signature string) []Event {
	return []Event{
		{"content_block_start", map[string]any{"type": "content_block_start", "index": i, "content_block": map[string]any{"type": "thinking", "thinking": "", "signature": ""}}},
		{"content_block_delta", map[string]any{"type": "content_block_delta", "index": i, "delta": map[string]any{"type": "thinking_delta", "thinking": thinking}}},
		{"content_block_delta", map[string]any{"type": "content_block_delta", "index": i, "delta": map[string]any{"type": "signature_delta", "signature": signature}}},
		{"content_block_stop", map[string]any{"type": "content_block_stop", "index": i}},
	}
}

// ToolUse is a tool_use block whose input arrives in two input_json_delta pieces.
func ToolUse(i int, id, name string, input any) []Event {
	raw, _ := json.Marshal(input)
	half := len(raw) / 2
	return []Event{
		{"content_block_start", map[string]any{"type": "content_block_start", "index": i, "content_block": map[string]any{"type": "tool_use", "id": id, "name": name, "input": map[string]any{}}}},
		{"ping", map[string]any{"type": "ping"}},
		{"content_block_delta", map[string]any{"type": "content_block_delta", "index": i, "delta": map[string]any{"type": "input_json_delta", "partial_json": string(raw[:half])}}},
		{"content_block_delta", map[string]any{"type": "content_block_delta", "index": i, "delta": map[string]any{"type": "input_json_delta", "partial_json": string(raw[half:])}}},
		{"content_block_stop", map[string]any{"type": "content_block_stop", "index": i}},
	}
}

// Call is a step answering with one tool call (computed from the request by input).
func Call(id, name string, input func(Seen) any) Step {
	return func(s Seen, w http.ResponseWriter) {
		evs := []Event{Start(Usage{Input: 100, CacheRead: 80})}
		evs = append(evs, ToolUse(0, id, name, input(s))...)
		Write(w, append(evs, Stop("tool_use", 20)...)...)
	}
}

// Fixed returns a constant input.
func Fixed(v any) func(Seen) any { return func(Seen) any { return v } }

// Say is a step answering with text.
func Say(text string) Step {
	return func(s Seen, w http.ResponseWriter) {
		if s.Body["stream"] != true {
			w.Header().Set("Content-Type", "application/json")
			json.NewEncoder(w).Encode(map[string]any{"id": "msg_scripted", "type": "message", "role": "assistant", "model": "claude-scripted",
				"content": []any{map[string]any{"type": "text", "text": text}}, "stop_reason": "end_turn", "stop_sequence": nil,
				"usage": map[string]any{"input_tokens": 5, "output_tokens": 1}})
			return
		}
		evs := append([]Event{Start(Usage{Input: 50})}, TextBlock(0, text)...)
		Write(w, append(evs, Stop("end_turn", 5)...)...)
	}
}

// Error answers with an API error: status, the error body {"type":"error","error":{...}} and
// the headers given as name, value pairs (e.g. "retry-after", "1").
func Error(status int, typ, msg string, headers ...string) Step {
	return func(s Seen, w http.ResponseWriter) {
		for i := 0; i+1 < len(headers); i += 2 {
			w.Header().Set(headers[i], headers[i+1])
		}
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("request-id", "req_scripted")
		w.WriteHeader(status)
		json.NewEncoder(w).Encode(map[string]any{"type": "error", "error": map[string]any{"type": typ, "message": msg}})
	}
}

// listModels answers GET /v1/models as the Models API documents it: a page of model objects
// after after_id, at most limit (default 20), with has_more, first_id and last_id.
func (s *Server) listModels(w http.ResponseWriter, r *http.Request) {
	models := s.modelIDs()
	if r.Header.Get("anthropic-version") == "" {
		Error(400, "invalid_request_error", "anthropic-version: header is required")(Seen{}, w)
		return
	}
	if s.Key != "" && r.Header.Get("x-api-key") != s.Key {
		Error(401, "authentication_error", "invalid x-api-key")(Seen{}, w)
		return
	}
	limit := 20
	if n, err := strconv.Atoi(r.URL.Query().Get("limit")); err == nil && n >= 1 && n <= 1000 {
		limit = n
	}
	start := 0
	if after := r.URL.Query().Get("after_id"); after != "" {
		start = slices.Index(models, after) + 1
	}
	page := models[min(start, len(models)):min(start+limit, len(models))]
	data := []map[string]any{}
	for _, id := range page {
		data = append(data, map[string]any{"type": "model", "id": id, "display_name": id, "created_at": "2025-09-29T00:00:00Z"})
	}
	out := map[string]any{"data": data, "has_more": start+limit < len(models), "first_id": nil, "last_id": nil}
	if len(page) > 0 {
		out["first_id"], out["last_id"] = page[0], page[len(page)-1]
	}
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(out)
}
