package models

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"cubicle/backend/agent"
	"cubicle/backend/fault"
	"cubicle/backend/store"
)

// endpoint is an OpenAI-compatible chat-completions server (the scripted stand-in for a
// language model) that answers every call with one text reply and records who called it.
type endpoint struct {
	srv    *httptest.Server
	mu     sync.Mutex
	calls  []call // guarded by mu
	status int    // answer with this HTTP status instead (0 = 200); guarded by mu
}

type call struct{ auth, model string }

func newEndpoint(t *testing.T) *endpoint {
	e := &endpoint{}
	e.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var body struct{ Model string }
		raw, _ := io.ReadAll(r.Body)
		json.Unmarshal(raw, &body)
		e.mu.Lock()
		e.calls = append(e.calls, call{auth: r.Header.Get("Authorization"), model: body.Model})
		status := e.status
		e.mu.Unlock()
		if r.URL.Path != "/v1/chat/completions" {
			http.Error(w, "no such path "+r.URL.Path, http.StatusNotFound)
			return
		}
		if status != 0 {
			http.Error(w, "refused by the test", status)
			return
		}
		w.Header().Set("Content-Type", "text/event-stream")
		fmt.Fprint(w, `data: {"choices":[{"delta":{"content":"hi"}}]}`+"\n\n")
		fmt.Fprint(w, `data: {"choices":[{"delta":{},"finish_reason":"stop"}]}`+"\n\ndata: [DONE]\n\n")
	}))
	t.Cleanup(e.srv.Close)
	return e
}

func (e *endpoint) refuse(status int) {
	e.mu.Lock()
	e.status = status
	e.mu.Unlock()
}

func (e *endpoint) url() string { return e.srv.URL + "/v1" }

// take returns the calls so far and forgets them.
func (e *endpoint) take() []call {
	e.mu.Lock()
	defer e.mu.Unlock()
	c := e.calls
	e.calls = nil
	return c
}

func openStore(t *testing.T) (*store.Store, string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "c.db")
	st, err := store.Open(path, store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return st, path
}

func ptr(s string) *string { return &s }

func yes() *bool { b := true; return &b }

// root is an administrator setting agents' models.
var root = Setter{AccountID: "root", Admin: true}

