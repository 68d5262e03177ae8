package agent

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"cubicle/backend/fault"
)

// External tools are tools the client executes (SPEC §2.1 REQUIRE_EXTERNAL_EXECUTION): the
// runtime offers one to the model only when the turn's client said it can run it
// (Turn.ClientTools), asks the client with REQUIRE_EXTERNAL_EXECUTION, and waits — the turn's
// stream stays open — until the client posts the result (Runtime.ExternalResult, the route
// POST /api/app/chat/external) or the call's deadline passes.

// PickFileTool asks the person to pick a file from their own machine.
const PickFileTool = "client_pick_file"

// Deadlines of an external call: the model may ask for any time up to MaxExternalTimeout.
const (
	DefaultExternalTimeout = 5 * time.Minute
	MaxExternalTimeout     = 15 * time.Minute
	// MaxExternalText is how much of a picked text file the model gets.
	MaxExternalText = 256 << 10
	// MaxExternalFile is the largest file a client may hand back (the route's body limit
	// carries it in base64).
	MaxExternalFile = 8 << 20
)

// ExternalTools are the external tools the runtime knows, by name.
var ExternalTools = map[string]ToolSpec{
	PickFileTool: {Name: PickFileTool,
		Description: "Ask the person to pick a file from their own machine (their browser's file picker) and get its content. " +
			"Use it when the task needs a file only the person has. It waits until they pick one or decline, or the deadline passes.",
		Parameters: json.RawMessage(`{"type":"object","properties":{"prompt":{"type":"string","description":"what to ask the person for"},` +
			`"accept":{"type":"string","description":"file types to offer, as an HTML accept list, e.g. \".csv,text/plain\""},` +
			`"timeout_seconds":{"type":"integer","description":"how long to wait, at most 900 (default 300)"}},"required":["prompt"]}`)},
}

// ExternalResult is what a client posts for an external call.
type ExternalResult struct {
	ToolCallID string `json:"toolCallId"`
	// State is StateSuccess, StateError (the client could not run it) or StateDenied (the
	// person declined).
	State   string         `json:"state"`
	Content []ContentBlock `json:"content,omitempty"` // for client_pick_file: one "file" block with data
	Error   string         `json:"error,omitempty"`
}

// ExternalResult hands a client's result to the external call toolCallID waiting in the
// conversation (userID, sessionID). No such call waiting is fault.ErrNotFound (also for
// another account's conversation: the key includes the account); a malformed result is
// fault.ErrInvalid and changes nothing.
func (r *Runtime) ExternalResult(userID, sessionID string, res ExternalResult) error {
	switch res.State {
	case "":
		res.State = StateSuccess
	case StateSuccess, StateError, StateDenied:
	default:
		return fault.Invalid("state must be success, error or denied")
	}
	for _, b := range res.Content {
		switch b.Type {
		case "text":
		case "file", "image":
			if _, err := base64.StdEncoding.DecodeString(b.Data); err != nil {
				return fault.Invalid("content %q: data is not base64: %v", b.Name, err)
			}
			if base64.StdEncoding.DecodedLen(len(b.Data)) > MaxExternalFile {
				return fault.Invalid("content %q is larger than %d MiB", b.Name, MaxExternalFile>>20)
			}
		default:
			return fault.Invalid("content blocks are text, file or image, not %q", b.Type)
		}
	}
	s := r.session(userID, sessionID)
	s.stopMu.Lock()
	ch := s.external[res.ToolCallID]
	delete(s.external, res.ToolCallID)
	s.stopMu.Unlock()
	if ch == nil {
		return fault.NotFound("no tool call %q is waiting for its result in this chat (it finished, its deadline passed, or it is not yours)", res.ToolCallID)
	}
	ch <- res // buffered (1), and only one sender gets ch
	return nil
}

// offersExternal reports whether this turn's model may call external tool name.
func (tr *turnRun) offersExternal(name string) bool {
	if tr.helper {
		return false
	}
	_, known := ExternalTools[name]
	return known && slices.Contains(tr.t.ClientTools, name)
}

// externalSpecs are the external tools this turn's client can run.
func (tr *turnRun) externalSpecs() []ToolSpec {
	var out []ToolSpec
	for _, n := range tr.t.ClientTools {
		if spec, ok := ExternalTools[n]; ok && !slices.ContainsFunc(out, func(s ToolSpec) bool { return s.Name == n }) {
			out = append(out, spec)
		}
	}
	return out
}

