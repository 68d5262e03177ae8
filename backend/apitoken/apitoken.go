// Package apitoken keeps personal API tokens: a person makes one (a name, optionally the agents
// it may reach and an expiry) for an agent outside Cubicle — Claude Code, Codex CLI, Cursor —
// that uses Cubicle's computers over MCP. The secret is shown once at creation; only its
// SHA-256 is stored. A token acts for its owner and never reaches further than the owner:
// the agents it names are checked against the owner's own on every call. Administrators see
// and revoke everyone's tokens.
package apitoken

import (
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"errors"
	"slices"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"cubicle/backend/auth"
	"cubicle/backend/fault"
	"cubicle/backend/store"
)

// Prefix starts every secret (so a leaked one is recognisable, e.g. by secret scanners).
const Prefix = "cbt_"

// MaxExpiryDays is the longest expiry a token may be given; MaxPerAccount the most tokens one
// account may hold.
const (
	MaxExpiryDays = 3650
	MaxPerAccount = 50
)

// Store keeps the tokens (the store implements it).
type Store interface {
	APITokens() ([]store.APIToken, error)
	UpdateAPITokens(fn func([]store.APIToken) ([]store.APIToken, error)) error
	Account(id string) (store.Account, error)
}

// Agents checks that an agent belongs to an account (profile.Service implements it).
type Agents interface {
	Get(accountID, id string) (store.Agent, error)
}

// Token is what a person sees of a token (never its secret or hash).
type Token struct {
	ID        string     `json:"id"`
	AccountID string     `json:"accountId"`
	Username  string     `json:"username,omitempty"`
	Name      string     `json:"name"`
	Agents    []string   `json:"agents"`
	CreatedAt time.Time  `json:"createdAt"`
	ExpiresAt *time.Time `json:"expiresAt,omitempty"`
	LastUsed  *time.Time `json:"lastUsed,omitempty"`
	Expired   bool       `json:"expired"`
}

// Caller is whom a verified secret acts for.
type Caller struct {
	TokenID   string
	TokenName string
	AccountID string
	Username  string
	Role      store.Role
	Agents    []string // empty: every agent of the account
}

// Reaches reports whether the token may reach agentID (its owner's agent is checked apart).
func (c Caller) Reaches(agentID string) bool {
	return len(c.Agents) == 0 || slices.Contains(c.Agents, agentID)
}

// Service manages the tokens. It is safe for concurrent use.
type Service struct {
	st     Store
	agents Agents
	now    func() time.Time

	mu   sync.Mutex
	used map[string]time.Time // last use not yet written (written at most once a minute)
}

// New returns a Service.
func New(st Store, agents Agents) *Service {
	return &Service{st: st, agents: agents, now: time.Now, used: map[string]time.Time{}}
}

// Create makes a token for p: name (1–64 characters), agents (ids of p's own agents; empty:
// all of them) and an expiry in days (0: never). It returns the token and its secret, which
// is never shown again.
func (s *Service) Create(p auth.Principal, name string, agents []string, expiresInDays int) (Token, string, error) {
	name = strings.TrimSpace(name)
	if name == "" || utf8.RuneCountInString(name) > 64 {
		return Token{}, "", fault.Invalid("give the token a name of 1–64 characters (e.g. \"Claude Code on my laptop\")")
	}
	if expiresInDays < 0 || expiresInDays > MaxExpiryDays {
		return Token{}, "", fault.Invalid("expiresInDays must be 0 (never) to %d", MaxExpiryDays)
	}
	seen := map[string]bool{}
	var ids []string
	for _, id := range agents {
		if seen[id] {
			continue
		}
		seen[id] = true
		if _, err := s.agents.Get(p.AccountID, id); err != nil {
			if errors.Is(err, fault.ErrNotFound) {
				return Token{}, "", fault.Invalid("agent %q is not one of your agents", id)
			}
			return Token{}, "", err
		}
		ids = append(ids, id)
	}
	raw := make([]byte, 32)
	rand.Read(raw)
	idb := make([]byte, 8)
	rand.Read(idb)
	id := hex.EncodeToString(idb)
	secret := Prefix + id + "_" + hex.EncodeToString(raw)
	now := s.now().UTC()
	rec := store.APIToken{ID: id, AccountID: p.AccountID, Name: name, Agents: ids, Hash: hash(secret), CreatedAt: now}
	if expiresInDays > 0 {
		rec.ExpiresAt = now.Add(time.Duration(expiresInDays) * 24 * time.Hour)
	}
	err := s.st.UpdateAPITokens(func(list []store.APIToken) ([]store.APIToken, error) {
		n := 0
		for _, t := range list {
			if t.AccountID == p.AccountID {
				n++
			}
		}
		if n >= MaxPerAccount {
			return nil, fault.Conflict("you have %d API tokens, the most one account may hold; delete one you no longer use", n)
		}
		return append(list, rec), nil
	})
	if err != nil {
		return Token{}, "", err
	}
	return s.view(rec, p.Username), secret, nil
}

