package api

import (
	"strings"
	"testing"

	"cubicle/backend/agent/anthropic/anthropictest"
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
