package apitoken

import (
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"cubicle/backend/auth"
	"cubicle/backend/fault"
	"cubicle/backend/store"
)

type agents map[string]string // agent id → account id

func (a agents) Get(accountID, id string) (store.Agent, error) {
	if a[id] != accountID {
		return store.Agent{}, fault.NotFound("agent %q not found", id)
	}
	return store.Agent{ID: id, AccountID: accountID}, nil
}

func newService(t *testing.T) (*Service, *store.Store, auth.Principal, auth.Principal) {
	st, err := store.Open(filepath.Join(t.TempDir(), "c.db"), store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	for _, a := range []store.Account{{ID: "adm", Username: "root", Role: store.RoleAdmin}, {ID: "mem", Username: "bob", Role: store.RoleMember}} {
		if err := st.CreateAccount(a); err != nil {
			t.Fatal(err)
		}
	}
	s := New(st, agents{"a1": "adm", "b1": "mem"})
	return s, st, auth.Principal{AccountID: "adm", Username: "root", Role: store.RoleAdmin}, auth.Principal{AccountID: "mem", Username: "bob", Role: store.RoleMember}
}

func TestCreateVerifyRevoke(t *testing.T) {
	s, st, admin, member := newService(t)
	tok, secret, err := s.Create(member, "laptop", []string{"b1"}, 0)
	if err != nil || !strings.HasPrefix(secret, Prefix) || tok.ExpiresAt != nil {
		t.Fatalf("%v %q %+v", err, secret, tok)
	}
	list, _ := st.APITokens()
	if len(list) != 1 || strings.Contains(list[0].Hash, secret) || list[0].Hash == "" {
		t.Fatalf("stored: %+v", list)
	}
	c, err := s.Verify(secret)
	if err != nil || c.AccountID != "mem" || c.TokenName != "laptop" || !c.Reaches("b1") || c.Reaches("a1") {
		t.Fatalf("%v %+v", err, c)
	}
	for _, bad := range []string{"", "nope", secret + "x", Prefix + tok.ID + "_00", strings.Replace(secret, tok.ID, "0000000000000000", 1)} {
		if _, err := s.Verify(bad); !errors.Is(err, fault.ErrUnauthenticated) {
			t.Fatalf("%q: %v", bad, err)
		}
	}
	// Another account's agent cannot be named; bad input changes nothing.
	for _, tc := range []struct {
		name   string
		agents []string
		days   int
	}{{"x", []string{"a1"}, 0}, {"", nil, 0}, {strings.Repeat("n", 65), nil, 0}, {"x", nil, -1}, {"x", nil, MaxExpiryDays + 1}} {
		if _, _, err := s.Create(member, tc.name, tc.agents, tc.days); !errors.Is(err, fault.ErrInvalid) {
			t.Fatalf("%+v: %v", tc, err)
		}
	}
	if l, _ := st.APITokens(); len(l) != 1 {
		t.Fatalf("bad input stored tokens: %d", len(l))
	}
	// Lists: one's own; everyone's for an admin only.
	if l, _ := s.List(admin, false); len(l) != 0 {
		t.Fatalf("admin's own: %+v", l)
	}
	if l, _ := s.List(admin, true); len(l) != 1 || l[0].Username != "bob" {
		t.Fatalf("admin's all: %+v", l)
	}
	if _, err := s.List(member, true); !errors.Is(err, fault.ErrForbidden) {
		t.Fatal(err)
	}
	// A member cannot revoke another's token; an admin can.
	_, asecret, _ := s.Create(admin, "admin's", nil, 1)
	atok, _ := s.Verify(asecret)
	if err := s.Revoke(member, atok.TokenID); !errors.Is(err, fault.ErrNotFound) {
		t.Fatal(err)
	}
	if err := s.Revoke(admin, tok.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Verify(secret); !errors.Is(err, fault.ErrUnauthenticated) {
		t.Fatalf("revoked: %v", err)
	}
	// Expiry.
	s.now = func() time.Time { return time.Now().Add(25 * time.Hour) }
	if _, err := s.Verify(asecret); !errors.Is(err, fault.ErrUnauthenticated) || !strings.Contains(err.Error(), "expired") {
		t.Fatalf("expired: %v", err)
	}
}
