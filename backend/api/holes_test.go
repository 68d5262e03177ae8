package api

import (
	"bufio"
	"crypto/tls"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"cubicle/backend/auth"
	"cubicle/backend/events"
)

// TestUpgradeHeaderIsNoBodyPass: a state-changing request that carries "Upgrade: websocket"
// is no websocket handshake (that is a GET): its body gets the same checks as any other —
// Content-Type, the JSON checks and the body deadline. Before the fix the header skipped all
// three, and 100 slow bodies stayed open for as long as their senders liked.
func TestUpgradeHeaderIsNoBodyPass(t *testing.T) {
	f := newFixture(t, func(c *Config) { c.BodyTimeout = 300 * time.Millisecond })
	up := map[string]string{"Upgrade": "websocket", "Connection": "Upgrade", "Sec-WebSocket-Version": "13", "Sec-WebSocket-Key": "dGhlIHNhbXBsZSBub25jZQ=="}
	with := func(extra map[string]string) map[string]string {
		h := map[string]string{}
		for k, v := range up {
			h[k] = v
		}
		for k, v := range extra {
			h[k] = v
		}
		return h
	}
	for _, c := range []struct {
		name string
		r    req
		want int
	}{
		{"duplicate keys", req{method: "POST", path: "/api/app/agents", bearer: f.admin, body: `{"name":"x","name":"y"}`, header: up}, 400},
		{"trailing data", req{method: "POST", path: "/api/app/agents", bearer: f.admin, body: `{"name":"x"} {"name":"y"}`, header: up}, 400},
		{"not JSON", req{method: "POST", path: "/api/app/agents", bearer: f.admin, body: `name=x`, header: with(map[string]string{"Content-Type": "text/plain"})}, 415},
		{"a handshake with a body", req{method: "GET", path: "/api/app/events", bearer: f.admin, body: `{"name":"x"}`, header: up}, 400},
	} {
		t.Run(c.name, func(t *testing.T) {
			rec := f.do(c.r)
			if rec.Code != c.want {
				t.Fatalf("%s %s with Upgrade: websocket: %d %s; want %d", c.r.method, c.r.path, rec.Code, rec.Body, c.want)
			}
		})
	}
	if rec := f.do(req{method: "GET", path: "/api/app/agents", bearer: f.admin}); rec.Code != 200 || strings.Contains(rec.Body.String(), `"name":"`) {
		t.Errorf("a refused body made an agent: %d %s", rec.Code, rec.Body)
	}

	// Slow bodies: each declares 100 bytes, sends 10 and stalls. The server must cut every one
	// off once the (test's) body deadline has passed.
	ts := httptest.NewServer(f.srv.Handler())
	defer ts.Close()
	const n = 100
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs <- slowBody(ts.Listener.Addr().String(), f.admin, i)
		}()
	}
	wg.Wait()
	close(errs)
	open := 0
	for err := range errs {
		if err != nil {
			open++
			if open == 1 {
				t.Error(err)
			}
		}
	}
	if open > 0 {
		t.Fatalf("%d of %d slow bodies sent with Upgrade: websocket were still open 5 s after a 300 ms body deadline", open, n)
	}
}

// slowBody sends a POST with Upgrade: websocket whose body never completes and reports an
// error if the server has not closed the connection (or answered) within 5 s.
func slowBody(addr, token string, i int) error {
	c, err := net.Dial("tcp", addr)
	if err != nil {
		return err
	}
	defer c.Close()
	fmt.Fprintf(c, "POST /api/app/agents HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer %s\r\nContent-Type: application/json\r\n"+
		"Upgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n"+
		"Content-Length: 100\r\n\r\n{\"name\":\"", token)
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err == nil {
		resp.Body.Close()
		return nil // answered (the deadline cut the body off)
	}
	if ne, ok := err.(net.Error); ok && ne.Timeout() {
		return fmt.Errorf("slow body %d: the connection is still open after 5 s", i)
	}
	if strings.Contains(err.Error(), "EOF") || strings.Contains(err.Error(), "reset") {
		return nil // closed by the server
	}
	return nil
}

// TestHSTSUnderTLS: an answer served over TLS (the server's own, or a trusted proxy's) tells
// the browser to keep to HTTPS; a plain-HTTP answer does not (it would be ignored, and on
// loopback it would pin a name to HTTPS for no reason).
func TestHSTSUnderTLS(t *testing.T) {
	f := newFixture(t, func(c *Config) { c.TrustedProxies = []string{"192.0.2.1"} })
	for _, c := range []struct {
		name string
		tls  bool
		from string
		fwd  string
		want bool
	}{
		{"plain HTTP", false, "", "", false},
		{"own TLS", true, "", "", true},
		{"trusted proxy over HTTPS", false, "192.0.2.1:4000", "https", true},
		{"untrusted client claiming HTTPS", false, "198.51.100.7:4000", "https", false},
	} {
		t.Run(c.name, func(t *testing.T) {
			hr := httptest.NewRequest("GET", "/api/health", nil)
			hr.Host = "127.0.0.1:8765"
			if c.tls {
				hr.TLS = &tls.ConnectionState{HandshakeComplete: true}
			}
			if c.from != "" {
				hr.RemoteAddr = c.from
				hr.Header.Set("X-Forwarded-Proto", c.fwd)
			}
			rec := httptest.NewRecorder()
			f.srv.Handler().ServeHTTP(rec, hr)
			got := rec.Header().Get("Strict-Transport-Security")
			if rec.Code != 200 || (got != "") != c.want {
				t.Fatalf("%d, Strict-Transport-Security %q; want set: %v", rec.Code, got, c.want)
			}
			if c.want && !strings.HasPrefix(got, "max-age=") {
				t.Fatalf("Strict-Transport-Security %q", got)
			}
		})
	}
}

