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
	"sync"
	"time"

	"cubicle/backend/agent"
	"cubicle/backend/fault"
	"cubicle/backend/security"
	"cubicle/backend/store"
)

// Store is the part of the store models need.
type Store interface {
	ModelSettings() (store.ModelSettings, error)
	PutModelSettings(m store.ModelSettings) error
	Agent(id string) (store.Agent, error)
	UpdateAgent(id string, fn func(*store.Agent) error) (store.Agent, error)
}

// Endpoints says whether an administrator approved a model base URL (Settings → Security →
// model endpoints) and whether it may resolve to loopback or private addresses.
type Endpoints interface {
	Endpoint(baseURL string) (approved, allowPrivate bool)
}

// Config configures a Service. Store and Key are required.
type Config struct {
	Store  Store
	Key    []byte              // 32 bytes sealing the API key
	Getenv func(string) string // default settings from the environment; nil = none
	// Endpoints are the approved base URLs agents' own models may use; nil approves none (an
	// agent's own base URL then needs an administrator to set it).
	Endpoints Endpoints
}

// Service manages the model settings.
type Service struct {
	st        Store
	aead      cipher.AEAD
	getenv    func(string) string
	endpoints Endpoints

	// mu serialises saving the app's settings with recording a test of them, so that a test
	// never writes back settings an administrator just replaced.
	mu sync.Mutex
	// envTest is the last test of the app's model from the environment (nothing of it is
	// saved), for envFor (its base URL and model); guarded by mu.
	envTest *store.ModelTest
	envFor  string
}

// noEndpoints approves nothing.
type noEndpoints struct{}

func (noEndpoints) Endpoint(string) (bool, bool) { return false, false }

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
	if cfg.Endpoints == nil {
		cfg.Endpoints = noEndpoints{}
	}
	return &Service{st: cfg.Store, aead: aead, getenv: cfg.Getenv, endpoints: cfg.Endpoints}, nil
}

// View is what the settings page shows: never the key itself.
type View struct {
	BaseURL    string `json:"baseUrl"`
	Model      string `json:"model"`
	HasAPIKey  bool   `json:"hasApiKey"`
	Configured bool   `json:"configured"`
	Source     string `json:"source"` // "settings", "environment" or "none"
	// AllowPrivate: the base URL may be a loopback or private address.
	AllowPrivate bool `json:"allowPrivate"`
	// Provider is the base URL's wire protocol (ProviderOpenAI, ProviderAnthropic,
	// ProviderResponses).
	Provider string `json:"provider"`
	// Tested is the last Test of these settings (nil: not tested since they were saved).
	Tested *store.ModelTest `json:"tested,omitempty"`
}

// Providers: the wire protocol a base URL speaks.
const (
	ProviderOpenAI    = "openai-compatible" // chat completions (OpenAI, vLLM, Ollama, LiteLLM, …)
	ProviderAnthropic = "anthropic"         // Anthropic's Messages API with its computer tool
	ProviderResponses = "openai-responses"  // OpenAI's Responses API with computer_use_preview
)

// Providers lists the providers, the default first.
var Providers = []string{ProviderOpenAI, ProviderAnthropic, ProviderResponses}

// checkProvider validates a provider as a form gives it ("" is the default).
func checkProvider(p string) (string, error) {
	switch p {
	case "", ProviderOpenAI:
		return ProviderOpenAI, nil
	case ProviderAnthropic, ProviderResponses:
		return p, nil
	}
	return "", fault.Invalid("unknown provider %q: use %s", p, strings.Join(Providers, ", "))
}

// providerOf is a stored provider, old records ("") being openai-compatible.
func providerOf(p string) string {
	if p == "" {
		return ProviderOpenAI
	}
	return p
}

// Update changes the settings. A nil APIKey keeps the saved key — as long as the base URL
// stays the one it was saved with; a new base URL drops it (a key is only ever sent to the URL
// it was saved with). "" clears it. AllowPrivate (administrators only) lets the base URL be a
// loopback or private address; nil keeps the allowance while the base URL stays.
type Update struct {
	BaseURL      string  `json:"baseUrl"`
	Model        string  `json:"model"`
	APIKey       *string `json:"apiKey,omitempty"`
	AllowPrivate *bool   `json:"allowPrivate,omitempty"`
	// Provider is the base URL's wire protocol; "" = openai-compatible.
	Provider string `json:"provider,omitempty"`
}

// sameURL reports whether two base URLs name the same endpoint.
func sameURL(a, b string) bool {
	na, err1 := security.NormalizeEndpoint(a)
	nb, err2 := security.NormalizeEndpoint(b)
	if err1 != nil || err2 != nil {
		return strings.TrimRight(a, "/") == strings.TrimRight(b, "/")
	}
	return na == nb
}

type settings struct {
	baseURL, model, apiKey, source, provider string
	allowPrivate                             bool
	tested                                   *store.ModelTest
}

// appSettings are the app's model settings with the saved key still sealed, so that an agent
// with its own endpoint does not depend on the app's key being readable.
type appSettings struct {
	baseURL, model, source string
	provider               string
	sealed                 []byte // saved key ("settings"), only when saved with baseURL
	envKey                 string // key from the environment ("environment")
	allowPrivate           bool
	tested                 *store.ModelTest // the last test of these settings
}

