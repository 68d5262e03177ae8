package store

import (
	"bytes"
	"encoding/json"
	"fmt"
	"sort"
	"strconv"
	"time"

	"go.etcd.io/bbolt"

	"cubicle/backend/fault"
)

// Buckets of accounts and security (schema version 5).
var (
	bucketRevocations   = []byte("session_revocations")
	bucketHostGrants    = []byte("host_grants")
	bucketAllowRules    = []byte("allow_rules")
	bucketConfirmations = []byte("confirmations")
)

func migrateSecurityBuckets(tx *bbolt.Tx) error {
	for _, b := range [][]byte{bucketRevocations, bucketHostGrants, bucketAllowRules, bucketConfirmations} {
		if _, err := tx.CreateBucketIfNotExists(b); err != nil {
			return fmt.Errorf("create bucket %s: %w", b, err)
		}
	}
	return nil
}

// deletePrefix removes every key of b that starts with prefix.
func deletePrefix(b *bbolt.Bucket, prefix []byte) error {
	var keys [][]byte
	c := b.Cursor()
	for k, _ := c.Seek(prefix); k != nil && bytes.HasPrefix(k, prefix); k, _ = c.Next() {
		keys = append(keys, bytes.Clone(k))
	}
	for _, k := range keys {
		if err := b.Delete(k); err != nil {
			return err
		}
	}
	return nil
}

// RevokeSession records that the session token with nonce ends now (log out), until exp,
// when the token would have expired anyway. Entries already past their expiry are dropped.
func (s *Store) RevokeSession(nonce string, exp, now time.Time) error {
	if nonce == "" {
		return fault.Invalid("revoke session: empty nonce")
	}
	return s.update("revoke session", func(tx *bbolt.Tx) error {
		b := tx.Bucket(bucketRevocations)
		var stale [][]byte
		err := b.ForEach(func(k, v []byte) error {
			if u, err := strconv.ParseInt(string(v), 10, 64); err != nil || time.Unix(u, 0).Before(now) {
				stale = append(stale, bytes.Clone(k))
			}
			return nil
		})
		if err != nil {
			return err
		}
		for _, k := range stale {
			if err := b.Delete(k); err != nil {
				return err
			}
		}
		return b.Put([]byte(nonce), []byte(strconv.FormatInt(exp.Unix(), 10)))
	})
}

// SessionRevoked reports whether the session token with nonce was revoked.
func (s *Store) SessionRevoked(nonce string) (bool, error) {
	var found bool
	err := s.view("read session revocation", func(tx *bbolt.Tx) error {
		found = tx.Bucket(bucketRevocations).Get([]byte(nonce)) != nil
		return nil
	})
	return found, err
}

// HostGrant is an administrator's grant of host access to one account on one execution node
// (SPEC §3): HostTools lets the account's agents use host_* tools (and computer_copy_file),
// HostDesktop the host desktop tools (screenshots and input on the node's own screen).
type HostGrant struct {
	AccountID   string `json:"accountId"`
	NodeID      string `json:"nodeId"`
	HostTools   bool   `json:"hostTools"`
	HostDesktop bool   `json:"hostDesktop"`
	// Placement: the account may place its agents on the node (a runner; the server's own
	// node needs no grant).
	Placement bool      `json:"placement,omitempty"`
	GrantedBy string    `json:"grantedBy"` // the admin's account id
	UpdatedAt time.Time `json:"updatedAt"`
}

func grantKey(accountID, nodeID string) []byte { return []byte(accountID + "\x00" + nodeID) }

// PutHostGrant saves g, replacing the grant of the same account and node. A grant of nothing
// removes the record.
func (s *Store) PutHostGrant(g HostGrant) error {
	if g.AccountID == "" || g.NodeID == "" {
		return fault.Invalid("a host grant needs an account and a node")
	}
	raw, err := json.Marshal(g)
	if err != nil {
		return fmt.Errorf("store: encode host grant: %w", err)
	}
	return s.update("put host grant", func(tx *bbolt.Tx) error {
		ok, err := accounts.has(tx, g.AccountID)
		if err != nil {
			return err
		}
		if !ok {
			return fault.NotFound("account %q not found", g.AccountID)
		}
		b := tx.Bucket(bucketHostGrants)
		if !g.HostTools && !g.HostDesktop && !g.Placement {
			return b.Delete(grantKey(g.AccountID, g.NodeID))
		}
		return b.Put(grantKey(g.AccountID, g.NodeID), raw)
	})
}

