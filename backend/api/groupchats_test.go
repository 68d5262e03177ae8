package api

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"

	"cubicle/backend/agent"
	"cubicle/backend/agent/openai"
	"cubicle/backend/groupchat"
	"cubicle/backend/history"
)

// groupModel is an OpenAI-compatible chat-completions server standing in for every member's
// model (the model name is the agent's id): to a person's message it answers with a call of
// the tool "work" carrying the message, to the tool's result with "<model>: done". It keeps
// the last user message of each request.
type groupModel struct {
	mu   sync.Mutex
	seen []modelSaw
}

type modelSaw struct{ model, user string }

func (m *groupModel) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	var body struct {
		Model    string `json:"model"`
		Messages []struct {
			Role    string `json:"role"`
			Content any    `json:"content"`
		} `json:"messages"`
	}
	raw, _ := io.ReadAll(r.Body)
	if err := json.Unmarshal(raw, &body); err != nil || len(body.Messages) == 0 {
		http.Error(w, "bad request", 400)
		return
	}
	last := body.Messages[len(body.Messages)-1]
	w.Header().Set("Content-Type", "text/event-stream")
	send := func(d string) { fmt.Fprintf(w, "data: %s\n\n", d) }
	if last.Role == "user" {
		text, _ := last.Content.(string)
		if parts, ok := last.Content.([]any); ok {
			for _, p := range parts {
				if pm, ok := p.(map[string]any); ok {
					s, _ := pm["text"].(string)
					text += s
				}
			}
		}
		m.mu.Lock()
		m.seen = append(m.seen, modelSaw{body.Model, text})
		m.mu.Unlock()
		args, _ := json.Marshal(map[string]string{"command": text})
		argStr, _ := json.Marshal(string(args))
		send(`{"choices":[{"delta":{"tool_calls":[{"index":0,"id":"call-` + fmt.Sprint(len(m.seen)) + `","type":"function","function":{"name":"work","arguments":` + string(argStr) + `}}]}}]}`)
		send(`{"choices":[{"delta":{},"finish_reason":"tool_calls"}]}`)
	} else {
		b, _ := json.Marshal(body.Model + ": done")
		send(`{"choices":[{"delta":{"content":` + string(b) + `}}]}`)
		send(`{"choices":[{"delta":{},"finish_reason":"stop"}]}`)
	}
	fmt.Fprint(w, "data: [DONE]\n\n")
}

func (m *groupModel) last() modelSaw {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.seen[len(m.seen)-1]
}

// groupTools offers "work" and records which agent's turn, in which session, ran each call.
type groupTools struct {
	mu   sync.Mutex
	runs []agent.TurnInfo
}

func (g *groupTools) Tools(context.Context, agent.TurnInfo) []agent.ToolSpec {
	return []agent.ToolSpec{{Name: "work", Description: "work", Parameters: json.RawMessage(`{"type":"object"}`)}}
}

func (g *groupTools) Call(ctx context.Context, t agent.TurnInfo, c agent.ToolCall, out *agent.ToolOutput) string {
	g.mu.Lock()
	g.runs = append(g.runs, t)
	g.mu.Unlock()
	out.Text("worked")
	return agent.StateSuccess
}

func (g *groupTools) last() agent.TurnInfo {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.runs[len(g.runs)-1]
}

// rmGuard asks before any call whose command mentions "rm ".
type rmGuard struct{}

func (rmGuard) Check(t agent.TurnInfo, c agent.ToolCall) (agent.Decision, string) {
	if cmd, _ := c.Input["command"].(string); strings.Contains(cmd, "rm ") {
		return agent.Ask, "removes files"
	}
	return agent.Allow, ""
}

func (rmGuard) AllowRule(agent.TurnInfo, agent.ToolCall, string) error { return nil }

type groupFixture struct {
	*fixture
	model *groupModel
	tools *groupTools
}

