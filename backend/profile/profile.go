// Package profile owns agent profiles: an agent's name and its computer selection, with the
// rules of SPEC §1.6 and §1.11 — "Allow host environment" exists only next to a VM ("vm") or a
// cloud computer ("cloud"); choosing any other computer clears it, and choosing a VM again does
// not bring it back. Agents belong to one account; another account's agent does not exist for
// the caller.
package profile

import (
	"fmt"
	"log/slog"
	"strings"
	"time"
	"unicode/utf8"

	"cubicle/backend/auth"
	"cubicle/backend/fault"
	"cubicle/backend/store"
)

// Computer types an agent can be given.
const (
	ComputerVM      = "vm"
	ComputerCloud   = "cloud"
	ComputerHost    = "host"
	ComputerBrowser = "browser"
	ComputerAuto    = "auto"
	ComputerNone    = "none"
)

// Computers lists the valid computer types in display order.
var Computers = []string{ComputerVM, ComputerCloud, ComputerHost, ComputerBrowser, ComputerAuto, ComputerNone}

// AllowsHostEnvironment reports whether the "Allow host environment" box exists for computer.
func AllowsHostEnvironment(computer string) bool {
	return computer == ComputerVM || computer == ComputerCloud
}

// Store is the part of the store profiles need.
type Store interface {
	CreateAgent(a store.Agent) error
	Agent(id string) (store.Agent, error)
	Agents(accountID string) ([]store.Agent, error)
	UpdateAgent(id string, fn func(*store.Agent) error) (store.Agent, error)
	DeleteAgent(id string) error
}

// HostAccess says whether an account may use host tools on an execution node
// (hostaccess.Checker); a Service without one refuses "Allow host environment" to everyone.
type HostAccess interface {
	HostTools(accountID, nodeID string) (bool, error)
}

// Service manages agent profiles. It is safe for concurrent use (the store serialises writes).
type Service struct {
	store Store
	log   *slog.Logger
	now   func() time.Time
	host  HostAccess
	node  string
}

// New returns a Service over st.
func New(st Store, log *slog.Logger) *Service {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Service{store: st, log: log, now: time.Now}
}

// WithHostAccess makes s check host access grants on node (the agents' execution node) when
// an agent's "Allow host environment" is turned on. It returns s.
func (s *Service) WithHostAccess(h HostAccess, node string) *Service {
	s.host, s.node = h, node
	return s
}

// Agent returns agent id whoever owns it (for administrators' pages).
func (s *Service) Agent(id string) (store.Agent, error) {
	return s.store.Agent(id)
}

// List returns the account's agents, oldest first.
func (s *Service) List(accountID string) ([]store.Agent, error) {
	agents, err := s.store.Agents(accountID)
	if err != nil {
		return nil, fmt.Errorf("list agents: %w", err)
	}
	if agents == nil {
		agents = []store.Agent{}
	}
	return agents, nil
}

// Get returns one of the account's agents.
func (s *Service) Get(accountID, id string) (store.Agent, error) {
	a, err := s.store.Agent(id)
	if err == nil && a.AccountID != accountID {
		err = fault.NotFound("agent %q not found", id)
	}
	if err != nil {
		return store.Agent{}, fmt.Errorf("get agent: %w", err)
	}
	return a, nil
}

// Create makes an agent. New agents get a Local VM without host tools.
func (s *Service) Create(accountID, name string) (store.Agent, error) {
	name, err := checkName(name)
	if err != nil {
		return store.Agent{}, err
	}
	id, err := auth.NewID()
	if err != nil {
		return store.Agent{}, err
	}
	now := s.now().UTC()
	a := store.Agent{ID: id, AccountID: accountID, Name: name, Computer: ComputerVM, CreatedAt: now, UpdatedAt: now}
	if err := s.store.CreateAgent(a); err != nil {
		return store.Agent{}, fmt.Errorf("create agent: %w", err)
	}
	s.log.Info("agent created", "agent", id, "account", accountID)
	return a, nil
}

// Rename changes an agent's name.
func (s *Service) Rename(accountID, id, name string) (store.Agent, error) {
	name, err := checkName(name)
	if err != nil {
		return store.Agent{}, err
	}
	return s.update(accountID, id, "rename agent", func(a *store.Agent) error {
		a.Name = name
		return nil
	})
}

// Delete removes an agent's profile. Its desktops' work data is kept by the VM layer.
func (s *Service) Delete(accountID, id string) error {
	if _, err := s.Get(accountID, id); err != nil {
		return fmt.Errorf("delete agent: %w", err)
	}
	if err := s.store.DeleteAgent(id); err != nil {
		return fmt.Errorf("delete agent: %w", err)
	}
	s.log.Info("agent deleted", "agent", id, "account", accountID)
	return nil
}

// Selection is an agent's computer choice.
type Selection struct {
	Computer             string
	AllowHostEnvironment bool
}

// SelectComputer saves an agent's computer choice. For any computer but vm and cloud the host
// environment is forced off; an unknown computer is refused and nothing changes. Turning the
// host environment on (or choosing the host computer) needs an administrator's grant of host
// access to the account on the agent's node (SPEC §3): without one it is fault.ErrForbidden.
func (s *Service) SelectComputer(accountID, id string, sel Selection) (store.Agent, error) {
	c := strings.TrimSpace(sel.Computer)
	if !valid(c) {
		return store.Agent{}, fault.Invalid("unknown computer %q: choose one of %s", sel.Computer, strings.Join(Computers, ", "))
	}
	_, after, err := s.SelectComputerFrom(accountID, id, sel)
	return after, err
}

