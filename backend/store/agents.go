package store

import (
	"cmp"
	"slices"
	"time"

	"go.etcd.io/bbolt"

	"cubicle/backend/fault"
)

// Agent is a bot owned by an account, with its computer selection (SPEC §1.6). The store keeps
// whatever it is given; which Computer values are legal is the caller's business.
type Agent struct {
	ID                   string `json:"id"`
	AccountID            string `json:"accountId"`
	Name                 string `json:"name"`
	Computer             string `json:"computer"` // "vm","cloud","host","browser","auto","none" ("" = none)
	AllowHostEnvironment bool   `json:"allowHostEnvironment"`
	WorkDir              string `json:"workDir,omitempty"` // the profile's terminal.cwd; "" = default
	// LazyInit is the sandbox binding of the agent's threads (SPEC §2.3): nil or true binds on
	// the first tool call, false binds before the first model call of each turn.
	LazyInit *bool       `json:"lazyInit,omitempty"`
	Model    *AgentModel `json:"model,omitempty"` // nil = the app's model settings
	// NodeID is the execution node the agent's desktop runs on ("" = the local node). Records
	// written before nodes decode with it empty, so no migration is needed.
	NodeID    string    `json:"nodeId,omitempty"`
	CreatedAt time.Time `json:"createdAt"`
	UpdatedAt time.Time `json:"updatedAt"`
}

// AgentModel is an agent's own chat model. Every empty field inherits the app's model
// settings. The API key is sealed by package models; the store never sees it in clear. Records
// written before agents had a model decode with Model nil, so no migration is needed.
type AgentModel struct {
	BaseURL      string `json:"baseUrl,omitempty"`
	Model        string `json:"model,omitempty"`
	APIKeySealed []byte `json:"apiKeySealed,omitempty"`
	// KeyBaseURL is the base URL the key was saved with: the key is only ever sent there.
	KeyBaseURL string `json:"keyBaseUrl,omitempty"`
	// ApprovedBy is the administrator who set or approved BaseURL ("" = it must be on the
	// admin-managed list of model endpoints to be used); AllowPrivate is that administrator's
	// allowance for a loopback or private address.
	ApprovedBy   string `json:"approvedBy,omitempty"`
	AllowPrivate bool   `json:"allowPrivate,omitempty"`
	// Provider is the wire protocol of BaseURL ("" = openai-compatible).
	Provider string `json:"provider,omitempty"`
}

// Empty reports whether m overrides nothing (nil counts as empty).
func (m *AgentModel) Empty() bool {
	return m == nil || (m.BaseURL == "" && m.Model == "" && len(m.APIKeySealed) == 0)
}

var agents = table[Agent]{bucket: bucketAgents, kind: "agent"}

// CreateAgent stores a new agent. It fails with fault.ErrInvalid when the ID is empty and
// with fault.ErrExists when it is taken.
func (s *Store) CreateAgent(a Agent) error {
	if a.ID == "" {
		return fault.Invalid("create agent: an agent needs an id")
	}
	return s.update("create agent", func(tx *bbolt.Tx) error {
		ok, err := agents.has(tx, a.ID)
		if err != nil {
			return err
		}
		if ok {
			return fault.Exists("agent %q already exists", a.ID)
		}
		return agents.put(tx, a.ID, a)
	})
}

// Agent returns agent id, or a fault.ErrNotFound error.
func (s *Store) Agent(id string) (Agent, error) {
	var a Agent
	err := s.view("get agent", func(tx *bbolt.Tx) (err error) {
		a, err = agents.get(tx, id)
		return err
	})
	return a, err
}

// Agents returns the agents of accountID ("" = of every account), oldest first (ties by ID).
func (s *Store) Agents(accountID string) ([]Agent, error) {
	var out []Agent
	err := s.view("list agents", func(tx *bbolt.Tx) (err error) {
		out, err = agents.list(tx, func(a Agent) bool { return accountID == "" || a.AccountID == accountID })
		return err
	})
	slices.SortFunc(out, func(a, b Agent) int {
		return cmp.Or(a.CreatedAt.Compare(b.CreatedAt), cmp.Compare(a.ID, b.ID))
	})
	return out, err
}

// UpdateAgent changes agent id with fn in one transaction and returns the result. An error
// from fn aborts the update (nothing changes) and is returned as is. fn may not change the ID.
func (s *Store) UpdateAgent(id string, fn func(*Agent) error) (Agent, error) {
	var a Agent
	err := s.update("update agent", func(tx *bbolt.Tx) (err error) {
		a, err = agents.modify(tx, id, fn, func(old, new Agent) error {
			if new.ID != old.ID {
				return fault.Invalid("update agent %q: the id cannot change", id)
			}
			return nil
		})
		return err
	})
	return a, err
}

// DeleteAgent removes agent id, or returns a fault.ErrNotFound error.
func (s *Store) DeleteAgent(id string) error {
	return s.update("delete agent", func(tx *bbolt.Tx) error { return agents.del(tx, id) })
}
