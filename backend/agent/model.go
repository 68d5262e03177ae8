package agent

import (
	"context"
	"encoding/json"
	"errors"
)

// Model is a chat model the runtime can stream from. Implementations (agent/openai) are safe
// for concurrent use.
type Model interface {
	// Name is the model's name as configured.
	Name() string
	// Stream sends req and calls onDelta for every piece of the reply as it arrives (from the
	// calling goroutine), then returns the whole reply.
	Stream(ctx context.Context, req ModelRequest, onDelta func(ModelDelta)) (ModelReply, error)
}

// ModelRequest is one model call.
type ModelRequest struct {
	System      string
	Messages    []Msg
	Tools       []ToolSpec
	Temperature *float64
}

// ModelDelta is a piece of a streamed reply: text, thinking, or part of a tool call.
type ModelDelta struct {
	Text     string
	Thinking string
	// Tool call pieces: Index identifies the call within the reply; ID and Name arrive with
	// its first piece, Args in fragments.
	ToolIndex int
	ToolID    string
	ToolName  string
	ToolArgs  string
	// Hint is a notice for the person while the call waits (a rate limit being retried); the
	// runtime shows it as a HINT_BLOCK event.
	Hint string
}

// ModelReply is a whole reply.
type ModelReply struct {
	Text         string
	Thinking     string
	ToolCalls    []ToolCall
	Usage        Usage
	FinishReason string
	// Blocks are kept in the assistant message ahead of its text: what a provider needs back
	// verbatim on the next call (Anthropic's signed thinking blocks).
	Blocks []ContentBlock
	// Meta is kept as the assistant message's metadata (e.g. the provider's response id).
	Meta map[string]any
}

// ErrStreamBroken marks a model call whose reply stream broke off (or went silent) after it
// had started: the turn ends interrupted, keeping what arrived.
var ErrStreamBroken = errors.New("the model's reply stream broke off")

// ToolSpec describes a tool to the model.
type ToolSpec struct {
	Name        string          `json:"name"`
	Description string          `json:"description"`
	Parameters  json.RawMessage `json:"parameters"` // JSON Schema of the input object
}
