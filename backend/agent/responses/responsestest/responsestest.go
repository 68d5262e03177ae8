// Package responsestest is a scripted OpenAI Responses API server for tests: it checks the
// bearer key, keeps every request body, and answers each POST /v1/responses with the next
// scripted step in the API's streaming wire format (response.created, response.output_item.added
// / .done, response.output_text.delta, response.reasoning_summary_text.delta,
// response.function_call_arguments.delta, response.completed, error) or an error response with
// the API's error body. It stands in for the language model only.
package responsestest

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
)

// Seen is one request the server received.
type Seen struct {
	Header http.Header
	Body   map[string]any
	Raw    []byte
}

// Step answers one request; n is the response's number (ids are "resp_<n>").
type Step func(s Seen, n int, w http.ResponseWriter)

// Server is the scripted server.
type Server struct {
	*httptest.Server
	Key string

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

// Push appends steps.
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

// Left is how many steps were not used.
func (s *Server) Left() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.steps)
}

func (s *Server) serve(w http.ResponseWriter, r *http.Request) {
	raw, _ := io.ReadAll(r.Body)
	if r.Method == http.MethodGet && r.URL.Path == "/v1/models" {
		if s.Key != "" && r.Header.Get("Authorization") != "Bearer "+s.Key {
			Error(401, "invalid_request_error", "invalid_api_key", "Incorrect API key provided.")(Seen{}, 0, w)
			return
		}
		data := []map[string]any{}
		for _, id := range s.modelIDs() {
			data = append(data, map[string]any{"id": id, "object": "model", "created": 1741000000, "owned_by": "system"})
		}
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(map[string]any{"object": "list", "data": data})
		return
	}
	if r.Method != http.MethodPost || r.URL.Path != "/v1/responses" {
		Error(404, "invalid_request_error", "unknown_url", "Invalid URL (POST "+r.URL.Path+")")(Seen{}, 0, w)
		return
	}
	if s.Key != "" && r.Header.Get("Authorization") != "Bearer "+s.Key {
		Error(401, "invalid_request_error", "invalid_api_key", "Incorrect API key provided.")(Seen{}, 0, w)
		return
	}
	seen := Seen{Header: r.Header.Clone(), Raw: raw}
	if err := json.Unmarshal(raw, &seen.Body); err != nil {
		Error(400, "invalid_request_error", "invalid_json", err.Error())(seen, 0, w)
		return
	}
	s.mu.Lock()
	s.seen = append(s.seen, seen)
	n := len(s.seen)
	var step Step
	if len(s.steps) > 0 {
		step, s.steps = s.steps[0], s.steps[1:]
	}
	s.mu.Unlock()
	if step == nil {
		Error(500, "server_error", "", "script exhausted")(seen, n, w)
		return
	}
	step(seen, n, w)
}

// Event is one SSE event (its data's "type" is its name).
type Event map[string]any

// Write streams events, numbering them.
func Write(w http.ResponseWriter, evs ...Event) {
	w.Header().Set("Content-Type", "text/event-stream")
	for i, e := range evs {
		e["sequence_number"] = i
		d, _ := json.Marshal(e)
		fmt.Fprintf(w, "event: %s\ndata: %s\n\n", e["type"], d)
	}
	if f, ok := w.(http.Flusher); ok {
		f.Flush()
	}
}

func response(n int, status string, usage map[string]any) map[string]any {
	r := map[string]any{"id": fmt.Sprintf("resp_%d", n), "object": "response", "created_at": 1, "status": status,
		"model": "computer-use-preview", "output": []any{}}
	if usage != nil {
		r["usage"] = usage
	}
	return r
}

// Created is response.created.
func Created(n int) Event {
	return Event{"type": "response.created", "response": response(n, "in_progress", nil)}
}

// Completed is response.completed with usage.
func Completed(n, input, cached, output int) Event {
	return Event{"type": "response.completed", "response": response(n, "completed", map[string]any{
		"input_tokens": input, "input_tokens_details": map[string]any{"cached_tokens": cached},
		"output_tokens": output, "output_tokens_details": map[string]any{"reasoning_tokens": 0}, "total_tokens": input + output})}
}

// Item is output_item.added and .done of an item at index i.
func Item(i int, item map[string]any) []Event {
	return []Event{{"type": "response.output_item.added", "output_index": i, "item": item}, {"type": "response.output_item.done", "output_index": i, "item": item}}
}

