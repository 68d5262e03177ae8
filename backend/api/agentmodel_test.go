package api

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"cubicle/backend/agent"
	"cubicle/backend/history"
	"cubicle/backend/models"
)

func withModels(t *testing.T, f *fixture) *models.Service {
	t.Helper()
	ms, err := models.New(models.Config{Store: f.store, Key: []byte(strings.Repeat("m", 32)), Endpoints: f.srv.cfg.Security.(models.Endpoints)})
	if err != nil {
		t.Fatal(err)
	}
	f.srv.cfg.Models = ms
	return ms
}

func TestAgentModelRoutes(t *testing.T) {
	f := newFixture(t)
	withModels(t, f)
	mine := decodeBody[agentJSON](t, f.do(req{method: "POST", path: "/api/app/agents", body: `{"name":"Bob's"}`, cookie: f.user}))
	theirs := decodeBody[agentJSON](t, f.do(req{method: "POST", path: "/api/app/agents", body: `{"name":"Admin's"}`, cookie: f.admin}))
	path := "/api/app/agents/" + mine.ID + "/model"
	if rec := f.do(req{method: "PUT", path: "/api/app/admin/model", body: `{"baseUrl":"https://app.example/v1","model":"app-m","apiKey":"sk-app"}`, cookie: f.admin}); rec.Code != 200 {
		t.Fatalf("app model: %d %s", rec.Code, rec.Body)
	}

	v := decodeBody[models.AgentView](t, f.do(req{method: "GET", path: path, cookie: f.user}))
	if v.BaseURL != "" || v.Model != "" || v.HasAPIKey || v.Inherits.Model != "app-m" || !v.Inherits.HasAPIKey ||
		v.Effective.Source != "settings" || v.Effective.Model != "app-m" || !v.Effective.Configured {
		t.Fatalf("fresh agent: %+v", v)
	}

	steps := []struct {
		name, method, path, body string
		cookie                   string
		code                     int
		want                     string // in the answer
	}{
		{"a member cannot point the agent anywhere", "PUT", path, `{"baseUrl":"https://b.example/v1","model":"b-m","apiKey":"sk-agent-b"}`, f.user, 403, "not an approved model endpoint"},
		{"nor allow private addresses", "PUT", path, `{"baseUrl":"https://b.example/v1","model":"b-m","allowPrivate":true}`, f.user, 403, "administrator"},
		{"the admin approves the endpoint", "PUT", "/api/app/admin/security", `{"modelEndpoints":[{"baseUrl":"https://B.example:443/v1/"}]}`, f.admin, 200, `"modelEndpoints":[{"baseUrl":"https://b.example/v1"}]`},
		{"a member may not approve endpoints", "PUT", "/api/app/admin/security", `{"modelEndpoints":[{"baseUrl":"https://evil.example/v1"}]}`, f.user, 403, ""},
		{"owner sets an approved endpoint", "PUT", path, `{"baseUrl":"https://b.example/v1","model":"b-m","apiKey":"sk-agent-b"}`, f.user, 200, `"hasApiKey":true,"approved":true`},
		{"another user's agent does not exist", "GET", "/api/app/agents/" + theirs.ID + "/model", "", f.user, 404, ""},
		{"nor can they change it", "PUT", "/api/app/agents/" + theirs.ID + "/model", `{"model":"x"}`, f.user, 404, ""},
		{"an administrator may look", "GET", path, "", f.admin, 200, `"source":"agent"`},
		{"unknown agent", "GET", "/api/app/agents/nope/model", "", f.user, 404, ""},
		{"unknown agent for an administrator", "PUT", "/api/app/agents/nope/model", `{"model":"x"}`, f.admin, 404, ""},
		{"logged out", "GET", path, "", "", 401, ""},
		{"bad URL", "PUT", path, `{"baseUrl":"ftp://x","model":"m"}`, f.user, 400, "http(s) URL"},
		{"base URL without a model", "PUT", path, `{"baseUrl":"https://c.example/v1"}`, f.user, 400, "name the model"},
		{"key without a base URL", "PUT", path, `{"model":"m","apiKey":"k"}`, f.user, 400, "base URL"},
		{"not JSON", "PUT", path, `{"model":`, f.user, 400, ""},
		{"nothing changed by refusals", "GET", path, "", f.user, 200, `"baseUrl":"https://b.example/v1","model":"b-m","hasApiKey":true`},
		{"omitted key is kept at the same URL", "PUT", path, `{"baseUrl":"https://b.example/v1","model":"b-2"}`, f.user, 200, `"model":"b-2","hasApiKey":true`},
		{"an administrator points it elsewhere: the key stays behind", "PUT", path, `{"baseUrl":"https://c.example/v1","model":"b-2"}`, f.admin, 200, `"model":"b-2","hasApiKey":false,"approved":true`},
		{"and back: the dropped key does not return", "PUT", path, `{"baseUrl":"https://b.example/v1","model":"b-2"}`, f.user, 200, `"model":"b-2","hasApiKey":false`},
		{"set a key again", "PUT", path, `{"baseUrl":"https://b.example/v1","model":"b-2","apiKey":"sk-again"}`, f.user, 200, `"hasApiKey":true`},
		{"empty key clears it", "PUT", path, `{"baseUrl":"https://b.example/v1","model":"b-2","apiKey":""}`, f.user, 200, `"model":"b-2","hasApiKey":false`},
		{"administrator sets a model name", "PUT", path, `{"model":"admin-pick"}`, f.admin, 200, `"effective":{"baseUrl":"https://app.example/v1","model":"admin-pick","source":"agent","configured":true,"provider":"openai-compatible"}`},
		{"all empty inherits", "PUT", path, `{"baseUrl":"","model":""}`, f.user, 200, `"effective":{"baseUrl":"https://app.example/v1","model":"app-m","source":"settings","configured":true,"provider":"openai-compatible"}`},
	}
	for _, s := range steps {
		rec := f.do(req{method: s.method, path: s.path, body: s.body, cookie: s.cookie})
		if rec.Code != s.code || !strings.Contains(rec.Body.String(), s.want) {
			t.Fatalf("%s: %d %s", s.name, rec.Code, rec.Body)
		}
		if strings.Contains(rec.Body.String(), "sk-") {
			t.Fatalf("%s: a key in the answer: %s", s.name, rec.Body)
		}
	}
	if a, _ := f.store.Agent(mine.ID); a.Model != nil {
		t.Fatalf("inherit left an override: %+v", a.Model)
	}
	f.srv.cfg.Models = nil
	if rec := f.do(req{method: "GET", path: path, cookie: f.user}); rec.Code != 503 {
		t.Fatalf("without models: %d", rec.Code)
	}
}

