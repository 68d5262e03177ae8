// Package agent is Cubicle's chat runtime: a turn takes a person's input, calls the model,
// runs the tools it asks for (through the safety guard), and streams every step as events
// (SPEC §2.1). Without a model, operator mode runs the same tools from slash commands through
// the same event stream (SPEC §2.2).
//
// A conversation is keyed by (userId, sessionId). One turn runs per conversation at a time;
// a turn that pauses (a tool call awaiting confirmation, or a stop request) resumes when the
// same conversation sends again.
package agent

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"cubicle/backend/fault"
	"cubicle/backend/store"
)

// Turn is one request to the runtime.
type Turn struct {
	SessionID string
	UserID    string
	AgentID   string
	AgentName string
	Input     string
	ChatModel *ChatModel
	// ConfirmResults answers a paused confirmation; when nil, Input "yes"/"y"/"ok"/"approve"
	// confirms every pending call and anything else denies them.
	ConfirmResults []ConfirmResult
	// ClientTools names the external tools (ExternalTools) the client of this turn can
	// execute; the model is offered those. A client that names none (older clients) is
	// offered none.
	ClientTools []string
}

// ChatModel overrides model options for a turn.
type ChatModel struct {
	Name        string   `json:"name"`
	Stream      *bool    `json:"stream,omitempty"`
	Temperature *float64 `json:"temperature,omitempty"`
}

// TurnInfo is what tools learn about the turn they run in.
type TurnInfo struct {
	SessionID, UserID, AgentID string
	AgentName                  string
	TurnID                     string
	Step                       int
	// Helper is the name of the temporary task helper making the call ("" for the main
	// agent) and TaskID its task; a toolbox gives a helper's computer tools the task-isolated
	// desktop of TaskID, never the agent's own, and no host tools (SPEC §1.3, §1.6).
	Helper, TaskID string
	// MainTurnID is the TurnID of the main agent's turn: the same for the turn and for every
	// helper it starts, so what was fixed at the turn's start (its computer) applies to both.
	MainTurnID string
	// Stopped is set in the TurnInfo given to Config.TurnEnded when a person stopped the turn.
	Stopped bool
	// Via names who made a direct call (DirectCall.Via, e.g. "MCP: laptop"); "" in a chat.
	Via string
	// ReplyID is the id of the turn's reply message in the chat ("" for a direct call).
	ReplyID string
}

// Notice is something a turn announces as it starts: a CUSTOM event {name, value} right after
// AGENT_START, whose value is also in AGENT_START's metadata under name (e.g. the computer the
// turn works on).
type Notice struct {
	Name  string
	Value any
}

// Source is the event source of calls made in t: "" for the main agent, "main/<name>" for a
// task helper (SPEC §2.1), DirectCall.Via for a direct call.
func (t TurnInfo) Source() string {
	if t.Via != "" {
		return t.Via
	}
	if t.Helper == "" {
		return ""
	}
	return "main/" + t.Helper
}

// ToolOutput collects a tool's result and streams it as events. Its methods are safe for
// concurrent use (a tool may announce a hint from a timer while it waits).
type ToolOutput struct {
	mu     sync.Mutex // guards every field below and serialises emit
	emit   func(Event)
	callID string
	blocks []ContentBlock
	// started is called once when the tool starts its work (Started); the runtime marks the
	// history's run RUNNING there.
	started  func()
	wasStart bool
	usage    ToolUsage
	timedOut bool
}

// ToolUsage is what the work of one tool call cost, as measured where it ran: the command's
// process tree in the desktop (the driver's wait4 of the child it ran) or on the host. A
// zero field was not measured.
type ToolUsage struct {
	CPU         time.Duration // user + system CPU time
	MemoryBytes int64         // peak resident memory of the largest process
}

// NewToolOutput returns an output that streams the result of call callID through emit
// (for toolboxes used outside a turn, and tests).
func NewToolOutput(callID string, emit func(Event)) *ToolOutput {
	return &ToolOutput{emit: emit, callID: callID}
}

// Blocks returns what was written so far.
func (o *ToolOutput) Blocks() []ContentBlock {
	o.mu.Lock()
	defer o.mu.Unlock()
	return append([]ContentBlock(nil), o.blocks...)
}