// Reasoning is a reasoning item with a streamed summary.
func Reasoning(i int, id, text string) []Event {
	it := map[string]any{"type": "reasoning", "id": id, "summary": []any{map[string]any{"type": "summary_text", "text": text}}}
	return []Event{
		{"type": "response.output_item.added", "output_index": i, "item": map[string]any{"type": "reasoning", "id": id, "summary": []any{}}},
		{"type": "response.reasoning_summary_text.delta", "item_id": id, "output_index": i, "summary_index": 0, "delta": text},
		{"type": "response.output_item.done", "output_index": i, "item": it},
	}
}

// ComputerCall is a step answering with reasoning and one computer_call whose action is
// computed from the request; checks are its pending_safety_checks.
func ComputerCall(callID string, action func(Seen) map[string]any, checks ...map[string]any) Step {
	return func(s Seen, n int, w http.ResponseWriter) {
		if checks == nil {
			checks = []map[string]any{}
		}
		evs := []Event{Created(n)}
		evs = append(evs, Reasoning(0, fmt.Sprintf("rs_%d", n), "Looking at the screen.")...)
		evs = append(evs, Item(1, map[string]any{"type": "computer_call", "id": "cu_" + callID, "call_id": callID,
			"action": action(s), "pending_safety_checks": checks, "status": "completed"})...)
		Write(w, append(evs, Completed(n, 900, 700, 40))...)
	}
}

// FunctionCall is a step answering with one function call.
func FunctionCall(callID, name string, args map[string]any) Step {
	return func(s Seen, n int, w http.ResponseWriter) {
		a, _ := json.Marshal(args)
		it := map[string]any{"type": "function_call", "id": "fc_" + callID, "call_id": callID, "name": name, "arguments": string(a), "status": "completed"}
		evs := []Event{Created(n), {"type": "response.output_item.added", "output_index": 0, "item": map[string]any{"type": "function_call", "id": "fc_" + callID, "call_id": callID, "name": name, "arguments": ""}},
			{"type": "response.function_call_arguments.delta", "item_id": "fc_" + callID, "output_index": 0, "delta": string(a)},
			{"type": "response.output_item.done", "output_index": 0, "item": it}}
		Write(w, append(evs, Completed(n, 100, 0, 10))...)
	}
}

// Say is a step answering with a message.
func Say(text string) Step {
	return func(s Seen, n int, w http.ResponseWriter) {
		if s.Body["stream"] != true {
			w.Header().Set("Content-Type", "application/json")
			r := response(n, "completed", map[string]any{"input_tokens": 3, "output_tokens": 1, "total_tokens": 4,
				"input_tokens_details": map[string]any{"cached_tokens": 0}, "output_tokens_details": map[string]any{"reasoning_tokens": 0}})
			r["output"] = []any{map[string]any{"type": "message", "id": "msg_1", "role": "assistant", "status": "completed",
				"content": []any{map[string]any{"type": "output_text", "text": text, "annotations": []any{}}}}}
			json.NewEncoder(w).Encode(r)
			return
		}
		msg := map[string]any{"type": "message", "id": "msg_1", "role": "assistant", "status": "completed",
			"content": []any{map[string]any{"type": "output_text", "text": text, "annotations": []any{}}}}
		evs := []Event{Created(n),
			{"type": "response.output_item.added", "output_index": 0, "item": map[string]any{"type": "message", "id": "msg_1", "role": "assistant", "content": []any{}}},
			{"type": "response.output_text.delta", "item_id": "msg_1", "output_index": 0, "content_index": 0, "delta": text},
			{"type": "response.output_item.done", "output_index": 0, "item": msg}}
		Write(w, append(evs, Completed(n, 50, 0, 5))...)
	}
}

// Error answers with an API error body {"error": {message, type, param, code}} and headers
// given as name, value pairs.
func Error(status int, typ, code, msg string, headers ...string) Step {
	return func(s Seen, n int, w http.ResponseWriter) {
		for i := 0; i+1 < len(headers); i += 2 {
			w.Header().Set(headers[i], headers[i+1])
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		json.NewEncoder(w).Encode(map[string]any{"error": map[string]any{"message": msg, "type": typ, "param": nil, "code": code}})
	}
}

// Input returns the request's input items.
func Input(body map[string]any) []map[string]any {
	var out []map[string]any
	in, _ := body["input"].([]any)
	for _, x := range in {
		if m, ok := x.(map[string]any); ok {
			out = append(out, m)
		}
	}
	return out
}

// LastScreenshot is the image_url data of the newest computer_call_output in the request.
func LastScreenshot(body map[string]any) string {
	in := Input(body)
	for i := len(in) - 1; i >= 0; i-- {
		if in[i]["type"] == "computer_call_output" {
			o, _ := in[i]["output"].(map[string]any)
			u, _ := o["image_url"].(string)
			for j := 0; j < len(u); j++ {
				if u[j] == ',' {
					return u[j+1:]
				}
			}
		}
	}
	return ""
}