// HostGrant returns the grant of accountID on nodeID; none is a zero grant (nothing granted),
// not an error.
func (s *Store) HostGrant(accountID, nodeID string) (HostGrant, error) {
	g := HostGrant{AccountID: accountID, NodeID: nodeID}
	err := s.view("get host grant", func(tx *bbolt.Tx) error {
		raw := tx.Bucket(bucketHostGrants).Get(grantKey(accountID, nodeID))
		if raw == nil {
			return nil
		}
		return json.Unmarshal(raw, &g)
	})
	return g, err
}

// HostGrants returns every grant of accountID, by node id.
func (s *Store) HostGrants(accountID string) ([]HostGrant, error) {
	out := []HostGrant{}
	err := s.view("list host grants", func(tx *bbolt.Tx) error {
		c := tx.Bucket(bucketHostGrants).Cursor()
		prefix := []byte(accountID + "\x00")
		for k, v := c.Seek(prefix); k != nil && bytes.HasPrefix(k, prefix); k, v = c.Next() {
			var g HostGrant
			if err := json.Unmarshal(v, &g); err != nil {
				return fmt.Errorf("store: host grant %q: corrupt record: %w", k, err)
			}
			out = append(out, g)
		}
		return nil
	})
	return out, err
}

// AllowRule is a saved "always allow" rule of the tool guard (SPEC §2.4). AgentID "" makes it
// apply to every agent (rules an administrator sets in Settings → Security); otherwise it
// applies to that agent only. Tool, Command and Pattern are interpreted by package guard.
type AllowRule struct {
	ID        string    `json:"id"`
	AgentID   string    `json:"agentId,omitempty"`
	Tool      string    `json:"tool"`
	Command   string    `json:"command,omitempty"`
	Pattern   string    `json:"pattern,omitempty"`
	CreatedBy string    `json:"createdBy,omitempty"` // account id of the person who added it
	CreatedAt time.Time `json:"createdAt"`
}

func allowKey(agentID, id string) []byte { return []byte(agentID + "\x00" + id) }

// AddAllowRule saves r (its ID and Tool are required).
func (s *Store) AddAllowRule(r AllowRule) error {
	if r.ID == "" || r.Tool == "" {
		return fault.Invalid("an allow rule needs an id and a tool")
	}
	raw, err := json.Marshal(r)
	if err != nil {
		return fmt.Errorf("store: encode allow rule: %w", err)
	}
	return s.update("add allow rule", func(tx *bbolt.Tx) error {
		return tx.Bucket(bucketAllowRules).Put(allowKey(r.AgentID, r.ID), raw)
	})
}

// AllowRules returns the rules of agentID ("" = the rules for every agent only), oldest first.
func (s *Store) AllowRules(agentID string) ([]AllowRule, error) {
	return s.allowRules(func(r AllowRule) bool { return r.AgentID == agentID })
}

// AllAllowRules returns every saved allow rule, oldest first.
func (s *Store) AllAllowRules() ([]AllowRule, error) {
	return s.allowRules(nil)
}

func (s *Store) allowRules(keep func(AllowRule) bool) ([]AllowRule, error) {
	out := []AllowRule{}
	err := s.view("list allow rules", func(tx *bbolt.Tx) error {
		return tx.Bucket(bucketAllowRules).ForEach(func(k, v []byte) error {
			var r AllowRule
			if err := json.Unmarshal(v, &r); err != nil {
				return fmt.Errorf("store: allow rule %q: corrupt record: %w", k, err)
			}
			if keep == nil || keep(r) {
				out = append(out, r)
			}
			return nil
		})
	})
	sort.SliceStable(out, func(i, j int) bool { return out[i].CreatedAt.Before(out[j].CreatedAt) })
	return out, err
}

// DeleteAllowRule removes rule id of agentID; a miss is fault.ErrNotFound.
func (s *Store) DeleteAllowRule(agentID, id string) error {
	return s.update("delete allow rule", func(tx *bbolt.Tx) error {
		b := tx.Bucket(bucketAllowRules)
		if b.Get(allowKey(agentID, id)) == nil {
			return fault.NotFound("allow rule %q not found", id)
		}
		return b.Delete(allowKey(agentID, id))
	})
}

