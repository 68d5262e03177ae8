package models

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"cubicle/backend/agent"
	"cubicle/backend/agent/anthropic"
	"cubicle/backend/agent/openai"
	"cubicle/backend/agent/responses"
	"cubicle/backend/fault"
	"cubicle/backend/store"
)

// Sources of a model setting, as views report them.
const (
	SourceAgent       = "agent"       // the agent's own override
	SourceSettings    = "settings"    // Settings → Model
	SourceEnvironment = "environment" // CUBICLE_MODEL_* variables
	SourceNone        = "none"        // nothing configured: operator mode
)

// agentFix says where a person fixes an agent's model, for messages.
const agentFix = "the agent's Model section (its chat page → Computer panel → Model)"

// AgentView is what an agent's Model section shows: the agent's own override (never its key),
// the app's settings it inherits from, and the model a turn would use.
type AgentView struct {
	BaseURL   string `json:"baseUrl"`
	Model     string `json:"model"`
	HasAPIKey bool   `json:"hasApiKey"`
	// Approved: the agent's own base URL was set by an administrator or is on the approved
	// list; AllowPrivate: it may be a loopback or private address.
	Approved     bool `json:"approved"`
	AllowPrivate bool `json:"allowPrivate"`
	// Provider is the wire protocol of the agent's own base URL ("" without one).
	Provider  string    `json:"provider"`
	Inherits  View      `json:"inherits"`
	Effective Effective `json:"effective"`
}

// Setter is who changes an agent's model: an administrator may give it any base URL (that is
// the approval), a member only one on the approved list.
type Setter struct {
	AccountID string
	Admin     bool
}

// Effective is the model a turn of the agent would use (without a turn's own model name).
type Effective struct {
	BaseURL    string `json:"baseUrl"`
	Model      string `json:"model"`
	Source     string `json:"source"` // SourceAgent when the agent overrides anything, else the app's source
	Configured bool   `json:"configured"`
	Provider   string `json:"provider"` // the wire protocol a turn speaks
	// Problem says why no model can run and where to fix it ("" when none).
	Problem string `json:"problem,omitempty"`
}

// resolved is the outcome of combining a turn, an agent and the app's settings.
type resolved struct {
	baseURL, model, source string
	provider               string
	allowPrivate           bool
	keyOf                  func() (string, error) // opens the key that goes with baseURL
	problem                error                  // a misconfiguration; nil when the model can run or none is set
	fix                    string                 // where to fix a failing call
}

// approval says whether an agent's own base URL may be used, and with private addresses.
func (s *Service) approval(am *store.AgentModel) (approved, allowPrivate bool) {
	listed, listPrivate := s.endpoints.Endpoint(am.BaseURL)
	admin := am.ApprovedBy != ""
	return admin || listed, (admin && am.AllowPrivate) || (listed && listPrivate)
}

// resolve combines the settings: turn name > agent name > app name; agent base URL (with the
// agent's key) > app base URL (with the app's key). am may be nil.
func (s *Service) resolve(app appSettings, agentName string, am *store.AgentModel, turnModel string) resolved {
	if am == nil {
		am = &store.AgentModel{}
	}
	r := resolved{baseURL: app.baseURL, model: app.model, source: app.source, fix: appFix(app.source), allowPrivate: app.allowPrivate,
		provider: providerOf(app.provider)}
	r.keyOf = func() (string, error) { return s.appKey(app) }
	if am.BaseURL != "" {
		sealed := am.APIKeySealed
		if am.KeyBaseURL != "" && !sameURL(am.KeyBaseURL, am.BaseURL) {
			sealed = nil // never send a key to a URL it was not saved with
		}
		approved, private := s.approval(am)
		r.baseURL, r.source, r.fix, r.allowPrivate = am.BaseURL, SourceAgent, agentFix, private
		r.provider = providerOf(am.Provider) // a provider goes with its base URL
		r.keyOf = func() (string, error) {
			return s.open(sealed, keyWhere{whose: fmt.Sprintf("agent %q's saved API key", agentName), fix: agentFix})
		}
		if !approved {
			r.problem = fault.Forbidden("agent %q's model endpoint %s is not approved: an administrator must set it, "+
				"or add it to Settings → Security → model endpoints", agentName, am.BaseURL)
		}
	}
	if am.Model != "" {
		r.model, r.source = am.Model, SourceAgent
		if am.BaseURL == "" && r.baseURL != "" {
			// The agent's model name at the app's endpoint: either side may be wrong.
			r.fix = agentFix + " or " + appFix(app.source)
		}
	}
	if turnModel != "" {
		r.model = turnModel
	}
	if r.baseURL == "" && am.Model != "" && r.problem == nil {
		r.problem = fault.Conflict("agent %q uses model %q but no base URL is configured for it: "+
			"set a base URL in %s, or configure the app's model in Settings → Model", agentName, am.Model, agentFix)
	}
	return r
}