func TestAgentModelResolve(t *testing.T) {
	st, _ := openStore(t)
	key := []byte(strings.Repeat("k", 32))
	s, err := New(Config{Store: st, Key: key})
	if err != nil {
		t.Fatal(err)
	}
	a, b := newEndpoint(t), newEndpoint(t)
	for _, id := range []string{"x", "y", "z", "w"} {
		if err := st.CreateAgent(store.Agent{ID: id, AccountID: "acc", Name: "Agent " + strings.ToUpper(id)}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := s.Set(Update{BaseURL: a.url(), Model: "model-a", APIKey: ptr("key-a"), AllowPrivate: yes()}); err != nil {
		t.Fatal(err)
	}
	for id, u := range map[string]Update{
		"x": {BaseURL: b.url(), Model: "model-x", APIKey: ptr("key-x"), AllowPrivate: yes()},
		"z": {Model: "model-z"},
		"w": {BaseURL: b.url(), Model: "model-w", AllowPrivate: yes()},
	} {
		if _, err := s.SetAgent(id, u, root); err != nil {
			t.Fatalf("SetAgent(%s): %v", id, err)
		}
	}

	ctx := context.Background()
	tests := []struct {
		name, agent, turn string
		at                *endpoint
		want              call
	}{
		{"no override uses the app", "y", "", a, call{"Bearer key-a", "model-a"}},
		{"turn name beats the app's", "y", "turn-m", a, call{"Bearer key-a", "turn-m"}},
		{"agent endpoint and key", "x", "", b, call{"Bearer key-x", "model-x"}},
		{"turn name beats the agent's", "x", "turn-m", b, call{"Bearer key-x", "turn-m"}},
		{"agent model at the app endpoint with the app key", "z", "", a, call{"Bearer key-a", "model-z"}},
		{"agent endpoint without a key sends none", "w", "", b, call{"", "model-w"}},
		{"unknown agent uses the app", "ghost", "", a, call{"Bearer key-a", "model-a"}},
		{"no agent uses the app", "", "", a, call{"Bearer key-a", "model-a"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var chat *agent.ChatModel
			if tt.turn != "" {
				chat = &agent.ChatModel{Name: tt.turn}
			}
			m, err := s.Resolve(ctx, tt.agent, chat)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := m.Stream(ctx, agent.ModelRequest{Messages: []agent.Msg{{Role: "user", Content: []agent.ContentBlock{{Type: "text", Text: "hello"}}}}}, func(agent.ModelDelta) {}); err != nil {
				t.Fatal(err)
			}
			other := a
			if tt.at == a {
				other = b
			}
			if got := tt.at.take(); len(got) != 1 || got[0] != tt.want {
				t.Fatalf("calls = %+v, want [%+v]", got, tt.want)
			}
			if got := other.take(); len(got) != 0 {
				t.Fatalf("the other endpoint got %+v", got)
			}
		})
	}

	// A failing call says whose configuration to check.
	b.refuse(http.StatusUnauthorized)
	m, _ := s.Resolve(ctx, "x", nil)
	_, err = m.Stream(ctx, agent.ModelRequest{}, func(agent.ModelDelta) {})
	if !errors.Is(err, fault.ErrForbidden) || !strings.Contains(err.Error(), "agent's Model section") {
		t.Fatalf("agent endpoint refusing: %v", err)
	}
	a.refuse(http.StatusUnauthorized)
	m, _ = s.Resolve(ctx, "y", nil)
	_, err = m.Stream(ctx, agent.ModelRequest{}, func(agent.ModelDelta) {})
	if !errors.Is(err, fault.ErrForbidden) || !strings.Contains(err.Error(), "Settings → Model") || strings.Contains(err.Error(), "agent") {
		t.Fatalf("app endpoint refusing: %v", err)
	}

	// Keys sealed under another secrets key: each error names its own configuration, and an
	// agent with its own endpoint does not need the app's key.
	wrong, _ := New(Config{Store: st, Key: []byte(strings.Repeat("x", 32))})
	if _, err := wrong.Resolve(ctx, "x", nil); !errors.Is(err, fault.ErrConflict) || !strings.Contains(err.Error(), `agent "Agent X"`) || !strings.Contains(err.Error(), "Model section") {
		t.Fatalf("agent key unreadable: %v", err)
	}
	if _, err := wrong.Resolve(ctx, "y", nil); !errors.Is(err, fault.ErrConflict) || !strings.Contains(err.Error(), "Settings → Model") || strings.Contains(err.Error(), "agent") {
		t.Fatalf("app key unreadable: %v", err)
	}
	if _, err := wrong.Resolve(ctx, "w", nil); err != nil {
		t.Fatalf("agent with its own keyless endpoint needs the app key: %v", err)
	}
	if v, err := wrong.AgentView("x"); err != nil || v.Effective.Configured || !strings.Contains(v.Effective.Problem, "cannot be decrypted") {
		t.Fatalf("view with an unreadable agent key: %+v, %v", v, err)
	}

	// Without an app model: the agent with only a model name is misconfigured (and says so),
	// the plain agent runs in operator mode, the agent with its own endpoint still works.
	if _, err := s.Set(Update{}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Resolve(ctx, "z", nil); !errors.Is(err, fault.ErrConflict) || !strings.Contains(err.Error(), `agent "Agent Z"`) || !strings.Contains(err.Error(), "Settings → Model") {
		t.Fatalf("agent model without a base URL: %v", err)
	}
	if v, _ := s.AgentView("z"); v.Effective.Configured || v.Effective.Source != SourceAgent || v.Effective.Problem == "" {
		t.Fatalf("view of z = %+v", v.Effective)
	}
	if _, err := s.Resolve(ctx, "y", nil); !errors.Is(err, agent.ErrNoModel) {
		t.Fatalf("no model anywhere: %v", err)
	}
	if m, err := s.Resolve(ctx, "x", nil); err != nil || m.Name() != "model-x" {
		t.Fatalf("agent endpoint without an app model: %v", err)
	}
}

func TestAgentModelSet(t *testing.T) {
	st, path := openStore(t)
	env := map[string]string{"CUBICLE_MODEL_BASE_URL": "http://127.0.0.1:9/v1", "CUBICLE_MODEL": "env-model", "CUBICLE_MODEL_API_KEY": "env-key"}
	s, err := New(Config{Store: st, Key: []byte(strings.Repeat("k", 32)), Getenv: func(k string) string { return env[k] }})
	if err != nil {
		t.Fatal(err)
	}
	if err := st.CreateAgent(store.Agent{ID: "g", AccountID: "acc", Name: "G"}); err != nil {
		t.Fatal(err)
	}
	v, err := s.AgentView("g")
	if err != nil || v.Effective != (Effective{BaseURL: env["CUBICLE_MODEL_BASE_URL"], Model: "env-model", Source: SourceEnvironment, Configured: true, Provider: ProviderOpenAI}) ||
		v.Inherits.Source != SourceEnvironment || !v.Inherits.HasAPIKey || v.HasAPIKey || v.BaseURL != "" {
		t.Fatalf("fresh view = %+v, %v", v, err)
	}
	if _, err := s.AgentView("ghost"); !errors.Is(err, fault.ErrNotFound) {
		t.Fatalf("unknown agent view: %v", err)
	}
	if _, err := s.SetAgent("ghost", Update{Model: "m"}, root); !errors.Is(err, fault.ErrNotFound) {
		t.Fatalf("unknown agent set: %v", err)
	}

	secret := "sk-agent-secret-key"
	v, err = s.SetAgent("g", Update{BaseURL: " https://b.example/v1 ", Model: " m-b ", APIKey: &secret}, root)
	if err != nil || v.BaseURL != "https://b.example/v1" || v.Model != "m-b" || !v.HasAPIKey ||
		v.Effective != (Effective{BaseURL: "https://b.example/v1", Model: "m-b", Source: SourceAgent, Configured: true, Provider: ProviderOpenAI}) {
		t.Fatalf("set = %+v, %v", v, err)
	}
	before, _ := st.Agent("g")

	for _, bad := range []Update{
		{BaseURL: "ftp://x", Model: "m"},
		{BaseURL: "not a url", Model: "m"},
		{BaseURL: "https://x/v1"},
		{Model: "m", APIKey: ptr("k")},
	} {
		if _, err := s.SetAgent("g", bad, root); !errors.Is(err, fault.ErrInvalid) {
			t.Fatalf("SetAgent(%+v) = %v", bad, err)
		}
	}
	if after, _ := st.Agent("g"); !reflect.DeepEqual(after, before) {
		t.Fatalf("refused input changed the agent: %+v, was %+v", after, before)
	}

	steps := []struct {
		name      string
		u         Update
		hasKey    bool
		effective Effective
		nilModel  bool
	}{
		{"omitted key is kept at the same URL", Update{BaseURL: "https://b.example/v1/", Model: "m-b2"}, true,
			Effective{BaseURL: "https://b.example/v1/", Model: "m-b2", Source: SourceAgent, Configured: true, Provider: ProviderOpenAI}, false},
		{"a new URL drops the key", Update{BaseURL: "https://b2.example/v1", Model: "m-b2"}, false,
			Effective{BaseURL: "https://b2.example/v1", Model: "m-b2", Source: SourceAgent, Configured: true, Provider: ProviderOpenAI}, false},
		{"empty key clears it", Update{BaseURL: "https://b2.example/v1", Model: "m-b2", APIKey: ptr("")}, false,
			Effective{BaseURL: "https://b2.example/v1", Model: "m-b2", Source: SourceAgent, Configured: true, Provider: ProviderOpenAI}, false},
		{"set a key again", Update{BaseURL: "https://b2.example/v1", Model: "m-b2", APIKey: ptr("k2")}, true,
			Effective{BaseURL: "https://b2.example/v1", Model: "m-b2", Source: SourceAgent, Configured: true, Provider: ProviderOpenAI}, false},
		{"model name only drops the key", Update{Model: "m-only"}, false,
			Effective{BaseURL: env["CUBICLE_MODEL_BASE_URL"], Model: "m-only", Source: SourceAgent, Configured: true, Provider: ProviderOpenAI}, false},
		{"all empty inherits", Update{APIKey: ptr("")}, false,
			Effective{BaseURL: env["CUBICLE_MODEL_BASE_URL"], Model: "env-model", Source: SourceEnvironment, Configured: true, Provider: ProviderOpenAI}, true},
	}
	for _, tt := range steps {
		v, err := s.SetAgent("g", tt.u, root)
		if err != nil || v.HasAPIKey != tt.hasKey || v.Effective != tt.effective {
			t.Fatalf("%s: %+v, %v", tt.name, v, err)
		}
		a, _ := st.Agent("g")
		if (a.Model == nil) != tt.nilModel {
			t.Fatalf("%s: stored model %+v", tt.name, a.Model)
		}
		if tt.hasKey && string(a.Model.APIKeySealed) == "k2" {
			t.Fatalf("%s: key stored in clear", tt.name)
		}
	}
	if _, err := s.SetAgent("g", Update{BaseURL: "https://b.example/v1", Model: "m", APIKey: &secret}, root); err != nil {
		t.Fatal(err)
	}
	raw, _ := json.Marshal(must(s.AgentView("g")))
	if strings.Contains(string(raw), secret) || strings.Contains(string(raw), "env-key") {
		t.Fatalf("a view shows a key: %s", raw)
	}
	st.Close()
	data, _ := os.ReadFile(path)
	if strings.Contains(string(data), secret) {
		t.Fatal("the agent's API key is stored in clear")
	}
	st2, err := store.Open(path, store.Options{LockTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer st2.Close()
	s2, _ := New(Config{Store: st2, Key: []byte(strings.Repeat("k", 32))})
	a, _ := st2.Agent("g")
	if k, err := s2.open(a.Model.APIKeySealed, appKeyWhere); err != nil || k != secret {
		t.Fatalf("reopened key = %q, %v", k, err)
	}
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}

// list approves base URLs for tests.
type list map[string]bool // normalized URL → allow private

func (l list) Endpoint(u string) (bool, bool) {
	for k, p := range l {
		if sameURL(k, u) {
			return true, p
		}
	}
	return false, false
}

// A member's agent may only use an approved base URL (issue 15, item 2): one an administrator
// set, or one on the admin-managed list; only an administrator allows private addresses, and
// withdrawing the approval stops the agent's model.
func TestMemberEndpointsNeedApproval(t *testing.T) {
	st, _ := openStore(t)
	approved := list{}
	s, err := New(Config{Store: st, Key: []byte(strings.Repeat("k", 32)), Endpoints: approved})
	if err != nil {
		t.Fatal(err)
	}
	e := newEndpoint(t)
	if err := st.CreateAgent(store.Agent{ID: "m", AccountID: "bob", Name: "M"}); err != nil {
		t.Fatal(err)
	}
	member := Setter{AccountID: "bob"}
	before, _ := st.Agent("m")
	if _, err := s.SetAgent("m", Update{BaseURL: "https://evil.example/v1", Model: "x", APIKey: ptr("k")}, member); !errors.Is(err, fault.ErrForbidden) {
		t.Fatalf("a member set an unapproved URL: %v", err)
	}
	if _, err := s.SetAgent("m", Update{BaseURL: e.url(), Model: "x", AllowPrivate: yes()}, member); !errors.Is(err, fault.ErrForbidden) {
		t.Fatalf("a member allowed a private address: %v", err)
	}
	if after, _ := st.Agent("m"); !reflect.DeepEqual(after, before) {
		t.Fatalf("a refused change changed the agent: %+v", after.Model)
	}
	// On the list (with the admin's allowance for its loopback address), the member may use it.
	approved[e.url()] = true
	v, err := s.SetAgent("m", Update{BaseURL: e.url(), Model: "x", APIKey: ptr("member-key")}, member)
	if err != nil || !v.Approved || !v.AllowPrivate || !v.Effective.Configured {
		t.Fatalf("approved URL: %+v, %v", v, err)
	}
	ctx := context.Background()
	m, err := s.Resolve(ctx, "m", nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m.Stream(ctx, agent.ModelRequest{}, func(agent.ModelDelta) {}); err != nil {
		t.Fatal(err)
	}
	if got := e.take(); len(got) != 1 || got[0].auth != "Bearer member-key" {
		t.Fatalf("calls %+v", got)
	}
	// Taken off the list: the agent's model no longer runs, and says why.
	delete(approved, e.url())
	if _, err := s.Resolve(ctx, "m", nil); !errors.Is(err, fault.ErrForbidden) || !strings.Contains(err.Error(), "not approved") {
		t.Fatalf("after the approval was withdrawn: %v", err)
	}
	// Listed without the private allowance: the loopback address is refused when dialled.
	approved[e.url()] = false
	m, err = s.Resolve(ctx, "m", nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m.Stream(ctx, agent.ModelRequest{}, func(agent.ModelDelta) {}); !errors.Is(err, fault.ErrForbidden) {
		t.Fatalf("a private address without the allowance: %v", err)
	}
	if got := e.take(); len(got) != 0 {
		t.Fatalf("the private endpoint was reached: %+v", got)
	}
	// An administrator's setting is the approval, also with the private allowance.
	delete(approved, e.url())
	if _, err := s.SetAgent("m", Update{BaseURL: e.url(), Model: "x", APIKey: ptr("admin-key"), AllowPrivate: yes()}, root); err != nil {
		t.Fatal(err)
	}
	if m, err = s.Resolve(ctx, "m", nil); err != nil {
		t.Fatal(err)
	}
	if _, err := m.Stream(ctx, agent.ModelRequest{}, func(agent.ModelDelta) {}); err != nil {
		t.Fatal(err)
	}
	// A key saved with another URL (a record from before keys were bound) is never sent.
	if _, err := st.UpdateAgent("m", func(a *store.Agent) error { a.Model.KeyBaseURL = "https://old.example/v1"; return nil }); err != nil {
		t.Fatal(err)
	}
	e.take()
	m, _ = s.Resolve(ctx, "m", nil)
	if _, err := m.Stream(ctx, agent.ModelRequest{}, func(agent.ModelDelta) {}); err != nil {
		t.Fatal(err)
	}
	if got := e.take(); len(got) != 1 || got[0].auth != "" {
		t.Fatalf("a key saved with another URL was sent: %+v", got)
	}
}
