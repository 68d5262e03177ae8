package api

import (
	"bufio"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"cubicle/backend/agent"
	"cubicle/backend/fault"
	"cubicle/backend/history"
	"cubicle/backend/store"
)

type echoTools struct{}

func (echoTools) Tools(context.Context, agent.TurnInfo) []agent.ToolSpec { return nil }

func (echoTools) Call(ctx context.Context, t agent.TurnInfo, c agent.ToolCall, out *agent.ToolOutput) string {
	out.Text("ran " + c.Name)
	return agent.StateSuccess
}

func withChat(t *testing.T, f *fixture) {
	rt, err := agent.New(agent.Config{Tools: echoTools{}, Sessions: f.store, Recorder: history.New(f.store, nil)})
	if err != nil {
		t.Fatal(err)
	}
	f.srv.cfg.Chat = rt
	f.srv.cfg.Chats = f.store
}

func TestChatStreams(t *testing.T) {
	f := newFixture(t)
	withChat(t, f)
	me := decodeBody[struct{ User userJSON }](t, f.do(req{method: "GET", path: "/api/auth/me", cookie: f.admin})).User
	body := `{"sessionId":"s1","userId":"` + me.ID + `","input":"/shell ls"}`

	// SSE: one data: line of JSON per event.
	rec := f.do(req{method: "POST", path: "/api/app/chat", body: body, cookie: f.admin, header: map[string]string{"Accept": "text/event-stream"}})
	if rec.Code != 200 || !strings.HasPrefix(rec.Header().Get("Content-Type"), "text/event-stream") {
		t.Fatalf("sse: %d %v", rec.Code, rec.Header())
	}
	var types []string
	sc := bufio.NewScanner(rec.Body)
	for sc.Scan() {
		line := sc.Text()
		if line == "" {
			continue
		}
		data, ok := strings.CutPrefix(line, "data: ")
		if !ok {
			t.Fatalf("non-data line %q", line)
		}
		var e agent.Event
		if err := json.Unmarshal([]byte(data), &e); err != nil {
			t.Fatal(err)
		}
		types = append(types, e.Type)
	}
	if types[0] != "AGENT_START" || types[len(types)-1] != "AGENT_END" || !strings.Contains(strings.Join(types, ","), "TOOL_RESULT_END") {
		t.Fatalf("sse events: %v", types)
	}

	// JSON: an array.
	rec = f.do(req{method: "POST", path: "/api/app/chat", body: strings.Replace(body, "s1", "s2", 1), cookie: f.admin, header: map[string]string{"Accept": "application/json"}})
	var evs []agent.Event
	if err := json.Unmarshal(rec.Body.Bytes(), &evs); err != nil || rec.Code != 200 {
		t.Fatalf("json array: %d %v %s", rec.Code, err, rec.Body)
	}
	if evs[0].Type != "AGENT_START" || evs[len(evs)-1].Type != "AGENT_END" {
		t.Fatalf("json events: %+v", evs)
	}
}

func TestChatValidation(t *testing.T) {
	f := newFixture(t)
	withChat(t, f)
	me := decodeBody[struct{ User userJSON }](t, f.do(req{method: "GET", path: "/api/auth/me", cookie: f.admin})).User
	tests := []struct {
		name, body string
		code       int
	}{
		{"no session", `{"userId":"` + me.ID + `","input":"x"}`, 400},
		{"no user", `{"sessionId":"s","input":"x"}`, 400},
		{"no input", `{"sessionId":"s","userId":"` + me.ID + `","input":""}`, 400},
		{"other user", `{"sessionId":"s","userId":"someone-else","input":"x"}`, 403},
		{"unknown agent", `{"sessionId":"s","userId":"` + me.ID + `","agentId":"nope","input":"x"}`, 404},
		{"by username", `{"sessionId":"s","userId":"admin","input":"/help"}`, 200},
	}
	for _, tt := range tests {
		if rec := f.do(req{method: "POST", path: "/api/app/chat", body: tt.body, cookie: f.admin}); rec.Code != tt.code {
			t.Errorf("%s: %d, want %d: %s", tt.name, rec.Code, tt.code, rec.Body)
		}
	}
	if rec := f.do(req{method: "POST", path: "/api/app/chat", body: `{}`}); rec.Code != 401 {
		t.Fatalf("logged out: %d", rec.Code)
	}
}

