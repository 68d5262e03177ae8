// Package models keeps the chat model configuration (an OpenAI-compatible endpoint: base URL,
// model name, API key) of the app and of each agent, and resolves the model of a turn. API keys
// are sealed with AES-256-GCM under a key file in the data directory's secrets (0600), so the
// data file alone does not reveal them. Environment variables CUBICLE_MODEL_BASE_URL,
// CUBICLE_MODEL and CUBICLE_MODEL_API_KEY give the app's default when nothing was saved.
//
// An agent may override the app's model (agent.go): its model name replaces the app's, and
// its own base URL comes with its own API key. A turn's chatModel name beats both.
package models

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"time"

	"cubicle/backend/agent"
	"cubicle/backend/fault"
	"cubicle/backend/store"
)

// Store is the part of the store models need.
type Store interface {
	ModelSettings() (store.ModelSettings, error)
	PutModelSettings(m store.ModelSettings) error
	Agent(id string) (store.Agent, error)
	UpdateAgent(id string, fn func(*store.Agent) error) (store.Agent, error)
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

// appSettings are the app's model settings with the saved key still sealed, so that an agent
// with its own endpoint does not depend on the app's key being readable.
type appSettings struct {
	baseURL, model, source string
	sealed                 []byte // saved key ("settings")
	envKey                 string // key from the environment ("environment")
}

func (a appSettings) hasKey() bool { return len(a.sealed) > 0 || a.envKey != "" }

func (s *Service) readApp() (appSettings, error) {
	m, err := s.st.ModelSettings()
	switch {
	case err == nil && m.BaseURL != "":
		return appSettings{baseURL: m.BaseURL, model: m.Model, sealed: m.APIKeySealed, source: "settings"}, nil
	case err != nil && !errors.Is(err, fault.ErrNotFound):
		return appSettings{}, fmt.Errorf("read the app's model settings: %w", err)
	}
	if u := s.getenv("CUBICLE_MODEL_BASE_URL"); u != "" {
		return appSettings{baseURL: u, model: s.getenv("CUBICLE_MODEL"), envKey: s.getenv("CUBICLE_MODEL_API_KEY"), source: "environment"}, nil
	}
	return appSettings{source: "none"}, nil
}

// appKey opens the app's API key.
func (s *Service) appKey(a appSettings) (string, error) {
	if a.source == "environment" {
		return a.envKey, nil
	}
	return s.open(a.sealed, appKeyWhere)
}

func (s *Service) load() (settings, error) {
	a, err := s.readApp()
	if err != nil {
		return settings{}, err
	}
	key, err := s.appKey(a)
	if err != nil {
		return settings{}, err
	}
	return settings{baseURL: a.baseURL, model: a.model, apiKey: key, source: a.source}, nil
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
	if err := checkEndpoint(u.BaseURL, u.Model); err != nil {
		return View{}, err
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

// checkEndpoint validates a base URL and model name as a form gives them (trimmed): an empty
// base URL is fine; a given one must be http(s) and needs a model name.
func checkEndpoint(baseURL, model string) error {
	if baseURL == "" {
		return nil
	}
	p, err := url.Parse(baseURL)
	if err != nil || (p.Scheme != "http" && p.Scheme != "https") || p.Host == "" {
		return fault.Invalid("the base URL must be an http(s) URL such as https://api.openai.com/v1")
	}
	if model == "" {
		return fault.Invalid("name the model (for example gpt-4o)")
	}
	return nil
}

// keyWhere says whose key a sealed key is, for messages.
type keyWhere struct {
	whose, fix string // "the saved API key", "Settings → Model"
}

var appKeyWhere = keyWhere{whose: "the saved API key", fix: "Settings → Model"}

func (s *Service) open(sealed []byte, w keyWhere) (string, error) {
	if len(sealed) == 0 {
		return "", nil
	}
	n := s.aead.NonceSize()
	if len(sealed) < n {
		return "", fault.Conflict("%s is damaged; enter it again in %s", w.whose, w.fix)
	}
	plain, err := s.aead.Open(nil, sealed[:n], sealed[n:], []byte("cubicle model api key"))
	if err != nil {
		return "", fault.Conflict("%s cannot be decrypted (the secrets directory changed?); enter it again in %s", w.whose, w.fix)
	}
	return string(plain), nil
}

var _ agent.ModelResolver = (*Service)(nil).Resolve