// TestStrangerCannotLockTheOwnerOut: wrong guesses at an account from a client the account
// has never logged in from get expensive (refused sooner and sooner, with a growing
// Retry-After), but the owner's known client — one that logged in before and kept the
// device cookie it was given — still logs in. Before, ten wrong guesses locked the account
// for everyone for five minutes.
func TestStrangerCannotLockTheOwnerOut(t *testing.T) {
	// A pair's first wait is a minute here, not a second: the last check must not depend on
	// how fast the machine checks thirty passwords (under the race detector on a busy machine
	// it took over a second, and the stranger's wait had run out).
	fixtureLoginLimits = auth.LoginLimits{BaseDelay: time.Minute}
	f := newFixture(t)
	fixtureLoginLimits = auth.LoginLimits{}
	login := func(pw string, cookies []*http.Cookie) *httptest.ResponseRecorder {
		hr := httptest.NewRequest("POST", "/api/auth/login", strings.NewReader(`{"username":"admin","password":"`+pw+`"}`))
		hr.Host = "127.0.0.1:8765"
		hr.Header.Set("Content-Type", "application/json")
		for _, c := range cookies {
			hr.AddCookie(c)
		}
		rec := httptest.NewRecorder()
		f.srv.Handler().ServeHTTP(rec, hr)
		return rec
	}
	first := login(testPassword, nil)
	if first.Code != 200 {
		t.Fatalf("owner's first login: %d %s", first.Code, first.Body)
	}
	known := first.Result().Cookies()
	refused := 0
	for i := range 30 {
		rec := login(fmt.Sprintf("wrong guess %d", i), nil)
		switch rec.Code {
		case http.StatusUnauthorized:
		case http.StatusTooManyRequests:
			refused++
			if rec.Header().Get("Retry-After") == "" {
				t.Fatalf("429 without Retry-After")
			}
		default:
			t.Fatalf("guess %d: %d %s", i, rec.Code, rec.Body)
		}
	}
	if refused == 0 {
		t.Fatal("30 wrong guesses in a row were all checked")
	}
	if rec := login(testPassword, known); rec.Code != 200 {
		t.Fatalf("the owner's known client after a stranger's guesses: %d %s; want 200", rec.Code, rec.Body)
	}
	if rec := login(testPassword, nil); rec.Code != http.StatusTooManyRequests {
		t.Fatalf("an unknown client during the guessing: %d %s; want 429", rec.Code, rec.Body)
	}
}

// TestEventStreamsPerAccountAreCapped: one account may hold at most 32 event streams open;
// the next is refused (429, saying what to do) while the others keep streaming, another
// account is not affected, and a closed stream frees its place. Before, 1000 were accepted.
func TestEventStreamsPerAccountAreCapped(t *testing.T) {
	f := newFixture(t, func(c *Config) { c.Events = events.New(events.Config{}) })
	ts := httptest.NewServer(f.srv.Handler())
	defer ts.Close()
	open := func(token string) (*http.Response, error) {
		req, _ := http.NewRequest("GET", ts.URL+"/api/app/events", nil)
		req.Header.Set("Authorization", "Bearer "+token)
		req.Header.Set("Accept", "text/event-stream")
		return http.DefaultClient.Do(req)
	}
	var streams []*http.Response
	defer func() {
		for _, s := range streams {
			s.Body.Close()
		}
	}()
	for i := 0; i < 40; i++ {
		resp, err := open(f.user)
		if err != nil {
			t.Fatal(err)
		}
		if resp.StatusCode != 200 {
			body := make([]byte, 512)
			n, _ := resp.Body.Read(body)
			resp.Body.Close()
			if i != 32 || resp.StatusCode != http.StatusTooManyRequests || !strings.Contains(string(body[:n]), "event streams") {
				t.Fatalf("stream %d: %d %s; want 32 accepted, then 429 saying why", i+1, resp.StatusCode, body[:n])
			}
			break
		}
		streams = append(streams, resp)
	}
	if len(streams) != 32 {
		t.Fatalf("%d streams of one account open; want at most 32", len(streams))
	}
	// Another account still gets its stream.
	other, err := open(f.admin)
	if err != nil || other.StatusCode != 200 {
		t.Fatalf("another account's stream: %v %v", other, err)
	}
	other.Body.Close()
	// Closing one frees its place (once the server noticed).
	streams[0].Body.Close()
	streams = streams[1:]
	deadline := time.Now().Add(10 * time.Second)
	for {
		resp, err := open(f.user)
		if err != nil {
			t.Fatal(err)
		}
		if resp.StatusCode == 200 {
			streams = append(streams, resp)
			break
		}
		resp.Body.Close()
		if time.Now().After(deadline) {
			t.Fatalf("a closed stream did not free its place: %d", resp.StatusCode)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
