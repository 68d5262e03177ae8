package api

import (
	"strings"
	"testing"

	"cubicle/backend/agent"
	"cubicle/backend/agent/anthropic/anthropictest"
	"cubicle/backend/agent/responses/responsestest"
	"cubicle/backend/history"
)

// A member's agent on an endpoint an administrator approved, for each native provider (issue
// 22): refused before the approval, the key sealed and sent only there after it, the chat turn
// answered through the vendor's own wire format, and the approval's removal ending it.
func TestMemberAgentOnApprovedNativeEndpoint(t *testing.T) {
	for _, p := range []struct {
		provider, model, key string
		start                func(key string) (url string, push func(text string), seen func() int, stop func())
	}{
		{"anthropic", "claude-sonnet-4-5", "sk-ant-member", func(key string) (string, func(string), func() int, func()) {
			s := anthropictest.New(key)
			return s.URL, func(text string) { s.Push(anthropictest.Say(text)) }, func() int { return len(s.Seen()) }, s.Close
		}},
		{"openai-responses", "computer-use-preview", "sk-member", func(key string) (string, func(string), func() int, func()) {
			s := responsestest.New(key)
			return s.URL + "/v1", func(text string) { s.Push(responsestest.Say(text)) }, func() int { return len(s.Seen()) }, s.Close
		}},
	} {
		t.Run(p.provider, func(t *testing.T) {
			f := newFixture(t)
			ms := withModels(t, f)
			rt, err := agent.New(agent.Config{Tools: echoTools{}, Models: ms.Resolve, Sessions: f.store, Recorder: history.New(f.store, nil)})
			if err != nil {
				t.Fatal(err)
			}
			f.srv.cfg.Chat, f.srv.cfg.Chats = rt, f.store
			url, push, seen, stop := p.start(p.key)
			defer stop()

			a := decodeBody[agentJSON](t, f.do(req{method: "POST", path: "/api/app/agents", body: `{"name":"Mine"}`, cookie: f.user}))
			me := decodeBody[struct{ User userJSON }](t, f.do(req{method: "GET", path: "/api/auth/me", cookie: f.user})).User
			setting := `{"provider":"` + p.provider + `","baseUrl":"` + url + `","model":"` + p.model + `","apiKey":"` + p.key + `"}`
			if rec := f.do(req{method: "PUT", path: "/api/app/agents/" + a.ID + "/model", body: setting, cookie: f.user}); rec.Code != 403 ||
				!strings.Contains(rec.Body.String(), "not an approved model endpoint") {
				t.Fatalf("before the approval: %d %s", rec.Code, rec.Body)
			}
			approve := `{"modelEndpoints":[{"baseUrl":"` + url + `","allowPrivate":true}]}`
			if rec := f.do(req{method: "PUT", path: "/api/app/admin/security", body: approve, cookie: f.admin}); rec.Code != 200 {
				t.Fatalf("approve: %d %s", rec.Code, rec.Body)
			}
			rec := f.do(req{method: "PUT", path: "/api/app/agents/" + a.ID + "/model", body: setting, cookie: f.user})
			if rec.Code != 200 || !strings.Contains(rec.Body.String(), `"approved":true`) || strings.Contains(rec.Body.String(), p.key) {
				t.Fatalf("on the approved endpoint: %d %s", rec.Code, rec.Body)
			}
			turn := func(session string) string {
				t.Helper()
				body := `{"sessionId":"` + session + `","userId":"` + me.ID + `","agentId":"` + a.ID + `","input":"hello"}`
				rec := f.do(req{method: "POST", path: "/api/app/chat", body: body, cookie: f.user, header: map[string]string{"Accept": "application/json"}})
				if rec.Code != 200 {
					t.Fatalf("chat: %d %s", rec.Code, rec.Body)
				}
				return rec.Body.String()
			}
			push("native answer")
			if out := turn("s1"); !strings.Contains(out, "native answer") || seen() != 1 {
				t.Fatalf("the turn through %s: %s (requests %d)", p.provider, out, seen())
			}
			// The administrator withdraws the approval: the member's agent no longer reaches it.
			if rec := f.do(req{method: "PUT", path: "/api/app/admin/security", body: `{"modelEndpoints":[]}`, cookie: f.admin}); rec.Code != 200 {
				t.Fatalf("withdraw: %d %s", rec.Code, rec.Body)
			}
			if out := turn("s2"); strings.Contains(out, "native answer") || seen() != 1 {
				t.Fatalf("after the approval was withdrawn: %s (requests %d)", out, seen())
			}
		})
	}
}