func (a appSettings) hasKey() bool { return len(a.sealed) > 0 || a.envKey != "" }

func (s *Service) readApp() (appSettings, error) {
	m, err := s.st.ModelSettings()
	switch {
	case err == nil && m.BaseURL != "":
		a := appSettings{baseURL: m.BaseURL, model: m.Model, source: "settings", allowPrivate: m.AllowPrivate, provider: providerOf(m.Provider),
			tested: m.Tested}
		// A key saved before keys were bound to a URL belongs to the URL saved with it.
		if m.KeyBaseURL == "" || sameURL(m.KeyBaseURL, m.BaseURL) {
			a.sealed = m.APIKeySealed
		}
		return a, nil
	case err != nil && !errors.Is(err, fault.ErrNotFound):
		return appSettings{}, fmt.Errorf("read the app's model settings: %w", err)
	}
	if u := s.getenv("CUBICLE_MODEL_BASE_URL"); u != "" {
		// The operator set it on the server's machine: that is the allowance.
		prov, err := checkProvider(s.getenv("CUBICLE_MODEL_PROVIDER"))
		if err != nil {
			return appSettings{}, fmt.Errorf("CUBICLE_MODEL_PROVIDER: %w", err)
		}
		a := appSettings{baseURL: u, model: s.getenv("CUBICLE_MODEL"), envKey: s.getenv("CUBICLE_MODEL_API_KEY"), source: "environment",
			allowPrivate: true, provider: prov}
		s.mu.Lock()
		if s.envFor == envTestKey(a) {
			a.tested = s.envTest
		}
		s.mu.Unlock()
		return a, nil
	}
	return appSettings{source: "none", provider: ProviderOpenAI}, nil
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
	return settings{baseURL: a.baseURL, model: a.model, apiKey: key, source: a.source, allowPrivate: a.allowPrivate, provider: a.provider,
		tested: a.tested}, nil
}

// Get returns the settings as the page shows them.
func (s *Service) Get() (View, error) {
	st, err := s.load()
	if err != nil {
		return View{}, err
	}
	return View{BaseURL: st.baseURL, Model: st.model, HasAPIKey: st.apiKey != "", Configured: st.baseURL != "" && st.model != "",
		Source: st.source, AllowPrivate: st.allowPrivate, Provider: st.provider, Tested: st.tested}, nil
}

// Set saves new settings (an administrator's); an empty base URL clears the configuration
// (operator mode). A new base URL drops the saved key unless a key comes with it.
func (s *Service) Set(u Update) (View, error) {
	if err := s.save(u); err != nil {
		return View{}, err
	}
	return s.Get()
}

// save validates and saves u (Set).
func (s *Service) save(u Update) error {
	u.BaseURL, u.Model = strings.TrimSpace(u.BaseURL), strings.TrimSpace(u.Model)
	if err := checkEndpoint(u.BaseURL, u.Model); err != nil {
		return err
	}
	prov, err := checkProvider(u.Provider)
	if err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	old, _ := s.st.ModelSettings()
	sameEndpoint := old.BaseURL != "" && sameURL(old.BaseURL, u.BaseURL) && (old.KeyBaseURL == "" || sameURL(old.KeyBaseURL, u.BaseURL))
	var sealed []byte
	switch {
	case u.APIKey != nil:
		if sealed, err = s.seal(*u.APIKey); err != nil {
			return err
		}
	case sameEndpoint:
		sealed = old.APIKeySealed
	}
	allowPrivate := sameEndpoint && old.AllowPrivate
	if u.AllowPrivate != nil {
		allowPrivate = *u.AllowPrivate
	}
	m := store.ModelSettings{BaseURL: u.BaseURL, Model: u.Model, APIKeySealed: sealed, AllowPrivate: allowPrivate, UpdatedAt: time.Now().UTC(), Provider: prov}
	if u.BaseURL == "" {
		m.APIKeySealed, m.AllowPrivate, m.Provider = nil, false, ""
	}
	if len(m.APIKeySealed) > 0 {
		m.KeyBaseURL = u.BaseURL
	}
	return s.st.PutModelSettings(m)
}

// envTestKey names the environment's settings a test of them belongs to.
func envTestKey(a appSettings) string { return a.provider + "\x00" + a.baseURL + "\x00" + a.model }

// recordAppTest keeps the outcome of a test of the app's model with the settings tested: in
// the saved settings (while they are still the ones tested), or in memory for settings from
// the environment.
func (s *Service) recordAppTest(res TestResult, at time.Time) error {
	t := &store.ModelTest{At: at.UTC(), OK: res.OK, Code: res.Code, Problem: res.Problem}
	s.mu.Lock()
	defer s.mu.Unlock()
	m, err := s.st.ModelSettings()
	switch {
	case err == nil && m.BaseURL != "":
		if m.BaseURL != res.BaseURL || m.Model != res.Model || providerOf(m.Provider) != res.Provider {
			return nil // replaced since: the test was of other settings
		}
		m.Tested = t
		return s.st.PutModelSettings(m)
	case err != nil && !errors.Is(err, fault.ErrNotFound):
		return err
	}
	if u := s.getenv("CUBICLE_MODEL_BASE_URL"); u != "" {
		s.envFor, s.envTest = res.Provider+"\x00"+res.BaseURL+"\x00"+res.Model, t
	}
	return nil
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
