package agent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"
)

// turnRun is the state of one running turn.
type turnRun struct {
	rt    *Runtime
	s     *session
	t     Turn
	emit  func(Event)
	ctx   context.Context
	info  TurnInfo
	reply Msg
	usage Usage

	system   string
	maxIters int
	model    Model // the turn's model; nil in operator mode
	// helper is set in a task helper's run: confirmations are refused instead of asked, and
	// only the tools in offered may run.
	helper  bool
	offered map[string]bool
}

func (tr *turnRun) run() error {
	if tr.rt.cfg.TurnStarted != nil {
		if err := tr.rt.cfg.TurnStarted(tr.ctx, tr.info); err != nil {
			return err
		}
	}
	// The person's message is in the history and saved already (Runtime.Run saves it, with
	// the turn marked running, before the turn is acknowledged).
	if len(tr.s.pending) > 0 {
		if err := tr.resumeConfirm(); err != nil {
			return err
		}
		tr.checkpoint()
	}
	var model Model
	if tr.rt.cfg.Models != nil {
		m, err := tr.rt.cfg.Models(tr.ctx, tr.t.AgentID, tr.t.ChatModel)
		switch {
		case errors.Is(err, ErrNoModel):
		case err != nil:
			return fmt.Errorf("model: %w", err)
		default:
			model = m
		}
	}
	if model == nil {
		return tr.operator()
	}
	tr.model = model
	return tr.loop(model)
}

// loop calls the model and runs its tool calls until it answers without any.
func (tr *turnRun) loop(model Model) error {
	tools := tr.tools()
	var temp *float64
	if tr.t.ChatModel != nil {
		temp = tr.t.ChatModel.Temperature
	}
	for iter := 1; ; iter++ {
		if iter > tr.maxIters {
			e := newEvent(ExceedMaxIters)
			e.MaxIters, e.CurrentIter = tr.maxIters, iter-1
			tr.emit(e)
			if tr.helper {
				tr.text(fmt.Sprintf("The helper stopped after %d model calls (its limit) before finishing.", tr.maxIters))
			} else {
				tr.text(fmt.Sprintf("Stopped after %d model calls (the limit per turn). Send a message to continue.", tr.maxIters))
			}
			return nil
		}
		reply, err := tr.callModel(model, ModelRequest{System: tr.system, Messages: trimImages(tr.s.history, KeepImages), Tools: tools, Temperature: temp})
		if err != nil {
			if errors.Is(err, ErrStreamBroken) && reply.Text != "" {
				// What arrived before the break is kept; its unfinished tool calls are not.
				tr.s.history = append(tr.s.history, Msg{ID: NewID(), Name: tr.reply.Name, Role: "assistant", Timestamp: time.Now().UTC(),
					Content: []ContentBlock{{Type: "text", Text: reply.Text}}, Metadata: map[string]any{"interrupted": true}})
				tr.reply.Content = append(tr.reply.Content, ContentBlock{Type: "text", Text: reply.Text})
			}
			return err
		}
		msg := Msg{ID: NewID(), Name: tr.reply.Name, Role: "assistant", Timestamp: time.Now().UTC(), Metadata: reply.Meta}
		msg.Content = append(msg.Content, reply.Blocks...)
		if reply.Text != "" {
			msg.Content = append(msg.Content, ContentBlock{Type: "text", Text: reply.Text})
			tr.reply.Content = append(tr.reply.Content, ContentBlock{Type: "text", Text: reply.Text})
		}
		for _, c := range reply.ToolCalls {
			msg.Content = append(msg.Content, ContentBlock{Type: "tool_use", ToolCallID: c.ID, Name: c.Name, Input: c.Input, Meta: c.Meta})
		}
		tr.s.history = append(tr.s.history, msg)
		if len(reply.ToolCalls) == 0 {
			return nil
		}
		tr.checkpoint() // the calls are on record before they run
		paused, err := tr.runCalls(reply.ToolCalls)
		if err != nil || paused {
			return err
		}
		tr.checkpoint()
	}
}

// checkpoint saves the conversation as it is now (the main agent's turn only: a helper's
// steps live in its parent's tool call).
func (tr *turnRun) checkpoint() {
	if !tr.helper {
		tr.rt.save(tr.s, tr.t.UserID, tr.t.SessionID)
	}
}