// checkHost refuses a selection that wants host access the account was not granted.
func (s *Service) checkHost(accountID, computer string, sel Selection) error {
	if !(sel.AllowHostEnvironment && AllowsHostEnvironment(computer)) && computer != ComputerHost {
		return nil
	}
	ok := false
	if s.host != nil {
		var err error
		if ok, err = s.host.HostTools(accountID, s.node); err != nil {
			return fmt.Errorf("select computer: %w", err)
		}
	}
	if !ok {
		return fault.Forbidden("host access is granted by an administrator: ask one to allow host tools for your account " +
			"(Settings → Users); until then agents use their own desktop only")
	}
	return nil
}

// MaxWorkDir caps the length of a working directory.
const MaxWorkDir = 1024

// SetWorkDir saves an agent's working directory (terminal.cwd, SPEC §1.7): "", ".", "auto" and
// "cwd" mean the default (the VM workspace /home/cua/workspace for VM tools, the runner user's
// home for host tools); a relative directory starts there; an absolute one is used as given.
// A directory with control characters or a ".." component is refused and nothing changes. It
// returns the agent before and after.
func (s *Service) SetWorkDir(accountID, id, dir string) (before, after store.Agent, err error) {
	dir, err = CheckWorkDir(dir)
	if err != nil {
		return store.Agent{}, store.Agent{}, err
	}
	after, err = s.update(accountID, id, "set working directory", func(a *store.Agent) error {
		before = *a
		a.WorkDir = dir
		return nil
	})
	return before, after, err
}

// CheckWorkDir validates and normalises a working directory.
func CheckWorkDir(dir string) (string, error) {
	dir = strings.TrimSpace(dir)
	switch {
	case len(dir) > MaxWorkDir:
		return "", fault.Invalid("the working directory is too long: use at most %d characters", MaxWorkDir)
	case strings.ContainsFunc(dir, func(r rune) bool { return r < 0x20 || r == 0x7f }):
		return "", fault.Invalid("the working directory contains control characters")
	case strings.Contains(dir, "\\"):
		return "", fault.Invalid("write the working directory with / (it is a path inside the Linux VM and on the host)")
	}
	switch dir {
	case "", ".", "auto", "cwd":
		return dir, nil
	}
	for _, part := range strings.Split(dir, "/") {
		if part == ".." {
			return "", fault.Invalid("the working directory %q contains \"..\": give the directory itself, relative to the workspace or absolute", dir)
		}
	}
	if strings.HasPrefix(dir, "~") && !strings.HasPrefix(dir, "~/") {
		return "", fault.Invalid("the working directory %q names another user's home; use ~/dir or an absolute path", dir)
	}
	return dir, nil
}

// SetLazyInit saves an agent's sandbox binding (SPEC §2.3): lazy binds on the first tool call,
// eager (lazy false) before the first model call of each turn.
func (s *Service) SetLazyInit(accountID, id string, lazy bool) (store.Agent, error) {
	return s.update(accountID, id, "set sandbox binding", func(a *store.Agent) error {
		if lazy {
			a.LazyInit = nil
		} else {
			f := false
			a.LazyInit = &f
		}
		return nil
	})
}

// SelectComputerFrom is SelectComputer that also returns the agent as it was before.
func (s *Service) SelectComputerFrom(accountID, id string, sel Selection) (before, after store.Agent, err error) {
	c := strings.TrimSpace(sel.Computer)
	if !valid(c) {
		return store.Agent{}, store.Agent{}, fault.Invalid("unknown computer %q: choose one of %s", sel.Computer, strings.Join(Computers, ", "))
	}
	if err := s.checkHost(accountID, c, sel); err != nil {
		return store.Agent{}, store.Agent{}, err
	}
	after, err = s.update(accountID, id, "select computer", func(a *store.Agent) error {
		before = *a
		a.Computer = c
		a.AllowHostEnvironment = sel.AllowHostEnvironment && AllowsHostEnvironment(c)
		return nil
	})
	return before, after, err
}

func (s *Service) update(accountID, id, op string, fn func(*store.Agent) error) (store.Agent, error) {
	a, err := s.store.UpdateAgent(id, func(a *store.Agent) error {
		if a.AccountID != accountID {
			return fault.NotFound("agent %q not found", id)
		}
		if err := fn(a); err != nil {
			return err
		}
		a.UpdatedAt = s.now().UTC()
		return nil
	})
	if err != nil {
		return store.Agent{}, fmt.Errorf("%s: %w", op, err)
	}
	return a, nil
}

func valid(computer string) bool {
	for _, c := range Computers {
		if c == computer {
			return true
		}
	}
	return false
}

func checkName(name string) (string, error) {
	name = strings.TrimSpace(name)
	switch {
	case name == "":
		return "", fault.Invalid("the agent needs a name")
	case utf8.RuneCountInString(name) > 64:
		return "", fault.Invalid("the agent's name is too long: use at most 64 characters")
	case strings.ContainsFunc(name, func(r rune) bool { return r < 0x20 || r == 0x7f }):
		return "", fault.Invalid("the agent's name contains control characters")
	}
	return name, nil
}