// newGroupFixture serves the real handler with the real runtime and group chats, every
// member's model being the scripted groupModel.
func newGroupFixture(t *testing.T) *groupFixture {
	f := newFixture(t)
	g := &groupFixture{fixture: f, model: &groupModel{}, tools: &groupTools{}}
	ms := httptest.NewServer(g.model)
	t.Cleanup(ms.Close)
	resolve := func(ctx context.Context, agentID string, chat *agent.ChatModel) (agent.Model, error) {
		return openai.New(openai.Config{BaseURL: ms.URL + "/v1", APIKey: "k", Model: agentID, AllowPrivate: true})
	}
	rt, err := agent.New(agent.Config{Tools: g.tools, Models: resolve, Guard: rmGuard{}, Sessions: f.store, Recorder: history.New(f.store, nil)})
	if err != nil {
		t.Fatal(err)
	}
	groups, err := groupchat.New(groupchat.Config{Store: f.store, Agents: f.srv.cfg.Profiles, Chat: rt, Logger: f.srv.log})
	if err != nil {
		t.Fatal(err)
	}
	f.srv.cfg.Chat, f.srv.cfg.Chats, f.srv.cfg.Groups = rt, f.store, groups
	return g
}

// send posts a group chat message and returns its events (SSE).
func (g *groupFixture) send(cookie, body string) (int, []agent.Event, string) {
	g.t.Helper()
	rec := g.do(req{method: "POST", path: "/api/app/chat", body: body, cookie: cookie, header: map[string]string{"Accept": "text/event-stream"}})
	if rec.Code != 200 {
		return rec.Code, nil, rec.Body.String()
	}
	var evs []agent.Event
	sc := bufio.NewScanner(rec.Body)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		if data, ok := strings.CutPrefix(sc.Text(), "data: "); ok {
			var e agent.Event
			if err := json.Unmarshal([]byte(data), &e); err != nil {
				g.t.Fatal(err)
			}
			evs = append(evs, e)
		}
	}
	return 200, evs, ""
}

// actedBy checks that a turn's events all name one agent and returns it.
func actedBy(t *testing.T, evs []agent.Event) string {
	t.Helper()
	if len(evs) < 2 || evs[0].Type != agent.AgentStart || evs[len(evs)-1].Type != agent.AgentEnd {
		t.Fatalf("stream shape: %v", evs)
	}
	for _, e := range evs {
		if e.AgentID != evs[0].AgentID {
			t.Fatalf("event %s names agent %q, the turn's start %q", e.Type, e.AgentID, evs[0].AgentID)
		}
	}
	return evs[0].AgentID
}