func appFix(source string) string {
	if source == SourceEnvironment {
		return "the CUBICLE_MODEL_BASE_URL, CUBICLE_MODEL and CUBICLE_MODEL_API_KEY environment variables (or Settings → Model)"
	}
	return "Settings → Model"
}

// agentModel returns agent id's override (nil when it has none or does not exist) and its name.
func (s *Service) agentModel(id string) (*store.AgentModel, string, error) {
	if id == "" {
		return nil, "", nil
	}
	a, err := s.st.Agent(id)
	switch {
	case errors.Is(err, fault.ErrNotFound):
		return nil, id, nil
	case err != nil:
		return nil, "", fmt.Errorf("read agent %q's model: %w", id, err)
	}
	return a.Model, a.Name, nil
}

// Resolve is an agent.ModelResolver: a turn's chatModel name beats the agent's model name,
// which beats the app's; the agent's base URL (with its own key) beats the app's (with the
// app's key). Without any configured model it returns agent.ErrNoModel (operator mode). An
// error names the configuration that is wrong (the agent's or the app's) and where to fix it;
// so do the errors of the returned model's calls.
func (s *Service) Resolve(ctx context.Context, agentID string, chat *agent.ChatModel) (agent.Model, error) {
	app, err := s.readApp()
	if err != nil {
		return nil, err
	}
	am, name, err := s.agentModel(agentID)
	if err != nil {
		return nil, err
	}
	turn := ""
	if chat != nil {
		turn = strings.TrimSpace(chat.Name)
	}
	r := s.resolve(app, name, am, turn)
	if r.problem != nil {
		return nil, r.problem
	}
	if r.baseURL == "" || r.model == "" {
		return nil, agent.ErrNoModel
	}
	m, err := s.open2(r)
	if err != nil {
		return nil, err
	}
	return sourced{Model: m, fix: r.fix}, nil
}

// Tester is a model that can make one tiny real request to check its settings.
type Tester interface {
	Test(ctx context.Context) error
}

// open2 makes the client of a resolved model in its provider's protocol.
func (s *Service) open2(r resolved) (agent.Model, error) {
	key, err := r.keyOf()
	if err != nil {
		return nil, err
	}
	switch r.provider {
	case ProviderAnthropic:
		return anthropic.New(anthropic.Config{BaseURL: r.baseURL, APIKey: key, Model: r.model, AllowPrivate: r.allowPrivate})
	case ProviderResponses:
		return responses.New(responses.Config{BaseURL: r.baseURL, APIKey: key, Model: r.model, AllowPrivate: r.allowPrivate})
	}
	return openai.New(openai.Config{BaseURL: r.baseURL, APIKey: key, Model: r.model, AllowPrivate: r.allowPrivate})
}

