package agent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"time"
)

// HelperTool is the tool that hands a task to a temporary task helper (a sub-agent). Only the
// main agent is offered it: helpers cannot start helpers.
const HelperTool = "task_helper"

// HelperConfig configures temporary task helpers (SPEC §1.3, §1.6, §2.1).
//
// A helper runs inside the main agent's task_helper call, on the calling goroutine: the same
// model, its own conversation (the task as the only input), System as its prompt, at most
// MaxIters model calls and Timeout of time. It is offered only the toolbox's computer_* tools
// for a turn whose TurnInfo names the helper and its task (the toolbox gives those calls the
// task's own isolated desktop and no host tools); any other tool it calls is refused. The
// guard applies as for the main agent, except that a call the guard would ask a person about
// is refused with a message to the helper (the parent turn cannot pause inside a tool call).
// Every event the helper produces goes to the parent's stream with source "main/<name>",
// after a SUBAGENT_EXPOSED event; its final text is the task_helper call's result. A stop of
// the parent turn stops the helper.
type HelperConfig struct {
	System   string        // the helpers' system prompt; "" = a built-in one
	MaxIters int           // model calls per helper task; default 15
	Timeout  time.Duration // a helper task's time limit; default 20 minutes
	// Ended runs when a helper's task ends however it ended (finished, failed, stopped,
	// timed out), after its last tool call returned: the place to remove its task-isolated
	// desktop. It runs on the turn's goroutine and should not take more than a few seconds.
	Ended func(t TurnInfo)
}

const defaultHelperSystem = `You are a temporary task helper of an AI agent. You work on a task-isolated Linux desktop (XFCE, 1280x800) of your own, created for this task and deleted when it ends: nothing you leave there is kept, and you cannot see the agent's own desktop or files.
Use the computer_* tools: take a screenshot first, act, and check each result. Prefer computer_shell and the file tools for work that does not need the screen.
When you are done, answer with a short report of what you did and found (include any content the agent asked for, since your files will be gone).`

func (h *HelperConfig) defaults() {
	if h.System == "" {
		h.System = defaultHelperSystem
	}
	if h.MaxIters <= 0 {
		h.MaxIters = 15
	}
	if h.Timeout <= 0 {
		h.Timeout = 20 * time.Minute
	}
}

var helperSpec = ToolSpec{
	Name: HelperTool,
	Description: "Hand a self-contained task to a temporary helper. The helper gets its own fresh, task-isolated desktop " +
		"(removed when the task ends; it cannot see your desktop or your files) and only the computer_* tools; it " +
		"answers with a report, which is this tool's result. Use it for side work that should not touch your own desktop.",
	Parameters: json.RawMessage(`{"type":"object","properties":{` +
		`"name":{"type":"string","description":"a short role for the helper, e.g. researcher (lowercase letters, digits, - or _; at most 32)"},` +
		`"task":{"type":"string","description":"the task, with everything the helper needs to know"}},"required":["name","task"]}`),
}

var helperName = regexp.MustCompile(`^[a-z0-9][a-z0-9_-]{0,31}$`)

// errHelperTimeout is the cause of a helper cancelled by its time limit.
var errHelperTimeout = errors.New("the helper's time limit passed")

// offersHelper reports whether this turn may start task helpers.
func (tr *turnRun) offersHelper() bool {
	return !tr.helper && tr.rt.cfg.Helpers != nil
}

// tools lists what the model of this turn is offered: the toolbox's tools plus task_helper
// for the main agent; for a helper only the computer tools (without computer_copy_file, which
// reaches the host).
func (tr *turnRun) tools() []ToolSpec {
	all := tr.rt.cfg.Tools.Tools(tr.ctx, tr.info)
	if !tr.helper {
		if tr.offersHelper() && tr.model != nil {
			all = append(all, helperSpec)
		}
		return append(all, tr.externalSpecs()...)
	}
	var out []ToolSpec
	tr.offered = map[string]bool{}
	for _, t := range all {
		if strings.HasPrefix(t.Name, "computer_") && t.Name != "computer_copy_file" {
			out = append(out, t)
			tr.offered[t.Name] = true
		}
	}
	return out
}

