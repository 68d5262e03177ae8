package auth

import (
	"strings"
	"sync"
	"time"

	"cubicle/backend/fault"
)

// LoginLimits bound failed logins. An attempt counts from the moment it starts (before the
// password is checked) until it ends; a failed one keeps counting for the window. An account
// or a client with Max attempts counted is refused until the oldest failure leaves the window.
type LoginLimits struct {
	// PerAccount is how many attempts one username may have counted (default 10).
	PerAccount int
	// PerClient is how many attempts one network address may have counted (default 20).
	PerClient int
	// Window is how long a failure counts (default 5 minutes).
	Window time.Duration
}

// DefaultLoginLimits are the limits of a Service whose Config leaves them zero.
var DefaultLoginLimits = LoginLimits{PerAccount: 10, PerClient: 20, Window: 5 * time.Minute}

// limiter counts login attempts per account and per client. Counting happens before the
// (slow) password check, so any number of parallel attempts gets at most the limit through.
type limiter struct {
	lim LoginLimits
	now func() time.Time

	mu      sync.Mutex
	account map[string]*attempts // guarded by mu
	client  map[string]*attempts // guarded by mu
}

// attempts of one key: how many run now and when the recent ones failed.
type attempts struct {
	running int
	fails   []time.Time
}

func newLimiter(lim LoginLimits, now func() time.Time) *limiter {
	d := DefaultLoginLimits
	if lim.PerAccount <= 0 {
		lim.PerAccount = d.PerAccount
	}
	if lim.PerClient <= 0 {
		lim.PerClient = d.PerClient
	}
	if lim.Window <= 0 {
		lim.Window = d.Window
	}
	return &limiter{lim: lim, now: now, account: map[string]*attempts{}, client: map[string]*attempts{}}
}

// count returns how many attempts of a key are counted now (dropping expired failures).
func (l *limiter) count(m map[string]*attempts, key string, now time.Time) int {
	a := m[key]
	if a == nil {
		return 0
	}
	kept := a.fails[:0]
	for _, t := range a.fails {
		if now.Sub(t) < l.lim.Window {
			kept = append(kept, t)
		}
	}
	a.fails = kept
	if a.running == 0 && len(a.fails) == 0 {
		delete(m, key)
		return 0
	}
	return a.running + len(a.fails)
}

func (l *limiter) get(m map[string]*attempts, key string) *attempts {
	a := m[key]
	if a == nil {
		a = &attempts{}
		m[key] = a
	}
	return a
}

// begin counts an attempt for username from client, or refuses it with fault.ErrTooMany.
// done must be called once with the outcome.
func (l *limiter) begin(username, client string) (done func(ok bool), err error) {
	acct := strings.ToLower(username)
	l.mu.Lock()
	defer l.mu.Unlock()
	now := l.now()
	if l.count(l.account, acct, now) >= l.lim.PerAccount || l.count(l.client, client, now) >= l.lim.PerClient {
		return nil, fault.New(fault.ErrTooMany, "too many failed logins; wait a few minutes and try again")
	}
	l.get(l.account, acct).running++
	l.get(l.client, client).running++
	var once sync.Once
	return func(ok bool) {
		once.Do(func() {
			l.mu.Lock()
			defer l.mu.Unlock()
			t := l.now()
			for _, p := range []struct {
				m   map[string]*attempts
				key string
			}{{l.account, acct}, {l.client, client}} {
				a := l.get(p.m, p.key)
				a.running--
				if !ok {
					a.fails = append(a.fails, t)
				}
				l.count(p.m, p.key, t)
			}
		})
	}, nil
}
