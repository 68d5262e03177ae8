package auth

import (
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/crypto/bcrypt"

	"cubicle/backend/fault"
)

// TestGuessingGetsExpensiveButTheOwnerGetsIn: wrong guesses at an account from one client
// wait longer and longer (1 s, 2 s, 4 s …); guesses from many clients at once stop at the
// account's limit for unknown clients — and through all of it the owner's known device (one
// that logged in before and holds its device token) logs in at once. Before, ten wrong
// guesses locked the account for everyone for five minutes.
func TestGuessingGetsExpensiveButTheOwnerGetsIn(t *testing.T) {
	var mu sync.Mutex
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	advance := func(d time.Duration) { mu.Lock(); now = now.Add(d); mu.Unlock() }
	s, _ := newService(t, clock)
	admin(t, s)
	var checked atomic.Int32
	s.compare = func(hash, pw []byte) error { checked.Add(1); return bcrypt.CompareHashAndPassword(hash, pw) }

	// The owner logged in from their laptop once and kept its device token.
	if _, err := s.LoginFrom("admin", strong, "192.0.2.10", ""); err != nil {
		t.Fatal(err)
	}
	device, err := s.DeviceToken("admin")
	if err != nil {
		t.Fatal(err)
	}

	// A stranger guesses from one address: three guesses, then each waits twice as long.
	var waits []time.Duration
	for i := range 12 {
		_, err := s.LoginFrom("admin", "wrong guess", "203.0.113.9", "")
		if errors.Is(err, fault.ErrTooMany) {
			w := RetryAfter(err)
			if w <= 0 {
				t.Fatalf("guess %d refused without a wait", i)
			}
			// Asking again at once is refused without a password check.
			before := checked.Load()
			if _, err := s.LoginFrom("admin", "wrong guess", "203.0.113.9", ""); !errors.Is(err, fault.ErrTooMany) || checked.Load() != before {
				t.Fatalf("a guess during the wait was checked: %v", err)
			}
			waits = append(waits, w)
			advance(w)
			continue
		}
		if !errors.Is(err, fault.ErrUnauthenticated) {
			t.Fatalf("guess %d: %v", i, err)
		}
	}
	if len(waits) < 5 {
		t.Fatalf("12 guesses waited only %d times: %v", len(waits), waits)
	}
	for i := 1; i < len(waits); i++ {
		if waits[i] < 2*waits[i-1]-time.Second {
			t.Fatalf("the waits do not grow: %v", waits)
		}
	}
	// The owner's known device gets in at once, from any address.
	if _, err := s.LoginFrom("admin", strong, "198.51.100.20", device); err != nil {
		t.Fatalf("the owner's known device after a stranger's guesses: %v", err)
	}

	// Many addresses at once: the account stops taking guesses from unknown clients after
	// its limit; the known device still gets in; a forged or another account's token does not.
	checked.Store(0)
	var wg sync.WaitGroup
	for i := range 60 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s.LoginFrom("admin", "guess", "10.9.0."+string(rune('a'+i)), "")
		}()
	}
	wg.Wait()
	if got := int(checked.Load()); got > DefaultLoginLimits.PerAccount {
		t.Fatalf("%d guesses from many addresses were checked; the limit is %d", got, DefaultLoginLimits.PerAccount)
	}
	if _, err := s.LoginFrom("admin", strong, "10.9.0.z", ""); !errors.Is(err, fault.ErrTooMany) {
		t.Fatalf("an unknown client during a many-address attack: %v", err)
	}
	if _, err := s.LoginFrom("admin", strong, "10.9.0.z", device); err != nil {
		t.Fatalf("the owner's known device during a many-address attack: %v", err)
	}
	other, _ := s.DeviceToken("someone-else")
	for _, bad := range []string{device[:len(device)-2] + "xx", other, "d1.x.y.z", "garbage"} {
		if _, err := s.LoginFrom("admin", strong, "10.9.0.z", bad); !errors.Is(err, fault.ErrTooMany) {
			t.Fatalf("device token %q counted as the owner's: %v", bad, err)
		}
	}
	// The device token is no session.
	if _, err := s.Authenticate(device); !errors.Is(err, fault.ErrUnauthenticated) {
		t.Fatalf("a device token authenticated: %v", err)
	}
}
