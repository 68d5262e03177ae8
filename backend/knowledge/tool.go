package knowledge

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"

	"cubicle/backend/agent"
)

// Tool is the agents' tool over the knowledge base.
const Tool = "recall_past_runs"

var toolSpec = agent.ToolSpec{
	Name: Tool,
	Description: "Search what this account's agents did before: past runs (the person's request, the tools used in order, the outcome, when, and the chat) " +
		"that best match a description of the task. Use it before a task that may have been done before, to reuse what worked and avoid what failed.",
	Parameters: json.RawMessage(`{"type":"object","properties":{` +
		`"query":{"type":"string","description":"what the task is about, in your own words"},` +
		`"limit":{"type":"integer","minimum":1,"maximum":20,"description":"how many runs to return (default 5)"}},` +
		`"required":["query"]}`),
}

// Tools offers recall_past_runs to an agent's own turns (not to task helpers, whose tools
// are their task desktop's).
func (s *Service) Tools(_ context.Context, t agent.TurnInfo) []agent.ToolSpec {
	if t.Helper != "" || t.UserID == "" {
		return nil
	}
	return []agent.ToolSpec{toolSpec}
}

// Owns reports whether name is the knowledge base's tool.
func Owns(name string) bool { return name == Tool }

// Call runs recall_past_runs for the turn's account (t.UserID) and writes the matches.
func (s *Service) Call(ctx context.Context, t agent.TurnInfo, c agent.ToolCall, out *agent.ToolOutput) string {
	q, _ := c.Input["query"].(string)
	limit := 0
	switch v := c.Input["limit"].(type) {
	case float64:
		limit = int(v)
	case int:
		limit = v
	case nil:
	default:
		out.Text("Error: limit must be a number between 1 and 20")
		return agent.StateError
	}
	res, err := s.Search(ctx, t.UserID, q, limit)
	if err != nil {
		out.Text("Error: " + err.Error())
		return agent.StateError
	}
	out.Text(FormatResult(res))
	return agent.StateSuccess
}

// FormatResult is a search's result as text for a model.
func FormatResult(res Result) string {
	var b strings.Builder
	how := "keyword search (BM25)"
	if res.Mode == ModeHybrid {
		how = "keyword search (BM25) re-ranked by embeddings"
	}
	if len(res.Hits) == 0 {
		fmt.Fprintf(&b, "No past run of this account matches %q (%s).", res.Query, how)
		if res.Notice != "" {
			b.WriteString("\nNote: " + res.Notice)
		}
		return b.String()
	}
	fmt.Fprintf(&b, "%d past run(s) matching %q, best first (%s):\n", len(res.Hits), res.Query, how)
	if res.Notice != "" {
		b.WriteString("Note: " + res.Notice + "\n")
	}
	for i, h := range res.Hits {
		fmt.Fprintf(&b, "\n%d. [%s] %s", i+1, h.Status, h.EndedAt.UTC().Format("2006-01-02 15:04 UTC"))
		if h.AgentName != "" {
			fmt.Fprintf(&b, " by %s", h.AgentName)
		}
		fmt.Fprintf(&b, "\n   request: %s\n", oneLine(h.Request, 400))
		if len(h.Tools) > 0 {
			fmt.Fprintf(&b, "   tools (%d calls): %s\n", h.ToolCalls, strings.Join(h.Tools, " → "))
		} else {
			b.WriteString("   tools: none\n")
		}
		if h.Error != "" {
			fmt.Fprintf(&b, "   error: %s\n", oneLine(h.Error, 300))
		}
		if h.Result != "" {
			fmt.Fprintf(&b, "   outcome: %s\n", oneLine(h.Result, 500))
		}
		fmt.Fprintf(&b, "   chat: %s (session %s)\n", h.Link, h.SessionID)
	}
	return strings.TrimRight(b.String(), "\n")
}

func oneLine(s string, n int) string {
	return clip(strings.Join(strings.Fields(s), " "), n)
}