// callModel streams one model call as events.
func (tr *turnRun) callModel(model Model, req ModelRequest) (ModelReply, error) {
	tr.emit(newEvent(ModelCallStart))
	var textID, thinkID string
	type open struct{ id, name string }
	calls := map[int]*open{}
	endThinking := func() {
		if thinkID != "" {
			e := newEvent(ThinkingBlockEnd)
			e.BlockID = thinkID
			tr.emit(e)
			thinkID = ""
		}
	}
	reply, err := model.Stream(tr.ctx, req, func(d ModelDelta) {
		switch {
		case d.Hint != "":
			e := newEvent(HintBlock)
			e.Delta = d.Hint
			tr.emit(e)
		case d.Thinking != "":
			if thinkID == "" {
				thinkID = NewID()
				e := newEvent(ThinkingBlockStart)
				e.BlockID = thinkID
				tr.emit(e)
			}
			e := newEvent(ThinkingBlockDelta)
			e.BlockID, e.Delta = thinkID, d.Thinking
			tr.emit(e)
		case d.Text != "":
			endThinking()
			if textID == "" {
				textID = NewID()
				e := newEvent(TextBlockStart)
				e.BlockID = textID
				tr.emit(e)
			}
			e := newEvent(TextBlockDelta)
			e.BlockID, e.Delta = textID, d.Text
			tr.emit(e)
		default:
			endThinking()
			c := calls[d.ToolIndex]
			if c == nil {
				c = &open{id: d.ToolID, name: d.ToolName}
				calls[d.ToolIndex] = c
				e := newEvent(ToolCallStart)
				e.ToolCallID, e.ToolCallName = c.id, c.name
				tr.emit(e)
			}
			if d.ToolArgs != "" {
				e := newEvent(ToolCallDelta)
				e.ToolCallID, e.ToolCallName, e.Delta = c.id, c.name, d.ToolArgs
				tr.emit(e)
			}
		}
	})
	endThinking()
	if textID != "" {
		e := newEvent(TextBlockEnd)
		e.BlockID = textID
		tr.emit(e)
	}
	for _, c := range reply.ToolCalls {
		e := newEvent(ToolCallEnd)
		e.ToolCallID, e.ToolCallName = c.ID, c.Name
		tr.emit(e)
	}
	end := newEvent(ModelCallEnd)
	u := reply.Usage
	if u.TotalTokens == 0 {
		u.TotalTokens = u.InputTokens + u.OutputTokens
	}
	end.Usage = &u
	tr.emit(end)
	tr.addUsage(u)
	if err == nil && len(reply.ToolCalls) == 0 && (reply.FinishReason == "length" || reply.FinishReason == "content_filter") {
		// The model ended its reply before finishing it (its output limit, a filter).
		e := newEvent(RequestStop)
		e.Reason, e.GenerateReason = "the model stopped its reply ("+reply.FinishReason+")", StopModel
		tr.emit(e)
	}
	if err != nil {
		if cause := context.Cause(tr.ctx); errors.Is(cause, errStopped) {
			tr.stopped()
			return reply, nil
		}
		return reply, err
	}
	return reply, nil
}

func (tr *turnRun) addUsage(u Usage) {
	tr.usage.InputTokens += u.InputTokens
	tr.usage.OutputTokens += u.OutputTokens
	tr.usage.CachedTokens += u.CachedTokens
	tr.usage.TotalTokens += u.TotalTokens
	tr.usage.Time += u.Time
	cp := tr.usage
	tr.reply.Usage = &cp
}

