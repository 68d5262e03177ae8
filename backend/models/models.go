// Package models keeps the app's chat model configuration (an OpenAI-compatible endpoint:
// base URL, model name, API key) and resolves the model of a turn. The API key is sealed with
// AES-256-GCM under a key file in the data directory's secrets (0600), so the data file alone
// does not reveal it. Environment variables CUBICLE_MODEL_BASE_URL, CUBICLE_MODEL and
// CUBICLE_MODEL_API_KEY give a default when nothing was saved.
package models

import (
	"context"
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"errors"
	"net/url"
	"strings"
	"time"

	"cubicle/backend/agent"
	"cubicle/backend/agent/openai"
	"cubicle/backend/fault"
	"cubicle/backend/store"
)

// Store is the part of the store models need.
type Store interface {
	ModelSettings() (store.ModelSettings, error)
	PutModelSettings(m store.ModelSettings) error
}

// Config configures a Service. Store and Key are required.
type Config struct {
	Store  Store
	Key    []byte              // 32 bytes sealing the API key
	Getenv func(string) string // default settings from the environment; nil = none
}

// Service manages the model settings.
type Service struct {
	st     Store
	aead   cipher.AEAD
	getenv func(string) string
}

// New returns a Service.
func New(cfg Config) (*Service, error) {
	if cfg.Store == nil || len(cfg.Key) != 32 {
		return nil, errors.New("models: Config.Store and a 32-byte Config.Key are required")
	}
	block, err := aes.NewCipher(cfg.Key)
	if err != nil {
		return nil, err
	}
	aead, err := cipher.NewGCM(block)
	if err != nil {
		return nil, err
	}
	if cfg.Getenv == nil {
		cfg.Getenv = func(string) string { return "" }
	}
	return &Service{st: cfg.Store, aead: aead, getenv: cfg.Getenv}, nil
}

// View is what the settings page shows: never the key itself.
type View struct {
	BaseURL    string `json:"baseUrl"`
	Model      string `json:"model"`
	HasAPIKey  bool   `json:"hasApiKey"`
	Configured bool   `json:"configured"`
	Source     string `json:"source"` // "settings", "environment" or "none"
}

// Update changes the settings. A nil APIKey keeps the saved key; "" clears it.
type Update struct {
	BaseURL string  `json:"baseUrl"`
	Model   string  `json:"model"`
	APIKey  *string `json:"apiKey,omitempty"`
}

type settings struct {
	baseURL, model, apiKey, source string
}

func (s *Service) load() (settings, error) {
	m, err := s.st.ModelSettings()
	switch {
	case err == nil && m.BaseURL != "":
		key, err := s.open(m.APIKeySealed)
		if err != nil {
			return settings{}, err
		}
		return settings{baseURL: m.BaseURL, model: m.Model, apiKey: key, source: "settings"}, nil
	case err != nil && !errors.Is(err, fault.ErrNotFound):
		return settings{}, err
	}
	if u := s.getenv("CUBICLE_MODEL_BASE_URL"); u != "" {
		return settings{baseURL: u, model: s.getenv("CUBICLE_MODEL"), apiKey: s.getenv("CUBICLE_MODEL_API_KEY"), source: "environment"}, nil
	}
	return settings{source: "none"}, nil
}

// Get returns the settings as the page shows them.
func (s *Service) Get() (View, error) {
	st, err := s.load()
	if err != nil {
		return View{}, err
	}
	return View{BaseURL: st.baseURL, Model: st.model, HasAPIKey: st.apiKey != "", Configured: st.baseURL != "" && st.model != "", Source: st.source}, nil
}

// Set saves new settings; an empty base URL clears the configuration (operator mode).
func (s *Service) Set(u Update) (View, error) {
	u.BaseURL, u.Model = strings.TrimSpace(u.BaseURL), strings.TrimSpace(u.Model)
	if u.BaseURL != "" {
		p, err := url.Parse(u.BaseURL)
		if err != nil || (p.Scheme != "http" && p.Scheme != "https") || p.Host == "" {
			return View{}, fault.Invalid("the base URL must be an http(s) URL such as https://api.openai.com/v1")
		}
		if u.Model == "" {
			return View{}, fault.Invalid("name the model (for example gpt-4o)")
		}
	}
	old, _ := s.st.ModelSettings()
	sealed := old.APIKeySealed
	if u.APIKey != nil {
		var err error
		if sealed, err = s.seal(*u.APIKey); err != nil {
			return View{}, err
		}
	}
	if u.BaseURL == "" {
		sealed = nil
	}
	if err := s.st.PutModelSettings(store.ModelSettings{BaseURL: u.BaseURL, Model: u.Model, APIKeySealed: sealed, UpdatedAt: time.Now().UTC()}); err != nil {
		return View{}, err
	}
	return s.Get()
}

// Resolve is an agent.ModelResolver: the saved (or environment) model, with a turn's
// chatModel name overriding the model name. Without a configured model it returns
// agent.ErrNoModel (operator mode).
func (s *Service) Resolve(ctx context.Context, agentID string, chat *agent.ChatModel) (agent.Model, error) {
	st, err := s.load()
	if err != nil {
		return nil, err
	}
	model := st.model
	if chat != nil && chat.Name != "" {
		model = chat.Name
	}
	if st.baseURL == "" || model == "" {
		return nil, agent.ErrNoModel
	}
	return openai.New(openai.Config{BaseURL: st.baseURL, APIKey: st.apiKey, Model: model})
}

func (s *Service) seal(key string) ([]byte, error) {
	if key == "" {
		return nil, nil
	}
	nonce := make([]byte, s.aead.NonceSize())
	if _, err := rand.Read(nonce); err != nil {
		return nil, err
	}
	return s.aead.Seal(nonce, nonce, []byte(key), []byte("cubicle model api key")), nil
}

func (s *Service) open(sealed []byte) (string, error) {
	if len(sealed) == 0 {
		return "", nil
	}
	n := s.aead.NonceSize()
	if len(sealed) < n {
		return "", fault.Conflict("the saved API key is damaged; enter it again in Settings → Model")
	}
	plain, err := s.aead.Open(nil, sealed[:n], sealed[n:], []byte("cubicle model api key"))
	if err != nil {
		return "", fault.Conflict("the saved API key cannot be decrypted (the secrets directory changed?); enter it again in Settings → Model")
	}
	return string(plain), nil
}

var _ agent.ModelResolver = (*Service)(nil).Resolve