// modelServer is a scripted OpenAI-compatible endpoint (the language model stand-in): it
// answers every call with its own text and records the Authorization header and model name.
type modelServer struct {
	*httptest.Server
	text  string
	mu    sync.Mutex
	calls []string // "<Authorization>|<model>"; guarded by mu
}

func newModelServer(t *testing.T, text string) *modelServer {
	m := &modelServer{text: text}
	m.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var body struct{ Model string }
		raw, _ := io.ReadAll(r.Body)
		json.Unmarshal(raw, &body)
		m.mu.Lock()
		m.calls = append(m.calls, r.Header.Get("Authorization")+"|"+body.Model)
		m.mu.Unlock()
		if r.URL.Path != "/v1/chat/completions" {
			http.Error(w, "no such path", http.StatusNotFound)
			return
		}
		w.Header().Set("Content-Type", "text/event-stream")
		fmt.Fprintf(w, "data: {\"choices\":[{\"delta\":{\"content\":%q}}]}\n\n", m.text)
		fmt.Fprint(w, "data: {\"choices\":[{\"delta\":{},\"finish_reason\":\"stop\"}]}\n\ndata: [DONE]\n\n")
	}))
	t.Cleanup(m.Close)
	return m
}

func (m *modelServer) take() []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	c := m.calls
	m.calls = nil
	return c
}

