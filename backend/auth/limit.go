package auth

import (
	"errors"
	"math"
	"strings"
	"sync"
	"time"

	"cubicle/backend/fault"
)

// LoginLimits make guessing passwords expensive without letting a stranger lock the owner
// out. Attempts are counted from the moment they start (before the password is checked)
// until they end, and a failure keeps counting for a while:
//
//   - one account from one client (a network address, or a known device): after PerPair
//     failures every further attempt waits, and the wait doubles with each failure
//     (1 s, 2 s, 4 s … up to MaxDelay);
//   - one client over all accounts: PerClient failures in Window, then it waits;
//   - one account from clients it never logged in from, together: PerAccount failures in
//     Window, then those clients wait (many addresses guessing at once).
//
// A known device — a client that logged in to the account before and sends the device
// cookie it was given then (see Service.DeviceToken) — is limited by its own pair only: no
// one else's guesses lock it out.
type LoginLimits struct {
	// PerAccount is how many failures clients unknown to one account may have counted
	// together (default 10).
	PerAccount int
	// PerClient is how many failures one network address may have counted (default 20).
	PerClient int
	// PerPair is how many failures one account may have from one client before each further
	// attempt waits (default 3).
	PerPair int
	// Window is how long a failure counts against the account and the client (default 5
	// minutes); against its pair it counts for PairWindow (default 1 hour).
	Window, PairWindow time.Duration
	// BaseDelay is the first wait of a pair (default 1 s); MaxDelay the longest (default 15
	// minutes).
	BaseDelay, MaxDelay time.Duration
}

// DefaultLoginLimits are the limits of a Service whose Config leaves them zero.
var DefaultLoginLimits = LoginLimits{PerAccount: 10, PerClient: 20, PerPair: 3, Window: 5 * time.Minute,
	PairWindow: time.Hour, BaseDelay: time.Second, MaxDelay: 15 * time.Minute}

// limiter counts login attempts. Counting happens before the (slow) password check, so any
// number of parallel attempts gets at most the limits through.
type limiter struct {
	lim LoginLimits
	now func() time.Time

	mu      sync.Mutex
	account map[string]*attempts // unknown clients' attempts by account; guarded by mu
	client  map[string]*attempts // by network address; guarded by mu
	pair    map[string]*attempts // by account and client (address or device); guarded by mu
}

// attempts of one key: how many run now and when the recent ones failed.
type attempts struct {
	running int
	fails   []time.Time
}

func newLimiter(lim LoginLimits, now func() time.Time) *limiter {
	d := DefaultLoginLimits
	pick := func(v *int, def int) {
		if *v <= 0 {
			*v = def
		}
	}
	pickD := func(v *time.Duration, def time.Duration) {
		if *v <= 0 {
			*v = def
		}
	}
	pick(&lim.PerAccount, d.PerAccount)
	pick(&lim.PerClient, d.PerClient)
	pick(&lim.PerPair, d.PerPair)
	pickD(&lim.Window, d.Window)
	pickD(&lim.PairWindow, d.PairWindow)
	pickD(&lim.BaseDelay, d.BaseDelay)
	pickD(&lim.MaxDelay, d.MaxDelay)
	return &limiter{lim: lim, now: now, account: map[string]*attempts{}, client: map[string]*attempts{}, pair: map[string]*attempts{}}
}

// count returns the attempts of key counted now (dropping failures older than window).
func count(m map[string]*attempts, key string, now time.Time, window time.Duration) *attempts {
	a := m[key]
	if a == nil {
		return &attempts{}
	}
	kept := a.fails[:0]
	for _, t := range a.fails {
		if now.Sub(t) < window {
			kept = append(kept, t)
		}
	}
	a.fails = kept
	if a.running == 0 && len(a.fails) == 0 {
		delete(m, key)
	}
	return a
}

func (a *attempts) n() int { return a.running + len(a.fails) }

func get(m map[string]*attempts, key string) *attempts {
	a := m[key]
	if a == nil {
		a = &attempts{}
		m[key] = a
	}
	return a
}

// windowWait is how long a key with a counted attempts must still wait at now, given limit
// attempts before it waits and the failures' window (for the oldest failure to leave it).
func (l *limiter) windowWait(a *attempts, limit int, window time.Duration, now time.Time) time.Duration {
	if a.n() < limit {
		return 0
	}
	if len(a.fails) == 0 {
		return time.Second // only attempts in flight: ask again shortly
	}
	return max(a.fails[0].Add(window).Sub(now), time.Second)
}

// pairWait is the growing delay of one account from one client.
func (l *limiter) pairWait(a *attempts, now time.Time) time.Duration {
	over := a.n() - l.lim.PerPair
	if over < 0 {
		return 0
	}
	if len(a.fails) == 0 {
		return time.Second
	}
	d := l.lim.MaxDelay
	if over < 30 {
		d = min(time.Duration(float64(l.lim.BaseDelay)*math.Pow(2, float64(over))), l.lim.MaxDelay)
	}
	return a.fails[len(a.fails)-1].Add(d).Sub(now)
}

// begin counts an attempt for username from client (its network address) or, when device is
// not empty, from that known device of the account; or refuses it with a fault.ErrTooMany
// error that says how long to wait (RetryAfter). done must be called once with the outcome.
func (l *limiter) begin(username, client, device string) (done func(ok bool), err error) {
	acct := strings.ToLower(username)
	pairKey := acct + "\x00addr:" + client
	if device != "" {
		pairKey = acct + "\x00device:" + device
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	now := l.now()
	pair := count(l.pair, pairKey, now, l.lim.PairWindow)
	wait := l.pairWait(pair, now)
	if device == "" {
		wait = max(wait,
			l.windowWait(count(l.client, client, now, l.lim.Window), l.lim.PerClient, l.lim.Window, now),
			l.windowWait(count(l.account, acct, now, l.lim.Window), l.lim.PerAccount, l.lim.Window, now))
	}
	if wait > 0 {
		return nil, &limitErr{error: fault.New(fault.ErrTooMany,
			"too many failed logins; try again in %s (a device that logged in to this account before is not held up by others' guesses)",
			wait.Round(time.Second)), retry: wait}
	}
	keys := []struct {
		m   map[string]*attempts
		key string
	}{{l.pair, pairKey}}
	if device == "" {
		keys = append(keys, struct {
			m   map[string]*attempts
			key string
		}{l.client, client}, struct {
			m   map[string]*attempts
			key string
		}{l.account, acct})
	}
	for _, k := range keys {
		get(k.m, k.key).running++
	}
	var once sync.Once
	return func(ok bool) {
		once.Do(func() {
			l.mu.Lock()
			defer l.mu.Unlock()
			t := l.now()
			for _, k := range keys {
				a := get(k.m, k.key)
				a.running--
				if !ok {
					a.fails = append(a.fails, t)
				} else if k.key == pairKey {
					a.fails = nil // the right password from this client: its own slate is clean
				}
				count(k.m, k.key, t, l.lim.PairWindow)
			}
		})
	}, nil
}

// limitErr is a refused login attempt and how long to wait.
type limitErr struct {
	error
	retry time.Duration
}

func (e *limitErr) Unwrap() error { return e.error }

// RetryAfter is how long a login refused by the limits (fault.ErrTooMany) should wait; 0 for
// any other error.
func RetryAfter(err error) time.Duration {
	var le *limitErr
	if errors.As(err, &le) {
		return le.retry
	}
	return 0
}