// TestResult is what a Test found: OK, or what failed (Problem) and its class (Code:
// "key", "model", "url", "quota", "unavailable", "config").
type TestResult struct {
	OK       bool    `json:"ok"`
	Provider string  `json:"provider"`
	BaseURL  string  `json:"baseUrl"`
	Model    string  `json:"model"`
	Code     string  `json:"code,omitempty"`
	Problem  string  `json:"problem,omitempty"`
	Seconds  float64 `json:"seconds"`
}

// Test makes one tiny real request with the model agentID would use ("" = the app's) and
// says what failed. Ownership is the caller's business. A test of the app's model is kept
// with its settings (View.Tested) until they change.
func (s *Service) Test(ctx context.Context, agentID string) (TestResult, error) {
	res, err := s.test(ctx, agentID)
	if err == nil && agentID == "" {
		if err := s.recordAppTest(res, time.Now()); err != nil {
			return res, fmt.Errorf("record the model test: %w", err)
		}
	}
	return res, err
}

// resolveFor resolves the model a turn of agentID would use ("" = the app's).
func (s *Service) resolveFor(agentID string) (resolved, error) {
	app, err := s.readApp()
	if err != nil {
		return resolved{}, err
	}
	var am *store.AgentModel
	name := ""
	if agentID != "" {
		a, err := s.st.Agent(agentID)
		if err != nil {
			return resolved{}, fmt.Errorf("agent model: %w", err)
		}
		am, name = a.Model, a.Name
	}
	return s.resolve(app, name, am, ""), nil
}

func (s *Service) test(ctx context.Context, agentID string) (TestResult, error) {
	r, err := s.resolveFor(agentID)
	if err != nil {
		return TestResult{}, err
	}
	res := TestResult{Provider: r.provider, BaseURL: r.baseURL, Model: r.model}
	fail := func(code string, err error) (TestResult, error) {
		res.Code, res.Problem = code, err.Error()
		return res, nil
	}
	if r.problem != nil {
		return fail("config", r.problem)
	}
	if r.baseURL == "" || r.model == "" {
		return fail("config", fault.Invalid("no model is configured: set a base URL and a model name first"))
	}
	m, err := s.open2(r)
	if err != nil {
		return fail("config", err)
	}
	t, ok := m.(Tester)
	if !ok {
		return fail("config", fault.Invalid("this provider cannot be tested"))
	}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	start := time.Now()
	err = t.Test(ctx)
	res.Seconds = time.Since(start).Seconds()
	if err == nil {
		res.OK = true
		return res, nil
	}
	msg := err.Error()
	switch {
	case ctx.Err() != nil:
		return fail("url", fault.Unavailable("no answer from %s within 30 s", r.baseURL))
	case strings.Contains(msg, "HTTP 401") || strings.Contains(msg, "HTTP 403") || strings.Contains(msg, "API key"):
		return fail("key", err)
	case strings.Contains(msg, "HTTP 404") || strings.Contains(msg, "not found"):
		return fail("model", err)
	case strings.Contains(msg, "HTTP 429") || strings.Contains(msg, "quota") || strings.Contains(msg, "rate limit"):
		return fail("quota", err)
	case strings.Contains(msg, "cannot reach") || errors.Is(err, fault.ErrForbidden):
		return fail("url", err)
	}
	return fail("unavailable", err)
}

// sourced adds to a failed call where the model's configuration is fixed.
type sourced struct {
	agent.Model
	fix string
}

func (m sourced) Stream(ctx context.Context, req agent.ModelRequest, onDelta func(agent.ModelDelta)) (agent.ModelReply, error) {
	reply, err := m.Model.Stream(ctx, req, onDelta)
	if err != nil && ctx.Err() == nil {
		err = fmt.Errorf("%w (check the model's base URL, name and API key in %s)", err, m.fix)
	}
	return reply, err
}

// AgentView returns agent id's model view, or a fault.ErrNotFound error. It does not check
// who owns the agent: that is the caller's business.
func (s *Service) AgentView(id string) (AgentView, error) {
	a, err := s.st.Agent(id)
	if err != nil {
		return AgentView{}, fmt.Errorf("agent model: %w", err)
	}
	return s.agentView(a)
}