// TestAgentModelUsedByChat runs chat turns through POST /api/app/chat with the real runtime
// and model resolver: the app's model is server A, agent X's override is server B; X's turn
// reaches B with X's model name and key, Y's turn reaches A with the app's.
func TestAgentModelUsedByChat(t *testing.T) {
	f := newFixture(t)
	ms := withModels(t, f)
	rt, err := agent.New(agent.Config{Tools: echoTools{}, Models: ms.Resolve, Sessions: f.store, Recorder: history.New(f.store, nil)})
	if err != nil {
		t.Fatal(err)
	}
	f.srv.cfg.Chat, f.srv.cfg.Chats = rt, f.store
	a, b := newModelServer(t, "answer from A"), newModelServer(t, "answer from B")

	if rec := f.do(req{method: "PUT", path: "/api/app/admin/model", body: `{"baseUrl":"` + a.URL + `/v1","model":"model-a","apiKey":"key-a","allowPrivate":true}`, cookie: f.admin}); rec.Code != 200 {
		t.Fatalf("app model: %d %s", rec.Code, rec.Body)
	}
	x := decodeBody[agentJSON](t, f.do(req{method: "POST", path: "/api/app/agents", body: `{"name":"X"}`, cookie: f.admin}))
	y := decodeBody[agentJSON](t, f.do(req{method: "POST", path: "/api/app/agents", body: `{"name":"Y"}`, cookie: f.admin}))
	if rec := f.do(req{method: "PUT", path: "/api/app/agents/" + x.ID + "/model", body: `{"baseUrl":"` + b.URL + `/v1","model":"model-x","apiKey":"key-x","allowPrivate":true}`, cookie: f.admin}); rec.Code != 200 {
		t.Fatalf("agent model: %d %s", rec.Code, rec.Body)
	}
	me := decodeBody[struct{ User userJSON }](t, f.do(req{method: "GET", path: "/api/auth/me", cookie: f.admin})).User

	turn := func(session, agentID, extra string) string {
		t.Helper()
		body := `{"sessionId":"` + session + `","userId":"` + me.ID + `","agentId":"` + agentID + `","input":"hello"` + extra + `}`
		rec := f.do(req{method: "POST", path: "/api/app/chat", body: body, cookie: f.admin, header: map[string]string{"Accept": "application/json"}})
		if rec.Code != 200 {
			t.Fatalf("chat %s: %d %s", session, rec.Code, rec.Body)
		}
		return rec.Body.String()
	}
	tests := []struct {
		name, session, agent, extra string
		hit, miss                   *modelServer
		call, text                  string
	}{
		{"agent X uses its own endpoint, model and key", "sx", x.ID, "", b, a, "Bearer key-x|model-x", "answer from B"},
		{"agent Y uses the app's model", "sy", y.ID, "", a, b, "Bearer key-a|model-a", "answer from A"},
		{"a turn's model name beats X's", "sx2", x.ID, `,"chatModel":{"name":"turn-m"}`, b, a, "Bearer key-x|turn-m", "answer from B"},
	}
	for _, tt := range tests {
		out := turn(tt.session, tt.agent, tt.extra)
		if got := tt.hit.take(); len(got) != 1 || got[0] != tt.call {
			t.Fatalf("%s: calls %q, want [%q]", tt.name, got, tt.call)
		}
		if got := tt.miss.take(); len(got) != 0 {
			t.Fatalf("%s: the other endpoint got %q", tt.name, got)
		}
		if !strings.Contains(out, tt.text) {
			t.Fatalf("%s: the reply lacks %q: %s", tt.name, tt.text, out)
		}
	}

	// The app's model goes away: Y falls back to operator mode, an agent naming only a model
	// gets an error that says where to fix it, X keeps working.
	if rec := f.do(req{method: "PUT", path: "/api/app/admin/model", body: `{"baseUrl":"","model":""}`, cookie: f.admin}); rec.Code != 200 {
		t.Fatalf("clear app model: %d", rec.Code)
	}
	if rec := f.do(req{method: "PUT", path: "/api/app/agents/" + y.ID + "/model", body: `{"model":"y-only"}`, cookie: f.admin}); rec.Code != 200 {
		t.Fatalf("y model: %d %s", rec.Code, rec.Body)
	}
	if out := turn("sy2", y.ID, ""); !strings.Contains(out, "no base URL is configured") || !strings.Contains(out, "Model section") {
		t.Fatalf("misconfigured agent: %s", out)
	}
	if out := turn("sx3", x.ID, ""); !strings.Contains(out, "answer from B") {
		t.Fatalf("X without an app model: %s", out)
	}
	if got := a.take(); len(got) != 0 {
		t.Fatalf("server A called after it was removed: %q", got)
	}
}
