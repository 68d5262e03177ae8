package api

import (
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
)

// FuzzGuard checks the guard's promises for arbitrary requests: a request reaches the routes
// only when its Host is allowed, and a state-changing one only when its Origin is absent,
// same-origin or trusted and its body (if any) is JSON. It must never panic.
func FuzzGuard(f *testing.F) {
	seeds := []struct{ method, host, origin, ctype, fetchSite, upgrade, body string }{
		{"GET", "127.0.0.1:8765", "", "", "", "", ""},
		{"POST", "127.0.0.1:8765", "http://127.0.0.1:8765", "application/json", "same-origin", "", "{}"},
		{"POST", "127.0.0.1:8765", "http://evil.example", "application/json", "cross-site", "", "{}"},
		{"POST", "evil.example", "", "text/plain", "", "", "x"},
		{"PUT", "[::1]:8765", "wails://wails", "application/json; charset=utf-8", "", "", "{}"},
		{"GET", "localhost", "null", "", "cross-site", "websocket", ""},
		{"DELETE", "LOCALHOST:1", "HTTP://LOCALHOST:1", "", "", "", ""},
		{"OPTIONS", "127.0.0.1", "wails://wails", "", "", "", ""},
		{"POST", "127.0.0.1:80", "http://127.0.0.1:80@evil.example", "application/json", "", "", "{}"},
	}
	for _, s := range seeds {
		f.Add(s.method, s.host, s.origin, s.ctype, s.fetchSite, s.upgrade, s.body)
	}
	allowed := []string{"127.0.0.1", "localhost", "::1"}
	trusted := []string{"wails://wails"}
	f.Fuzz(func(t *testing.T, method, host, origin, ctype, fetchSite, upgrade, body string) {
		if !validToken(method) {
			return
		}
		reached := false
		g := newGuard(allowed, trusted, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { reached = true }))
		r := httptest.NewRequest("GET", "/api/x", nil)
		r.Method = method
		r.Host = host
		r.Body = http.NoBody
		r.ContentLength = int64(len(body))
		if body != "" {
			r.Body = httpBody(body)
		}
		set := func(k, v string) {
			if v != "" {
				r.Header.Set(k, v)
			}
		}
		set("Origin", origin)
		set("Content-Type", ctype)
		set("Sec-Fetch-Site", fetchSite)
		set("Upgrade", upgrade)
		g.ServeHTTP(httptest.NewRecorder(), r)
		if !reached {
			return
		}
		h := host
		if i := strings.LastIndex(h, ":"); i >= 0 && !strings.HasSuffix(h, "]") {
			h = h[:i]
		}
		h = strings.ToLower(strings.Trim(h, "[]"))
		if h != "127.0.0.1" && h != "localhost" && h != "::1" {
			t.Fatalf("request for host %q reached the routes", host)
		}
		mutating := !(method == "GET" || method == "HEAD" || method == "OPTIONS") || strings.EqualFold(upgrade, "websocket")
		if !mutating {
			return
		}
		if origin != "" && !strings.EqualFold(origin, "wails://wails") {
			u, err := url.Parse(origin)
			if err != nil || !strings.EqualFold(u.Host, host) || (u.Scheme != "http" && u.Scheme != "https") {
				t.Fatalf("state-changing request from origin %q to host %q reached the routes", origin, host)
			}
		}
		if origin == "" && fetchSite == "cross-site" {
			t.Fatalf("cross-site request without origin reached the routes")
		}
		if body != "" && !strings.EqualFold(upgrade, "websocket") && !strings.HasPrefix(strings.ToLower(strings.TrimSpace(ctype)), "application/json") {
			t.Fatalf("non-JSON body (%q) reached the routes", ctype)
		}
	})
}

func validToken(s string) bool {
	if s == "" {
		return false
	}
	for _, c := range s {
		if c <= ' ' || c >= 0x7f || strings.ContainsRune("()<>@,;:\\\"/[]?={}", c) {
			return false
		}
	}
	return true
}

type stringBody struct{ *strings.Reader }

func (stringBody) Close() error { return nil }

func httpBody(s string) stringBody { return stringBody{strings.NewReader(s)} }
