package agent_test

import (
	"context"
	"encoding/json"
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"cubicle/backend/agent"
	"cubicle/backend/agent/openai"
	"cubicle/backend/fault"
	"cubicle/backend/store"
)

func TestConversationsSurviveRestart(t *testing.T) {
	path := filepath.Join(t.TempDir(), "c.db")
	st, err := store.Open(path, store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	h := newHarness(t, true, 0)
	newRuntime := func(st *store.Store) *agent.Runtime {
		rt, err := agent.New(agent.Config{Tools: h.tools, Guard: h.guard, Sessions: st,
			Models: func(ctx context.Context, id string, c *agent.ChatModel) (agent.Model, error) {
				return openai.New(openai.Config{BaseURL: h.server.URL + "/v1", APIKey: "test-key", Model: "m", AllowPrivate: true})
			}})
		if err != nil {
			t.Fatal(err)
		}
		return rt
	}
	h.rt = newRuntime(st)
	h.model.replies = [][]string{
		toolReply("c1", "shot", `{}`), toolReply("c2", "shot", `{}`), toolReply("c3", "shot", `{}`), toolReply("c4", "shot", `{}`),
		toolReply("c5", "echo", `{"command":"rm -rf x"}`),
		textReply("after restart"),
	}
	h.run("s1", "take four screenshots then clean")
	if got := len(h.tools.called()); got != 4 {
		t.Fatalf("calls before pause = %d", got)
	}
	// The fifth model request carried only the newest screenshots.
	raw, _ := json.Marshal(h.model.request(4)["messages"])
	if n := strings.Count(string(raw), "data:image/png"); n != agent.KeepImages {
		t.Fatalf("model got %d images, want %d", n, agent.KeepImages)
	}
	// Restart: a new runtime over the reopened store resumes the paused confirmation.
	st.Close()
	st, err = store.Open(path, store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	h.rt = newRuntime(st)
	evs := h.run("s1", "yes")
	if find(evs, agent.UserConfirmResult) == nil || find(evs, agent.AgentResult).Result.Content[0].Text != "after restart" {
		t.Fatalf("after restart: %v", types(evs))
	}
	msgs := h.model.request(5)["messages"].([]any)
	if first := msgs[0].(map[string]any); !strings.Contains(first["content"].([]any)[0].(map[string]any)["text"].(string), "four screenshots") {
		t.Fatalf("context lost across restart: %v", first)
	}
	c, err := st.ChatSession("u1", "s1")
	if err != nil || c.Title != "take four screenshots then clean" || c.AgentID != "a1" || len(c.Pending) != 0 {
		t.Fatalf("saved session = %+v, %v", c, err)
	}
	if strings.Count(string(c.History), `"type":"image"`) != agent.KeepImages {
		t.Fatalf("saved history keeps %d images", strings.Count(string(c.History), `"type":"image"`))
	}
}

// TestTurnIsDurable: while a tool runs, the person's message and the model's tool call are
// already saved and the turn is marked running; a runtime started after a crash (the first
// one never finishes) closes the turn: an interrupted result for the cut-off call and a
// notice, so the conversation shows the interruption and stays valid for the model.
func TestTurnIsDurable(t *testing.T) {
	path := filepath.Join(t.TempDir(), "c.db")
	st, err := store.Open(path, store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	h := newHarness(t, true, 0)
	resolve := func(ctx context.Context, id string, c *agent.ChatModel) (agent.Model, error) {
		return openai.New(openai.Config{BaseURL: h.server.URL + "/v1", APIKey: "test-key", Model: "m", AllowPrivate: true})
	}
	rt, err := agent.New(agent.Config{Tools: h.tools, Guard: h.guard, Sessions: st, Models: resolve})
	if err != nil {
		t.Fatal(err)
	}
	h.model.replies = [][]string{toolReply("c1", "slow", `{}`), textReply("continued")}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- rt.Run(ctx, agent.Turn{SessionID: "s1", UserID: "u1", AgentID: "a1", Input: "please wait a long time"},
			func(agent.Event) {})
	}()
	deadline := time.Now().Add(10 * time.Second)
	for len(h.tools.called()) == 0 {
		if time.Now().After(deadline) {
			t.Fatal("the slow tool was never called")
		}
		time.Sleep(5 * time.Millisecond)
	}
	c, err := st.ChatSession("u1", "s1")
	if err != nil {
		t.Fatalf("nothing saved while the tool runs: %v", err)
	}
	if !strings.Contains(string(c.History), "please wait a long time") || !strings.Contains(string(c.History), `"toolCallId":"c1"`) ||
		c.ActiveTurn == nil || c.ActiveTurn.ID == "" {
		t.Fatalf("saved while the tool runs: active %v, history %s", c.ActiveTurn, c.History)
	}

	// "Restart": a new runtime over the same store, while the first is stuck in its tool.
	rt2, err := agent.New(agent.Config{Tools: h.tools, Guard: h.guard, Sessions: st, Models: resolve})
	if err != nil {
		t.Fatal(err)
	}
	n, err := rt2.RecoverInterrupted(st)
	if err != nil || n != 1 {
		t.Fatalf("RecoverInterrupted = %d, %v; want 1", n, err)
	}
	c, _ = st.ChatSession("u1", "s1")
	var hist []agent.Msg
	if err := json.Unmarshal(c.History, &hist); err != nil {
		t.Fatal(err)
	}
	if c.ActiveTurn != nil || len(hist) != 4 {
		t.Fatalf("after recovery: active %v, %d messages", c.ActiveTurn, len(hist))
	}
	if r := hist[2].Content[0]; r.Type != "tool_result" || r.ToolCallID != "c1" || r.State != agent.StateInterrupted {
		t.Errorf("the cut-off call's result: %+v", r)
	}
	if last := hist[3]; last.Role != "assistant" || last.Metadata["interrupted"] != true || last.Content[0].Text != agent.InterruptedText {
		t.Errorf("the interruption notice: %+v", last)
	}
	if n, _ := rt2.RecoverInterrupted(st); n != 0 {
		t.Errorf("a second recovery closed %d turns", n)
	}
	// The conversation goes on: the model gets a valid history (every call answered).
	var evs []agent.Event
	if err := rt2.Run(context.Background(), agent.Turn{SessionID: "s1", UserID: "u1", AgentID: "a1", Input: "go on"},
		func(e agent.Event) { evs = append(evs, e) }); err != nil {
		t.Fatal(err)
	}
	if r := find(evs, agent.AgentResult); r == nil || r.Result.Content[0].Text != "continued" {
		t.Fatalf("turn after recovery: %v", types(evs))
	}
	cancel()
	<-done
}

// failingStore is a real store whose conversation saves fail.
type failingStore struct{ *store.Store }

func (failingStore) PutChatSession(store.ChatSession) error { return errors.New("disk full") }

// TestTurnSavedBeforeStart (issue 31 item 3): when a turn is acknowledged (AGENT_START, the
// first event) the person's message and the running mark are in the data file already; a
// save that fails ends the turn before any event, with an error saying so.
func TestTurnSavedBeforeStart(t *testing.T) {
	st, err := store.Open(filepath.Join(t.TempDir(), "c.db"), store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	h := newHarness(t, true, 0)
	h.model.replies = [][]string{textReply("hello")}
	models := func(ctx context.Context, id string, c *agent.ChatModel) (agent.Model, error) {
		return openai.New(openai.Config{BaseURL: h.server.URL + "/v1", APIKey: "test-key", Model: "m", AllowPrivate: true})
	}
	rt, err := agent.New(agent.Config{Tools: h.tools, Guard: h.guard, Sessions: st, Models: models})
	if err != nil {
		t.Fatal(err)
	}
	var atStart *store.ChatSession
	err = rt.Run(t.Context(), agent.Turn{SessionID: "s1", UserID: "u1", Input: "keep this message"}, func(e agent.Event) {
		if e.Type == agent.AgentStart && atStart == nil {
			c, err := st.ChatSession("u1", "s1")
			if err != nil {
				t.Errorf("at AGENT_START the conversation is not saved: %v", err)
			}
			atStart = &c
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	if atStart == nil || atStart.ActiveTurn == nil || !strings.Contains(string(atStart.History), "keep this message") {
		t.Fatalf("saved at AGENT_START: %+v", atStart)
	}

	rt, err = agent.New(agent.Config{Tools: h.tools, Guard: h.guard, Sessions: failingStore{st}, Models: models})
	if err != nil {
		t.Fatal(err)
	}
	events := 0
	err = rt.Run(t.Context(), agent.Turn{SessionID: "s2", UserID: "u1", Input: "lost?"}, func(agent.Event) { events++ })
	if !errors.Is(err, fault.ErrUnavailable) || !strings.Contains(err.Error(), "disk full") || events != 0 {
		t.Fatalf("a turn whose message cannot be saved: err %v after %d events, want unavailable before any", err, events)
	}
}
