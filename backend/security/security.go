// Package security is Settings → Security (SPEC §2.4, §3): it keeps what an administrator
// sets — the tool guard's level, denied tools, protected paths on the host and in desktops,
// the per-tool access policy, approved model endpoints and the host ports desktops may reach —
// builds the safety layers of package guard from it, and is the agent runtime's Guard: every
// tool call of every agent is decided here, with the agent's own "always allow" rules (saved
// in the store, listed and removable), and every answer a person gives to a confirmation is
// recorded (who, when, what).
//
// The access policy is always active: the tools the app provides are allowed unless the
// policy says otherwise, and any other tool name (a remote tool, or one the model made up) is
// denied. The data directory is protected on the host and the driver's run directory in every
// desktop, whatever the settings say.
//
// A Service is safe for concurrent use: settings are swapped as a whole under a lock, so a
// decision never sees half of an update.
package security

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"cubicle/backend/agent"
	"cubicle/backend/agent/guard"
	"cubicle/backend/fault"
	"cubicle/backend/store"
)

// Store is the part of the store the service needs.
type Store interface {
	SecuritySettings() (store.SecuritySettings, error)
	PutSecuritySettings(m store.SecuritySettings) error
	AddAllowRule(r store.AllowRule) error
	AllowRules(agentID string) ([]store.AllowRule, error)
	AllAllowRules() ([]store.AllowRule, error)
	DeleteAllowRule(agentID, id string) error
	DeleteAllowRulesOf(agentID string) error
	PutConfirmation(c store.Confirmation) error
	Confirmations(limit int, keep func(store.Confirmation) bool) ([]store.Confirmation, error)
}

// Config configures a Service. Store and DataDir are required.
type Config struct {
	Store Store
	// DataDir is the app's data directory, protected on the host whatever the settings say.
	DataDir string
	// VMRunDir is protected in every desktop (the driver's socket); default /run/cubicle.
	VMRunDir string
	// HostHome and VMHome expand "~" for the file guard: this machine's home for host tools
	// that run here, the desktops' home for the others. Host tools on a runner's host use
	// that machine's home, which Place names.
	HostHome, VMHome string
	// LookupHome returns the home directory of an account of this machine ("~name" in host
	// tools run here); nil looks nothing up.
	LookupHome func(name string) string
	// DefaultLevel is the guard level when the settings name none (CUBICLE_TOOL_GUARD).
	DefaultLevel guard.Level
	// LocalTools lists the tools the app provides; any other tool is denied. nil: none known
	// (every tool is then denied unless the policy names it).
	LocalTools func() []string
	// Place says where a call acts: the directory its relative paths start from (the agent's
	// working directory on the host or in the desktop) and, for host tools on a runner's host,
	// that machine's home (or why it is not known: paths under "~" are then refused). nil
	// resolves nothing relative and uses HostHome and VMHome.
	Place func(t agent.TurnInfo, tool string) guard.Place
	// SandboxStatus is the kind of host sandbox this machine has and, without one, why (for
	// the settings page); nil shows none.
	SandboxStatus func() (kind, problem string)
	Logger        *slog.Logger
	Now           func() time.Time
}

// Service decides tool calls and keeps the security settings.
type Service struct {
	cfg Config
	log *slog.Logger
	now func() time.Time

	widen    sync.Mutex // serialises WidenHostSandbox's read-modify-write
	mu       sync.RWMutex
	settings store.SecuritySettings // guarded by mu
	safety   *guard.Safety          // guarded by mu; rebuilt on every update
	rules    map[string]guard.Rules // guarded by mu; compiled allow rules by rule owner
}

