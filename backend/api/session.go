package api

import (
	"context"
	"errors"
	"math"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
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

// websocketCaller is the caller of a websocket route: the session's token, or for an upgrade
// (browsers cannot set headers on one) the access_token query parameter. It answers the
// error itself and returns false when there is no valid one; tok is the token used, for a
// connection that checks it again while it lasts.
func (s *Server) websocketCaller(w http.ResponseWriter, r *http.Request) (p auth.Principal, tok string, ok bool) {
	tok = token(r)
	if tok == "" && isUpgrade(r) {
		tok = r.URL.Query().Get("access_token")
	}
	if tok == "" {
		writeError(w, r, s.log, fault.New(fault.ErrUnauthenticated, "log in first"))
		return auth.Principal{}, "", false
	}
	p, err := s.cfg.Auth.Authenticate(tok)
	if err != nil {
		writeError(w, r, s.log, err)
		return auth.Principal{}, "", false
	}
	return p, tok, true
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
	ip := s.clientIP(r)
	device := ""
	if c, err := r.Cookie(DeviceCookie); err == nil {
		device = c.Value
	}
	p, err := s.cfg.Auth.LoginFrom(body.Username, body.Password, ip, device)
	if err != nil {
		if errors.Is(err, fault.ErrTooMany) {
			w.Header().Set("Retry-After", strconv.Itoa(int(math.Ceil(max(auth.RetryAfter(err), time.Second).Seconds()))))
		}
		s.log.Warn("login failed", "user", body.Username, "remote", ip, "err", err)
		writeError(w, r, s.log, err)
		return
	}
	s.setSession(w, r, p)
	if tok, err := s.cfg.Auth.DeviceToken(p.Username); err == nil {
		// This client is now one of the account's known devices: others' wrong guesses at the
		// account do not hold it up (auth.LoginLimits).
		http.SetCookie(w, &http.Cookie{Name: DeviceCookie, Value: tok, Path: "/api/auth/", MaxAge: 400 * 24 * 3600,
			HttpOnly: true, SameSite: http.SameSiteStrictMode, Secure: s.secure(r)})
	}
	s.log.Info("login", "user", p.Username, "remote", ip)
	writeJSON(w, http.StatusOK, map[string]any{"user": userOf(p)})
}

// setSession sets the session cookie of p: HttpOnly, SameSite=Strict, and Secure when the
// server is reached over TLS (its own, or a trusted proxy's).
func (s *Server) setSession(w http.ResponseWriter, r *http.Request, p auth.Principal) {
	http.SetCookie(w, &http.Cookie{
		Name: SessionCookie, Value: p.Token, Path: "/", Expires: p.Expires,
		HttpOnly: true, SameSite: http.SameSiteStrictMode, Secure: s.secure(r),
	})
}

func (s *Server) logout(w http.ResponseWriter, r *http.Request) {
	if err := s.cfg.Auth.Revoke(principal(r).Token); err != nil {
		writeError(w, r, s.log, err)
		return
	}
	http.SetCookie(w, &http.Cookie{Name: SessionCookie, Value: "", Path: "/", MaxAge: -1,
		HttpOnly: true, SameSite: http.SameSiteStrictMode, Secure: s.secure(r)})
	w.WriteHeader(http.StatusNoContent)
}

func (s *Server) me(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusOK, map[string]any{"user": userOf(principal(r))})
}

// changePassword changes the caller's own password ({currentPassword, newPassword}). Every
// session of the account ends; the caller gets a fresh one (a new cookie, and the token in
// the answer for bearer clients).
func (s *Server) changePassword(w http.ResponseWriter, r *http.Request) {
	var body struct {
		Current string `json:"currentPassword"`
		New     string `json:"newPassword"`
	}
	if err := decode(r, &body); err != nil {
		writeError(w, r, s.log, err)
		return
	}
	if body.Current == "" || body.New == "" {
		writeError(w, r, s.log, fault.Invalid(`send {"currentPassword": "…", "newPassword": "…"}`))
		return
	}
	p, err := s.cfg.Auth.ChangePassword(principal(r), body.Current, body.New, s.clientIP(r))
	if err != nil {
		writeError(w, r, s.log, err)
		return
	}
	if c, err := r.Cookie(SessionCookie); err == nil && c.Value != "" {
		s.setSession(w, r, p)
	}
	out := map[string]any{"user": userOf(p)}
	if token(r) != "" && r.Header.Get("Authorization") != "" {
		out["token"] = p.Token
	}
	writeJSON(w, http.StatusOK, out)
}

// clientIP is the address a request came from: the peer, or — when the peer is a trusted
// proxy — the nearest address in X-Forwarded-For that is not a trusted proxy itself.
func (s *Server) clientIP(r *http.Request) string {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		host = r.RemoteAddr
	}
	if !s.trustedProxy(host) {
		return host
	}
	hops := strings.Split(strings.Join(r.Header.Values("X-Forwarded-For"), ","), ",")
	for i := len(hops) - 1; i >= 0; i-- {
		h := strings.TrimSpace(hops[i])
		if h == "" {
			continue
		}
		if !s.trustedProxy(h) {
			return h
		}
	}
	return host
}

// trustedProxy reports whether addr (an IP address) is one of Config.TrustedProxies.
func (s *Server) trustedProxy(addr string) bool {
	ip, err := netip.ParseAddr(addr)
	if err != nil {
		return false
	}
	ip = ip.Unmap()
	for _, p := range s.proxies {
		if p.Contains(ip) {
			return true
		}
	}
	return false
}

// secure reports whether the client reached the server over TLS: the server's own TLS, or a
// trusted proxy that says so in X-Forwarded-Proto (or Config.SecureCookies says so).
func (s *Server) secure(r *http.Request) bool {
	if s.cfg.SecureCookies || r.TLS != nil {
		return true
	}
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil || !s.trustedProxy(host) {
		return false
	}
	proto := strings.TrimSpace(strings.SplitN(r.Header.Get("X-Forwarded-Proto"), ",", 2)[0])
	return strings.EqualFold(proto, "https")
}
