package auth

import (
	"errors"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/crypto/bcrypt"

	"cubicle/backend/fault"
	"cubicle/backend/store"
)

const strong = "Correct-Horse-42-battery"

func admin(t *testing.T, s *Service) Principal {
	t.Helper()
	if _, err := s.EnsureAdmin(Bootstrap{Password: strong}); err != nil {
		t.Fatal(err)
	}
	p, err := s.Login("admin", strong, "test")
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func TestCheckPassword(t *testing.T) {
	weak := []string{"", "short", "abcdefghijk", "aaaaaaaaaaaaaaaaaa", "Password123!", "P@ssw0rd-2024", "alice-Secret-9!", "123456789012",
		"qwertyuiop12", "abcdefgh1234", "Cubicle-admin-1", "zzzzzzzzzzzzAAAA1!", strings.Repeat("Ab1!", 20)}
	for _, pw := range weak {
		if err := CheckPassword(pw, "alice"); !errors.Is(err, fault.ErrInvalid) {
			t.Errorf("CheckPassword(%q) = %v, want a refusal", pw, err)
		}
	}
	ok := []string{strong, "e2e-Passw0rd-k3j9x8q2", "tangerine orbit lantern velvet", "Vq7#mL2$xR9!", "blue-Otter-91-hum"}
	for _, pw := range ok {
		if err := CheckPassword(pw, "alice"); err != nil {
			t.Errorf("CheckPassword(%q) = %v", pw, err)
		}
	}
}

// Accounts: an admin creates, changes, disables and deletes them; the last admin and one's own
// account are kept; disabling or a new password ends the account's sessions.
func TestAccountManagement(t *testing.T) {
	s, st := newService(t, nil)
	root := admin(t, s)
	bob, err := s.CreateAccount(root, NewAccount{Username: "bob", Password: "Otter-is-9-cool!", Role: store.RoleMember})
	if err != nil {
		t.Fatal(err)
	}
	if !bob.PasswordChosen || bob.Role != store.RoleMember || bob.CreatedBy != root.AccountID {
		t.Fatalf("created %+v", bob)
	}
	for _, bad := range []NewAccount{
		{Username: "Bob", Password: "Other-pass-77!"},               // taken (any case)
		{Username: "carol", Password: "weak"},                       // weak password
		{Username: "carol", Password: "Carol-x-99-y", Role: "root"}, // unknown role
		{Username: "ca rol", Password: "Carol-x-99-y"},              // space
		{Username: "", Password: "Carol-x-99-y"},
	} {
		if _, err := s.CreateAccount(root, bad); err == nil {
			t.Errorf("CreateAccount(%+v) accepted", bad)
		}
	}
	bp, err := s.Login("bob", "Otter-is-9-cool!", "test")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.CreateAccount(bp, NewAccount{Username: "eve", Password: "Eve-is-9-cool!"}); !errors.Is(err, fault.ErrForbidden) {
		t.Fatalf("a member created an account: %v", err)
	}
	// Disabling ends bob's sessions and refuses his logins.
	yes := true
	if _, err := s.UpdateAccount(root, bob.ID, AccountChange{Disabled: &yes}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Authenticate(bp.Token); !errors.Is(err, fault.ErrUnauthenticated) {
		t.Fatalf("a disabled account's session still works: %v", err)
	}
	if _, err := s.Login("bob", "Otter-is-9-cool!", "test"); !errors.Is(err, fault.ErrForbidden) {
		t.Fatalf("a disabled account logged in: %v", err)
	}
	no := false
	if _, err := s.UpdateAccount(root, bob.ID, AccountChange{Disabled: &no}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Authenticate(bp.Token); err == nil {
		t.Fatal("re-enabling brought back an ended session")
	}
	// An admin's new password for bob ends his new session too.
	bp, _ = s.Login("bob", "Otter-is-9-cool!", "test")
	pw := "Fresh-Pass-for-him-1"
	if _, err := s.UpdateAccount(root, bob.ID, AccountChange{Password: &pw}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Authenticate(bp.Token); err == nil {
		t.Fatal("a password reset left the old session")
	}
	// The last enabled admin cannot be disabled, demoted or deleted, and nobody disables or
	// deletes themselves.
	member := store.RoleMember
	if _, err := s.UpdateAccount(root, root.AccountID, AccountChange{Role: &member}); !errors.Is(err, fault.ErrConflict) {
		t.Fatalf("self-demotion: %v", err)
	}
	if err := s.DeleteAccount(root, root.AccountID); !errors.Is(err, fault.ErrConflict) {
		t.Fatalf("self-deletion: %v", err)
	}
	adminRole := store.RoleAdmin
	if _, err := s.UpdateAccount(root, bob.ID, AccountChange{Role: &adminRole}); err != nil {
		t.Fatal(err)
	}
	bp, _ = s.Login("bob", pw, "test")
	if err := s.DeleteAccount(bp, root.AccountID); err != nil {
		t.Fatalf("another admin deletes the first: %v", err)
	}
	if err := s.DeleteAccount(bp, bob.ID); !errors.Is(err, fault.ErrConflict) {
		t.Fatalf("the last admin deleted themselves: %v", err)
	}
	if _, err := st.Account(root.AccountID); !errors.Is(err, fault.ErrNotFound) {
		t.Fatalf("deleted account still there: %v", err)
	}
	if _, err := s.Authenticate(root.Token); !errors.Is(err, fault.ErrUnauthenticated) {
		t.Fatalf("a deleted account's session works: %v", err)
	}
}

// Logging out and a password change end sessions for good: a new Service over the same store
// (a restart) does not bring them back.
func TestSessionEndsSurviveARestart(t *testing.T) {
	path := filepath.Join(t.TempDir(), "c.db")
	key := []byte(strings.Repeat("k", 32))
	open := func() (*Service, *store.Store) {
		st, err := store.Open(path, store.Options{})
		if err != nil {
			t.Fatal(err)
		}
		s, err := New(Config{Accounts: st, Key: key})
		if err != nil {
			t.Fatal(err)
		}
		return s, st
	}
	s, st := open()
	root := admin(t, s)
	other, _ := s.Login("admin", strong, "test")
	if err := s.Revoke(root.Token); err != nil {
		t.Fatal(err)
	}
	st.Close()
	s, st = open()
	if _, err := s.Authenticate(root.Token); !errors.Is(err, fault.ErrUnauthenticated) {
		t.Fatalf("a logged-out session came back after a restart: %v", err)
	}
	if _, err := s.Authenticate(other.Token); err != nil {
		t.Fatalf("logging out one session ended another: %v", err)
	}
	next, err := s.ChangePassword(other, strong, "Another-strong-one-7", "test")
	if err != nil {
		t.Fatal(err)
	}
	st.Close()
	s, st = open()
	defer st.Close()
	if _, err := s.Authenticate(other.Token); !errors.Is(err, fault.ErrUnauthenticated) {
		t.Fatalf("a session from before the password change came back after a restart: %v", err)
	}
	if _, err := s.Authenticate(next.Token); err != nil {
		t.Fatalf("the session given with the new password: %v", err)
	}
	if _, err := s.ChangePassword(next, "wrong-current-pw", "Yet-another-one-8", "test"); !errors.Is(err, fault.ErrInvalid) {
		t.Fatalf("a wrong current password was accepted: %v", err)
	}
	if _, err := s.ChangePassword(next, "Another-strong-one-7", "weak", "test"); !errors.Is(err, fault.ErrInvalid) {
		t.Fatalf("a weak new password was accepted: %v", err)
	}
}

// The login limit holds under parallel attempts: attempts are counted before the password is
// checked, so many guesses at once get at most the limit through to bcrypt — per account
// (from many clients) and per client (against many accounts).
func TestLoginLimitUnderParallelAttempts(t *testing.T) {
	s, _ := newService(t, nil)
	admin(t, s)
	var checked atomic.Int32
	s.compare = func(hash, pw []byte) error {
		checked.Add(1)
		time.Sleep(5 * time.Millisecond) // bcrypt is slow; let the attempts overlap
		return bcrypt.CompareHashAndPassword(hash, pw)
	}
	attempt := func(user, client string, n int) (tooMany int) {
		var wg sync.WaitGroup
		var mu sync.Mutex
		for i := range n {
			wg.Add(1)
			go func() {
				defer wg.Done()
				_, err := s.Login(user, "guess-"+string(rune('a'+i%26)), client+string(rune('a'+i%7)))
				if errors.Is(err, fault.ErrTooMany) {
					mu.Lock()
					tooMany++
					mu.Unlock()
				}
			}()
		}
		wg.Wait()
		return tooMany
	}
	// One account, guessed from 7 clients at once.
	limited := attempt("admin", "10.0.0.", 60)
	if got := int(checked.Load()); got > DefaultLoginLimits.PerAccount {
		t.Fatalf("%d passwords were checked for one account, the limit is %d", got, DefaultLoginLimits.PerAccount)
	}
	if limited < 60-DefaultLoginLimits.PerAccount {
		t.Fatalf("only %d of 60 parallel attempts were refused", limited)
	}
	// The right password is refused too while the account is limited.
	if _, err := s.Login("admin", strong, "192.0.2.9"); !errors.Is(err, fault.ErrTooMany) {
		t.Fatalf("login during the lock: %v", err)
	}
	// One client, against many accounts.
	checked.Store(0)
	var wg sync.WaitGroup
	for i := range 50 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s.Login("user"+string(rune('a'+i%26))+string(rune('a'+i/26)), "guess", "203.0.113.7")
		}()
	}
	wg.Wait()
	if got := int(checked.Load()); got > DefaultLoginLimits.PerClient {
		t.Fatalf("%d passwords were checked for one client, the limit is %d", got, DefaultLoginLimits.PerClient)
	}
}

// The first-start generated password never faces a network, also when the data directory was
// first started on loopback; a strong chosen password does.
func TestNetworkReady(t *testing.T) {
	s, _ := newService(t, nil)
	if err := s.NetworkReady(); !errors.Is(err, fault.ErrForbidden) {
		t.Fatalf("no admin: %v", err)
	}
	r, err := s.EnsureAdmin(Bootstrap{})
	if err != nil || !r.Generated {
		t.Fatal(r, err)
	}
	if err := s.NetworkReady(); !errors.Is(err, fault.ErrForbidden) || !strings.Contains(err.Error(), "reset-password") {
		t.Fatalf("generated password: %v", err)
	}
	if _, err := s.ResetPassword("admin", "weak"); !errors.Is(err, fault.ErrInvalid) {
		t.Fatalf("weak reset: %v", err)
	}
	if _, err := s.ResetPassword("admin", strong); err != nil {
		t.Fatal(err)
	}
	if err := s.NetworkReady(); err != nil {
		t.Fatalf("after a chosen password: %v", err)
	}
	// A weak password given on first start works on loopback but is not "chosen".
	s2, _ := newService(t, nil)
	if _, err := s2.EnsureAdmin(Bootstrap{Password: "longenough"}); err != nil {
		t.Fatal(err)
	}
	if err := s2.NetworkReady(); !errors.Is(err, fault.ErrForbidden) {
		t.Fatalf("weak first-start password: %v", err)
	}
}
