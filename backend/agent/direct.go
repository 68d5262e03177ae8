package agent

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"cubicle/backend/fault"
)

// DirectCall is one tool call made from outside a chat: an agent outside Cubicle using this
// agent's computer over MCP (package mcpserver). It runs through the same gate as the
// agent's own calls and is kept in conversation SessionID of UserID, whose owner answers its
// confirmations.
type DirectCall struct {
	SessionID, UserID, AgentID, AgentName string
	// Via names who makes the call; it is the call's source in the history ("MCP: laptop").
	Via  string
	Call ToolCall
	// ConfirmTimeout bounds the wait for the person's answer when the guard asks; the call is
	// denied when it passes (default 2 minutes).
	ConfirmTimeout time.Duration
}

// DefaultConfirmTimeout is how long a direct call waits for a confirmation by default.
const DefaultConfirmTimeout = 2 * time.Minute

// waiter is a direct call waiting in a session for a person's answer.
type waiter struct {
	calls  []ToolCall
	answer chan []ConfirmResult // buffered (1)
}

// Call runs one direct call as a turn of its own: Config.Start, TurnStarted and TurnEnded (the
// turn's computer, the desktop's task and its control lease), the guard, the recorder and
// the events — exactly what a model's call meets. When the guard asks, emit receives
// REQUIRE_USER_CONFIRM and the call waits for the answer, which the person gives like any
// other (Run with ConfirmResults, or "yes"/"no", for the same conversation); without one
// before the deadline the call is denied. The call and its result are added to the
// conversation. Call returns the tool_result block; its error is for calls that could not be
// started (bad input, a busy conversation, a computer that cannot be fixed).
func (r *Runtime) Call(ctx context.Context, d DirectCall, emit func(Event)) (ContentBlock, error) {
	if strings.TrimSpace(d.SessionID) == "" || strings.TrimSpace(d.UserID) == "" || d.Call.Name == "" {
		return ContentBlock{}, fault.Invalid("sessionId, userId and a tool call are required")
	}
	if d.ConfirmTimeout <= 0 {
		d.ConfirmTimeout = DefaultConfirmTimeout
	}
	if d.Call.ID == "" {
		d.Call.ID = "mcp_" + NewID()[:12]
	}
	s := r.session(d.UserID, d.SessionID)
	if !s.mu.TryLock() {
		return ContentBlock{}, fault.Conflict("this agent's conversation %q is busy with another call; try again when it finished", d.SessionID)
	}
	defer s.mu.Unlock()
	if err := r.load(s, d.UserID, d.SessionID); err != nil {
		return ContentBlock{}, err
	}
	if s.agentID == "" {
		s.agentID = d.AgentID
	}
	if s.title == "" {
		s.title = firstNonEmpty(d.Via, "Direct calls")
	}
	s.pending = nil // a direct conversation never keeps calls waiting between calls
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	s.stopMu.Lock()
	s.stop, s.runAgent = cancel, d.AgentID
	s.stopMu.Unlock()
	defer func() {
		s.stopMu.Lock()
		s.stop, s.runAgent = nil, ""
		s.stopMu.Unlock()
	}()
	defer r.save(s, d.UserID, d.SessionID)

	t := Turn{SessionID: d.SessionID, UserID: d.UserID, AgentID: d.AgentID, AgentName: d.AgentName}
	tr := &turnRun{rt: r, s: s, t: t, emit: emit, ctx: ctx}
	tr.info = TurnInfo{SessionID: d.SessionID, UserID: d.UserID, AgentID: d.AgentID, AgentName: d.AgentName,
		TurnID: NewID(), Via: d.Via}
	tr.info.MainTurnID = tr.info.TurnID
	if r.cfg.TurnEnded != nil {
		defer func() {
			info := tr.info
			info.Stopped = errors.Is(context.Cause(ctx), errStopped)
			r.cfg.TurnEnded(info)
		}()
	}
	if r.cfg.Start != nil {
		if _, err := r.cfg.Start(ctx, tr.info); err != nil {
			return ContentBlock{}, err
		}
	}
	if r.cfg.TurnStarted != nil {
		if err := r.cfg.TurnStarted(ctx, tr.info); err != nil {
			return ContentBlock{}, err
		}
	}
	c := d.Call
	s.history = append(s.history, Msg{ID: NewID(), Name: firstNonEmpty(d.Via, d.AgentName, "agent"), Role: "assistant",
		Timestamp: time.Now().UTC(), Content: []ContentBlock{{Type: "tool_use", ToolCallID: c.ID, Name: c.Name, Input: c.Input}}})
	var res ContentBlock
	defer func() {
		s.history = append(s.history, Msg{ID: NewID(), Name: "tools", Role: "user", Timestamp: time.Now().UTC(),
			Content: []ContentBlock{res}})
	}()
	dec, reason := Allow, ""
	if r.cfg.Guard != nil {
		dec, reason = r.cfg.Guard.Check(tr.info, c)
	}
	switch dec {
	case Deny:
		res = tr.refuse(c, "Refused by the safety policy: "+reason)
		return res, nil
	case Ask:
		a, refusal, ok := r.await(ctx, s, tr, c, reason, d.ConfirmTimeout)
		if !ok {
			res = refusal
			return res, nil
		}
		rec, _ := r.cfg.Guard.(ConfirmRecorder)
		// Judged again, as in a chat: what is denied now stays denied whatever the answer.
		d2, reason2 := r.cfg.Guard.Check(tr.info, c)
		if rec != nil {
			rec.Confirmed(tr.info, a, reason2)
		}
		if !a.Confirmed {
			res = tr.refuse(c, "The person declined this tool call.")
			return res, nil
		}
		if d2 == Deny {
			res = tr.refuse(c, "Refused by the safety policy: "+reason2)
			return res, nil
		}
		for _, rule := range a.Rules {
			if err := r.cfg.Guard.AllowRule(tr.info, c, rule); err != nil {
				r.log.Warn("allow rule not saved", "rule", rule, "err", err)
			}
		}
	}
	res = tr.runCall(c)
	return res, nil
}

