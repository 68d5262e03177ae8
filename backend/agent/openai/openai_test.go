package openai

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"cubicle/backend/agent"
	"cubicle/backend/fault"
)

// stream serves body as a chat-completions stream.
func stream(t *testing.T, body string) *httptest.Server {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		fmt.Fprint(w, body)
	}))
	t.Cleanup(srv.Close)
	return srv
}

func call(t *testing.T, baseURL string, allowPrivate bool) (agent.ModelReply, error) {
	t.Helper()
	c, err := New(Config{BaseURL: baseURL, Model: "m", APIKey: "sk-test", AllowPrivate: allowPrivate})
	if err != nil {
		t.Fatal(err)
	}
	return c.Stream(context.Background(), agent.ModelRequest{}, func(agent.ModelDelta) {})
}

// A hostile endpoint cannot crash or bloat the server with tool-call indexes and sizes
// (issue 15, item 6: index -1 panicked, one 100-byte chunk grew the server past 1 GB).
func TestStreamBounds(t *testing.T) {
	chunk := func(index string, args string) string {
		return `data: {"choices":[{"delta":{"tool_calls":[{"index":` + index + `,"id":"c","function":{"name":"x","arguments":"` + args + `"}}]}}]}` + "\n\n"
	}
	tests := []struct {
		name string
		body string
	}{
		{"negative index", chunk("-1", "{}")},
		{"huge index", chunk("1000000000", "{}")},
		{"index past the limit", chunk(fmt.Sprint(MaxToolCalls), "{}")},
		{"huge arguments", strings.Repeat(chunk("0", strings.Repeat("a", 64<<10)), MaxToolArgBytes/(64<<10)+2)},
		{"huge text", strings.Repeat(`data: {"choices":[{"delta":{"content":"`+strings.Repeat("x", 1<<20)+`"}}]}`+"\n\n", MaxResponseBytes>>20+2)},
		{"endless line", "data: " + strings.Repeat("x", maxLineBytes+10)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := stream(t, tt.body)
			var before runtime.MemStats
			runtime.ReadMemStats(&before)
			_, err := call(t, srv.URL, true)
			if !errors.Is(err, fault.ErrUnavailable) {
				t.Fatalf("got %v, want a refusal of the reply", err)
			}
			var after runtime.MemStats
			runtime.ReadMemStats(&after)
			if grown := int64(after.HeapAlloc) - int64(before.HeapAlloc); grown > 256<<20 {
				t.Fatalf("the heap grew by %d MiB", grown>>20)
			}
		})
	}
	// Within the bounds, replies still work.
	srv := stream(t, chunk("0", `{\"a\":1}`)+chunk("1", "{}")+"data: [DONE]\n\n")
	reply, err := call(t, srv.URL, true)
	if err != nil || len(reply.ToolCalls) != 2 || reply.ToolCalls[0].Input["a"] != float64(1) {
		t.Fatalf("reply %+v, %v", reply, err)
	}
}

// Model endpoints on loopback or private addresses are refused unless allowed, on the address
// actually dialled: a literal address, a name that resolves to one, and every connection.
func TestPrivateEndpointsNeedTheAdminsAllowance(t *testing.T) {
	var hits atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		fmt.Fprint(w, "data: {\"choices\":[{\"delta\":{\"content\":\"hi\"}}]}\n\ndata: [DONE]\n\n")
	}))
	defer srv.Close()
	_, port, _ := net.SplitHostPort(strings.TrimPrefix(srv.URL, "http://"))
	for _, base := range []string{srv.URL, "http://localhost:" + port, "http://[::ffff:127.0.0.1]:" + port, "http://0.0.0.0:" + port} {
		t.Run(base, func(t *testing.T) {
			_, err := call(t, base, false)
			if !errors.Is(err, fault.ErrForbidden) {
				t.Fatalf("got %v, want forbidden", err)
			}
		})
	}
	if hits.Load() != 0 {
		t.Fatalf("the private endpoint was reached %d times", hits.Load())
	}
	reply, err := call(t, srv.URL, true)
	if err != nil || reply.Text != "hi" {
		t.Fatalf("allowed private endpoint: %+v, %v", reply, err)
	}
}

// The key is sent to the base URL and nowhere else: a redirect is not followed.
func TestNoRedirects(t *testing.T) {
	var leaked atomic.Value
	other := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		leaked.Store(r.Header.Get("Authorization"))
	}))
	defer other.Close()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, other.URL+"/chat/completions", http.StatusTemporaryRedirect)
	}))
	defer srv.Close()
	if _, err := call(t, srv.URL, true); err == nil {
		t.Fatal("a redirect was accepted")
	}
	if v := leaked.Load(); v != nil {
		t.Fatalf("the key reached the redirect target: %v", v)
	}
}

// TestRetriesRateLimit: a 429 (with retry-after) and a 503 before the stream starts are tried
// again, each wait told to the person as a hint; a 400 is not retried.
func TestRetriesRateLimit(t *testing.T) {
	var calls int
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls++
		switch calls {
		case 1:
			w.Header().Set("Retry-After", "0.05")
			http.Error(w, "slow down", http.StatusTooManyRequests)
		case 2:
			http.Error(w, "busy", http.StatusServiceUnavailable)
		default:
			w.Header().Set("Content-Type", "text/event-stream")
			io.WriteString(w, `data: {"choices":[{"delta":{"content":"ok"},"finish_reason":"stop"}]}`+"\n\ndata: [DONE]\n\n")
		}
	}))
	defer srv.Close()
	c, err := New(Config{BaseURL: srv.URL, Model: "m", HTTP: srv.Client(), RetryBase: 10 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	var hints []string
	reply, err := c.Stream(context.Background(), agent.ModelRequest{}, func(d agent.ModelDelta) {
		if d.Hint != "" {
			hints = append(hints, d.Hint)
		}
	})
	if err != nil || reply.Text != "ok" || calls != 3 {
		t.Fatalf("reply %q, %v after %d calls", reply.Text, err, calls)
	}
	if len(hints) != 2 || !strings.Contains(hints[0], "rate limited (HTTP 429)") || !strings.Contains(hints[1], "HTTP 503") {
		t.Fatalf("hints: %q", hints)
	}
	calls = 10
	bad := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls++
		http.Error(w, "bad request", http.StatusBadRequest)
	}))
	defer bad.Close()
	c, _ = New(Config{BaseURL: bad.URL, Model: "m", HTTP: bad.Client(), RetryBase: 10 * time.Millisecond})
	calls = 0
	if _, err := c.Stream(context.Background(), agent.ModelRequest{}, func(agent.ModelDelta) {}); err == nil || calls != 1 {
		t.Fatalf("a 400: %v after %d calls", err, calls)
	}
}
