package api

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"cubicle/backend/agent/anthropic/anthropictest"
	"cubicle/backend/agent/responses/responsestest"
	"cubicle/backend/models"
)

// The provider goes through PUT and GET; Test makes one real request and says what failed;
// members cannot test the app's model.
func TestModelProviderAndTest(t *testing.T) {
	f := newFixture(t)
	ms, err := models.New(models.Config{Store: f.store, Key: []byte(strings.Repeat("m", 32))})
	if err != nil {
		t.Fatal(err)
	}
	f.srv.cfg.Models = ms
	srv := anthropictest.New("sk-ant-good")
	defer srv.Close()
	if rec := f.do(req{method: "PUT", path: "/api/app/admin/model", body: `{"baseUrl":"` + srv.URL + `","model":"claude-haiku-4-5","provider":"bogus"}`, cookie: f.admin}); rec.Code != 400 {
		t.Fatalf("unknown provider: %d %s", rec.Code, rec.Body)
	}
	body := `{"baseUrl":"` + srv.URL + `","model":"claude-haiku-4-5","provider":"anthropic","apiKey":"sk-ant-good","allowPrivate":true}`
	if rec := f.do(req{method: "PUT", path: "/api/app/admin/model", body: body, cookie: f.admin}); rec.Code != 200 || !strings.Contains(rec.Body.String(), `"provider":"anthropic"`) {
		t.Fatalf("put: %d %s", rec.Code, rec.Body)
	}
	if got := decodeBody[models.View](t, f.do(req{method: "GET", path: "/api/app/admin/model", cookie: f.admin})); got.Provider != "anthropic" {
		t.Fatalf("get: %+v", got)
	}
	if rec := f.do(req{method: "POST", path: "/api/app/admin/model/test", cookie: f.user}); rec.Code != 403 {
		t.Fatalf("member test: %d", rec.Code)
	}
	srv.Push(anthropictest.Say("pong"))
	if got := decodeBody[models.TestResult](t, f.do(req{method: "POST", path: "/api/app/admin/model/test", cookie: f.admin})); !got.OK {
		t.Fatalf("test: %+v", got)
	}
	srv.Push(anthropictest.Error(404, "not_found_error", "model: claude-haiku-4-5"))
	if got := decodeBody[models.TestResult](t, f.do(req{method: "POST", path: "/api/app/admin/model/test", cookie: f.admin})); got.OK || got.Code != "model" {
		t.Fatalf("test 404: %+v", got)
	}
}

// The models picker: each provider's saved endpoint lists its models through its own API
// (Anthropic's paged Models API, OpenAI's and OpenAI-compatible GET /models); a wrong key and
// an endpoint without a list say so; members list only their own agents' endpoints.
func TestModelList(t *testing.T) {
	f := newFixture(t)
	ms, err := models.New(models.Config{Store: f.store, Key: []byte(strings.Repeat("m", 32))})
	if err != nil {
		t.Fatal(err)
	}
	f.srv.cfg.Models = ms
	list := func(path, cookie string) models.ModelList {
		t.Helper()
		rec := f.do(req{method: "GET", path: path, cookie: cookie})
		if rec.Code != 200 {
			t.Fatalf("GET %s: %d %s", path, rec.Code, rec.Body)
		}
		return decodeBody[models.ModelList](t, rec)
	}
	put := func(body string) {
		t.Helper()
		if rec := f.do(req{method: "PUT", path: "/api/app/admin/model", body: body, cookie: f.admin}); rec.Code != 200 {
			t.Fatalf("put %s: %d %s", body, rec.Code, rec.Body)
		}
	}

	// Anthropic's Models API (the official SDK's auto-pager; the scripted server pages as the
	// API documents).
	ant := anthropictest.New("sk-ant-good")
	defer ant.Close()
	var want []string
	for i := range 25 {
		want = append(want, fmt.Sprintf("claude-model-%02d", i))
	}
	ant.SetModels(want...)
	put(`{"baseUrl":"` + ant.URL + `","model":"claude-model-00","provider":"anthropic","apiKey":"sk-ant-good","allowPrivate":true}`)
	if got := list("/api/app/admin/model/models", f.admin); got.Problem != "" || !slices.Equal(got.Models, want) || got.Provider != "anthropic" {
		t.Fatalf("anthropic list: %+v", got)
	}
	if rec := f.do(req{method: "GET", path: "/api/app/admin/model/models", cookie: f.user}); rec.Code != 403 {
		t.Fatalf("a member listing the app's endpoint: %d", rec.Code)
	}
	put(`{"baseUrl":"` + ant.URL + `","model":"claude-model-01","provider":"anthropic","apiKey":"sk-ant-wrong","allowPrivate":true}`)
	if got := list("/api/app/admin/model/models", f.admin); got.Code != "key" || len(got.Models) != 0 {
		t.Fatalf("anthropic with a wrong key: %+v", got)
	}

	// OpenAI Responses (GET /v1/models, as for every OpenAI-compatible endpoint).
	oai := responsestest.New("sk-good")
	defer oai.Close()
	oai.SetModels("gpt-4o", "computer-use-preview")
	put(`{"baseUrl":"` + oai.URL + `/v1","model":"computer-use-preview","provider":"openai-responses","apiKey":"sk-good","allowPrivate":true}`)
	if got := list("/api/app/admin/model/models", f.admin); got.Problem != "" || !slices.Equal(got.Models, []string{"computer-use-preview", "gpt-4o"}) {
		t.Fatalf("responses list: %+v", got)
	}
	put(`{"baseUrl":"` + oai.URL + `/v1","model":"computer-use-preview","provider":"openai-responses","apiKey":"sk-wrong","allowPrivate":true}`)
	if got := list("/api/app/admin/model/models", f.admin); got.Code != "key" || len(got.Models) != 0 {
		t.Fatalf("responses with a wrong key: %+v", got)
	}

	// OpenAI-compatible: the same GET /models; an endpoint that has none says to type the name.
	put(`{"baseUrl":"` + oai.URL + `/v1","model":"m","provider":"openai-compatible","apiKey":"sk-good","allowPrivate":true}`)
	if got := list("/api/app/admin/model/models", f.admin); got.Problem != "" || len(got.Models) != 2 {
		t.Fatalf("openai-compatible list: %+v", got)
	}
	put(`{"baseUrl":"` + oai.URL + `/nolist","model":"m","provider":"openai-compatible","apiKey":"sk-good","allowPrivate":true}`)
	if got := list("/api/app/admin/model/models", f.admin); got.Code != "unsupported" || !strings.Contains(got.Problem, "type the model") {
		t.Fatalf("an endpoint without a list: %+v", got)
	}
}