// await asks for a confirmation of c (REQUIRE_USER_CONFIRM through the turn's emit) and waits
// for the answer. Without one (timeout, cancellation, an answer that does not name c) it
// returns false and the refusal it emitted.
func (r *Runtime) await(ctx context.Context, s *session, tr *turnRun, c ToolCall, reason string, timeout time.Duration) (ConfirmResult, ContentBlock, bool) {
	w := &waiter{calls: []ToolCall{c}, answer: make(chan []ConfirmResult, 1)}
	s.stopMu.Lock()
	s.waiting = w
	s.stopMu.Unlock()
	defer func() {
		s.stopMu.Lock()
		if s.waiting == w {
			s.waiting = nil
		}
		s.stopMu.Unlock()
	}()
	deadline := time.Now().Add(timeout)
	e := newEvent(RequireUserConfirm)
	e.ToolCalls, e.Reason, e.Value = w.calls, reason, map[string]any{"deadline": deadline.UTC().Format(time.RFC3339)}
	tr.emit(e)
	// The caller (another agent, over MCP) waits while the person answers somewhere else.
	hint := newEvent(HintBlock)
	hint.ToolCallID = c.ID
	hint.Delta = fmt.Sprintf("Waiting for the owner to confirm %s in Cubicle's chat %q (on any of their devices) until %s UTC.",
		c.Name, s.title, deadline.UTC().Format("15:04:05"))
	tr.emit(hint)
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	var why string
	select {
	case ans := <-w.answer:
		for _, a := range ans {
			if a.ToolCall.ID == c.ID {
				a.ToolCall = c
				done := newEvent(UserConfirmResult)
				done.ConfirmResults = []ConfirmResult{a}
				tr.emit(done)
				return a, ContentBlock{}, true
			}
		}
		why = "The person's answer did not name this call; it was not run."
	case <-timer.C:
		why = fmt.Sprintf("Refused: nobody confirmed this call within %s (the person is asked in Cubicle's chat of this agent, %q); ask again when they are there.",
			timeout.Round(time.Second), s.title)
	case <-ctx.Done():
		why = "Cancelled while waiting for the person's confirmation."
	}
	end := newEvent(AllToolsDenied)
	end.Reason = why
	tr.emit(end)
	return ConfirmResult{}, tr.refuse(c, why), false
}

// answer hands t's answer to a direct call waiting in s; it reports whether one was waiting.
func (s *session) answer(t Turn) bool {
	s.stopMu.Lock()
	w := s.waiting
	if w != nil {
		s.waiting = nil
	}
	s.stopMu.Unlock()
	if w == nil {
		return false
	}
	var out []ConfirmResult
	if t.ConfirmResults != nil {
		out = t.ConfirmResults
	} else {
		yes := isYes(t.Input)
		for _, c := range w.calls {
			out = append(out, ConfirmResult{Confirmed: yes, ToolCall: c})
		}
	}
	w.answer <- out
	return true
}

// Waiting returns the calls a direct call of a conversation waits to have confirmed (nil
// when none).
func (r *Runtime) Waiting(userID, sessionID string) []ToolCall {
	s := r.session(userID, sessionID)
	s.stopMu.Lock()
	defer s.stopMu.Unlock()
	if s.waiting == nil {
		return nil
	}
	return append([]ToolCall(nil), s.waiting.calls...)
}