// New loads the saved settings and builds the safety layers.
func New(cfg Config) (*Service, error) {
	if cfg.Store == nil || cfg.DataDir == "" {
		return nil, errors.New("security: Config.Store and Config.DataDir are required")
	}
	if cfg.VMRunDir == "" {
		cfg.VMRunDir = "/run/cubicle"
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	abs, err := filepath.Abs(cfg.DataDir)
	if err != nil {
		return nil, fmt.Errorf("security: data directory: %w", err)
	}
	cfg.DataDir = abs
	s := &Service{cfg: cfg, log: cfg.Logger, now: cfg.Now, rules: map[string]guard.Rules{}}
	m, err := cfg.Store.SecuritySettings()
	if err != nil {
		return nil, fmt.Errorf("security: read settings: %w", err)
	}
	safety, err := s.build(m)
	if err != nil {
		// Saved settings that no longer build (a rule this version refuses) must not lock
		// people out: fall back to the defaults and say so.
		s.log.Error("the saved security settings are invalid; using the defaults until an administrator saves them again", "err", err)
		if safety, err = s.build(store.SecuritySettings{}); err != nil {
			return nil, err
		}
	}
	s.settings, s.safety = m, safety
	return s, nil
}

// build makes the safety layers of m; invalid settings are fault.ErrInvalid.
func (s *Service) build(m store.SecuritySettings) (*guard.Safety, error) {
	level := guard.Level(m.GuardLevel)
	if level == "" {
		level = s.cfg.DefaultLevel
	}
	g, err := guard.New(guard.Config{Level: level, DeniedTools: m.DeniedTools})
	if err != nil {
		return nil, err
	}
	host, err := guard.NewFileGuard(append([]string{s.cfg.DataDir}, m.ProtectedPaths...))
	if err != nil {
		return nil, err
	}
	vm, err := guard.NewLexicalFileGuard(append([]string{s.cfg.VMRunDir}, m.VMProtectedPaths...))
	if err != nil {
		return nil, err
	}
	rules := map[string]guard.Decision{}
	for tool, d := range m.AccessPolicy {
		rules[tool] = guard.Decision(strings.ToLower(strings.TrimSpace(d)))
	}
	var local []string
	if s.cfg.LocalTools != nil {
		local = s.cfg.LocalTools()
	}
	p, err := guard.NewPolicy(guard.PolicyConfig{Rules: rules, Local: local})
	if err != nil {
		return nil, err
	}
	return &guard.Safety{Guard: g, Policy: p, HostFiles: host, VMFiles: vm, HostHome: s.cfg.HostHome, VMHome: s.cfg.VMHome,
		LookupHome: s.cfg.LookupHome}, nil
}

// View is Settings → Security as the page shows it.
type View struct {
	// GuardLevel is the saved level ("" = the default); EffectiveLevel the one in force.
	GuardLevel     string   `json:"guardLevel"`
	EffectiveLevel string   `json:"effectiveLevel"`
	Levels         []string `json:"levels"`
	DeniedTools    []string `json:"deniedTools"`
	// ProtectedPaths are the administrator's; BuiltinProtected are always protected.
	ProtectedPaths     []string              `json:"protectedPaths"`
	VMProtectedPaths   []string              `json:"vmProtectedPaths"`
	BuiltinProtected   []string              `json:"builtinProtected"`
	BuiltinVMProtected []string              `json:"builtinVmProtected"`
	AccessPolicy       map[string]string     `json:"accessPolicy"`
	KnownTools         []string              `json:"knownTools"`
	ModelEndpoints     []store.ModelEndpoint `json:"modelEndpoints"`
	DesktopHostPorts   []int                 `json:"desktopHostPorts"`
	// HostSandbox are the host sandbox's settings by node; LocalSandbox is the kind this
	// server's own host has ("none": LocalSandboxProblem says why and what to install).
	HostSandbox         map[string]store.HostSandbox `json:"hostSandbox"`
	LocalSandbox        string                       `json:"localSandbox,omitempty"`
	LocalSandboxProblem string                       `json:"localSandboxProblem,omitempty"`
	UpdatedAt           *time.Time                   `json:"updatedAt,omitempty"`
	UpdatedBy           string                       `json:"updatedBy,omitempty"`
}

// View returns the settings.
func (s *Service) View() View {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.viewLocked()
}

// viewLocked is View with s.mu held.
func (s *Service) viewLocked() View {
	m := s.settings
	v := View{GuardLevel: m.GuardLevel, EffectiveLevel: string(s.safety.Guard.Level()),
		Levels:      []string{string(guard.Strict), string(guard.Smart), string(guard.Auto), string(guard.Off)},
		DeniedTools: orEmpty(m.DeniedTools), ProtectedPaths: orEmpty(m.ProtectedPaths), VMProtectedPaths: orEmpty(m.VMProtectedPaths),
		BuiltinProtected: []string{s.cfg.DataDir}, BuiltinVMProtected: []string{s.cfg.VMRunDir},
		AccessPolicy: map[string]string{}, ModelEndpoints: m.ModelEndpoints, DesktopHostPorts: m.DesktopHostPorts, UpdatedBy: m.UpdatedBy}
	for k, d := range m.AccessPolicy {
		v.AccessPolicy[k] = d
	}
	if v.ModelEndpoints == nil {
		v.ModelEndpoints = []store.ModelEndpoint{}
	}
	if v.DesktopHostPorts == nil {
		v.DesktopHostPorts = []int{}
	}
	v.HostSandbox = map[string]store.HostSandbox{}
	for k, h := range m.HostSandbox {
		v.HostSandbox[k] = h
	}
	if s.cfg.SandboxStatus != nil {
		v.LocalSandbox, v.LocalSandboxProblem = s.cfg.SandboxStatus()
	}
	if s.cfg.LocalTools != nil {
		v.KnownTools = s.cfg.LocalTools()
		slices.Sort(v.KnownTools)
	}
	if !m.UpdatedAt.IsZero() {
		t := m.UpdatedAt
		v.UpdatedAt = &t
	}
	return v
}

func orEmpty(xs []string) []string {
	if xs == nil {
		return []string{}
	}
	return xs
}

// Update is a change of the settings; nil fields stay as they are.
type Update struct {
	GuardLevel       *string                `json:"guardLevel"`
	DeniedTools      *[]string              `json:"deniedTools"`
	ProtectedPaths   *[]string              `json:"protectedPaths"`
	VMProtectedPaths *[]string              `json:"vmProtectedPaths"`
	AccessPolicy     *map[string]string     `json:"accessPolicy"`
	ModelEndpoints   *[]store.ModelEndpoint `json:"modelEndpoints"`
	DesktopHostPorts *[]int                 `json:"desktopHostPorts"`
	// HostSandbox replaces the host sandbox's settings of the nodes it names (an entry with
	// the defaults removes the node's).
	HostSandbox *map[string]store.HostSandbox `json:"hostSandbox"`
}

// Update checks and saves a change (by is the administrator's account id). Invalid settings
// are fault.ErrInvalid and change nothing; valid ones take effect for the next tool call.
func (s *Service) Update(by string, u Update) (View, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	m := s.settings
	if u.GuardLevel != nil {
		lv := strings.ToUpper(strings.TrimSpace(*u.GuardLevel))
		if lv != "" {
			if _, err := guard.ParseLevel(lv); err != nil {
				return View{}, err
			}
		}
		m.GuardLevel = lv
	}
	if u.DeniedTools != nil {
		m.DeniedTools = cleanList(*u.DeniedTools)
	}
	if u.ProtectedPaths != nil {
		// "~/…" stays as written: it is below the home of whichever host a tool acts on (this
		// machine's, or a runner's), known only when the call is checked.
		var paths []string
		for _, p := range cleanList(*u.ProtectedPaths) {
			if strings.HasPrefix(p, "~") {
				rel, ok := guard.HomeRelative(p)
				if !ok {
					return View{}, fault.Invalid("protected path %q: only ~/… (without ..) names a path in the home directory; give other paths in full", p)
				}
				p = path.Join("~", filepath.ToSlash(rel))
			} else if !filepath.IsAbs(p) {
				return View{}, fault.Invalid("protected path %q must be absolute (or start with ~/)", p)
			} else {
				p = filepath.Clean(p)
			}
			if !slices.Contains(paths, p) {
				paths = append(paths, p)
			}
		}
		m.ProtectedPaths = paths
	}
	if u.VMProtectedPaths != nil {
		m.VMProtectedPaths = cleanList(*u.VMProtectedPaths)
		for _, p := range m.VMProtectedPaths {
			if !strings.HasPrefix(p, "/") && !strings.HasPrefix(p, "~/") {
				return View{}, fault.Invalid("desktop path %q must be absolute (or start with ~/)", p)
			}
		}
		m.VMProtectedPaths = s.expandHome(m.VMProtectedPaths, s.cfg.VMHome)
	}
	if u.HostSandbox != nil {
		next, err := mergeHostSandbox(m.HostSandbox, *u.HostSandbox)
		if err != nil {
			return View{}, err
		}
		m.HostSandbox = next
	}
	if u.AccessPolicy != nil {
		m.AccessPolicy = map[string]string{}
		for k, d := range *u.AccessPolicy {
			k, d = strings.TrimSpace(k), strings.ToLower(strings.TrimSpace(d))
			if k == "" {
				continue
			}
			m.AccessPolicy[k] = d
		}
	}
	if u.ModelEndpoints != nil {
		var eps []store.ModelEndpoint
		for _, e := range *u.ModelEndpoints {
			n, err := NormalizeEndpoint(e.BaseURL)
			if err != nil {
				return View{}, err
			}
			if !slices.ContainsFunc(eps, func(x store.ModelEndpoint) bool { return x.BaseURL == n }) {
				eps = append(eps, store.ModelEndpoint{BaseURL: n, AllowPrivate: e.AllowPrivate})
			}
		}
		m.ModelEndpoints = eps
	}
	if u.DesktopHostPorts != nil {
		var ports []int
		for _, p := range *u.DesktopHostPorts {
			if p < 1 || p > 65535 {
				return View{}, fault.Invalid("port %d is not a TCP port (1–65535)", p)
			}
			if !slices.Contains(ports, p) {
				ports = append(ports, p)
			}
		}
		slices.Sort(ports)
		m.DesktopHostPorts = ports
	}
	safety, err := s.build(m)
	if err != nil {
		return View{}, err
	}
	m.UpdatedAt, m.UpdatedBy = s.now().UTC(), by
	if err := s.cfg.Store.PutSecuritySettings(m); err != nil {
		return View{}, err
	}
	s.settings, s.safety = m, safety
	s.log.Info("security settings changed", "by", by, "level", safety.Guard.Level())
	return s.viewLocked(), nil
}

func (s *Service) expandHome(ps []string, home string) []string {
	out := make([]string, 0, len(ps))
	for _, p := range ps {
		if strings.HasPrefix(p, "~/") && home != "" {
			p = filepath.Join(home, strings.TrimPrefix(p, "~/"))
		}
		out = append(out, filepath.Clean(p))
	}
	return out
}

func cleanList(xs []string) []string {
	var out []string
	for _, x := range xs {
		if x = strings.TrimSpace(x); x != "" && !slices.Contains(out, x) {
			out = append(out, x)
		}
	}
	return out
}

// current returns the safety layers in force.
func (s *Service) current() *guard.Safety {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.safety
}

// Safety returns the safety layers in force (for tests and tools that check files).
func (s *Service) Safety() *guard.Safety { return s.current() }

// ruleOwner is whose allow rules apply to a turn: the agent's, or for a chat without an agent
// the account's.
func ruleOwner(t agent.TurnInfo) string {
	if t.AgentID != "" {
		return t.AgentID
	}
	return "account:" + t.UserID
}

// agentRules returns the compiled rules of owner plus the rules for every agent.
func (s *Service) agentRules(owner string) guard.Rules {
	s.mu.RLock()
	r, ok := s.rules[owner]
	s.mu.RUnlock()
	if ok {
		return r
	}
	var all []guard.AllowRule
	for _, o := range []string{"", owner} {
		rs, err := s.cfg.Store.AllowRules(o)
		if err != nil {
			s.log.Warn("read allow rules", "owner", o, "err", err)
			continue
		}
		for _, x := range rs {
			all = append(all, guard.AllowRule{Tool: x.Tool, Command: x.Command, Pattern: x.Pattern})
		}
	}
	r, err := guard.CompileRules(all)
	if err != nil {
		s.log.Warn("an allow rule does not compile; ignoring the agent's rules", "owner", owner, "err", err)
		r = guard.Rules{}
	}
	s.mu.Lock()
	s.rules[owner] = r
	s.mu.Unlock()
	return r
}

func (s *Service) forget(owner string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if owner == "" {
		s.rules = map[string]guard.Rules{}
		return
	}
	delete(s.rules, owner)
}

func (s *Service) place(t agent.TurnInfo, tool string) guard.Place {
	if s.cfg.Place == nil {
		return guard.Place{}
	}
	return s.cfg.Place(t, tool)
}

// Check implements agent.Guard: the access policy, the tool guard with the agent's allow rules,
// and the file guard.
func (s *Service) Check(t agent.TurnInfo, c agent.ToolCall) (agent.Decision, string) {
	d, reason, _ := s.current().Decide(guard.ToolCall{Name: c.Name, Args: c.Input}, s.place(t, c.Name), s.agentRules(ruleOwner(t)))
	return agent.Decision(d), reason
}

// commandKeys are the arguments of a remote tool that the tool guard judges as shell
// commands.
var commandKeys = []string{"command", "cmd", "script"}

// CheckArgs judges a call of a tool the app does not provide itself (an MCP server's, whose
// own access policy decided whether it may run at all): the rules of the access policy here
// that name it (none: allow), and the tool guard and the file guard on its arguments — paths
// as for any tool, and a command ("command", "cmd", "script") as a shell command in the
// agent's desktop — with the agent's allow rules.
func (s *Service) CheckArgs(t agent.TurnInfo, c agent.ToolCall) (agent.Decision, string) {
	sf := *s.current()
	pol := guard.Allow
	if sf.Policy != nil {
		if d, ok := sf.Policy.Explicit(c.Name); ok {
			pol = d
		}
	}
	if pol == guard.Deny {
		return agent.Deny, fmt.Sprintf("the access policy does not allow the tool %s", c.Name)
	}
	sf.Policy = nil
	at, rules := s.place(t, c.Name), s.agentRules(ruleOwner(t))
	d, reason, _ := sf.Decide(guard.ToolCall{Name: c.Name, Args: c.Input}, at, rules)
	for _, k := range commandKeys {
		cmd, ok := c.Input[k].(string)
		if !ok || strings.TrimSpace(cmd) == "" {
			continue
		}
		args := map[string]any{"command": cmd}
		if cwd, ok := c.Input["cwd"]; ok {
			args["cwd"] = cwd
		}
		d2, r2, _ := sf.Decide(guard.ToolCall{Name: c.Name + "_shell", Args: args}, at, rules)
		if guard.Combine(guard.Decision(d), d2) != guard.Decision(d) {
			d, reason = d2, r2
		}
	}
	if d == guard.Allow && pol == guard.Ask {
		return agent.Ask, fmt.Sprintf("the access policy asks before the tool %s runs", c.Name)
	}
	return agent.Decision(d), reason
}

// AllowRule implements agent.Guard: the rule a person chose while confirming is saved for the
// agent (see guard.ParseAllowRules); rules that would launder a CRITICAL finding are refused.
func (s *Service) AllowRule(t agent.TurnInfo, c agent.ToolCall, rule string) error {
	call := guard.ToolCall{Name: c.Name, Args: c.Input}
	v, in := s.current().Inspect(call, s.place(t, c.Name).WorkDir)
	rs, err := guard.ParseAllowRules(call, rule, v, in)
	if err != nil {
		return err
	}
	owner := ruleOwner(t)
	for _, r := range rs {
		if _, err := s.add(t.UserID, owner, r); err != nil {
			return err
		}
	}
	return nil
}

func (s *Service) add(by, owner string, r guard.AllowRule) (store.AllowRule, error) {
	if err := guard.CheckAllowRule(r); err != nil {
		return store.AllowRule{}, err
	}
	if r.Command != "" {
		r.Command = guard.NormalizeCommand(r.Command)
	}
	id := agent.NewID()
	rec := store.AllowRule{ID: id, AgentID: owner, Tool: r.Tool, Command: r.Command, Pattern: r.Pattern, CreatedBy: by, CreatedAt: s.now().UTC()}
	if err := s.cfg.Store.AddAllowRule(rec); err != nil {
		return store.AllowRule{}, err
	}
	s.forget(owner)
	if owner == "" {
		s.forget("")
	}
	s.log.Info("allow rule added", "by", by, "owner", owner, "tool", r.Tool, "command", r.Command, "pattern", r.Pattern)
	return rec, nil
}

// AddAllowRule saves a rule an administrator (or an agent's owner) sets directly; agentID ""
// makes it apply to every agent.
func (s *Service) AddAllowRule(by, agentID string, r guard.AllowRule) (store.AllowRule, error) {
	return s.add(by, agentID, r)
}

// AllowRules lists the rules of agentID ("" = those for every agent).
func (s *Service) AllowRules(agentID string) ([]store.AllowRule, error) {
	return s.cfg.Store.AllowRules(agentID)
}

// AllAllowRules lists every saved rule.
func (s *Service) AllAllowRules() ([]store.AllowRule, error) { return s.cfg.Store.AllAllowRules() }

// DeleteAllowRule removes rule id of agentID ("" = a rule for every agent).
func (s *Service) DeleteAllowRule(agentID, id string) error {
	if err := s.cfg.Store.DeleteAllowRule(agentID, id); err != nil {
		return err
	}
	if agentID == "" {
		s.forget("")
	} else {
		s.forget(agentID)
	}
	return nil
}

// AgentDeleted removes the rules of a deleted agent.
func (s *Service) AgentDeleted(agentID string) error {
	if agentID == "" {
		return nil
	}
	s.forget(agentID)
	return s.cfg.Store.DeleteAllowRulesOf(agentID)
}

// Confirmed implements agent.ConfirmRecorder: every answer is saved with who gave it, when,
// and what was asked.
func (s *Service) Confirmed(t agent.TurnInfo, r agent.ConfirmResult, reason string) {
	raw, _ := json.Marshal(r.ToolCall.Input)
	sum := sha256.Sum256(raw)
	rec := store.Confirmation{ID: agent.NewID(), At: s.now().UTC(), AccountID: t.UserID, AgentID: t.AgentID, SessionID: t.SessionID,
		ToolCallID: r.ToolCall.ID, Tool: r.ToolCall.Name, InputSHA256: hex.EncodeToString(sum[:]), Summary: summary(r.ToolCall),
		Reason: reason, Confirmed: r.Confirmed, Rules: r.Rules}
	if err := s.cfg.Store.PutConfirmation(rec); err != nil {
		s.log.Error("record a confirmation", "err", err, "tool", r.ToolCall.Name, "account", t.UserID)
	}
	s.log.Info("confirmation answered", "account", t.UserID, "agent", t.AgentID, "tool", r.ToolCall.Name, "confirmed", r.Confirmed)
}

// summary shortens what a call does for the record: its command or its paths.
func summary(c agent.ToolCall) string {
	var parts []string
	for _, k := range []string{"command", "text", "path", "source", "target"} {
		if v, ok := c.Input[k].(string); ok && v != "" {
			parts = append(parts, v)
		}
	}
	out := strings.Join(parts, " → ")
	if len(out) > 500 {
		out = out[:500] + "…"
	}
	return out
}

// Confirmations returns up to limit records, newest first; accountID "" returns everyone's.
func (s *Service) Confirmations(limit int, accountID string) ([]store.Confirmation, error) {
	var keep func(store.Confirmation) bool
	if accountID != "" {
		keep = func(c store.Confirmation) bool { return c.AccountID == accountID }
	}
	return s.cfg.Store.Confirmations(limit, keep)
}

// NormalizeEndpoint returns the canonical form of a model base URL (lower-case scheme and
// host, default port dropped, no trailing slash, no query or fragment), or a fault.ErrInvalid
// error.
func NormalizeEndpoint(raw string) (string, error) {
	raw = strings.TrimSpace(raw)
	u, err := url.Parse(raw)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.User != nil {
		return "", fault.Invalid("the base URL %q must be an http(s) URL such as https://api.openai.com/v1 (without a user name)", raw)
	}
	if u.RawQuery != "" || u.Fragment != "" {
		return "", fault.Invalid("the base URL %q must not have a query or a fragment", raw)
	}
	scheme, host := strings.ToLower(u.Scheme), strings.ToLower(u.Hostname())
	port := u.Port()
	if (scheme == "http" && port == "80") || (scheme == "https" && port == "443") {
		port = ""
	}
	if port != "" {
		host = host + ":" + port
		if strings.Contains(u.Hostname(), ":") {
			host = "[" + strings.ToLower(u.Hostname()) + "]:" + port
		}
	} else if strings.Contains(host, ":") {
		host = "[" + host + "]"
	}
	return scheme + "://" + host + strings.TrimRight(u.EscapedPath(), "/"), nil
}

// Endpoint says whether a base URL is on the approved list and whether it may resolve to
// loopback or private addresses.
func (s *Service) Endpoint(baseURL string) (approved, allowPrivate bool) {
	n, err := NormalizeEndpoint(baseURL)
	if err != nil {
		return false, false
	}
	s.mu.RLock()
	defer s.mu.RUnlock()
	for _, e := range s.settings.ModelEndpoints {
		if e.BaseURL == n {
			return true, e.AllowPrivate
		}
	}
	return false, false
}

// DesktopHostPorts are the host TCP ports desktops may reach.
func (s *Service) DesktopHostPorts() []int {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return slices.Clone(s.settings.DesktopHostPorts)
}

var (
	_ agent.Guard           = (*Service)(nil)
	_ agent.ConfirmRecorder = (*Service)(nil)
)