// runExternal asks the client to run c and waits for its result until c's deadline.
func (tr *turnRun) runExternal(c ToolCall, out *ToolOutput) string {
	timeout := DefaultExternalTimeout
	if v, ok := c.Input["timeout_seconds"].(float64); ok && v > 0 {
		timeout = min(time.Duration(v*float64(time.Second)), MaxExternalTimeout)
	}
	deadline := time.Now().Add(timeout)
	ch := make(chan ExternalResult, 1)
	s := tr.s
	s.stopMu.Lock()
	if s.external == nil {
		s.external = map[string]chan ExternalResult{}
	}
	s.external[c.ID] = ch
	s.stopMu.Unlock()
	defer func() {
		s.stopMu.Lock()
		delete(s.external, c.ID)
		s.stopMu.Unlock()
	}()
	req := newEvent(RequireExternalExec)
	req.ToolCalls, req.ToolCallID, req.ToolCallName = []ToolCall{c}, c.ID, c.Name
	req.Metadata = map[string]any{"deadline": deadline.UTC().Format(time.RFC3339)}
	tr.emit(req)
	prompt, _ := c.Input["prompt"].(string)
	out.Hint(fmt.Sprintf("Waiting for you to pick a file%s — until %s UTC.", quoted(prompt), deadline.UTC().Format("15:04:05")))
	out.Started() // it runs on the client now

	timer := time.NewTimer(timeout)
	defer timer.Stop()
	var res ExternalResult
	select {
	case res = <-ch:
	case <-timer.C:
		out.TimedOut()
		res = ExternalResult{ToolCallID: c.ID, State: StateError, Error: fmt.Sprintf("nobody answered within %s", timeout.Round(time.Second))}
	case <-tr.ctx.Done():
		res = ExternalResult{ToolCallID: c.ID, State: StateInterrupted, Error: "the turn was stopped while waiting"}
	}
	done := newEvent(ExternalExecutionResult)
	done.ToolCallID, done.ToolCallName, done.State, done.Reason = c.ID, c.Name, res.State, res.Error
	for _, b := range res.Content {
		if b.Type == "file" || b.Type == "image" {
			raw, _ := base64.StdEncoding.DecodeString(b.Data) // checked by ExternalResult
			head := ContentBlock{Type: b.Type, Name: b.Name, MediaType: b.MediaType, Size: int64(len(raw))}
			done.Data = &head
			break
		}
	}
	tr.emit(done)
	switch res.State {
	case StateSuccess:
		describeExternal(out, res)
	case StateDenied:
		out.Text("The person declined to pick a file.")
	default:
		out.Text("Error: the person's client did not run " + c.Name + ": " + res.Error)
	}
	return res.State
}

func quoted(s string) string {
	if s = strings.TrimSpace(s); s == "" {
		return ""
	}
	return fmt.Sprintf(" (%q)", s)
}

// describeExternal tells the model what the client returned: the picked file's name, type
// and size, and its text when it is text.
func describeExternal(out *ToolOutput, res ExternalResult) {
	said := false
	for _, b := range res.Content {
		switch b.Type {
		case "text":
			out.Text(b.Text)
			said = true
		case "image":
			out.Text(fmt.Sprintf("The person picked the image %s (%s).", b.Name, b.MediaType))
			out.Image(b.MediaType, b.Data)
			said = true
		case "file":
			data, _ := base64.StdEncoding.DecodeString(b.Data)
			head := fmt.Sprintf("The person picked %s (%s, %d bytes)", b.Name, firstNonEmpty(b.MediaType, "unknown type"), len(data))
			switch {
			case utf8.Valid(data) && !bytes.ContainsRune(data, 0) && len(data) <= MaxExternalText:
				out.Text(head + ":\n" + string(data))
			case utf8.Valid(data[:min(len(data), MaxExternalText)]) && !bytes.ContainsRune(data, 0):
				out.Text(fmt.Sprintf("%s; its first %d bytes:\n%s", head, MaxExternalText, data[:MaxExternalText]))
			default:
				out.Text(head + "; it is binary, so its content is not shown.")
			}
			said = true
		}
	}
	if !said {
		out.Text("The client returned nothing.")
	}
}