func TestChatSessionsAndHistory(t *testing.T) {
	f := newFixture(t)
	withChat(t, f)
	me := decodeBody[struct{ User userJSON }](t, f.do(req{method: "GET", path: "/api/auth/me", cookie: f.admin})).User
	for _, in := range []string{"/shell ls", "/screenshot"} {
		if rec := f.do(req{method: "POST", path: "/api/app/chat", body: `{"sessionId":"s-1","userId":"` + me.ID + `","input":"` + in + `"}`, cookie: f.admin}); rec.Code != 200 {
			t.Fatalf("chat: %d %s", rec.Code, rec.Body)
		}
	}
	list := decodeBody[struct {
		Sessions []struct{ SessionID, Title string }
	}](t, f.do(req{method: "GET", path: "/api/app/chat/sessions", cookie: f.admin}))
	if len(list.Sessions) != 1 || list.Sessions[0].SessionID != "s-1" || list.Sessions[0].Title != "/shell ls" {
		t.Fatalf("sessions = %+v", list)
	}
	tl := decodeBody[history.Timeline](t, f.do(req{method: "GET", path: "/api/app/chat/sessions/s-1/history", cookie: f.admin}))
	if tl.Total != 2 || tl.Runs[0].Tool != "computer_shell" || tl.Runs[1].Tool != "computer_screenshot" || tl.Runs[0].Status != "SUCCESS" {
		t.Fatalf("timeline = %+v", tl)
	}
	// Another account sees none of it.
	for _, p := range []string{"/api/app/chat/sessions/s-1", "/api/app/chat/sessions/s-1/history"} {
		if rec := f.do(req{method: "GET", path: p, cookie: f.user}); rec.Code != 404 {
			t.Fatalf("%s as other user: %d", p, rec.Code)
		}
	}
	// Not even by using the same session id (issue 15, item 6: runs were keyed by the session
	// id alone): its timeline holds its own run only.
	bob := decodeBody[struct{ User userJSON }](t, f.do(req{method: "GET", path: "/api/auth/me", cookie: f.user})).User
	if rec := f.do(req{method: "POST", path: "/api/app/chat", body: `{"sessionId":"s-1","userId":"` + bob.ID + `","input":"/shell id"}`, cookie: f.user}); rec.Code != 200 {
		t.Fatalf("bob's chat: %d %s", rec.Code, rec.Body)
	}
	if tl := decodeBody[history.Timeline](t, f.do(req{method: "GET", path: "/api/app/chat/sessions/s-1/history", cookie: f.user})); tl.Total != 1 || tl.Runs[0].UserID != bob.ID {
		t.Fatalf("bob's timeline of s-1 = %+v", tl)
	}
	if tl := decodeBody[history.Timeline](t, f.do(req{method: "GET", path: "/api/app/chat/sessions/s-1/history", cookie: f.admin})); tl.Total != 2 {
		t.Fatalf("the admin's timeline of s-1 after bob's = %+v", tl)
	}
	if rec := f.do(req{method: "POST", path: "/api/app/chat", body: `{"sessionId":"bad id/..","userId":"` + me.ID + `","input":"x"}`, cookie: f.admin}); rec.Code != 400 {
		t.Fatalf("bad session id: %d", rec.Code)
	}

	// The export: JSON Lines, one run per line, the caller's runs only.
	exp := func(cookie string) (int, []store.ToolRun, http.Header) {
		rec := f.do(req{method: "GET", path: "/api/app/chat/sessions/s-1/history.jsonl", cookie: cookie})
		var runs []store.ToolRun
		for _, l := range strings.Split(strings.TrimSpace(rec.Body.String()), "\n") {
			var r store.ToolRun
			if rec.Code == 200 && json.Unmarshal([]byte(l), &r) == nil {
				runs = append(runs, r)
			}
		}
		return rec.Code, runs, rec.Header()
	}
	if code, runs, h := exp(f.admin); code != 200 || len(runs) != 2 || runs[0].Tool != "computer_shell" || runs[0].UserID != me.ID ||
		h.Get("Content-Type") != "application/jsonl; charset=utf-8" || !strings.Contains(h.Get("Content-Disposition"), "history-s-1.jsonl") {
		t.Fatalf("admin's export: %d %+v %v", code, runs, h)
	}
	if code, runs, _ := exp(f.user); code != 200 || len(runs) != 1 || runs[0].UserID != bob.ID {
		t.Fatalf("bob's export of s-1: %d %+v", code, runs)
	}
	if rec := f.do(req{method: "GET", path: "/api/app/chat/sessions/nope/history.jsonl", cookie: f.admin}); rec.Code != 404 {
		t.Fatalf("export of an unknown session: %d", rec.Code)
	}
	if rec := f.do(req{method: "GET", path: "/api/app/chat/sessions/s-1/history.jsonl"}); rec.Code != 401 {
		t.Fatalf("export logged out: %d", rec.Code)
	}
}

// pickModel asks for client_pick_file once, then answers with what the tool returned.
type pickModel struct {
	calls   int
	offered []string // the tools of the last request
}

func (m *pickModel) Name() string { return "pick" }