// DeleteAllowRulesOf removes every rule of agentID (an agent that is deleted).
func (s *Store) DeleteAllowRulesOf(agentID string) error {
	if agentID == "" {
		return fault.Invalid("delete allow rules: empty agent id")
	}
	return s.update("delete allow rules", func(tx *bbolt.Tx) error {
		return deletePrefix(tx.Bucket(bucketAllowRules), []byte(agentID+"\x00"))
	})
}

// Confirmation records one answer a person gave to a confirmation request of the tool guard:
// who (AccountID), when (At), what (the tool, a digest and a summary of its input, why it was
// asked) and the answer with any allow rules added.
type Confirmation struct {
	ID          string    `json:"id"`
	At          time.Time `json:"at"`
	AccountID   string    `json:"accountId"`
	AgentID     string    `json:"agentId,omitempty"`
	SessionID   string    `json:"sessionId"`
	ToolCallID  string    `json:"toolCallId"`
	Tool        string    `json:"tool"`
	InputSHA256 string    `json:"inputSha256"`
	Summary     string    `json:"summary"` // the command or paths, shortened
	Reason      string    `json:"reason,omitempty"`
	Confirmed   bool      `json:"confirmed"`
	Rules       []string  `json:"rules,omitempty"`
}

func confirmationKey(c Confirmation) []byte {
	return []byte(c.At.UTC().Format("20060102T150405.000000000") + "\x00" + c.ID)
}

// PutConfirmation saves c (ID and At are required).
func (s *Store) PutConfirmation(c Confirmation) error {
	if c.ID == "" || c.At.IsZero() {
		return fault.Invalid("a confirmation record needs an id and a time")
	}
	raw, err := json.Marshal(c)
	if err != nil {
		return fmt.Errorf("store: encode confirmation: %w", err)
	}
	return s.update("put confirmation", func(tx *bbolt.Tx) error {
		return tx.Bucket(bucketConfirmations).Put(confirmationKey(c), raw)
	})
}

// Confirmations returns up to limit records (≤ 0: all), newest first, for which keep (nil
// keeps all) is true.
func (s *Store) Confirmations(limit int, keep func(Confirmation) bool) ([]Confirmation, error) {
	out := []Confirmation{}
	err := s.view("list confirmations", func(tx *bbolt.Tx) error {
		c := tx.Bucket(bucketConfirmations).Cursor()
		for k, v := c.Last(); k != nil; k, v = c.Prev() {
			var r Confirmation
			if err := json.Unmarshal(v, &r); err != nil {
				return fmt.Errorf("store: confirmation %q: corrupt record: %w", k, err)
			}
			if keep != nil && !keep(r) {
				continue
			}
			out = append(out, r)
			if limit > 0 && len(out) >= limit {
				break
			}
		}
		return nil
	})
	return out, err
}

// SecuritySettings are what an administrator sets in Settings → Security (SPEC §3, §2.4).
// Empty fields mean the defaults of the packages that read them. The store keeps them as
// given; package security checks them.
type SecuritySettings struct {
	GuardLevel     string   `json:"guardLevel,omitempty"` // STRICT, SMART, AUTO, OFF ("" = AUTO)
	DeniedTools    []string `json:"deniedTools,omitempty"`
	ProtectedPaths []string `json:"protectedPaths,omitempty"` // host paths, next to the data directory
	// VMProtectedPaths are paths inside desktops, next to the driver's run directory.
	VMProtectedPaths []string `json:"vmProtectedPaths,omitempty"`
	// AccessPolicy maps tool names or patterns to allow, ask or deny.
	AccessPolicy map[string]string `json:"accessPolicy,omitempty"`
	// ModelEndpoints are the base URLs members may give their agents' own models.
	ModelEndpoints []ModelEndpoint `json:"modelEndpoints,omitempty"`
	// DesktopHostPorts are TCP ports of the execution node's host that desktops may reach
	// (everything else on the host is blocked).
	DesktopHostPorts []int `json:"desktopHostPorts,omitempty"`
	// HostSandbox are the host sandbox's settings per execution node ("local" is the
	// server's own host); a node not named has the defaults.
	HostSandbox map[string]HostSandbox `json:"hostSandbox,omitempty"`
	UpdatedAt   time.Time              `json:"updatedAt,omitzero"`
	UpdatedBy   string                 `json:"updatedBy,omitempty"`
}

