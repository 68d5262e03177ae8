package api

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
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