// runCalls passes calls through the guard and runs the allowed ones. Calls the guard asks
// about pause the conversation (REQUIRE_USER_CONFIRM); paused reports that.
func (tr *turnRun) runCalls(calls []ToolCall) (paused bool, err error) {
	results := Msg{ID: NewID(), Name: "tools", Role: "user", Timestamp: time.Now().UTC()}
	var ask []ToolCall
	var askWhy []string // why each asked call needs the person: shown on the confirmation card
	denied := 0
	for _, c := range calls {
		d, reason := Allow, ""
		if tr.rt.cfg.Guard != nil && !tr.offersExternal(c.Name) {
			// An external tool runs on the person's own client and does nothing without
			// them (picking the file is their answer): the guard has nothing to judge.
			d, reason = tr.rt.cfg.Guard.Check(tr.info, c)
		}
		if tr.helper && !tr.offered[c.Name] {
			d, reason = Deny, fmt.Sprintf("a task helper can use only the computer_* tools of its own task desktop; %s is not available to helpers", c.Name)
		}
		if c.Unsupported != "" {
			results.Content = append(results.Content, tr.unsupported(c))
			continue
		}
		if c.Confirm != "" && d == Allow {
			// The model's provider asks for a person (a safety check): the guard's allow is
			// not enough, its deny still is.
			d, reason = Ask, c.Confirm
		}
		switch d {
		case Deny:
			denied++
			results.Content = append(results.Content, tr.refuse(c, "Refused by the safety policy: "+reason))
		case Ask:
			if tr.helper {
				// A helper cannot pause for a person: its parent's turn is waiting on it.
				denied++
				results.Content = append(results.Content, tr.refuse(c, "Refused: this call needs a person's confirmation ("+reason+
					"), and a task helper cannot ask for one. Do the task another way, or report back so the main agent can ask the person."))
				continue
			}
			ask = append(ask, c)
			if reason != "" {
				askWhy = append(askWhy, c.Name+": "+reason)
			}
		default:
			results.Content = append(results.Content, tr.runCall(c))
			if errors.Is(context.Cause(tr.ctx), errStopped) {
				tr.s.history = append(tr.s.history, results)
				tr.stopped()
				return true, nil
			}
		}
	}
	if len(results.Content) > 0 {
		tr.s.history = append(tr.s.history, results)
	}
	if len(ask) > 0 {
		tr.s.pending = ask
		if rec := tr.rt.cfg.Recorder; rec != nil {
			// Queued behind the person's answer: PENDING in the history until it runs.
			if tr.s.pendingRuns == nil {
				tr.s.pendingRuns = map[string]string{}
			}
			for _, c := range ask {
				tr.info.Step++
				tr.s.pendingRuns[c.ID] = rec.Begin(tr.info, c)
				tr.info.Step--
			}
		}
		e := newEvent(RequireUserConfirm)
		e.ToolCalls, e.Reason = ask, strings.Join(askWhy, "; ")
		tr.emit(e)
		why := ""
		for _, c := range ask {
			if c.Confirm != "" {
				why += " " + c.Name + ": " + c.Confirm
			}
		}
		if why != "" {
			why = " The model's provider asks for it:" + why
		}
		tr.text("Waiting for your confirmation before running " + names(ask) + "." + why)
		stop := newEvent(RequestStop)
		stop.Reason, stop.GenerateReason = "waiting for the person's confirmation", StopPermission
		tr.emit(stop)
		return true, nil
	}
	if denied == len(calls) {
		tr.emit(newEvent(AllToolsDenied))
	}
	return false, nil
}

// resumeConfirm applies a person's answer to the pending calls of a paused conversation.
func (tr *turnRun) resumeConfirm() error {
	pending := tr.s.pending
	tr.s.pending = nil
	answers := map[string]ConfirmResult{}
	if tr.t.ConfirmResults != nil {
		for _, r := range tr.t.ConfirmResults {
			answers[r.ToolCall.ID] = r
		}
	} else {
		yes := isYes(tr.t.Input)
		for _, c := range pending {
			answers[c.ID] = ConfirmResult{Confirmed: yes, ToolCall: c}
		}
	}
	var out []ConfirmResult
	results := Msg{ID: NewID(), Name: "tools", Role: "user", Timestamp: time.Now().UTC()}
	confirmed := 0
	for _, c := range pending {
		a := answers[c.ID] // a missing answer is a no
		a.ToolCall = c
		out = append(out, a)
		if a.Confirmed {
			confirmed++
		}
	}
	e := newEvent(UserConfirmResult)
	e.ConfirmResults = out
	tr.emit(e)
	rec, _ := tr.rt.cfg.Guard.(ConfirmRecorder)
	for _, a := range out {
		// The call is judged again: settings may have changed while it waited, and what is
		// denied now stays denied whatever the answer.
		d, reason := Ask, ""
		if tr.rt.cfg.Guard != nil {
			d, reason = tr.rt.cfg.Guard.Check(tr.info, a.ToolCall)
		}
		if rec != nil {
			rec.Confirmed(tr.info, a, reason)
		}
		if !a.Confirmed {
			tr.closePending(a.ToolCall)
			results.Content = append(results.Content, tr.refuse(a.ToolCall, "The person declined this tool call."))
			continue
		}
		if d == Deny {
			tr.closePending(a.ToolCall)
			results.Content = append(results.Content, tr.refuse(a.ToolCall, "Refused by the safety policy: "+reason))
			continue
		}
		for _, rule := range a.Rules {
			if tr.rt.cfg.Guard == nil {
				continue
			}
			if err := tr.rt.cfg.Guard.AllowRule(tr.info, a.ToolCall, rule); err != nil {
				tr.text("The rule \"" + rule + "\" was not saved: " + err.Error())
			}
		}
		results.Content = append(results.Content, tr.runCall(a.ToolCall))
	}
	tr.s.history = append(tr.s.history, results)
	if confirmed == 0 {
		tr.emit(newEvent(AllToolsDenied))
	}
	if tr.t.ConfirmResults == nil && !isYes(tr.t.Input) && strings.TrimSpace(tr.t.Input) != "" && !isNo(tr.t.Input) {
		tr.s.history = append(tr.s.history, Msg{ID: NewID(), Name: tr.t.UserID, Role: "user",
			Content: []ContentBlock{{Type: "text", Text: tr.t.Input}}, Timestamp: time.Now().UTC()})
	}
	return nil
}

