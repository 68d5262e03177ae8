package agent

import (
	"crypto/rand"
	"encoding/hex"
	"time"
)

// Event types of the chat event stream (SPEC §2.1). Clients tolerate types they do not know.
const (
	AgentStart              = "AGENT_START"
	ModelCallStart          = "MODEL_CALL_START"
	ModelCallEnd            = "MODEL_CALL_END"
	ThinkingBlockStart      = "THINKING_BLOCK_START"
	ThinkingBlockDelta      = "THINKING_BLOCK_DELTA"
	ThinkingBlockEnd        = "THINKING_BLOCK_END"
	ToolCallStart           = "TOOL_CALL_START"
	ToolCallDelta           = "TOOL_CALL_DELTA"
	ToolCallEnd             = "TOOL_CALL_END"
	ToolResultStart         = "TOOL_RESULT_START"
	ToolResultTextDelta     = "TOOL_RESULT_TEXT_DELTA"
	ToolResultDataDelta     = "TOOL_RESULT_DATA_DELTA"
	ToolResultEnd           = "TOOL_RESULT_END"
	DataBlockStart          = "DATA_BLOCK_START"
	DataBlockDelta          = "DATA_BLOCK_DELTA"
	DataBlockEnd            = "DATA_BLOCK_END"
	TextBlockStart          = "TEXT_BLOCK_START"
	TextBlockDelta          = "TEXT_BLOCK_DELTA"
	TextBlockEnd            = "TEXT_BLOCK_END"
	AgentResult             = "AGENT_RESULT"
	AgentEnd                = "AGENT_END"
	ExceedMaxIters          = "EXCEED_MAX_ITERS"
	RequireUserConfirm      = "REQUIRE_USER_CONFIRM"
	UserConfirmResult       = "USER_CONFIRM_RESULT"
	AllToolsDenied          = "ALL_TOOLS_DENIED"
	RequireExternalExec     = "REQUIRE_EXTERNAL_EXECUTION"
	ExternalExecutionResult = "EXTERNAL_EXECUTION_RESULT"
	RequestStop             = "REQUEST_STOP"
	SubagentExposed         = "SUBAGENT_EXPOSED"
	HintBlock               = "HINT_BLOCK"
	Custom                  = "CUSTOM"
)

// Why a turn stopped (REQUEST_STOP.generateReason, the seed's enum). StopMiddleware is the
// default: a stop asked for from outside the model loop that names no other reason.
const (
	// StopModel: the model ended its reply itself before finishing (its output limit or a
	// content filter: finish reason "length" or "content_filter").
	StopModel = "MODEL_STOP"
	// StopPermission: the turn paused for a person's confirmation (REQUIRE_USER_CONFIRM);
	// it resumes with the answer.
	StopPermission = "PERMISSION_ASKING"
	// StopUser: a person stopped the turn (POST /api/app/chat/stop).
	StopUser = "USER_INTERRUPTED"
	// StopMiddleware: the server stopped the turn (shutdown, an image being prepared).
	StopMiddleware = "MIDDLEWARE_STOP_REQUESTED"
)

// Tool result states.
const (
	StateSuccess     = "success"
	StateError       = "error"
	StateInterrupted = "interrupted"
	StateDenied      = "denied"
	StateRunning     = "running"
)

