package agent

import (
	"context"
	"encoding/json"
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
}

// ModelReply is a whole reply.
type ModelReply struct {
	Text         string
	Thinking     string
	ToolCalls    []ToolCall
	Usage        Usage
	FinishReason string
}

// ToolSpec describes a tool to the model.
type ToolSpec struct {
	Name        string          `json:"name"`
	Description string          `json:"description"`
	Parameters  json.RawMessage `json:"parameters"` // JSON Schema of the input object
}
