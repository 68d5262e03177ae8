package agent_test

import (
	"context"
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"

	"cubicle/backend/agent"
	"cubicle/backend/agent/openai"
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
