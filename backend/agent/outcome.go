package agent

import (
	"context"
	"errors"
	"strings"
	"time"
)

// Outcome is what a finished turn did, for Config.Finished (the knowledge base of past runs
// indexes it): the person's request, the tools called since it in order, the reply, and
// whether the turn worked.
type Outcome struct {
	Info TurnInfo
	// RequestID and RequestAt identify the person's message the turn answered. A turn that
	// answers a confirmation carries the request of the turn that paused (the same ID), and
	// Tools then run from that request on: the whole run, across the pause.
	RequestID string
	RequestAt time.Time
	Request   string
	Tools     []ToolStep
	// Result is the reply's text; Error why the turn failed ("" when it did not).
	Result  string
	Error   string
	Stopped bool
	// Paused: the turn waits for a person's confirmation; the turn that answers finishes
	// the run.
	Paused    bool
	StartedAt time.Time
	EndedAt   time.Time
}

// ToolStep is one tool call of a run: the tool's name and its final state (StateSuccess, …).
type ToolStep struct {
	Name  string
	State string
}

// outcome sums up the turn tr of session s that ran from started and ended with err (the
// caller holds s.mu).
func (r *Runtime) outcome(s *session, tr *turnRun, err error, started time.Time) Outcome {
	o := Outcome{Info: tr.info, StartedAt: started, EndedAt: time.Now().UTC(), Paused: len(s.pending) > 0,
		Stopped: errors.Is(context.Cause(tr.ctx), errStopped)}
	if err != nil && !o.Stopped {
		o.Error = err.Error()
	}
	var out []string
	for _, b := range tr.reply.Content {
		if b.Type == "text" && b.Text != "" {
			out = append(out, b.Text)
		}
	}
	o.Result = strings.Join(out, "\n")
	from := 0
	for i := len(s.history) - 1; i >= 0; i-- {
		if text, ok := request(s.history[i]); ok {
			o.RequestID, o.RequestAt, o.Request, from = s.history[i].ID, s.history[i].Timestamp, text, i+1
			break
		}
	}
	for _, m := range s.history[from:] {
		for _, b := range m.Content {
			if b.Type == "tool_result" {
				o.Tools = append(o.Tools, ToolStep{Name: b.Name, State: b.State})
			}
		}
	}
	return o
}

// request returns the text of a person's message that asks for something (not tool results,
// not a yes or no answering a confirmation).
func request(m Msg) (string, bool) {
	if m.Role != "user" || m.Name == "tools" {
		return "", false
	}
	var parts []string
	for _, b := range m.Content {
		if b.Type == "text" && strings.TrimSpace(b.Text) != "" {
			parts = append(parts, b.Text)
		}
	}
	text := strings.Join(parts, "\n")
	if text == "" || isYes(text) || isNo(text) {
		return "", false
	}
	return text, true
}