func isYes(s string) bool {
	switch strings.ToLower(strings.TrimSpace(s)) {
	case "y", "yes", "ok", "approve", "confirm", "allow":
		return true
	}
	return false
}

func isNo(s string) bool {
	switch strings.ToLower(strings.TrimSpace(s)) {
	case "n", "no", "deny", "reject", "cancel":
		return true
	}
	return false
}

func names(calls []ToolCall) string {
	var n []string
	for _, c := range calls {
		n = append(n, c.Name)
	}
	return strings.Join(n, ", ")
}

// runCall runs one allowed call and returns its tool_result block.
func (tr *turnRun) runCall(c ToolCall) ContentBlock {
	tr.info.Step++
	start := newEvent(ToolResultStart)
	start.ToolCallID, start.ToolCallName = c.ID, c.Name
	tr.emit(start)
	out := &ToolOutput{emit: tr.emit, callID: c.ID}
	rec := tr.rt.cfg.Recorder
	var id string
	if rec != nil {
		// A call that waited for a confirmation was recorded PENDING when it was asked.
		if id = tr.s.pendingRuns[c.ID]; id == "" {
			id = rec.Begin(tr.info, c)
		}
		delete(tr.s.pendingRuns, c.ID)
	}
	began := time.Now()
	var mu sync.Mutex // began is set from the tool's goroutine (Started) and read below
	out.started = func() {
		mu.Lock()
		began = time.Now()
		mu.Unlock()
		if rec != nil {
			rec.Running(id)
		}
	}
	var state string
	switch {
	case c.Name == HelperTool && tr.offersHelper():
		out.Started()
		state = tr.runHelper(c, out)
	case tr.offersExternal(c.Name):
		state = tr.runExternal(c, out)
	default:
		state = tr.rt.cfg.Tools.Call(tr.ctx, tr.info, c, out)
	}
	if errors.Is(context.Cause(tr.ctx), errStopped) && state != StateSuccess {
		state = StateInterrupted
	}
	if rec != nil {
		mu.Lock()
		elapsed := time.Since(began)
		mu.Unlock()
		out.mu.Lock()
		end := RunEnd{State: state, Output: out.blocks, Elapsed: elapsed, TimedOut: out.timedOut, Usage: out.usage}
		out.mu.Unlock()
		rec.End(id, end)
	}
	end := newEvent(ToolResultEnd)
	end.ToolCallID, end.ToolCallName, end.State = c.ID, c.Name, state
	tr.emit(end)
	return ContentBlock{Type: "tool_result", ToolCallID: c.ID, Name: c.Name, State: state, Content: out.Blocks()}
}

// closePending ends the PENDING history run of a confirmation-waiting call that will not run
// (declined, or denied when judged again).
func (tr *turnRun) closePending(c ToolCall) {
	id := tr.s.pendingRuns[c.ID]
	delete(tr.s.pendingRuns, c.ID)
	if id != "" && tr.rt.cfg.Recorder != nil {
		tr.rt.cfg.Recorder.End(id, RunEnd{State: StateDenied})
	}
}