// Text appends text to the result.
func (o *ToolOutput) Text(s string) {
	if s == "" {
		return
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	e := newEvent(ToolResultTextDelta)
	e.ToolCallID, e.Delta = o.callID, s
	o.emit(e)
	if n := len(o.blocks); n > 0 && o.blocks[n-1].Type == "text" {
		o.blocks[n-1].Text += s
		return
	}
	o.blocks = append(o.blocks, ContentBlock{Type: "text", Text: s})
}

// Image appends an image (base64 data) to the result.
func (o *ToolOutput) Image(mediaType, base64Data string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	b := ContentBlock{Type: "image", MediaType: mediaType, Data: base64Data}
	e := newEvent(ToolResultDataDelta)
	e.ToolCallID, e.Data = o.callID, &b
	o.emit(e)
	o.blocks = append(o.blocks, b)
}

// DataChunk is how much of a data block one DATA_BLOCK_DELTA carries (before base64).
const DataChunk = 48 << 10

// MaxDataBlock is the largest structured result a tool may hand to the person.
const MaxDataBlock = 25 << 20

// DataBlock hands a structured result the tool produced — a file, an image, a table — to the
// person: DATA_BLOCK_START (its MIME type, name and size), DATA_BLOCK_DELTA (the content in
// base64 pieces) and DATA_BLOCK_END (its SHA-256). The chat renders it and offers it for
// download. It is kept in the tool's result as a "file" block, which is never sent to the
// model: say in Text what the model should know of it.
func (o *ToolOutput) DataBlock(mediaType, name string, data []byte) error {
	if len(data) > MaxDataBlock {
		return fmt.Errorf("%s is %d bytes; at most %d can be handed to the person", name, len(data), MaxDataBlock)
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	id := NewID()
	head := ContentBlock{Type: "file", MediaType: mediaType, Name: name, Size: int64(len(data))}
	e := newEvent(DataBlockStart)
	e.BlockID, e.ToolCallID, e.Data = id, o.callID, &head
	o.emit(e)
	for off := 0; off < len(data) || off == 0; off += DataChunk {
		d := newEvent(DataBlockDelta)
		d.BlockID, d.ToolCallID, d.Delta = id, o.callID, base64.StdEncoding.EncodeToString(data[off:min(off+DataChunk, len(data))])
		o.emit(d)
		if len(data) == 0 {
			break
		}
	}
	sum := sha256.Sum256(data)
	end := newEvent(DataBlockEnd)
	end.BlockID, end.ToolCallID = id, o.callID
	end.Metadata = map[string]any{"sha256": hex.EncodeToString(sum[:]), "size": len(data)}
	o.emit(end)
	full := head
	full.Data = base64.StdEncoding.EncodeToString(data)
	o.blocks = append(o.blocks, full)
	return nil
}

// Hint tells the person something while the tool waits (HINT_BLOCK): a desktop starting, a
// file being asked for.
func (o *ToolOutput) Hint(s string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	e := newEvent(HintBlock)
	e.ToolCallID, e.Delta = o.callID, s
	o.emit(e)
}

// Started says the tool's own work begins now: until then the call was queued (waiting for
// its desktop to start, for the desktop's lease). The history shows it PENDING until then,
// RUNNING from then on. Calling it again does nothing.
func (o *ToolOutput) Started() {
	o.mu.Lock()
	f := o.started
	first := !o.wasStart
	o.wasStart = true
	o.mu.Unlock()
	if first && f != nil {
		f()
	}
}

// Measured records what the tool's work cost where it ran (the history keeps it).
func (o *ToolOutput) Measured(u ToolUsage) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.usage = u
}

// TimedOut records that the call's deadline ended it (the history says TIMEOUT).
func (o *ToolOutput) TimedOut() {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.timedOut = true
}

// Toolbox runs tools. The runtime asks it which tools a turn may use and to run them.
type Toolbox interface {
	// Tools lists the tools of a turn (what the model is offered).
	Tools(ctx context.Context, t TurnInfo) []ToolSpec
	// Call runs call, writing its result to out, and returns the final state (StateSuccess,
	// StateError, …). It honours ctx (a stop request cancels it).
	Call(ctx context.Context, t TurnInfo, call ToolCall, out *ToolOutput) string
}

// Decision of a guard.
type Decision string

// Guard decisions.
const (
	Allow Decision = "allow"
	Ask   Decision = "ask"
	Deny  Decision = "deny"
)

// Guard decides whether a tool call may run.
type Guard interface {
	Check(t TurnInfo, call ToolCall) (Decision, string)
	// AllowRule records an "always allow" rule a person added while confirming; an error
	// (a rule that cannot be made, such as one for a CRITICAL finding) is shown to the person.
	AllowRule(t TurnInfo, call ToolCall, rule string) error
}

// ConfirmRecorder keeps a record of every answer a person gives to a confirmation request
// (who: t.UserID; when; what: the call, why it was asked, the answer and any rules). A Guard
// that implements it is told of every answer.
type ConfirmRecorder interface {
	Confirmed(t TurnInfo, r ConfirmResult, reason string)
}

// Recorder writes the execution history (SPEC §2.5). Begin records a call as PENDING (queued:
// behind a person's confirmation, its desktop starting, the desktop's lease) and returns an
// id; Running marks it started; End completes it. Implementations are safe for concurrent use.
type Recorder interface {
	Begin(t TurnInfo, call ToolCall) string
	Running(id string)
	End(id string, end RunEnd)
}

// RunEnd is how a recorded call ended.
type RunEnd struct {
	State    string // StateSuccess, StateError, …
	Output   []ContentBlock
	Elapsed  time.Duration // from Running (or Begin when it never ran) to the end
	TimedOut bool          // its deadline ended it
	Usage    ToolUsage     // measured where the work ran; zero when nothing was measured
}

// ErrNoModel is returned by a ModelResolver when no model is configured; the runtime then
// runs in operator mode.
var ErrNoModel = errors.New("no model configured")

// ModelResolver finds the model of a turn. It is called only when a turn runs.
type ModelResolver func(ctx context.Context, agentID string, chat *ChatModel) (Model, error)

// Config configures a Runtime. Tools is required.
type Config struct {
	Tools    Toolbox
	Models   ModelResolver // nil: always operator mode
	Guard    Guard         // nil: every call is allowed
	Recorder Recorder      // nil: no history
	Sessions SessionStore  // nil: conversations live only in memory
	// Start runs first in every turn, before AGENT_START: it fixes what the turn works with
	// (its computer) and returns the notices the turn's first events carry. Its error ends
	// the turn (after AGENT_START) with that error.
	Start func(ctx context.Context, t TurnInfo) ([]Notice, error)
	// TurnStarted runs before a turn's first model call (e.g. eager sandbox binding); its
	// error ends the turn. TurnEnded runs after every turn (e.g. to release the desktop's
	// task so its idle timer starts); its TurnInfo says whether a person stopped the turn.
	TurnStarted func(ctx context.Context, t TurnInfo) error
	TurnEnded   func(t TurnInfo)
	Logger      *slog.Logger
	MaxIters    int    // model calls per turn; default 25
	System      string // system prompt
	// Helpers, when set, offers the main agent the task_helper tool: temporary task helpers
	// (sub-agents) with their own task-isolated desktops (see helper.go).
	Helpers *HelperConfig
	// Finished, when set, is told what every turn did once it ended (after AGENT_END), from
	// the turn's goroutine: it must not block (the knowledge base indexes it).
	Finished func(Outcome)
}

// Runtime runs turns. It is safe for concurrent use.
type Runtime struct {
	cfg Config
	log *slog.Logger

	mu       sync.Mutex
	sessions map[string]*session // guarded by mu
}

// session is one conversation's state.
type session struct {
	mu      sync.Mutex // held while a turn runs
	history []Msg
	pending []ToolCall // awaiting confirmation
	stop    context.CancelCauseFunc
	stopMu  sync.Mutex
	// runAgent is the agent of the running turn; guarded by stopMu with stop.
	runAgent string
	// waiting is a direct call waiting for a person's answer (direct.go); guarded by stopMu.
	waiting *waiter
	// external are the external tool calls waiting for their client's result, by tool call
	// id (external.go); guarded by stopMu.
	external map[string]chan ExternalResult
	// pendingRuns are the history ids of the calls in pending (recorded PENDING when the
	// confirmation was asked), by tool call id; guarded by mu.
	pendingRuns map[string]string
	loaded      bool // history was read from the store (or there was none)
	agentID     string
	title       string
	created     time.Time
	active      *store.ActiveTurn // the running turn, saved so a crash leaves a trace
}

// New returns a Runtime.
func New(cfg Config) (*Runtime, error) {
	if cfg.Tools == nil {
		return nil, errors.New("agent: Config.Tools is required")
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.MaxIters <= 0 {
		cfg.MaxIters = 25
	}
	if cfg.Helpers != nil {
		h := *cfg.Helpers
		h.defaults()
		cfg.Helpers = &h
	}
	return &Runtime{cfg: cfg, log: cfg.Logger, sessions: map[string]*session{}}, nil
}

func (r *Runtime) session(userID, sessionID string) *session {
	r.mu.Lock()
	defer r.mu.Unlock()
	k := userID + "\x00" + sessionID
	s := r.sessions[k]
	if s == nil {
		s = &session{}
		r.sessions[k] = s
	}
	return s
}

// errStopped is the cause of a turn cancelled by Stop; errStoppedAll (which is errStopped
// too) of one StopAll cancelled.
var (
	errStopped    = errors.New("stopped by request")
	errStoppedAll = fmt.Errorf("%w of the server", errStopped)
)

// Stop asks the running turn of a conversation to stop; the conversation pauses and resumes
// on its next input. It reports whether a turn was running.
func (r *Runtime) Stop(userID, sessionID string) bool {
	s := r.session(userID, sessionID)
	s.stopMu.Lock()
	defer s.stopMu.Unlock()
	if s.stop == nil {
		return false
	}
	s.stop(errStopped)
	return true
}

// Running reports whether a turn of agentID runs now (in any conversation).
func (r *Runtime) Running(agentID string) bool {
	r.mu.Lock()
	sessions := make([]*session, 0, len(r.sessions))
	for _, s := range r.sessions {
		sessions = append(sessions, s)
	}
	r.mu.Unlock()
	for _, s := range sessions {
		s.stopMu.Lock()
		running := s.stop != nil && s.runAgent == agentID
		s.stopMu.Unlock()
		if running {
			return true
		}
	}
	return false
}

// StopAll asks every running turn to stop (before an image is prepared, at shutdown). It
// returns how many were running.
func (r *Runtime) StopAll() int {
	r.mu.Lock()
	sessions := make([]*session, 0, len(r.sessions))
	for _, s := range r.sessions {
		sessions = append(sessions, s)
	}
	r.mu.Unlock()
	n := 0
	for _, s := range sessions {
		s.stopMu.Lock()
		if s.stop != nil {
			s.stop(errStoppedAll)
			n++
		}
		s.stopMu.Unlock()
	}
	return n
}

// Run runs one turn, calling emit for every event in order (from the calling goroutine).
// Input errors are returned before any event; later failures end the stream with an
// AGENT_RESULT carrying the error and AGENT_END.
func (r *Runtime) Run(ctx context.Context, t Turn, emit func(Event)) error {
	if strings.TrimSpace(t.SessionID) == "" || strings.TrimSpace(t.UserID) == "" {
		return fault.Invalid("sessionId and userId are required")
	}
	if strings.TrimSpace(t.Input) == "" && t.ConfirmResults == nil {
		return fault.Invalid("input is required")
	}
	s := r.session(t.UserID, t.SessionID)
	if (t.ConfirmResults != nil || isYes(t.Input) || isNo(t.Input)) && s.answer(t) {
		// The answer to a direct call waiting in this conversation (DirectCall): it goes to
		// the call, which reports the result to its caller.
		reply := Msg{ID: NewID(), Name: firstNonEmpty(t.AgentName, "agent"), Role: "assistant", Timestamp: time.Now().UTC(),
			Content: []ContentBlock{{Type: "text", Text: "Your answer went to the waiting call."}}}
		start := newEvent(AgentStart)
		start.SessionID, start.ReplyID, start.Name, start.Role = t.SessionID, reply.ID, reply.Name, "assistant"
		emit(start)
		e := newEvent(UserConfirmResult)
		e.ConfirmResults = t.ConfirmResults
		emit(e)
		res := newEvent(AgentResult)
		res.Result = &reply
		emit(res)
		emit(newEvent(AgentEnd))
		return nil
	}
	if !s.mu.TryLock() {
		return fault.Conflict("this chat is already answering; wait for it or stop it")
	}
	defer s.mu.Unlock()
	if err := r.load(s, t.UserID, t.SessionID); err != nil {
		return err
	}
	if s.agentID == "" {
		s.agentID = t.AgentID
	}
	hadTitle := s.title != ""
	if !hadTitle {
		s.title = title(t.Input)
	}
	turnID := NewID()
	// The person's message and the turn's running mark are saved before anything else
	// happens, and before the turn is acknowledged (AGENT_START, the HTTP 200 of the chat
	// route): a crash from then on loses no input. A save that fails ends the turn here, with
	// nothing emitted. The mark goes with the save at the turn's end, so one left behind
	// means a crash (see RecoverInterrupted).
	s.active = &store.ActiveTurn{ID: turnID, StartedAt: time.Now().UTC()}
	before := len(s.history)
	if len(s.pending) == 0 { // else the input answers the pending confirmations (resumeConfirm)
		s.history = append(s.history, Msg{ID: NewID(), Name: t.UserID, Role: "user",
			Content: []ContentBlock{{Type: "text", Text: t.Input}}, Timestamp: time.Now().UTC()})
	}
	if err := r.trySave(s, t.UserID, t.SessionID); err != nil {
		s.history, s.active = s.history[:before], nil
		if !hadTitle {
			s.title = ""
		}
		return fault.Unavailable("your message could not be saved, so the turn did not start (nothing was changed; try again): %v", err)
	}
	defer func() {
		s.active = nil
		r.save(s, t.UserID, t.SessionID)
	}()
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	s.stopMu.Lock()
	s.stop, s.runAgent = cancel, t.AgentID
	s.stopMu.Unlock()
	defer func() {
		s.stopMu.Lock()
		s.stop, s.runAgent = nil, ""
		s.stopMu.Unlock()
	}()

	tr := &turnRun{rt: r, s: s, t: t, emit: emit, ctx: ctx, system: r.cfg.System, maxIters: r.cfg.MaxIters}
	tr.info = TurnInfo{SessionID: t.SessionID, UserID: t.UserID, AgentID: t.AgentID, AgentName: t.AgentName, TurnID: turnID}
	tr.info.MainTurnID = tr.info.TurnID
	if r.cfg.TurnEnded != nil {
		defer func() {
			info := tr.info
			info.Stopped = errors.Is(context.Cause(ctx), errStopped)
			r.cfg.TurnEnded(info)
		}()
	}
	var notices []Notice
	var startErr error
	if r.cfg.Start != nil {
		notices, startErr = r.cfg.Start(ctx, tr.info)
	}
	tr.reply = Msg{ID: NewID(), Name: firstNonEmpty(t.AgentName, "agent"), Role: "assistant", Timestamp: time.Now().UTC()}
	tr.info.ReplyID = tr.reply.ID
	start := newEvent(AgentStart)
	start.SessionID, start.ReplyID, start.Name, start.Role = t.SessionID, tr.reply.ID, tr.reply.Name, "assistant"
	for _, n := range notices {
		if start.Metadata == nil {
			start.Metadata = map[string]any{}
		}
		start.Metadata[n.Name] = n.Value
	}
	emit(start)
	for _, n := range notices {
		e := newEvent(Custom)
		e.Name, e.Value = n.Name, n.Value
		emit(e)
	}
	err := startErr
	if err == nil {
		err = tr.run()
	}
	if err != nil && !errors.Is(context.Cause(ctx), errStopped) {
		r.log.Warn("turn failed", "session", t.SessionID, "err", err)
		tr.reply.Content = append(tr.reply.Content, ContentBlock{Type: "text", Text: "Error: " + err.Error()})
		if tr.reply.Metadata == nil {
			tr.reply.Metadata = map[string]any{}
		}
		tr.reply.Metadata["error"], tr.reply.Metadata["errorCode"] = err.Error(), errorCode(err)
		if errors.Is(err, ErrStreamBroken) {
			tr.reply.Metadata["interrupted"] = true
		}
	}
	res := newEvent(AgentResult)
	res.Result = &tr.reply
	emit(res)
	emit(newEvent(AgentEnd))
	if r.cfg.Finished != nil {
		r.cfg.Finished(r.outcome(s, tr, err, s.active.StartedAt))
	}
	return nil
}

// title names a conversation after its first input.
func title(in string) string {
	in = strings.Join(strings.Fields(in), " ")
	if r := []rune(in); len(r) > 60 {
		return string(r[:60]) + "…"
	}
	return in
}

func errorCode(err error) string {
	if errors.Is(err, ErrStreamBroken) {
		return "interrupted"
	}
	switch fault.Class(err) {
	case fault.ErrInvalid:
		return "invalid"
	case fault.ErrUnavailable:
		return "unavailable"
	case fault.ErrForbidden:
		return "forbidden"
	case fault.ErrConflict:
		return "conflict"
	case fault.ErrNotFound:
		return "not_found"
	}
	return "internal"
}

func firstNonEmpty(s ...string) string {
	for _, v := range s {
		if v != "" {
			return v
		}
	}
	return ""
}