// List returns p's tokens, or everyone's when all is set and p is an administrator.
func (s *Service) List(p auth.Principal, all bool) ([]Token, error) {
	if all && !p.Admin() {
		return nil, fault.Forbidden("only administrators see everyone's API tokens")
	}
	list, err := s.st.APITokens()
	if err != nil {
		return nil, err
	}
	out := []Token{}
	names := map[string]string{}
	for _, t := range list {
		if t.AccountID != p.AccountID && !all {
			continue
		}
		if _, ok := names[t.AccountID]; !ok {
			if a, err := s.st.Account(t.AccountID); err == nil {
				names[t.AccountID] = a.Username
			}
		}
		out = append(out, s.view(t, names[t.AccountID]))
	}
	return out, nil
}

// Revoke deletes token id: the owner's own, or anyone's for an administrator. It answers
// fault.ErrNotFound for a token p may not see.
func (s *Service) Revoke(p auth.Principal, id string) error {
	return s.st.UpdateAPITokens(func(list []store.APIToken) ([]store.APIToken, error) {
		for i, t := range list {
			if t.ID == id && (t.AccountID == p.AccountID || p.Admin()) {
				return slices.Delete(list, i, i+1), nil
			}
		}
		return nil, fault.NotFound("API token %q not found", id)
	})
}

// RevokeAccount deletes every token of an account (when it is deleted).
func (s *Service) RevokeAccount(accountID string) error {
	return s.st.UpdateAPITokens(func(list []store.APIToken) ([]store.APIToken, error) {
		return slices.DeleteFunc(list, func(t store.APIToken) bool { return t.AccountID == accountID }), nil
	})
}

// Verify returns whom secret acts for. An unknown, revoked or expired secret, or one whose
// owner no longer exists, is fault.ErrUnauthenticated with a message saying which.
func (s *Service) Verify(secret string) (Caller, error) {
	rest, ok := strings.CutPrefix(secret, Prefix)
	id, _, ok2 := strings.Cut(rest, "_")
	if !ok || !ok2 || id == "" {
		return Caller{}, fault.New(fault.ErrUnauthenticated, "this is not a Cubicle API token (they start with %q); make one in Settings → Account → API tokens", Prefix)
	}
	list, err := s.st.APITokens()
	if err != nil {
		return Caller{}, err
	}
	want := hash(secret)
	for _, t := range list {
		if t.ID != id {
			continue
		}
		if subtle.ConstantTimeCompare([]byte(t.Hash), []byte(want)) != 1 {
			break
		}
		if !t.ExpiresAt.IsZero() && !s.now().Before(t.ExpiresAt) {
			return Caller{}, fault.New(fault.ErrUnauthenticated, "API token %q expired on %s; make a new one in Settings → Account → API tokens", t.Name, t.ExpiresAt.Format(time.DateOnly))
		}
		a, err := s.st.Account(t.AccountID)
		if err != nil {
			return Caller{}, fault.New(fault.ErrUnauthenticated, "the account of API token %q no longer exists", t.Name)
		}
		s.touch(t.ID)
		return Caller{TokenID: t.ID, TokenName: t.Name, AccountID: t.AccountID, Username: a.Username, Role: a.Role,
			Agents: slices.Clone(t.Agents)}, nil
	}
	return Caller{}, fault.New(fault.ErrUnauthenticated, "unknown or revoked API token; make a new one in Settings → Account → API tokens")
}

// touch records a use of token id, writing it at most once a minute per token.
func (s *Service) touch(id string) {
	now := s.now().UTC()
	s.mu.Lock()
	last, ok := s.used[id]
	if ok && now.Sub(last) < time.Minute {
		s.mu.Unlock()
		return
	}
	s.used[id] = now
	s.mu.Unlock()
	_ = s.st.UpdateAPITokens(func(list []store.APIToken) ([]store.APIToken, error) {
		for i := range list {
			if list[i].ID == id {
				list[i].LastUsed = now
			}
		}
		return list, nil
	})
}

func (s *Service) view(t store.APIToken, username string) Token {
	v := Token{ID: t.ID, AccountID: t.AccountID, Username: username, Name: t.Name, Agents: t.Agents, CreatedAt: t.CreatedAt}
	if v.Agents == nil {
		v.Agents = []string{}
	}
	if !t.ExpiresAt.IsZero() {
		e := t.ExpiresAt
		v.ExpiresAt = &e
		v.Expired = !s.now().Before(e)
	}
	if !t.LastUsed.IsZero() {
		u := t.LastUsed
		v.LastUsed = &u
	}
	return v
}

func hash(secret string) string {
	sum := sha256.Sum256([]byte(secret))
	return hex.EncodeToString(sum[:])
}
