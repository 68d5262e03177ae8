package auth

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"cubicle/backend/fault"
	"cubicle/backend/store"

	"golang.org/x/crypto/bcrypt"
)

func newService(t *testing.T, now func() time.Time) (*Service, *store.Store) {
	t.Helper()
	st, err := store.Open(filepath.Join(t.TempDir(), "c.db"), store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	s, err := New(Config{Accounts: st, Key: []byte(strings.Repeat("s", 32)), TTL: time.Hour, Now: now})
	if err != nil {
		t.Fatal(err)
	}
	return s, st
}

func TestBootstrapAndLogin(t *testing.T) {
	s, st := newService(t, nil)
	r, err := s.EnsureAdmin(Bootstrap{})
	if err != nil {
		t.Fatal(err)
	}
	if !r.Created || !r.Generated || r.Username != "admin" || len(r.Password) < 16 {
		t.Fatalf("bootstrap = %+v", r)
	}
	acct, err := st.AccountByUsername("admin")
	if err != nil {
		t.Fatal(err)
	}
	if acct.PasswordHash == r.Password || !strings.HasPrefix(acct.PasswordHash, "$2") {
		t.Fatalf("password not stored as a bcrypt hash: %q", acct.PasswordHash)
	}
	// A second start creates nothing and shows no password.
	r2, err := s.EnsureAdmin(Bootstrap{Username: "other", Password: "whatever-123"})
	if err != nil || r2.Created || r2.Password != "" {
		t.Fatalf("second bootstrap = %+v, %v", r2, err)
	}
	if accts, _ := st.Accounts(); len(accts) != 1 {
		t.Fatalf("accounts = %d", len(accts))
	}
	p, err := s.Login("admin", r.Password, "test")
	if err != nil {
		t.Fatal(err)
	}
	got, err := s.Authenticate(p.Token)
	if err != nil || got.AccountID != acct.ID || !got.Admin() {
		t.Fatalf("authenticate = %+v, %v", got, err)
	}
	if _, err := s.Login("admin", r.Password+"x", "test"); !errors.Is(err, fault.ErrUnauthenticated) {
		t.Fatalf("wrong password: %v", err)
	}
	if _, err := s.Login("nobody", r.Password, "test"); !errors.Is(err, fault.ErrUnauthenticated) {
		t.Fatalf("unknown user: %v", err)
	}
}

func TestBootstrapFromEnvironmentValues(t *testing.T) {
	s, _ := newService(t, nil)
	if _, err := s.EnsureAdmin(Bootstrap{Username: "root", Password: "short"}); !errors.Is(err, fault.ErrInvalid) {
		t.Fatalf("short password accepted: %v", err)
	}
	r, err := s.EnsureAdmin(Bootstrap{Username: "root", Password: "long enough pw"})
	if err != nil || r.Generated || r.Password != "" || r.Username != "root" {
		t.Fatalf("bootstrap = %+v, %v", r, err)
	}
	if _, err := s.Login("root", "long enough pw", "test"); err != nil {
		t.Fatal(err)
	}
}

func TestTokens(t *testing.T) {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	clock := func() time.Time { return now }
	s, _ := newService(t, clock)
	if _, err := s.EnsureAdmin(Bootstrap{Password: "password-1"}); err != nil {
		t.Fatal(err)
	}
	p, err := s.Login("admin", "password-1", "test")
	if err != nil {
		t.Fatal(err)
	}
	other, _ := New(Config{Accounts: s.accounts, Key: []byte(strings.Repeat("x", 32)), Now: clock})
	parts := strings.Split(p.Token, ".")
	tampered := parts[0] + "." + parts[1] + "A." + parts[2]
	tests := []struct {
		name  string
		svc   *Service
		token string
		ok    bool
	}{
		{"valid", s, p.Token, true},
		{"empty", s, "", false},
		{"garbage", s, "v1.abc.def", false},
		{"tampered payload", s, tampered, false},
		{"other key", other, p.Token, false},
		{"wrong version", s, "v2" + p.Token[2:], false},
		{"huge", s, "v1." + strings.Repeat("a", 5000), false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := tt.svc.Authenticate(tt.token)
			if (err == nil) != tt.ok {
				t.Fatalf("Authenticate = %v, want ok=%v", err, tt.ok)
			}
			if err != nil && !errors.Is(err, fault.ErrUnauthenticated) {
				t.Fatalf("class = %v", fault.Class(err))
			}
		})
	}
	now = now.Add(59 * time.Minute)
	if _, err := s.Authenticate(p.Token); err != nil {
		t.Fatalf("expired early: %v", err)
	}
	now = now.Add(2 * time.Minute)
	if _, err := s.Authenticate(p.Token); !errors.Is(err, fault.ErrUnauthenticated) {
		t.Fatalf("expired token accepted: %v", err)
	}
}