func (s *Service) agentView(a store.Agent) (AgentView, error) {
	app, err := s.readApp()
	if err != nil {
		return AgentView{}, err
	}
	v := AgentView{Inherits: View{BaseURL: app.baseURL, Model: app.model, HasAPIKey: app.hasKey(),
		Configured: app.baseURL != "" && app.model != "", Source: app.source, Provider: providerOf(app.provider)}}
	if am := a.Model; am != nil {
		v.BaseURL, v.Model, v.HasAPIKey = am.BaseURL, am.Model, len(am.APIKeySealed) > 0
		if am.BaseURL != "" {
			v.Approved, v.AllowPrivate = s.approval(am)
			v.Provider = providerOf(am.Provider)
		}
	}
	r := s.resolve(app, a.Name, a.Model, "")
	v.Effective = Effective{BaseURL: r.baseURL, Model: r.model, Source: r.source, Provider: r.provider}
	switch {
	case r.problem != nil:
		v.Effective.Problem = r.problem.Error()
	case r.baseURL != "" && r.model != "":
		if _, err := r.keyOf(); err != nil {
			v.Effective.Problem = err.Error()
		} else {
			v.Effective.Configured = true
		}
	}
	if r.baseURL == "" && r.model == "" {
		v.Effective.Source = SourceNone
	}
	return v, nil
}

// SetAgent saves agent id's override. Empty fields inherit the app's settings; all empty
// removes the override. A nil APIKey keeps the agent's saved key while the base URL stays the
// one it was saved with (a new base URL drops it), "" clears it; a key belongs to the agent's
// own base URL (without one it is refused). A member's base URL must be on the approved list
// (fault.ErrForbidden otherwise); an administrator's is approved by setting it, and only an
// administrator may allow a loopback or private address. Invalid input changes nothing and
// returns a fault.ErrInvalid error; an unknown agent a fault.ErrNotFound error. Ownership is the
// caller's business.
func (s *Service) SetAgent(id string, u Update, by Setter) (AgentView, error) {
	u.BaseURL, u.Model = strings.TrimSpace(u.BaseURL), strings.TrimSpace(u.Model)
	if err := checkEndpoint(u.BaseURL, u.Model); err != nil {
		return AgentView{}, fmt.Errorf("the agent's model: %w", err)
	}
	prov, err := checkProvider(u.Provider)
	if err != nil {
		return AgentView{}, fmt.Errorf("the agent's model: %w", err)
	}
	if u.BaseURL == "" && u.Provider != "" && prov != ProviderOpenAI {
		return AgentView{}, fault.Invalid("an agent's provider goes with its own base URL: enter the base URL too, " +
			"or leave the provider empty to use the app's")
	}
	if u.AllowPrivate != nil && *u.AllowPrivate && !by.Admin {
		return AgentView{}, fault.Forbidden("only an administrator may let a model endpoint use loopback or private addresses")
	}
	if u.BaseURL != "" && !by.Admin {
		if ok, _ := s.endpoints.Endpoint(u.BaseURL); !ok {
			return AgentView{}, fault.Forbidden("the base URL %s is not an approved model endpoint: ask an administrator to add it "+
				"to Settings → Security → model endpoints (or to set it for this agent)", u.BaseURL)
		}
	}
	if u.BaseURL == "" && u.APIKey != nil && *u.APIKey != "" {
		return AgentView{}, fault.Invalid("an agent's API key goes with its own base URL: enter the base URL too, " +
			"or leave the key empty to use the app's key with the app's base URL")
	}
	var sealed []byte
	if u.APIKey != nil {
		var err error
		if sealed, err = s.seal(*u.APIKey); err != nil {
			return AgentView{}, err
		}
	}
	a, err := s.st.UpdateAgent(id, func(a *store.Agent) error {
		m := store.AgentModel{BaseURL: u.BaseURL, Model: u.Model}
		if u.BaseURL != "" && prov != ProviderOpenAI {
			m.Provider = prov
		}
		old := a.Model
		same := old != nil && old.BaseURL != "" && sameURL(old.BaseURL, u.BaseURL) && (old.KeyBaseURL == "" || sameURL(old.KeyBaseURL, u.BaseURL))
		switch {
		case u.BaseURL == "":
		case u.APIKey != nil:
			m.APIKeySealed = sealed
		case same:
			m.APIKeySealed = old.APIKeySealed
		}
		if len(m.APIKeySealed) > 0 {
			m.KeyBaseURL = u.BaseURL
		}
		if u.BaseURL != "" {
			switch {
			case by.Admin:
				m.ApprovedBy = by.AccountID
				m.AllowPrivate = u.AllowPrivate != nil && *u.AllowPrivate || u.AllowPrivate == nil && same && old.AllowPrivate
			case same:
				// A member saving again keeps an administrator's approval of the same URL.
				m.ApprovedBy, m.AllowPrivate = old.ApprovedBy, old.AllowPrivate
			}
		}
		if m.Empty() {
			a.Model = nil
		} else {
			a.Model = &m
		}
		a.UpdatedAt = time.Now().UTC()
		return nil
	})
	if err != nil {
		return AgentView{}, fmt.Errorf("set agent model: %w", err)
	}
	return s.agentView(a)
}

