// Package mcpclient lets Cubicle's agents use MCP servers an administrator configured
// (Settings → Tools): it keeps the servers (their secrets sealed like model keys), which agents
// use which, and each server's access policy; it connects to them with the official Go SDK
// (streamable HTTP, the older HTTP+SSE transport, and stdio inside the agent's desktop) and
// offers their tools to the model as mcp_<server>_<tool>.
//
// The Service is three things to the agent runtime: the admin's store of servers (Create,
// Update, Delete, SetAgentServers), a Toolbox (Tools lists an agent's MCP tools, Call runs one
// with a deadline) and the policy part of the Guard (Check: the server's access policy for
// the person and the agent; the tool guard still judges the arguments, see backend/chat.go).
//
// Concurrency: a Service is safe for concurrent use. Connections are made on first use, one
// per server (per server and desktop for stdio servers), and dropped when the server's
// settings change, when a call fails at the transport, and at Close.
package mcpclient

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"log/slog"
	"maps"
	"net/http"
	"net/url"
	"regexp"
	"slices"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"cubicle/backend/auth"
	"cubicle/backend/fault"
	"cubicle/backend/store"
)

// Limits.
const (
	MaxServers        = 50
	MaxRules          = 500
	MaxHeaders        = 32
	MaxToolsPerServer = 64  // the most tools one server offers the model
	MaxTools          = 128 // the most MCP tools one turn offers the model
	// DefaultTimeout bounds a tool call unless the server's settings say otherwise;
	// MaxTimeout is the longest an administrator may set.
	DefaultTimeout = 60 * time.Second
	MaxTimeout     = 10 * time.Minute
	// DefaultAskTimeout is how long a call the policy asks about waits for the person's answer
	// before it is denied.
	DefaultAskTimeout = 2 * time.Minute
)

// Transports.
const (
	TransportHTTP  = "http"  // streamable HTTP
	TransportSSE   = "sse"   // the older HTTP+SSE transport
	TransportStdio = "stdio" // a command run inside the agent's desktop
)

// Store is the part of the store the service needs (the store implements it).
type Store interface {
	MCPConfig() (store.MCPConfig, error)
	UpdateMCPConfig(fn func(*store.MCPConfig) error) error
	Account(id string) (store.Account, error)
	AccountByUsername(name string) (store.Account, error)
	Agent(id string) (store.Agent, error)
}

// Config configures a Service. Store and Key are required.
type Config struct {
	Store Store
	Key   []byte // 32 bytes sealing the servers' secrets
	// Desktops runs stdio servers inside agents' desktops; nil: stdio servers fail as
	// unavailable.
	Desktops Desktops
	// OnServer runs the stdio servers an administrator marked to run on the Cubicle server
	// (store.MCPServer.OnServer), in its OS sandbox; its Key refuses a turn whose account has
	// no host access there. nil: such servers fail as unavailable.
	OnServer Desktops
	Logger   *slog.Logger
	Version  string
	// AskTimeout is how long a call the policy asks about waits for the person; 0:
	// DefaultAskTimeout.
	AskTimeout time.Duration
	// ConnectTimeout bounds connecting to a server and listing its tools; 0:
	// DefaultConnectTimeout. A stdio server's start may take its own timeout when that is
	// longer (conn.startTimeout).
	ConnectTimeout time.Duration
	Now            func() time.Time
}

// Service keeps the MCP servers and connects agents to them.
type Service struct {
	cfg  Config
	log  *slog.Logger
	aead cipher.AEAD

	mu    sync.Mutex
	conns map[string]*conn // guarded by mu; by server id (and desktop, for stdio)
	asked map[string]time.Time
	// closed is set by Close; guarded by mu.
	closed bool
	bg     sync.WaitGroup // sessions being closed (conn.resetLocked)
}