// runHelper runs task_helper call c: a helper turn whose events stream with its source and
// whose final text becomes c's result.
func (tr *turnRun) runHelper(c ToolCall, out *ToolOutput) string {
	name, _ := c.Input["name"].(string)
	name = strings.ToLower(strings.TrimSpace(name))
	task, _ := c.Input["task"].(string)
	task = strings.TrimSpace(task)
	if !helperName.MatchString(name) {
		out.Text(fmt.Sprintf("Error: the helper's name %q must be a short role such as researcher: 1–32 lowercase letters, digits, - or _.", name))
		return StateError
	}
	if task == "" {
		out.Text("Error: the argument \"task\" (what the helper should do) is required.")
		return StateError
	}
	if tr.model == nil {
		// A task_helper call confirmed by a person runs before the turn resolved its model.
		var m Model
		var err error
		if tr.rt.cfg.Models != nil {
			m, err = tr.rt.cfg.Models(tr.ctx, tr.t.AgentID, tr.t.ChatModel)
		}
		if m == nil || err != nil {
			if err == nil || errors.Is(err, ErrNoModel) {
				err = errors.New("no model is configured (Settings → Model)")
			}
			out.Text("Error: a task helper needs a model: " + err.Error())
			return StateError
		}
		tr.model = m
	}
	hc := tr.rt.cfg.Helpers
	ctx, cancel := context.WithTimeoutCause(tr.ctx, hc.Timeout, errHelperTimeout)
	defer cancel()
	info := tr.info
	info.TurnID, info.Step, info.Helper = NewID(), 0, name
	info.TaskID = info.TurnID
	source := info.Source()
	h := &turnRun{
		rt: tr.rt, s: &session{}, ctx: ctx, info: info, model: tr.model,
		t:      Turn{SessionID: tr.t.SessionID, UserID: tr.t.UserID, AgentID: tr.t.AgentID, AgentName: name, Input: task, ChatModel: tr.t.ChatModel},
		emit:   func(e Event) { e.Source = source; tr.emit(e) },
		system: hc.System, maxIters: hc.MaxIters, helper: true,
		reply: Msg{ID: NewID(), Name: name, Role: "assistant", Timestamp: time.Now().UTC()},
	}
	if hc.Ended != nil {
		defer hc.Ended(info)
	}
	exposed := newEvent(SubagentExposed)
	exposed.Name, exposed.Role, exposed.ToolCallID = name, "assistant", c.ID
	exposed.Metadata = map[string]any{"task": task, "taskId": info.TaskID}
	h.emit(exposed)
	h.s.history = []Msg{{ID: NewID(), Name: tr.reply.Name, Role: "user", Timestamp: time.Now().UTC(),
		Content: []ContentBlock{{Type: "text", Text: task}}}}
	err := h.loop(tr.model)
	tr.addUsage(h.usage)
	var report []string
	for _, b := range h.reply.Content {
		if b.Type == "text" && strings.TrimSpace(b.Text) != "" {
			report = append(report, b.Text)
		}
	}
	text := strings.Join(report, "\n\n")
	cause := context.Cause(ctx)
	switch {
	case errors.Is(cause, errStopped):
		out.Text(fmt.Sprintf("The helper %s was stopped.", name))
		return StateInterrupted
	case errors.Is(cause, errHelperTimeout):
		out.Text(fmt.Sprintf("Error: the helper %s ran out of time (%s).", name, hc.Timeout))
		if text != "" {
			out.Text(" Its last words: " + text)
		}
		return StateError
	case err != nil:
		tr.rt.log.Warn("task helper failed", "session", tr.t.SessionID, "helper", name, "err", err)
		out.Text(fmt.Sprintf("Error: the helper %s failed: %v", name, err))
		return StateError
	}
	if text == "" {
		text = fmt.Sprintf("The helper %s finished without a report.", name)
	}
	out.Text(text)
	return StateSuccess
}