// HostSandbox is how host tools are sandboxed on one execution node (issue 26). The zero
// value is the default: a sandbox required, network on, only the working directory (and the
// scratch directories) writable.
type HostSandbox struct {
	// AllowNone lets host tools run without an OS sandbox where the node has none (shown as
	// a warning with every command).
	AllowNone bool `json:"allowNone,omitempty"`
	// NetworkOff takes the network away from host commands.
	NetworkOff bool `json:"networkOff,omitempty"`
	// ReadWrite are further absolute paths host commands may write.
	ReadWrite []string `json:"readWrite,omitempty"`
	// Read are credential folders of the node's home (~/.kube, …) an administrator opened to
	// host commands for reading (an approved widening; Cubicle's data and the protected paths
	// never are).
	Read []string `json:"read,omitempty"`
}

// ModelEndpoint is an approved model base URL. AllowPrivate lets it resolve to loopback or
// private addresses (a model server in the local network).
type ModelEndpoint struct {
	BaseURL      string `json:"baseUrl"`
	AllowPrivate bool   `json:"allowPrivate,omitempty"`
}

var keySecurity = []byte("security")

// SecuritySettings returns the saved security settings (zero settings when none were saved).
func (s *Store) SecuritySettings() (SecuritySettings, error) {
	var m SecuritySettings
	err := s.view("get security settings", func(tx *bbolt.Tx) error {
		raw := tx.Bucket(bucketAppSettings).Get(keySecurity)
		if raw == nil {
			return nil
		}
		return json.Unmarshal(raw, &m)
	})
	return m, err
}

// PutSecuritySettings saves the security settings.
func (s *Store) PutSecuritySettings(m SecuritySettings) error {
	raw, err := json.Marshal(m)
	if err != nil {
		return fmt.Errorf("store: encode security settings: %w", err)
	}
	return s.update("put security settings", func(tx *bbolt.Tx) error {
		return tx.Bucket(bucketAppSettings).Put(keySecurity, raw)
	})
}

// SandboxRefusal is an access the host sandbox refused an agent's command (issue 26): where
// (Node, and Home, the runner user's home there), whose (AccountID, AgentID, SessionID), what
// (Path, Write or a read of a hidden path, Hidden the hidden path that covered it, Line the
// command's own report) and when (First, At the latest of Count).
type SandboxRefusal struct {
	ID        string    `json:"id"`
	Node      string    `json:"node"`
	Home      string    `json:"home,omitempty"`
	AccountID string    `json:"accountId"`
	AgentID   string    `json:"agentId,omitempty"`
	SessionID string    `json:"sessionId,omitempty"`
	Path      string    `json:"path"`
	Write     bool      `json:"write,omitempty"`
	Hidden    string    `json:"hidden,omitempty"`
	Line      string    `json:"line,omitempty"`
	First     time.Time `json:"first"`
	At        time.Time `json:"at"`
	Count     int       `json:"count"`
}

var keySandboxRefusals = []byte("sandbox_refusals")

// SandboxRefusals returns the recorded sandbox refusals, as UpdateSandboxRefusals left them.
func (s *Store) SandboxRefusals() ([]SandboxRefusal, error) {
	var out []SandboxRefusal
	err := s.view("list sandbox refusals", func(tx *bbolt.Tx) error {
		var err error
		out, err = sandboxRefusals(tx)
		return err
	})
	return out, err
}

func sandboxRefusals(tx *bbolt.Tx) ([]SandboxRefusal, error) {
	out := []SandboxRefusal{}
	raw := tx.Bucket(bucketAppSettings).Get(keySandboxRefusals)
	if raw == nil {
		return out, nil
	}
	if err := json.Unmarshal(raw, &out); err != nil {
		return nil, fmt.Errorf("store: sandbox refusals: corrupt record: %w", err)
	}
	return out, nil
}

// UpdateSandboxRefusals replaces the recorded sandbox refusals with what fn makes of them, in
// one transaction (an error from fn changes nothing).
func (s *Store) UpdateSandboxRefusals(fn func([]SandboxRefusal) ([]SandboxRefusal, error)) error {
	return s.update("update sandbox refusals", func(tx *bbolt.Tx) error {
		cur, err := sandboxRefusals(tx)
		if err != nil {
			return err
		}
		next, err := fn(cur)
		if err != nil {
			return err
		}
		raw, err := json.Marshal(next)
		if err != nil {
			return fmt.Errorf("store: encode sandbox refusals: %w", err)
		}
		return tx.Bucket(bucketAppSettings).Put(keySandboxRefusals, raw)
	})
}