// New returns a Service.
func New(cfg Config) (*Service, error) {
	if cfg.Store == nil || len(cfg.Key) != 32 {
		return nil, errors.New("mcpclient: Config.Store and a 32-byte Config.Key are required")
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.AskTimeout <= 0 {
		cfg.AskTimeout = DefaultAskTimeout
	}
	if cfg.ConnectTimeout <= 0 {
		cfg.ConnectTimeout = DefaultConnectTimeout
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	block, err := aes.NewCipher(cfg.Key)
	if err != nil {
		return nil, err
	}
	aead, err := cipher.NewGCM(block)
	if err != nil {
		return nil, err
	}
	return &Service{cfg: cfg, log: cfg.Logger, aead: aead, conns: map[string]*conn{}, asked: map[string]time.Time{}}, nil
}

// Close drops every connection (stdio servers in desktops are stopped with them). It is
// idempotent.
func (s *Service) Close() error {
	s.mu.Lock()
	s.closed = true
	conns := slices.Collect(maps.Values(s.conns))
	s.conns = map[string]*conn{}
	s.mu.Unlock()
	for _, c := range conns {
		c.close()
	}
	s.bg.Wait()
	return nil
}

// Server is what an administrator sees of a server: secrets only masked.
type Server struct {
	ID           string            `json:"id"`
	Name         string            `json:"name"`
	Transport    string            `json:"transport"`
	Description  string            `json:"description"`
	URL          string            `json:"url,omitempty"`
	Headers      map[string]string `json:"headers"` // masked values
	AllowPrivate bool              `json:"allowPrivate"`
	Command      string            `json:"command,omitempty"`
	OnServer     bool              `json:"onServer"`
	Args         []string          `json:"args"`
	Env          map[string]string `json:"env"` // masked values
	// TimeoutSeconds bounds a tool call (the default when 0 was saved).
	TimeoutSeconds int    `json:"timeoutSeconds"`
	Disabled       bool   `json:"disabled"`
	Policy         Policy `json:"policy"`
	// Agents are the ids of the agents that use the server.
	Agents    []string  `json:"agents"`
	CreatedAt time.Time `json:"createdAt"`
	UpdatedAt time.Time `json:"updatedAt"`
	UpdatedBy string    `json:"updatedBy,omitempty"`
}

// Policy is a server's access policy as an administrator sees it (rules always a list).
type Policy struct {
	Default string          `json:"default"`
	Rules   []store.MCPRule `json:"rules"`
}

// Input is a server as an administrator gives it. For an update, nil fields keep what was
// saved; in Headers and Env a nil value keeps that saved secret, a name left out removes it.
type Input struct {
	Name           *string            `json:"name"`
	Transport      *string            `json:"transport"`
	Description    *string            `json:"description"`
	URL            *string            `json:"url"`
	Headers        map[string]*string `json:"headers"`
	AllowPrivate   *bool              `json:"allowPrivate"`
	Command        *string            `json:"command"`
	OnServer       *bool              `json:"onServer"`
	Args           []string           `json:"args"`
	Env            map[string]*string `json:"env"`
	TimeoutSeconds *int               `json:"timeoutSeconds"`
	Disabled       *bool              `json:"disabled"`
	Policy         *store.MCPPolicy   `json:"policy"`
}

// List returns every server (administrators).
func (s *Service) List(p auth.Principal) ([]Server, error) {
	if !p.Admin() {
		return nil, fault.Forbidden("only administrators manage MCP servers (Settings → Tools)")
	}
	c, err := s.cfg.Store.MCPConfig()
	if err != nil {
		return nil, err
	}
	out := []Server{}
	for _, srv := range c.Servers {
		out = append(out, s.view(srv, c))
	}
	return out, nil
}

// Create adds a server. A new server's default effect is deny unless the input says
// otherwise: nobody can use it until an administrator opens it.
func (s *Service) Create(p auth.Principal, in Input) (Server, error) {
	if !p.Admin() {
		return Server{}, fault.Forbidden("only administrators add MCP servers (Settings → Tools)")
	}
	now := s.cfg.Now().UTC()
	srv := store.MCPServer{ID: newID(), Policy: store.MCPPolicy{Default: Deny}, CreatedAt: now}
	if in.Name == nil || in.Transport == nil {
		return Server{}, fault.Invalid("give the server a name (letters, digits and '-', e.g. \"files\") and a transport (http, sse or stdio)")
	}
	if err := s.apply(&srv, in); err != nil {
		return Server{}, err
	}
	srv.UpdatedAt, srv.UpdatedBy = now, p.Username
	var view Server
	err := s.cfg.Store.UpdateMCPConfig(func(c *store.MCPConfig) error {
		if len(c.Servers) >= MaxServers {
			return fault.Conflict("there are %d MCP servers, the most Cubicle keeps; delete one you no longer use", len(c.Servers))
		}
		if slices.ContainsFunc(c.Servers, func(x store.MCPServer) bool { return x.Name == srv.Name }) {
			return fault.Exists("an MCP server named %q exists already; choose another name", srv.Name)
		}
		c.Servers = append(c.Servers, srv)
		view = s.view(srv, *c)
		return nil
	})
	return view, err
}

// Update changes server id.
func (s *Service) Update(p auth.Principal, id string, in Input) (Server, error) {
	if !p.Admin() {
		return Server{}, fault.Forbidden("only administrators change MCP servers (Settings → Tools)")
	}
	var view Server
	err := s.cfg.Store.UpdateMCPConfig(func(c *store.MCPConfig) error {
		i := slices.IndexFunc(c.Servers, func(x store.MCPServer) bool { return x.ID == id })
		if i < 0 {
			return fault.NotFound("MCP server %q not found", id)
		}
		srv := c.Servers[i]
		if err := s.apply(&srv, in); err != nil {
			return err
		}
		if slices.ContainsFunc(c.Servers, func(x store.MCPServer) bool { return x.Name == srv.Name && x.ID != id }) {
			return fault.Exists("an MCP server named %q exists already; choose another name", srv.Name)
		}
		srv.UpdatedAt, srv.UpdatedBy = s.cfg.Now().UTC(), p.Username
		c.Servers[i] = srv
		view = s.view(srv, *c)
		return nil
	})
	if err == nil {
		s.drop(id) // the next use connects with the new settings
	}
	return view, err
}

// Delete removes server id and takes it from every agent.
func (s *Service) Delete(p auth.Principal, id string) error {
	if !p.Admin() {
		return fault.Forbidden("only administrators delete MCP servers (Settings → Tools)")
	}
	err := s.cfg.Store.UpdateMCPConfig(func(c *store.MCPConfig) error {
		i := slices.IndexFunc(c.Servers, func(x store.MCPServer) bool { return x.ID == id })
		if i < 0 {
			return fault.NotFound("MCP server %q not found", id)
		}
		c.Servers = slices.Delete(c.Servers, i, i+1)
		for a, ids := range c.Agents {
			c.Agents[a] = slices.DeleteFunc(ids, func(x string) bool { return x == id })
			if len(c.Agents[a]) == 0 {
				delete(c.Agents, a)
			}
		}
		return nil
	})
	if err == nil {
		s.drop(id)
	}
	return err
}

// AgentServer is a server as an agent's owner sees it (no address, command or secrets).
type AgentServer struct {
	ID          string `json:"id"`
	Name        string `json:"name"`
	Description string `json:"description"`
	Transport   string `json:"transport"`
	Disabled    bool   `json:"disabled"`
	Enabled     bool   `json:"enabled"` // the agent uses it
}

// AgentServers lists every server with whether agent agentID uses it (its owner or an
// administrator).
func (s *Service) AgentServers(p auth.Principal, agentID string) ([]AgentServer, error) {
	if err := s.reach(p, agentID); err != nil {
		return nil, err
	}
	c, err := s.cfg.Store.MCPConfig()
	if err != nil {
		return nil, err
	}
	out := []AgentServer{}
	for _, srv := range c.Servers {
		out = append(out, AgentServer{ID: srv.ID, Name: srv.Name, Description: srv.Description, Transport: srv.Transport,
			Disabled: srv.Disabled, Enabled: slices.Contains(c.Agents[agentID], srv.ID)})
	}
	return out, nil
}

// SetAgentServers sets the servers agent agentID uses (its owner or an administrator).
func (s *Service) SetAgentServers(p auth.Principal, agentID string, ids []string) ([]AgentServer, error) {
	if err := s.reach(p, agentID); err != nil {
		return nil, err
	}
	err := s.cfg.Store.UpdateMCPConfig(func(c *store.MCPConfig) error {
		var keep []string
		for _, id := range ids {
			if slices.Contains(keep, id) {
				continue
			}
			if !slices.ContainsFunc(c.Servers, func(x store.MCPServer) bool { return x.ID == id }) {
				return fault.Invalid("there is no MCP server %q; list them with GET /api/app/agents/%s/mcp-servers", id, agentID)
			}
			keep = append(keep, id)
		}
		if c.Agents == nil {
			c.Agents = map[string][]string{}
		}
		if len(keep) == 0 {
			delete(c.Agents, agentID)
		} else {
			c.Agents[agentID] = keep
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return s.AgentServers(p, agentID)
}

// AgentDeleted forgets which servers a deleted agent used. Policy rules naming it stay (the
// administrator sees them; they match nothing).
func (s *Service) AgentDeleted(agentID string) error {
	return s.cfg.Store.UpdateMCPConfig(func(c *store.MCPConfig) error {
		delete(c.Agents, agentID)
		return nil
	})
}

// reach checks that p may change agent agentID: its owner, or an administrator.
func (s *Service) reach(p auth.Principal, agentID string) error {
	a, err := s.cfg.Store.Agent(agentID)
	if err != nil || (a.AccountID != p.AccountID && !p.Admin()) {
		return fault.NotFound("agent %q not found", agentID)
	}
	return nil
}

var (
	nameRE   = regexp.MustCompile(`^[a-z0-9][a-z0-9-]{0,19}$`)
	headerRE = regexp.MustCompile(`^[A-Za-z0-9!#$%&'*+.^_|~-]{1,64}$`)
	envRE    = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]{0,63}$`)
)

// apply checks in and writes it onto srv. Errors are fault.ErrInvalid and say what to fix.
func (s *Service) apply(srv *store.MCPServer, in Input) error {
	if in.Name != nil {
		n := strings.TrimSpace(*in.Name)
		if !nameRE.MatchString(n) {
			return fault.Invalid("the server name %q must be 1–20 lower-case letters, digits and '-', starting with a letter or digit (e.g. \"files\"): it becomes part of the tool names mcp_<server>_<tool>", n)
		}
		srv.Name = n
	}
	if in.Transport != nil {
		switch t := strings.TrimSpace(*in.Transport); t {
		case TransportHTTP, TransportSSE, TransportStdio:
			srv.Transport = t
		default:
			return fault.Invalid("unknown transport %q: use http (streamable HTTP), sse (the older HTTP+SSE) or stdio (a command run inside the agent's desktop)", t)
		}
	}
	if in.Description != nil {
		d := strings.TrimSpace(*in.Description)
		if utf8.RuneCountInString(d) > 500 {
			return fault.Invalid("the description is longer than 500 characters")
		}
		srv.Description = d
	}
	if in.URL != nil {
		srv.URL = strings.TrimSpace(*in.URL)
	}
	if in.AllowPrivate != nil {
		srv.AllowPrivate = *in.AllowPrivate
	}
	if in.Command != nil {
		srv.Command = strings.TrimSpace(*in.Command)
	}
	if in.OnServer != nil {
		srv.OnServer = *in.OnServer
	}
	if in.Args != nil {
		if len(in.Args) > 64 {
			return fault.Invalid("give at most 64 arguments")
		}
		for _, a := range in.Args {
			if len(a) > 4096 || strings.ContainsRune(a, 0) {
				return fault.Invalid("an argument is longer than 4096 bytes or holds a NUL byte")
			}
		}
		srv.Args = slices.Clone(in.Args)
	}
	if in.TimeoutSeconds != nil {
		t := *in.TimeoutSeconds
		if t < 0 || time.Duration(t)*time.Second > MaxTimeout {
			return fault.Invalid("timeoutSeconds must be 0 (the default, %d) to %d", int(DefaultTimeout/time.Second), int(MaxTimeout/time.Second))
		}
		srv.TimeoutSeconds = t
	}
	if in.Disabled != nil {
		srv.Disabled = *in.Disabled
	}
	var err error
	if in.Headers != nil {
		if srv.Headers, err = s.secrets("header", in.Headers, srv.Headers, headerRE, checkHeader); err != nil {
			return err
		}
	}
	if in.Env != nil {
		if srv.Env, err = s.secrets("environment variable", in.Env, srv.Env, envRE, checkEnv); err != nil {
			return err
		}
	}
	if in.Policy != nil {
		pol, err := s.checkPolicy(*in.Policy)
		if err != nil {
			return err
		}
		srv.Policy = pol
	}
	switch srv.Transport {
	case TransportHTTP, TransportSSE:
		u, err := url.Parse(srv.URL)
		if srv.URL == "" || err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.User != nil {
			return fault.Invalid("the %s transport needs the server's URL, an http(s) URL without a user name such as https://mcp.example.com/mcp", srv.Transport)
		}
		if u.Fragment != "" {
			return fault.Invalid("the URL must not have a fragment (#…)")
		}
		if srv.OnServer {
			return fault.Invalid("onServer is for stdio servers (a command); an %s server is reached at its URL", srv.Transport)
		}
		srv.Command, srv.Args, srv.Env = "", nil, nil
	case TransportStdio:
		if srv.Command == "" || len(srv.Command) > 1024 || strings.ContainsRune(srv.Command, 0) {
			return fault.Invalid("the stdio transport needs the command to run inside the agent's desktop (e.g. \"npx\" with args [\"-y\", \"@modelcontextprotocol/server-filesystem\", \"/home/cua/workspace\"])")
		}
		srv.URL, srv.Headers, srv.AllowPrivate = "", nil, false
	}
	return nil
}

func checkHeader(v string) error {
	if strings.ContainsAny(v, "\r\n\x00") || len(v) > 8192 {
		return errors.New("holds a line break or NUL byte, or is longer than 8 KiB")
	}
	return nil
}

func checkEnv(v string) error {
	if strings.ContainsRune(v, 0) || len(v) > 8192 {
		return errors.New("holds a NUL byte or is longer than 8 KiB")
	}
	return nil
}

// secrets seals the values of in (nil keeps the saved one of old; a name left out is removed).
func (s *Service) secrets(what string, in map[string]*string, old map[string][]byte, name *regexp.Regexp, check func(string) error) (map[string][]byte, error) {
	if len(in) > MaxHeaders {
		return nil, fault.Invalid("give at most %d of %ss", MaxHeaders, what)
	}
	out := map[string][]byte{}
	for k, v := range in {
		if !name.MatchString(k) {
			return nil, fault.Invalid("%q is not a valid %s name", k, what)
		}
		if v == nil {
			prev, ok := old[k]
			if !ok {
				return nil, fault.Invalid("the %s %q has no saved value to keep; give its value", what, k)
			}
			out[k] = prev
			continue
		}
		if err := check(*v); err != nil {
			return nil, fault.Invalid("the value of the %s %q %v", what, k, err)
		}
		sealed, err := s.seal(*v)
		if err != nil {
			return nil, err
		}
		out[k] = sealed
	}
	if len(out) == 0 {
		return nil, nil
	}
	return out, nil
}

// checkPolicy validates a policy: effects, subjects that name existing users and agents.
func (s *Service) checkPolicy(p store.MCPPolicy) (store.MCPPolicy, error) {
	p.Default = strings.ToLower(strings.TrimSpace(p.Default))
	if p.Default == "" {
		p.Default = Deny
	}
	if p.Default != Allow && p.Default != Ask && p.Default != Deny {
		return p, fault.Invalid("the policy's default %q must be allow, ask or deny", p.Default)
	}
	if len(p.Rules) > MaxRules {
		return p, fault.Invalid("give at most %d policy rules", MaxRules)
	}
	out := p
	out.Rules = nil
	for i, r := range p.Rules {
		r.Tool = strings.TrimSpace(r.Tool)
		r.Subject = strings.TrimSpace(r.Subject)
		r.Effect = strings.ToLower(strings.TrimSpace(r.Effect))
		if r.Effect != Allow && r.Effect != Ask && r.Effect != Deny {
			return p, fault.Invalid("policy rule %d: the effect %q must be allow, ask or deny", i+1, r.Effect)
		}
		if len(r.Tool) > 128 {
			return p, fault.Invalid("policy rule %d: the tool name is longer than 128 characters", i+1)
		}
		switch {
		case r.Subject == "*":
		case strings.HasPrefix(r.Subject, "user:"):
			name := strings.TrimPrefix(r.Subject, "user:")
			if _, err := s.cfg.Store.AccountByUsername(name); err != nil {
				return p, fault.Invalid("policy rule %d: there is no user %q (subjects are user:NAME, agent:ID or *)", i+1, name)
			}
		case strings.HasPrefix(r.Subject, "agent:"):
			id := strings.TrimPrefix(r.Subject, "agent:")
			if _, err := s.cfg.Store.Agent(id); err != nil {
				return p, fault.Invalid("policy rule %d: there is no agent %q (subjects are user:NAME, agent:ID or *)", i+1, id)
			}
		default:
			return p, fault.Invalid("policy rule %d: the subject %q must be user:NAME, agent:ID or *", i+1, r.Subject)
		}
		out.Rules = append(out.Rules, r)
	}
	return out, nil
}

func (s *Service) view(srv store.MCPServer, c store.MCPConfig) Server {
	v := Server{ID: srv.ID, Name: srv.Name, Transport: srv.Transport, Description: srv.Description, URL: srv.URL,
		AllowPrivate: srv.AllowPrivate, Command: srv.Command, OnServer: srv.OnServer, Args: slices.Clone(srv.Args), TimeoutSeconds: srv.TimeoutSeconds,
		Disabled: srv.Disabled, Policy: Policy{Default: srv.Policy.Default, Rules: srv.Policy.Rules}, CreatedAt: srv.CreatedAt, UpdatedAt: srv.UpdatedAt, UpdatedBy: srv.UpdatedBy,
		Headers: map[string]string{}, Env: map[string]string{}, Agents: []string{}}
	if v.TimeoutSeconds == 0 {
		v.TimeoutSeconds = int(DefaultTimeout / time.Second)
	}
	if v.Args == nil {
		v.Args = []string{}
	}
	if v.Policy.Rules == nil {
		v.Policy.Rules = []store.MCPRule{}
	}
	for k, sealed := range srv.Headers {
		v.Headers[k] = s.mask(sealed)
	}
	for k, sealed := range srv.Env {
		v.Env[k] = s.mask(sealed)
	}
	for a, ids := range c.Agents {
		if slices.Contains(ids, srv.ID) {
			v.Agents = append(v.Agents, a)
		}
	}
	slices.Sort(v.Agents)
	return v
}

// mask shows a secret as its last four characters at most (none for a short one).
func (s *Service) mask(sealed []byte) string {
	v, err := s.open(sealed)
	if err != nil {
		return "(cannot be decrypted: enter it again)"
	}
	if len(v) < 12 {
		return "••••"
	}
	return "••••" + v[len(v)-4:]
}

const sealAD = "cubicle mcp server secret"

func (s *Service) seal(v string) ([]byte, error) {
	nonce := make([]byte, s.aead.NonceSize())
	if _, err := rand.Read(nonce); err != nil {
		return nil, err
	}
	return s.aead.Seal(nonce, nonce, []byte(v), []byte(sealAD)), nil
}

func (s *Service) open(sealed []byte) (string, error) {
	n := s.aead.NonceSize()
	if len(sealed) < n {
		return "", fault.Conflict("a saved secret of an MCP server is damaged; enter it again in Settings → Tools")
	}
	plain, err := s.aead.Open(nil, sealed[:n], sealed[n:], []byte(sealAD))
	if err != nil {
		return "", fault.Conflict("a saved secret of an MCP server cannot be decrypted (the secrets directory changed?); enter it again in Settings → Tools")
	}
	return string(plain), nil
}

// openAll opens sealed values by name.
func (s *Service) openAll(m map[string][]byte) (map[string]string, error) {
	out := map[string]string{}
	for k, v := range m {
		p, err := s.open(v)
		if err != nil {
			return nil, err
		}
		out[k] = p
	}
	return out, nil
}

// headerTransport adds the server's headers to every request.
type headerTransport struct {
	base    http.RoundTripper
	headers map[string]string
}

func (h headerTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	for k, v := range h.headers {
		r.Header.Set(k, v)
	}
	return h.base.RoundTrip(r)
}

func newID() string {
	b := make([]byte, 8)
	rand.Read(b)
	return hex.EncodeToString(b)
}

// server returns the saved server id.
func (s *Service) server(id string) (store.MCPServer, error) {
	c, err := s.cfg.Store.MCPConfig()
	if err != nil {
		return store.MCPServer{}, err
	}
	for _, srv := range c.Servers {
		if srv.ID == id {
			return srv, nil
		}
	}
	return store.MCPServer{}, fault.NotFound("MCP server %q not found", id)
}

// agentServers returns the servers agent agentID uses, in the order they were added.
func (s *Service) agentServers(agentID string) ([]store.MCPServer, error) {
	c, err := s.cfg.Store.MCPConfig()
	if err != nil {
		return nil, err
	}
	ids := c.Agents[agentID]
	var out []store.MCPServer
	for _, srv := range c.Servers {
		if slices.Contains(ids, srv.ID) {
			out = append(out, srv)
		}
	}
	return out, nil
}