func (m *pickModel) Stream(ctx context.Context, req agent.ModelRequest, on func(agent.ModelDelta)) (agent.ModelReply, error) {
	m.calls++
	m.offered = nil
	for _, t := range req.Tools {
		m.offered = append(m.offered, t.Name)
	}
	if m.calls == 1 {
		return agent.ModelReply{ToolCalls: []agent.ToolCall{{ID: "pick1", Name: agent.PickFileTool,
			Input: map[string]any{"prompt": "the report", "timeout_seconds": float64(60)}}}}, nil
	}
	last := req.Messages[len(req.Messages)-1]
	var said string
	for _, b := range last.Content {
		for _, c := range b.Content {
			said += c.Text
		}
	}
	on(agent.ModelDelta{Text: "got: " + said})
	return agent.ModelReply{Text: "got: " + said}, nil
}

// TestChatExternal: a client that names client_pick_file in clientTools is offered it; the
// turn waits for the result, which only the conversation's owner can post, well-formed.
func TestChatExternal(t *testing.T) {
	f := newFixture(t)
	model := &pickModel{}
	rt, err := agent.New(agent.Config{Tools: echoTools{}, Sessions: f.store, Recorder: history.New(f.store, nil),
		Models: func(context.Context, string, *agent.ChatModel) (agent.Model, error) { return model, nil }})
	if err != nil {
		t.Fatal(err)
	}
	f.srv.cfg.Chat, f.srv.cfg.Chats = rt, f.store
	me := decodeBody[struct{ User userJSON }](t, f.do(req{method: "GET", path: "/api/auth/me", cookie: f.admin})).User

	srv := httptest.NewServer(f.srv.Handler())
	defer srv.Close()
	body := `{"sessionId":"s-x","userId":"` + me.ID + `","input":"read my report","clientTools":["client_pick_file"]}`
	hr, _ := http.NewRequest("POST", srv.URL+"/api/app/chat", strings.NewReader(body))
	hr.Host = "127.0.0.1:8765"
	hr.Header.Set("Content-Type", "application/json")
	hr.Header.Set("Accept", "text/event-stream")
	hr.AddCookie(&http.Cookie{Name: SessionCookie, Value: f.admin})
	resp, err := http.DefaultClient.Do(hr)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	next := func() agent.Event {
		for sc.Scan() {
			if data, ok := strings.CutPrefix(sc.Text(), "data: "); ok {
				var e agent.Event
				if err := json.Unmarshal([]byte(data), &e); err != nil {
					t.Fatal(err)
				}
				return e
			}
		}
		t.Fatalf("stream ended: %v", sc.Err())
		return agent.Event{}
	}
	for e := next(); e.Type != agent.RequireExternalExec; e = next() {
		if e.Type == agent.AgentEnd {
			t.Fatal("the turn ended without asking the client")
		}
	}
	post := func(cookie, b string) int {
		return f.do(req{method: "POST", path: "/api/app/chat/external", body: b, cookie: cookie}).Code
	}
	file := base64.StdEncoding.EncodeToString([]byte("a,b\n1,2\n"))
	good := `{"sessionId":"s-x","toolCallId":"pick1","state":"success","content":[{"type":"file","name":"r.csv","mediaType":"text/csv","data":"` + file + `"}]}`
	cases := []struct {
		name, cookie, body string
		code               int
	}{
		{"logged out", "", good, 401},
		{"another account", f.user, good, 404},
		{"no tool call id", f.admin, `{"sessionId":"s-x"}`, 400},
		{"unknown state", f.admin, strings.Replace(good, `"success"`, `"maybe"`, 1), 400},
		{"not base64", f.admin, strings.Replace(good, file, "%%%", 1), 400},
		{"unknown call", f.admin, strings.Replace(good, "pick1", "pick9", 1), 404},
		{"the owner", f.admin, good, 200},
		{"twice", f.admin, good, 404},
	}
	for _, c := range cases {
		if got := post(c.cookie, c.body); got != c.code {
			t.Errorf("%s: %d, want %d", c.name, got, c.code)
		}
	}
	var result agent.Event
	var text string
	for e := next(); e.Type != agent.AgentEnd; e = next() {
		switch e.Type {
		case agent.ExternalExecutionResult:
			result = e
		case agent.TextBlockDelta:
			text += e.Delta
		}
	}
	if result.State != agent.StateSuccess || result.Data == nil || result.Data.Name != "r.csv" || result.Data.Size != 8 {
		t.Fatalf("EXTERNAL_EXECUTION_RESULT = %+v", result)
	}
	if !strings.Contains(text, "r.csv") || !strings.Contains(text, "1,2") {
		t.Fatalf("the model got %q", text)
	}
	if !slices.Contains(model.offered, agent.PickFileTool) {
		t.Fatalf("offered %v", model.offered)
	}
	// An old client (no clientTools) is not offered the tool.
	model.calls = 1 // answer with text at once
	f.do(req{method: "POST", path: "/api/app/chat", body: strings.Replace(strings.Replace(body, `,"clientTools":["client_pick_file"]`, "", 1), "s-x", "s-y", 1),
		cookie: f.admin, header: map[string]string{"Accept": "application/json"}})
	if slices.Contains(model.offered, agent.PickFileTool) {
		t.Fatalf("a client that named no client tools was offered %v", model.offered)
	}
}

