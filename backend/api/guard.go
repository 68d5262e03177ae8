package api

import (
	"net"
	"net/http"
	"net/url"
	"strings"
)

// guard is the first handler every request meets. It refuses requests addressed to a host
// name that is not ours (DNS rebinding), every request from a foreign origin (CSRF, and reads
// by pages of another origin), state-changing requests and websocket upgrades from cross-site
// contexts that send no Origin, and state-changing requests whose body is not
// JSON (HTML forms cannot send JSON). It answers CORS preflights for the trusted origins only
// (the desktop window's page).
type guard struct {
	hosts   map[string]bool // lower-case host names without port
	origins map[string]bool // trusted foreign origins, e.g. "wails://wails"
	next    http.Handler
}

func newGuard(hosts, origins []string, next http.Handler) *guard {
	g := &guard{hosts: map[string]bool{}, origins: map[string]bool{}, next: next}
	for _, h := range hosts {
		g.hosts[strings.ToLower(strings.Trim(h, "[]"))] = true
	}
	for _, o := range origins {
		g.origins[strings.ToLower(strings.TrimRight(o, "/"))] = true
	}
	return g
}

func (g *guard) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if !g.hostAllowed(r.Host) {
		writeJSON(w, http.StatusForbidden, errorBody{
			Error: "this Cubicle server does not answer to the host name " + quote(r.Host) + "; open it by its address (e.g. http://127.0.0.1:PORT) or start it with --allowed-host",
			Code:  "forbidden"})
		return
	}
	origin := r.Header.Get("Origin")
	trusted := origin != "" && g.origins[strings.ToLower(origin)]
	if trusted {
		h := w.Header()
		h.Set("Access-Control-Allow-Origin", origin)
		h.Add("Vary", "Origin")
		if r.Method == http.MethodOptions {
			h.Set("Access-Control-Allow-Methods", "GET, POST, PUT, PATCH, DELETE")
			h.Set("Access-Control-Allow-Headers", "Authorization, Content-Type, Accept")
			h.Set("Access-Control-Max-Age", "600")
			w.WriteHeader(http.StatusNoContent)
			return
		}
	}
	if origin != "" && !trusted && !sameOrigin(origin, r) {
		// Reads too: a page of another origin gets nothing (not even an event stream held
		// open on the caller's cookie, which a page on another port of this host would send).
		writeJSON(w, http.StatusForbidden, errorBody{Error: "cross-origin request refused: pages of " + quote(origin) + " may not call this server", Code: "forbidden"})
		return
	}
	if isUpgrade(r) && r.ContentLength != 0 {
		// A handshake carries no body; one that does would hold its bytes past every body check.
		writeJSON(w, http.StatusBadRequest, errorBody{Error: "a websocket handshake carries no request body; send the upgrade without one", Code: "invalid"})
		return
	}
	if changesState(r) {
		if origin == "" && r.Header.Get("Sec-Fetch-Site") == "cross-site" {
			writeJSON(w, http.StatusForbidden, errorBody{Error: "cross-site request refused", Code: "forbidden"})
			return
		}
		// An upload chunk is raw bytes. application/octet-stream, like JSON, is no type a
		// form or a simple cross-site request can send (it needs a CORS preflight, which this
		// server never grants), so it keeps the protection the JSON rule gives.
		if !isUpgrade(r) && r.ContentLength != 0 && !isJSON(r.Header.Get("Content-Type")) &&
			!(uploadPath(r) && isOctets(r.Header.Get("Content-Type"))) {
			writeJSON(w, http.StatusUnsupportedMediaType, errorBody{Error: "send the request body as JSON with Content-Type: application/json", Code: "invalid"})
			return
		}
	}
	g.next.ServeHTTP(w, r)
}

func (g *guard) hostAllowed(hostport string) bool {
	if hostport == "" {
		return false
	}
	host := hostport
	if h, _, err := net.SplitHostPort(hostport); err == nil {
		host = h
	}
	return g.hosts[strings.ToLower(strings.Trim(host, "[]"))]
}

// changesState reports whether r may change state: every method but GET/HEAD/OPTIONS, and
// websocket upgrades (whose handshake is a GET that opens a channel able to send input).
func changesState(r *http.Request) bool {
	switch r.Method {
	case http.MethodGet, http.MethodHead, http.MethodOptions:
		return isUpgrade(r)
	}
	return true
}

// isUpgrade reports whether r is a websocket handshake: a GET asking to upgrade (RFC 6455
// §4.1). The header on any other method is no handshake, and its body gets every check a
// body gets (Content-Type, the JSON checks, the body deadline).
func isUpgrade(r *http.Request) bool {
	return r.Method == http.MethodGet && strings.EqualFold(r.Header.Get("Upgrade"), "websocket")
}

func isOctets(ct string) bool {
	ct = strings.ToLower(strings.TrimSpace(strings.SplitN(ct, ";", 2)[0]))
	return ct == "application/octet-stream"
}

func isJSON(ct string) bool {
	ct = strings.ToLower(strings.TrimSpace(strings.SplitN(ct, ";", 2)[0]))
	return ct == "application/json"
}

// sameOrigin reports whether origin names the host the request was sent to.
func sameOrigin(origin string, r *http.Request) bool {
	u, err := url.Parse(origin)
	if err != nil || u.Host == "" || (u.Scheme != "http" && u.Scheme != "https") {
		return false
	}
	return strings.EqualFold(u.Host, r.Host)
}

func quote(s string) string {
	if len(s) > 100 {
		s = s[:100] + "…"
	}
	return "\"" + strings.Map(func(r rune) rune {
		if r < 0x20 || r == 0x7f {
			return '?'
		}
		return r
	}, s) + "\""
}
