package api

import (
	"strings"
	"testing"

	"cubicle/backend/models"
)

func TestModelSettings(t *testing.T) {
	f := newFixture(t)
	ms, err := models.New(models.Config{Store: f.store, Key: []byte(strings.Repeat("m", 32))})
	if err != nil {
		t.Fatal(err)
	}
	f.srv.cfg.Models = ms
	if rec := f.do(req{method: "GET", path: "/api/app/admin/model", cookie: f.admin}); rec.Code != 200 || !strings.Contains(rec.Body.String(), `"configured":false`) {
		t.Fatalf("get: %d %s", rec.Code, rec.Body)
	}
	body := `{"baseUrl":"https://api.example/v1","model":"gpt-x","apiKey":"sk-secret-123"}`
	if rec := f.do(req{method: "PUT", path: "/api/app/admin/model", body: body, cookie: f.user}); rec.Code != 403 {
		t.Fatalf("non-admin put: %d", rec.Code)
	}
	rec := f.do(req{method: "PUT", path: "/api/app/admin/model", body: body, cookie: f.admin})
	if rec.Code != 200 || strings.Contains(rec.Body.String(), "sk-secret") || !strings.Contains(rec.Body.String(), `"hasApiKey":true`) {
		t.Fatalf("put: %d %s", rec.Code, rec.Body)
	}
	if rec := f.do(req{method: "PUT", path: "/api/app/admin/model", body: `{"baseUrl":"nope","model":"m"}`, cookie: f.admin}); rec.Code != 400 {
		t.Fatalf("bad url: %d", rec.Code)
	}
	if got := decodeBody[models.View](t, f.do(req{method: "GET", path: "/api/app/admin/model", cookie: f.admin})); got.BaseURL != "https://api.example/v1" {
		t.Fatalf("bad input changed the settings: %+v", got)
	}
}
