package models

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"testing"

	"cubicle/backend/agent/anthropic"
	"cubicle/backend/agent/anthropic/anthropictest"
	"cubicle/backend/agent/openai"
	"cubicle/backend/agent/responses"
	"cubicle/backend/fault"
	"cubicle/backend/store"
)

// approveAll approves every endpoint, with private addresses.
type approveAll struct{}

func (approveAll) Endpoint(string) (bool, bool) { return true, true }

func TestProviders(t *testing.T) {
	st, err := store.Open(filepath.Join(t.TempDir(), "c.db"), store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	s, err := New(Config{Store: st, Key: []byte(strings.Repeat("k", 32)), Endpoints: approveAll{}})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	// A record saved before providers reads as openai-compatible.
	if err := st.PutModelSettings(store.ModelSettings{BaseURL: "https://old.example/v1", Model: "m"}); err != nil {
		t.Fatal(err)
	}
	if v, _ := s.Get(); v.Provider != ProviderOpenAI {
		t.Fatalf("old record: %+v", v)
	}
	if m, _ := s.Resolve(ctx, "", nil); m.(sourced).Model.(*openai.Client) == nil {
		t.Fatal("old record is not openai-compatible")
	}
	// An unknown provider is refused and changes nothing.
	if _, err := s.Set(Update{BaseURL: "https://api.anthropic.com", Model: "claude-sonnet-4-5", Provider: "gemini"}); !errors.Is(err, fault.ErrInvalid) {
		t.Fatalf("unknown provider: %v", err)
	}
	if v, _ := s.Get(); v.BaseURL != "https://old.example/v1" {
		t.Fatalf("a refused update changed the settings: %+v", v)
	}
	key := "sk-ant-x"
	v, err := s.Set(Update{BaseURL: "https://api.anthropic.com", Model: "claude-sonnet-4-5", Provider: ProviderAnthropic, APIKey: &key})
	if err != nil || v.Provider != ProviderAnthropic || !v.HasAPIKey {
		t.Fatalf("set anthropic: %+v %v", v, err)
	}
	if m, err := s.Resolve(ctx, "", nil); err != nil {
		t.Fatal(err)
	} else if _, ok := m.(sourced).Model.(*anthropic.Client); !ok {
		t.Fatalf("resolved %T", m.(sourced).Model)
	}
	// Switching the provider at the same URL keeps the key (it is bound to the URL).
	if v, _ := s.Set(Update{BaseURL: "https://api.anthropic.com", Model: "claude-opus-4-5", Provider: ProviderAnthropic}); !v.HasAPIKey {
		t.Fatal("key lost")
	}
	// An agent's provider goes with its own base URL.
	if err := st.CreateAgent(store.Agent{ID: "ag", Name: "Ada"}); err != nil {
		t.Fatal(err)
	}
	admin := Setter{AccountID: "root", Admin: true}
	if _, err := s.SetAgent("ag", Update{Model: "computer-use-preview", Provider: ProviderResponses}, admin); !errors.Is(err, fault.ErrInvalid) {
		t.Fatalf("provider without base URL: %v", err)
	}
	av, err := s.SetAgent("ag", Update{BaseURL: "https://api.openai.com/v1", Model: "computer-use-preview", Provider: ProviderResponses}, admin)
	if err != nil || av.Provider != ProviderResponses || av.Effective.Provider != ProviderResponses || av.Inherits.Provider != ProviderAnthropic {
		t.Fatalf("agent view: %+v %v", av, err)
	}
	if m, err := s.Resolve(ctx, "ag", nil); err != nil {
		t.Fatal(err)
	} else if _, ok := m.(sourced).Model.(*responses.Client); !ok {
		t.Fatalf("agent resolved %T", m.(sourced).Model)
	}
	// The agent's model name alone uses the app's provider.
	if av, _ := s.SetAgent("ag", Update{Model: "claude-haiku-4-5"}, admin); av.Effective.Provider != ProviderAnthropic {
		t.Fatalf("inherited provider: %+v", av.Effective)
	}
}

// Test makes one tiny real request and says what failed.
func TestTestModel(t *testing.T) {
	st, err := store.Open(filepath.Join(t.TempDir(), "c.db"), store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	s, _ := New(Config{Store: st, Key: []byte(strings.Repeat("k", 32))})
	srv := anthropictest.New("sk-good")
	defer srv.Close()
	allow := true
	set := func(key, model string) {
		if _, err := s.Set(Update{BaseURL: srv.URL, Model: model, Provider: ProviderAnthropic, APIKey: &key, AllowPrivate: &allow}); err != nil {
			t.Fatal(err)
		}
	}
	set("sk-good", "claude-haiku-4-5")
	srv.Push(anthropictest.Say("pong"))
	if r, err := s.Test(context.Background(), ""); err != nil || !r.OK || r.Provider != ProviderAnthropic {
		t.Fatalf("good: %+v %v", r, err)
	}
	set("sk-bad", "claude-haiku-4-5")
	if r, _ := s.Test(context.Background(), ""); r.OK || r.Code != "key" {
		t.Fatalf("bad key: %+v", r)
	}
	set("sk-good", "claude-nope")
	srv.Push(anthropictest.Error(404, "not_found_error", "model: claude-nope"))
	if r, _ := s.Test(context.Background(), ""); r.OK || r.Code != "model" || !strings.Contains(r.Problem, "claude-nope") {
		t.Fatalf("bad model: %+v", r)
	}
	srv.Push(anthropictest.Error(429, "rate_limit_error", "quota", "retry-after", "0"))
	if r, _ := s.Test(context.Background(), ""); r.OK || r.Code != "quota" {
		t.Fatalf("quota: %+v", r)
	}
	// A URL nothing listens on.
	key := "k"
	s.Set(Update{BaseURL: "http://127.0.0.1:1", Model: "m", Provider: ProviderAnthropic, APIKey: &key, AllowPrivate: &allow})
	if r, _ := s.Test(context.Background(), ""); r.OK || r.Code != "url" {
		t.Fatalf("bad url: %+v", r)
	}
}
