package api

import (
	"context"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	"cubicle/backend/auth"
	"cubicle/backend/fault"
)

type principalKey struct{}

// principal returns the authenticated caller of r; authed guarantees there is one.
func principal(r *http.Request) auth.Principal {
	p, _ := r.Context().Value(principalKey{}).(auth.Principal)
	return p
}

// token returns the session token r carries: a bearer token (desktop window, API clients) or
// the session cookie (browser).
func token(r *http.Request) string {
	if h := r.Header.Get("Authorization"); h != "" {
		if t, ok := strings.CutPrefix(h, "Bearer "); ok {
			return strings.TrimSpace(t)
		}
	}
	if c, err := r.Cookie(SessionCookie); err == nil {
		return c.Value
	}
	return ""
}

// authed wraps h so that it runs only for a logged-in caller.
func (s *Server) authed(h http.HandlerFunc) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		tok := token(r)
		if tok == "" {
			writeError(w, r, s.log, fault.New(fault.ErrUnauthenticated, "log in first"))
			return
		}
		p, err := s.cfg.Auth.Authenticate(tok)
		if err != nil {
			writeError(w, r, s.log, err)
			return
		}
		h(w, r.WithContext(context.WithValue(r.Context(), principalKey{}, p)))
	})
}

// admin wraps h so that it runs only for an administrator.
func (s *Server) admin(h http.HandlerFunc) http.Handler {
	return s.authed(func(w http.ResponseWriter, r *http.Request) {
		if !principal(r).Admin() {
			writeError(w, r, s.log, fault.Forbidden("only administrators can change app settings"))
			return
		}
		h(w, r)
	})
}

type userJSON struct {
	ID       string `json:"id"`
	Username string `json:"username"`
	Role     string `json:"role"`
}

func userOf(p auth.Principal) userJSON {
	return userJSON{ID: p.AccountID, Username: p.Username, Role: string(p.Role)}
}

func (s *Server) login(w http.ResponseWriter, r *http.Request) {
	ip := clientIP(r)
	if !s.logins.allow(ip) {
		w.Header().Set("Retry-After", "60")
		writeJSON(w, http.StatusTooManyRequests, errorBody{Error: "too many failed logins; wait a minute and try again", Code: "rate_limited"})
		return
	}
	var body struct {
		Username string `json:"username"`
		Password string `json:"password"`
	}
	if err := decode(r, &body); err != nil {
		writeError(w, r, s.log, err)
		return
	}
	if body.Username == "" || body.Password == "" {
		writeError(w, r, s.log, fault.Invalid("enter a username and a password"))
		return
	}
	p, err := s.cfg.Auth.Login(body.Username, body.Password)
	if err != nil {
		s.logins.fail(ip)
		s.log.Warn("login failed", "user", body.Username, "remote", ip)
		writeError(w, r, s.log, err)
		return
	}
	http.SetCookie(w, &http.Cookie{
		Name: SessionCookie, Value: p.Token, Path: "/", Expires: p.Expires,
		HttpOnly: true, SameSite: http.SameSiteStrictMode, Secure: s.cfg.SecureCookies || r.TLS != nil,
	})
	s.log.Info("login", "user", p.Username, "remote", ip)
	writeJSON(w, http.StatusOK, map[string]any{"user": userOf(p)})
}

func (s *Server) logout(w http.ResponseWriter, r *http.Request) {
	s.cfg.Auth.Revoke(principal(r).Token)
	http.SetCookie(w, &http.Cookie{Name: SessionCookie, Value: "", Path: "/", MaxAge: -1,
		HttpOnly: true, SameSite: http.SameSiteStrictMode, Secure: s.cfg.SecureCookies || r.TLS != nil})
	w.WriteHeader(http.StatusNoContent)
}

func (s *Server) me(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusOK, map[string]any{"user": userOf(principal(r))})
}

func clientIP(r *http.Request) string {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		return r.RemoteAddr
	}
	return host
}

// loginLimiter allows a client a number of failed logins per window.
type loginLimiter struct {
	max    int
	window time.Duration
	mu     sync.Mutex
	fails  map[string][]time.Time // guarded by mu
}

func newLoginLimiter(max int, window time.Duration) *loginLimiter {
	return &loginLimiter{max: max, window: window, fails: map[string][]time.Time{}}
}

func (l *loginLimiter) recent(ip string, now time.Time) []time.Time {
	kept := l.fails[ip][:0]
	for _, t := range l.fails[ip] {
		if now.Sub(t) < l.window {
			kept = append(kept, t)
		}
	}
	if len(kept) == 0 {
		delete(l.fails, ip)
		return nil
	}
	l.fails[ip] = kept
	return kept
}

func (l *loginLimiter) allow(ip string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.recent(ip, time.Now())) < l.max
}

func (l *loginLimiter) fail(ip string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := time.Now()
	l.fails[ip] = append(l.recent(ip, now), now)
}
