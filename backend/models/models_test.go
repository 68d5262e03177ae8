package models

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"cubicle/backend/agent"
	"cubicle/backend/fault"
	"cubicle/backend/store"
)

func TestModels(t *testing.T) {
	path := filepath.Join(t.TempDir(), "c.db")
	st, err := store.Open(path, store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	key := []byte(strings.Repeat("k", 32))
	env := map[string]string{}
	s, err := New(Config{Store: st, Key: key, Getenv: func(k string) string { return env[k] }})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if _, err := s.Resolve(ctx, "a", nil); !errors.Is(err, agent.ErrNoModel) {
		t.Fatalf("unconfigured: %v", err)
	}
	env["CUBICLE_MODEL_BASE_URL"], env["CUBICLE_MODEL"] = "http://127.0.0.1:1/v1", "env-model"
	if v, _ := s.Get(); v.Source != "environment" || v.Model != "env-model" {
		t.Fatalf("env view = %+v", v)
	}
	for _, bad := range []Update{{BaseURL: "ftp://x", Model: "m"}, {BaseURL: "not a url", Model: "m"}, {BaseURL: "https://x/v1"}} {
		if _, err := s.Set(bad); !errors.Is(err, fault.ErrInvalid) {
			t.Fatalf("Set(%+v) = %v", bad, err)
		}
	}
	secret := "sk-very-secret-key"
	v, err := s.Set(Update{BaseURL: "https://api.example/v1", Model: "gpt-x", APIKey: &secret})
	if err != nil || !v.HasAPIKey || v.Source != "settings" || !v.Configured {
		t.Fatalf("set = %+v, %v", v, err)
	}
	m, err := s.Resolve(ctx, "a", &agent.ChatModel{Name: "override"})
	if err != nil || m.Name() != "override" {
		t.Fatalf("resolve override: %v", err)
	}
	// Another model name at the same URL (however spelled) keeps the key; a new URL drops it:
	// a saved key is only ever sent to the URL it was saved with.
	if v, _ := s.Set(Update{BaseURL: "https://API.example:443/v1/", Model: "gpt-y"}); !v.HasAPIKey {
		t.Fatal("key lost when only the model changed")
	}
	if v, _ := s.Set(Update{BaseURL: "https://api2.example/v1", Model: "gpt-y"}); v.HasAPIKey {
		t.Fatal("the saved key followed a new base URL")
	}
	if v, _ := s.Set(Update{BaseURL: "https://api.example/v1", Model: "gpt-y"}); v.HasAPIKey {
		t.Fatal("the dropped key came back")
	}
	if _, err := s.Set(Update{BaseURL: "https://api.example/v1", Model: "gpt-x", APIKey: &secret}); err != nil {
		t.Fatal(err)
	}
	st.Close()
	raw, _ := os.ReadFile(path)
	if strings.Contains(string(raw), secret) {
		t.Fatal("API key stored in clear")
	}
	st, _ = store.Open(path, store.Options{})
	defer st.Close()
	s2, _ := New(Config{Store: st, Key: key})
	if l, err := s2.load(); err != nil || l.apiKey != secret {
		t.Fatalf("reload: %+v %v", l, err)
	}
	wrong, _ := New(Config{Store: st, Key: []byte(strings.Repeat("x", 32))})
	if _, err := wrong.Get(); !errors.Is(err, fault.ErrConflict) {
		t.Fatalf("wrong key: %v", err)
	}
	if v, _ := s2.Set(Update{}); v.Configured || v.HasAPIKey {
		t.Fatalf("cleared = %+v", v)
	}
}