// Lister is a model client that can list its endpoint's models.
type Lister interface {
	Models(ctx context.Context) ([]string, error)
}

// ModelList is the models an endpoint offers (the settings' picker), or why there is none.
type ModelList struct {
	Provider string   `json:"provider"`
	BaseURL  string   `json:"baseUrl"`
	Models   []string `json:"models"`
	// Code and Problem say why the list could not be had ("key", "url", "unsupported",
	// "config", "unavailable"), as a Test's.
	Code    string `json:"code,omitempty"`
	Problem string `json:"problem,omitempty"`
}

// Models lists the models of the endpoint agentID's model settings name ("" = the app's):
// the saved provider, base URL and key (a model name is not needed). Ownership is the
// caller's business.
func (s *Service) Models(ctx context.Context, agentID string) (ModelList, error) {
	r, err := s.resolveFor(agentID)
	if err != nil {
		return ModelList{}, err
	}
	res := ModelList{Provider: r.provider, BaseURL: r.baseURL, Models: []string{}}
	fail := func(code string, err error) (ModelList, error) {
		res.Code, res.Problem = code, err.Error()
		return res, nil
	}
	if r.problem != nil {
		return fail("config", r.problem)
	}
	if r.baseURL == "" {
		return fail("config", fault.Invalid("no model endpoint is configured: set a base URL (and a key) first"))
	}
	if r.model == "" {
		r.model = "-" // the clients need a name; listing does not use it
	}
	m, err := s.open2(r)
	if err != nil {
		return fail("config", err)
	}
	l, ok := m.(Lister)
	if !ok {
		return fail("unsupported", fault.Invalid("this provider does not list its models: type the model's name"))
	}
	ctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	list, err := l.Models(ctx)
	switch {
	case err == nil:
		res.Models = list
		return res, nil
	case ctx.Err() != nil:
		return fail("url", fault.Unavailable("no answer from %s within 20 s", r.baseURL))
	case strings.Contains(err.Error(), "HTTP 401") || strings.Contains(err.Error(), "HTTP 403") || strings.Contains(err.Error(), "API key"):
		return fail("key", err)
	case errors.Is(err, fault.ErrNotFound) || strings.Contains(err.Error(), "HTTP 404"):
		return fail("unsupported", fmt.Errorf("%w (this endpoint does not list its models: type the model's name)", err))
	case errors.Is(err, fault.ErrForbidden) || strings.Contains(err.Error(), "cannot reach"):
		return fail("url", err)
	}
	return fail("unavailable", err)
}