// refuse emits a denied result for c without running it.
func (tr *turnRun) refuse(c ToolCall, why string) ContentBlock {
	start := newEvent(ToolResultStart)
	start.ToolCallID, start.ToolCallName = c.ID, c.Name
	tr.emit(start)
	out := &ToolOutput{emit: tr.emit, callID: c.ID}
	out.Text(why)
	end := newEvent(ToolResultEnd)
	end.ToolCallID, end.ToolCallName, end.State = c.ID, c.Name, StateDenied
	tr.emit(end)
	return ContentBlock{Type: "tool_result", ToolCallID: c.ID, Name: c.Name, State: StateDenied, Content: out.blocks}
}

// unsupported answers a call a model adapter could not map onto a tool with an error result,
// without running anything.
func (tr *turnRun) unsupported(c ToolCall) ContentBlock {
	start := newEvent(ToolResultStart)
	start.ToolCallID, start.ToolCallName = c.ID, c.Name
	tr.emit(start)
	out := &ToolOutput{emit: tr.emit, callID: c.ID}
	out.Text("Error: " + c.Unsupported)
	end := newEvent(ToolResultEnd)
	end.ToolCallID, end.ToolCallName, end.State = c.ID, c.Name, StateError
	tr.emit(end)
	return ContentBlock{Type: "tool_result", ToolCallID: c.ID, Name: c.Name, State: StateError, Content: out.blocks}
}

func (tr *turnRun) stopped() {
	if tr.helper {
		// The parent's turn reports the stop once.
		tr.reply.Content = append(tr.reply.Content, ContentBlock{Type: "text", Text: "Stopped."})
		return
	}
	e := newEvent(RequestStop)
	e.Reason, e.GenerateReason = "stopped by the person", StopUser
	if context.Cause(tr.ctx) == errStoppedAll {
		e.Reason, e.GenerateReason = "stopped by the server", StopMiddleware
	}
	tr.emit(e)
	tr.reply.Content = append(tr.reply.Content, ContentBlock{Type: "text", Text: "Stopped. Send a message to continue."})
}

// text emits a whole text block and adds it to the reply.
func (tr *turnRun) text(s string) {
	id := NewID()
	e := newEvent(TextBlockStart)
	e.BlockID = id
	tr.emit(e)
	e = newEvent(TextBlockDelta)
	e.BlockID, e.Delta = id, s
	tr.emit(e)
	e = newEvent(TextBlockEnd)
	e.BlockID = id
	tr.emit(e)
	tr.reply.Content = append(tr.reply.Content, ContentBlock{Type: "text", Text: s})
}

// operator runs a slash command as a tool call (SPEC §2.2): the same guard, tools and events
// as a model's call.
func (tr *turnRun) operator() error {
	if len(tr.s.pending) == 0 && tr.t.ConfirmResults != nil {
		return nil
	}
	in := strings.TrimSpace(tr.t.Input)
	if in == "" || isYes(in) || isNo(in) {
		return nil // a confirmation answer was handled by resumeConfirm
	}
	call, help, err := ParseCommand(in)
	if err != nil {
		tr.text(err.Error() + "\n\n" + OperatorHelp)
		return nil
	}
	if help {
		tr.text(OperatorHelp)
		return nil
	}
	call.ID = "op_" + NewID()[:12]
	st := newEvent(ToolCallStart)
	st.ToolCallID, st.ToolCallName = call.ID, call.Name
	tr.emit(st)
	args, _ := json.Marshal(call.Input)
	d := newEvent(ToolCallDelta)
	d.ToolCallID, d.ToolCallName, d.Delta = call.ID, call.Name, string(args)
	tr.emit(d)
	en := newEvent(ToolCallEnd)
	en.ToolCallID, en.ToolCallName = call.ID, call.Name
	tr.emit(en)
	tr.s.history = append(tr.s.history, Msg{ID: NewID(), Name: tr.reply.Name, Role: "assistant", Timestamp: time.Now().UTC(),
		Content: []ContentBlock{{Type: "tool_use", ToolCallID: call.ID, Name: call.Name, Input: call.Input}}})
	tr.checkpoint()
	paused, err := tr.runCalls([]ToolCall{call})
	if err != nil || paused {
		return err
	}
	last := tr.s.history[len(tr.s.history)-1]
	for _, b := range last.Content {
		if b.Type == "tool_result" {
			tr.text(fmt.Sprintf("`%s` finished: %s.", call.Name, b.State))
		}
	}
	return nil
}