func TestGroupChatTurns(t *testing.T) {
	g := newGroupFixture(t)
	me := decodeBody[struct{ User userJSON }](t, g.do(req{method: "GET", path: "/api/auth/me", cookie: g.admin})).User
	ada, err := g.srv.cfg.Profiles.Create(me.ID, "Ada")
	if err != nil {
		t.Fatal(err)
	}
	bob, err := g.srv.cfg.Profiles.Create(me.ID, "Bob Two")
	if err != nil {
		t.Fatal(err)
	}
	rec := g.do(req{method: "POST", path: "/api/app/chats", cookie: g.admin, body: `{"agentIds":["` + ada.ID + `","` + bob.ID + `"]}`})
	if rec.Code != 201 {
		t.Fatalf("create: %d %s", rec.Code, rec.Body)
	}
	chat := decodeBody[groupchat.Chat](t, rec)
	if chat.Title != "Ada, Bob Two" || len(chat.Members) != 2 || chat.Members[1].SessionID != groupchat.MemberSession(chat.ID, bob.ID) {
		t.Fatalf("created: %+v", chat)
	}
	msg := func(text, to string) string {
		b, _ := json.Marshal(map[string]string{"chatId": chat.ID, "message": text, "to": to})
		return string(b)
	}

	// Without an address the first member acts, on its own conversation.
	code, evs, body := g.send(g.admin, msg("hello all", ""))
	if code != 200 || actedBy(t, evs) != ada.ID {
		t.Fatalf("first message: %d %s, acted %v", code, body, evs)
	}
	if ti := g.tools.last(); ti.AgentID != ada.ID || ti.SessionID != groupchat.MemberSession(chat.ID, ada.ID) {
		t.Fatalf("tool ran for %+v", ti)
	}

	// @name addresses a member even when it is not its turn (punctuation may follow the name).
	_, evs, _ = g.send(g.admin, msg("@Ada, more", ""))
	if actedBy(t, evs) != ada.ID || g.model.last().user != "@Ada, more" {
		t.Fatalf("@Ada acted %q, her model saw %q", actedBy(t, evs), g.model.last().user)
	}

	// @name routes to that member (the longest name that matches); it hears what was said.
	_, evs, _ = g.send(g.admin, msg("@bob two please check", ""))
	if actedBy(t, evs) != bob.ID || g.tools.last().AgentID != bob.ID {
		t.Fatalf("@bob two acted %q, tool for %q", actedBy(t, evs), g.tools.last().AgentID)
	}
	saw := g.model.last()
	if saw.model != bob.ID || !strings.Contains(saw.user, "Person to Ada: hello all") ||
		!strings.Contains(saw.user, "Ada: "+ada.ID+": done") || !strings.HasSuffix(saw.user, "@bob two please check") {
		t.Fatalf("bob's model saw %+v", saw)
	}

	// Taking turns: the member after the last one; Ada hears Bob's exchange, not her own again.
	_, evs, _ = g.send(g.admin, msg("next", ""))
	if actedBy(t, evs) != ada.ID {
		t.Fatalf("turn after bob went to %q", evs[0].AgentID)
	}
	saw = g.model.last()
	if !strings.Contains(saw.user, "Person to Bob Two: @bob two please check") || strings.Contains(saw.user, "hello all") {
		t.Fatalf("ada's model saw %q", saw.user)
	}
	// to names a member by name or id.
	for _, to := range []string{"bob two", bob.ID} {
		if _, evs, _ = g.send(g.admin, msg("again", to)); actedBy(t, evs) != bob.ID {
			t.Fatalf("to %q went to %q", to, evs[0].AgentID)
		}
	}

	// The transcript: every message in order with its agent.
	tr := decodeBody[groupchat.Transcript](t, g.do(req{method: "GET", path: "/api/app/chats/" + chat.ID, cookie: g.admin}))
	var got []string
	for _, e := range tr.Entries {
		got = append(got, e.Role+" "+e.AgentID+" "+e.Text)
	}
	want := []string{
		"user " + ada.ID + " hello all", "assistant " + ada.ID + " " + ada.ID + ": done",
		"user " + ada.ID + " @Ada, more", "assistant " + ada.ID + " " + ada.ID + ": done",
		"user " + bob.ID + " @bob two please check", "assistant " + bob.ID + " " + bob.ID + ": done",
		"user " + ada.ID + " next", "assistant " + ada.ID + " " + ada.ID + ": done",
		"user " + bob.ID + " again", "assistant " + bob.ID + " " + bob.ID + ": done",
		"user " + bob.ID + " again", "assistant " + bob.ID + " " + bob.ID + ": done",
	}
	if !slices.Equal(got, want) || tr.Chat.LastAgentID != bob.ID {
		t.Fatalf("transcript:\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	// The members' own conversations stay out of the agents' chat lists.
	list := decodeBody[struct{ Sessions []struct{ SessionID string } }](t, g.do(req{method: "GET", path: "/api/app/chat/sessions", cookie: g.admin}))
	if len(list.Sessions) != 0 {
		t.Fatalf("chat sessions list member conversations: %+v", list)
	}

	// A paused confirmation: the next message without an address answers it, whoever's turn it would be.
	_, evs, _ = g.send(g.admin, msg("@ada rm -rf /tmp/x", ""))
	if !slices.ContainsFunc(evs, func(e agent.Event) bool { return e.Type == agent.RequireUserConfirm }) {
		t.Fatalf("no confirmation asked: %v", evs)
	}
	tr = decodeBody[groupchat.Transcript](t, g.do(req{method: "GET", path: "/api/app/chats/" + chat.ID, cookie: g.admin}))
	if !slices.Equal(tr.Waiting, []string{ada.ID}) {
		t.Fatalf("waiting %v", tr.Waiting)
	}
	n := len(g.tools.runs)
	if _, evs, _ = g.send(g.admin, msg("yes", "")); actedBy(t, evs) != ada.ID || len(g.tools.runs) != n+1 {
		t.Fatalf("yes went to %q; tools ran %d→%d", evs[0].AgentID, n, len(g.tools.runs))
	}
}

func TestGroupChatScopeAndBadInput(t *testing.T) {
	g := newGroupFixture(t)
	me := decodeBody[struct{ User userJSON }](t, g.do(req{method: "GET", path: "/api/auth/me", cookie: g.admin})).User
	var ids []string
	for i := range 9 {
		a, err := g.srv.cfg.Profiles.Create(me.ID, fmt.Sprintf("Agent %d", i))
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, a.ID)
	}
	theirs, err := g.srv.cfg.Profiles.Create("user1", "Bobs")
	if err != nil {
		t.Fatal(err)
	}
	list := func(idList ...string) string {
		b, _ := json.Marshal(map[string]any{"title": "t", "agentIds": idList})
		return string(b)
	}
	creates := []struct {
		name, body string
		code       int
	}{
		{"no agents", `{"title":"t","agentIds":[]}`, 400},
		{"one agent", list(ids[0]), 400},
		{"too many", list(ids...), 400},
		{"twice", list(ids[0], ids[0]), 400},
		{"unknown agent", list(ids[0], "nope"), 404},
		{"another account's agent", list(ids[0], theirs.ID), 404},
		{"long title", `{"title":"` + strings.Repeat("x", 101) + `","agentIds":["` + ids[0] + `","` + ids[1] + `"]}`, 400},
		{"not json", `{"agentIds":`, 400},
	}
	for _, tt := range creates {
		rec := g.do(req{method: "POST", path: "/api/app/chats", cookie: g.admin, body: tt.body})
		var e errorBody
		json.Unmarshal(rec.Body.Bytes(), &e)
		if rec.Code != tt.code || e.Error == "" {
			t.Errorf("%s: %d %s, want %d with a message", tt.name, rec.Code, rec.Body, tt.code)
		}
	}
	if l := decodeBody[struct{ Chats []groupchat.Chat }](t, g.do(req{method: "GET", path: "/api/app/chats", cookie: g.admin})); len(l.Chats) != 0 {
		t.Fatalf("bad input created chats: %+v", l.Chats)
	}

	rec := g.do(req{method: "POST", path: "/api/app/chats", cookie: g.admin, body: list(ids[0], ids[1])})
	if rec.Code != 201 {
		t.Fatalf("create: %d %s", rec.Code, rec.Body)
	}
	chat := decodeBody[groupchat.Chat](t, rec)
	msg := func(text, to string) string {
		b, _ := json.Marshal(map[string]string{"chatId": chat.ID, "message": text, "to": to})
		return string(b)
	}
	sends := []struct {
		name, cookie, body string
		code               int
	}{
		{"to not a member", g.admin, msg("hi", ids[2]), 400},
		{"@ not a member", g.admin, msg("@Agent 5 hi", ""), 400},
		{"empty message", g.admin, msg(" ", ""), 400},
		{"unknown chat", g.admin, `{"chatId":"g-nope","message":"hi"}`, 404},
		{"another account's chat", g.user, msg("hi", ""), 404},
	}
	for _, tt := range sends {
		code, _, body := g.send(tt.cookie, tt.body)
		if code != tt.code || !strings.Contains(body, `"error"`) {
			t.Errorf("%s: %d %s, want %d", tt.name, code, body, tt.code)
		}
	}
	if tr := decodeBody[groupchat.Transcript](t, g.do(req{method: "GET", path: "/api/app/chats/" + chat.ID, cookie: g.admin})); len(tr.Entries) != 0 || len(g.tools.runs) != 0 {
		t.Fatalf("bad messages changed the chat: %+v, %d tool runs", tr.Entries, len(g.tools.runs))
	}

	// Members of an account see only their own group chats.
	if l := decodeBody[struct{ Chats []groupchat.Chat }](t, g.do(req{method: "GET", path: "/api/app/chats", cookie: g.user})); len(l.Chats) != 0 {
		t.Fatalf("bob sees %+v", l.Chats)
	}
	if rec := g.do(req{method: "GET", path: "/api/app/chats/" + chat.ID, cookie: g.user}); rec.Code != 404 {
		t.Fatalf("bob reads the admin's chat: %d", rec.Code)
	}
	if l := decodeBody[struct{ Chats []groupchat.Chat }](t, g.do(req{method: "GET", path: "/api/app/chats", cookie: g.admin})); len(l.Chats) != 1 || l.Chats[0].ID != chat.ID {
		t.Fatalf("admin's list %+v", l.Chats)
	}
	if rec := g.do(req{method: "GET", path: "/api/app/chats"}); rec.Code != 401 {
		t.Fatalf("logged out: %d", rec.Code)
	}
}