// failingSessions is the real store whose conversation saves fail (a full disk, a damaged file).
type failingSessions struct{ *store.Store }

func (failingSessions) PutChatSession(store.ChatSession) error {
	return errors.New("disk full")
}

// ackRecorder records a response and calls onAck once, at the moment the status is sent (the
// person's client learns the turn started).
type ackRecorder struct {
	*httptest.ResponseRecorder
	onAck func(code int)
	acked bool
}

func (w *ackRecorder) WriteHeader(code int) {
	if !w.acked {
		w.acked = true
		w.onAck(code)
	}
	w.ResponseRecorder.WriteHeader(code)
}

func (w *ackRecorder) Write(p []byte) (int, error) {
	if !w.acked {
		w.WriteHeader(http.StatusOK)
	}
	return w.ResponseRecorder.Write(p)
}

// Issue 31 item 3: the person's message and the running turn are saved before the chat
// acknowledges the turn (HTTP 200, AGENT_START). A crash right after the acknowledgement
// (here: a copy of the data file as it is on disk at that moment, opened as the next start
// would) finds both; a save that fails is an error response, not a 200.
func TestChatSavedBeforeAck(t *testing.T) {
	f := newFixture(t)
	withChat(t, f)
	me := decodeBody[struct{ User userJSON }](t, f.do(req{method: "GET", path: "/api/auth/me", cookie: f.admin})).User
	body := `{"sessionId":"s-ack","userId":"` + me.ID + `","input":"/shell echo kept"}`

	var onDisk store.ChatSession
	var snapErr error
	rec := &ackRecorder{ResponseRecorder: httptest.NewRecorder(), onAck: func(int) {
		snap := filepath.Join(t.TempDir(), "after-ack.db")
		raw, err := os.ReadFile(f.store.Path())
		if err != nil {
			snapErr = err
			return
		}
		if err := os.WriteFile(snap, raw, 0o600); err != nil {
			snapErr = err
			return
		}
		st, err := store.Open(snap, store.Options{KeepBackups: -1})
		if err != nil {
			snapErr = err
			return
		}
		defer st.Close()
		onDisk, snapErr = st.ChatSession(me.ID, "s-ack")
	}}
	hr := httptest.NewRequest("POST", "/api/app/chat", strings.NewReader(body))
	hr.Host = "127.0.0.1:8765"
	hr.Header.Set("Content-Type", "application/json")
	hr.Header.Set("Accept", "text/event-stream")
	hr.AddCookie(&http.Cookie{Name: SessionCookie, Value: f.admin})
	f.srv.Handler().ServeHTTP(rec, hr)
	if rec.Code != 200 || !rec.acked {
		t.Fatalf("chat: %d %s", rec.Code, rec.Body)
	}
	if snapErr != nil {
		t.Fatalf("the conversation was not on disk when the turn was acknowledged: %v", snapErr)
	}
	if onDisk.ActiveTurn == nil || !strings.Contains(string(onDisk.History), "/shell echo kept") {
		t.Fatalf("on disk at the acknowledgement: active turn %v, history %s", onDisk.ActiveTurn, onDisk.History)
	}

	// A save that fails: no 200, no AGENT_START, nothing saved.
	rt, err := agent.New(agent.Config{Tools: echoTools{}, Sessions: failingSessions{f.store}, Recorder: history.New(f.store, nil)})
	if err != nil {
		t.Fatal(err)
	}
	f.srv.cfg.Chat = rt
	res := f.do(req{method: "POST", path: "/api/app/chat", body: strings.Replace(body, "s-ack", "s-fail", 1), cookie: f.admin,
		header: map[string]string{"Accept": "text/event-stream"}})
	if res.Code == 200 || strings.Contains(res.Body.String(), "AGENT_START") || !strings.Contains(res.Body.String(), "disk full") {
		t.Fatalf("a turn whose message could not be saved: %d %s", res.Code, res.Body)
	}
	if _, err := f.store.ChatSession(me.ID, "s-fail"); !errors.Is(err, fault.ErrNotFound) {
		t.Fatalf("the failed turn left a conversation: %v", err)
	}
}