// Event is one element of the chat event stream. Common fields first; the rest are set by
// type (see SPEC §2.1) and omitted when empty.
type Event struct {
	Type      string         `json:"type"`
	ID        string         `json:"id"`        // 32 hex characters
	CreatedAt time.Time      `json:"createdAt"` // UTC
	Source    string         `json:"source,omitempty"`
	Metadata  map[string]any `json:"metadata,omitempty"`

	SessionID string `json:"sessionId,omitempty"`
	// AgentID is the agent whose turn the event belongs to (set by the chat route on every
	// event of a turn; in a group chat it names the acting member). Older clients ignore it.
	AgentID        string          `json:"agentId,omitempty"`
	ReplyID        string          `json:"replyId,omitempty"`
	Name           string          `json:"name,omitempty"`
	Role           string          `json:"role,omitempty"`
	Usage          *Usage          `json:"usage,omitempty"`
	BlockID        string          `json:"blockId,omitempty"`
	Delta          string          `json:"delta,omitempty"`
	ToolCallID     string          `json:"toolCallId,omitempty"`
	ToolCallName   string          `json:"toolCallName,omitempty"`
	Data           *ContentBlock   `json:"data,omitempty"`
	State          string          `json:"state,omitempty"`
	Result         *Msg            `json:"result,omitempty"`
	MaxIters       int             `json:"maxIters,omitempty"`
	CurrentIter    int             `json:"currentIter,omitempty"`
	ToolCalls      []ToolCall      `json:"toolCalls,omitempty"`
	ConfirmResults []ConfirmResult `json:"confirmResults,omitempty"`
	Reason         string          `json:"reason,omitempty"`
	// GenerateReason is why a REQUEST_STOP stopped the turn, one of the Stop* values (the
	// seed's string enum; it was a boolean before, always false, which no client read).
	GenerateReason string `json:"generateReason,omitempty"`
	Value          any    `json:"value,omitempty"`
}

// Usage is what one model call cost.
type Usage struct {
	InputTokens  int     `json:"inputTokens"`
	OutputTokens int     `json:"outputTokens"`
	CachedTokens int     `json:"cachedTokens"`
	Time         float64 `json:"time"` // seconds
	TotalTokens  int     `json:"totalTokens"`
}

// ContentBlock is one piece of a message: text, an image (base64) or a tool call/result.
type ContentBlock struct {
	Type       string         `json:"type"` // "text", "image", "thinking", "tool_use", "tool_result", "file"
	Text       string         `json:"text,omitempty"`
	MediaType  string         `json:"mediaType,omitempty"` // images: "image/png", "image/jpeg"
	Data       string         `json:"data,omitempty"`      // images: base64
	ToolCallID string         `json:"toolCallId,omitempty"`
	Name       string         `json:"name,omitempty"`
	Input      map[string]any `json:"input,omitempty"`
	State      string         `json:"state,omitempty"`
	Content    []ContentBlock `json:"content,omitempty"` // tool results
	// Size is a file's size in bytes (type "file": a structured result a tool produced, shown
	// to the person, never sent to the model).
	Size int64 `json:"size,omitempty"`
	// Meta is what a model adapter keeps with a block for its next call: the vendor's own
	// form of a tool call, a thinking block's signature, safety checks a person acknowledged.
	Meta map[string]any `json:"meta,omitempty"`
}

// Msg is one message of a conversation.
type Msg struct {
	ID        string         `json:"id"`
	Name      string         `json:"name"`
	Role      string         `json:"role"` // "user", "assistant", "system"
	Content   []ContentBlock `json:"content"`
	Metadata  map[string]any `json:"metadata,omitempty"`
	Timestamp time.Time      `json:"timestamp"`
	Usage     *Usage         `json:"usage,omitempty"`
}

// ToolCall is a model's request to run a tool.
type ToolCall struct {
	ID    string         `json:"id"`
	Name  string         `json:"name"`
	Input map[string]any `json:"input"`
	// Confirm, set by a model adapter, is the model provider's reason why a person must
	// confirm this call (a safety check): the call then waits for a person whatever the guard
	// says, and is refused when the guard denies it.
	Confirm string `json:"confirm,omitempty"`
	// Unsupported, set by a model adapter, says why the call cannot run here (a vendor tool
	// command without a counterpart); the model gets that as an error result.
	Unsupported string `json:"unsupported,omitempty"`
	// Meta is kept with the call in the conversation for the adapter's next request.
	Meta map[string]any `json:"meta,omitempty"`
}

// ConfirmResult is a person's answer to a REQUIRE_USER_CONFIRM.
type ConfirmResult struct {
	Confirmed bool     `json:"confirmed"`
	ToolCall  ToolCall `json:"toolCall"`
	Rules     []string `json:"rules,omitempty"` // allow rules the person added ("always allow")
}

// NewID returns 32 random hex characters.
func NewID() string {
	b := make([]byte, 16)
	rand.Read(b)
	return hex.EncodeToString(b)
}

// newEvent stamps an event of type t.
func newEvent(t string) Event {
	return Event{Type: t, ID: NewID(), CreatedAt: time.Now().UTC()}
}