func TestRevokeAndDeletedAccount(t *testing.T) {
	s, st := newService(t, nil)
	if _, err := s.EnsureAdmin(Bootstrap{Password: "password-1"}); err != nil {
		t.Fatal(err)
	}
	a, _ := s.Login("admin", "password-1", "test")
	b, _ := s.Login("admin", "password-1", "test")
	if err := s.Revoke(a.Token); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Authenticate(a.Token); err == nil {
		t.Fatal("revoked token accepted")
	}
	if _, err := s.Authenticate(b.Token); err != nil {
		t.Fatalf("revoking one session ended another: %v", err)
	}
	hash, _ := HashPassword("password-2")
	if err := st.CreateAccount(store.Account{ID: "u", Username: "u", PasswordHash: hash, Role: store.RoleMember}); err != nil {
		t.Fatal(err)
	}
	u, err := s.Issue(store.Account{ID: "ghost", Username: "ghost", Role: store.RoleAdmin})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Authenticate(u.Token); !errors.Is(err, fault.ErrUnauthenticated) {
		t.Fatalf("token of a missing account accepted: %v", err)
	}
}

func TestLoadOrCreateKey(t *testing.T) {
	path := filepath.Join(t.TempDir(), "secrets", "session.key")
	k1, err := LoadOrCreateKey(path)
	if err != nil {
		t.Fatal(err)
	}
	st, err := os.Stat(path)
	if err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("key file mode = %v, %v", st.Mode(), err)
	}
	if dst, _ := os.Stat(filepath.Dir(path)); dst.Mode().Perm() != 0o700 {
		t.Fatalf("secrets dir mode = %v", dst.Mode())
	}
	k2, err := LoadOrCreateKey(path)
	if err != nil || string(k1) != string(k2) || len(k1) != 32 {
		t.Fatalf("key not stable: %v", err)
	}
	os.WriteFile(path, []byte("short"), 0o600)
	if _, err := LoadOrCreateKey(path); !errors.Is(err, fault.ErrConflict) {
		t.Fatalf("damaged key: %v", err)
	}
}

// TestDummyHash: the written-out hash an unknown username is compared against is a bcrypt
// hash at the cost real passwords get (so both take the same time) of its phrase.
func TestDummyHash(t *testing.T) {
	cost, err := bcrypt.Cost(dummyHash)
	if err != nil || cost != hashCost {
		t.Fatalf("dummy hash cost %d (%v), want %d", cost, err, hashCost)
	}
	h, err := HashPassword("a password of ours")
	if err != nil {
		t.Fatal(err)
	}
	if cost, err := bcrypt.Cost([]byte(h)); err != nil || cost != hashCost {
		t.Fatalf("a new hash's cost %d (%v), want %d", cost, err, hashCost)
	}
	if err := bcrypt.CompareHashAndPassword(dummyHash, []byte("cubicle-timing-equaliser")); err != nil {
		t.Fatalf("dummy hash is not of its phrase: %v", err)
	}
}
