package nodes_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"cubicle/backend/fault"
	"cubicle/backend/nodes"
	"cubicle/backend/store"
	"cubicle/runner"
	"cubicle/runner/wire"
)

// hub is a Hub on a real store, its connect route on a real HTTP server.
type hub struct {
	h    *nodes.Hub
	st   *store.Store
	srv  *httptest.Server
	path string

	mu    sync.Mutex
	drops map[string][]string // node → desktops of its last disconnect
	ups   map[string]bool     // node → whether Connected held when OnConnect heard it
}

func newHub(t *testing.T) *hub {
	t.Helper()
	path := filepath.Join(t.TempDir(), "server.db")
	st, err := store.Open(path, store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	x := &hub{st: st, path: path, drops: map[string][]string{}, ups: map[string]bool{}}
	x.h, err = nodes.New(nodes.Config{Store: st, Version: "9.9.9", OnDisconnect: func(node string, desktops []string) {
		x.mu.Lock()
		x.drops[node] = desktops
		x.mu.Unlock()
	}, OnConnect: func(node string) {
		up := x.h.Connected(node) // the link is reachable by the time it is announced
		x.mu.Lock()
		x.ups[node] = up
		x.mu.Unlock()
	}})
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.Handle("GET "+wire.ConnectPath, x.h)
	x.srv = httptest.NewServer(mux)
	t.Cleanup(func() {
		x.srv.Close()
		x.h.Close()
		st.Close()
	})
	return x
}

// startRunner runs an in-process runner without an engine until the test ends; its Run's
// result arrives on the channel.
func startRunner(t *testing.T, server, token string) (*runner.Runner, <-chan error) {
	t.Helper()
	r, err := runner.New(runner.Config{Server: server, Token: token, DataDir: t.TempDir(), Engine: "none", Version: "9.9.9",
		MaxBackoff: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		done <- r.Run(ctx)
	}()
	t.Cleanup(func() {
		cancel()
		select {
		case <-stopped:
		case <-time.After(30 * time.Second):
			t.Error("runner did not stop")
		}
		r.Close()
	})
	return r, done
}

func waitFor(t *testing.T, what string, ok func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !ok() {
		if time.Now().After(deadline) {
			t.Fatalf("waited 30s for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func TestCreateStoresOnlyTheHash(t *testing.T) {
	x := newHub(t)
	c, err := x.h.Create("mac mini", false, "http://192.0.2.10:8765")
	if err != nil {
		t.Fatal(err)
	}
	id, secret, ok := strings.Cut(c.Token, ".")
	if !ok || id != c.ID || len(secret) < 40 {
		t.Fatalf("token %q for %s", c.Token, c.ID)
	}
	run := "cubicle runner --server http://192.0.2.10:8765 --token " + c.Token + " --name 'mac mini'"
	if c.RunCommand != run {
		t.Fatalf("runCommand %q", c.RunCommand)
	}
	// The join command downloads the binary for the machine over the token, then runs it.
	if c.JoinCommand != c.JoinCommands["linux/macos"] ||
		!strings.HasPrefix(c.JoinCommand, "curl -fSL -H 'Authorization: Bearer "+c.Token+"' \"http://192.0.2.10:8765/api/runner/download?os=$(uname -s") ||
		!strings.HasSuffix(c.JoinCommand, " && ./"+run) {
		t.Fatalf("joinCommand %q", c.JoinCommand)
	}
	if w := c.JoinCommands["windows"]; !strings.Contains(w, "-OutFile cubicle.exe; .\\cubicle.exe runner --server http://192.0.2.10:8765 --token "+c.Token+" --name 'mac mini'") {
		t.Fatalf("windows join command %q", w)
	}
	rec, err := x.st.Runner(c.ID)
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256([]byte(secret))
	if !bytes.Equal(rec.TokenHash, sum[:]) {
		t.Fatal("stored hash is not SHA-256 of the secret")
	}
	x.h.Close()
	x.st.Close()
	raw, err := os.ReadFile(x.path)
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Contains(raw, []byte(secret)) {
		t.Fatal("the data file holds the runner's secret")
	}
	h2, err := nodes.New(nodes.Config{Store: mustStore(t)})
	if err != nil {
		t.Fatal(err)
	}
	for _, bad := range []string{"", "   ", strings.Repeat("x", 65), "a\nb"} {
		if _, err := h2.Create(bad, false, "http://x"); !errors.Is(err, fault.ErrInvalid) {
			t.Errorf("name %q: %v, want invalid", bad, err)
		}
	}
}

func mustStore(t *testing.T) *store.Store {
	st, err := store.Open(filepath.Join(t.TempDir(), "x.db"), store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return st
}

func TestConnectCallRevoke(t *testing.T) {
	x := newHub(t)
	c, err := x.h.Create("box", true, x.srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	remote, err := x.h.Node(c.ID)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := remote.Status(context.Background()); !errors.Is(err, fault.ErrUnavailable) || !strings.Contains(err.Error(), "has not connected yet") {
		t.Fatalf("status before connecting: %v", err)
	}
	r, done := startRunner(t, x.srv.URL, c.Token)
	waitFor(t, "the runner to connect", func() bool { return x.h.Connected(c.ID) })
	if !r.Connected() {
		t.Fatal("the runner does not know it is connected")
	}
	waitFor(t, "OnConnect to hear the link", func() bool {
		x.mu.Lock()
		defer x.mu.Unlock()
		_, heard := x.ups[c.ID]
		return heard
	})
	x.mu.Lock()
	up := x.ups[c.ID]
	x.mu.Unlock()
	if !up {
		t.Fatal("OnConnect heard the link before the hub could reach it")
	}
	st, err := remote.Status(context.Background())
	if err != nil || st.NodeID != c.ID || st.Engine.Found {
		t.Fatalf("status over the link: %+v, %v", st, err)
	}
	views, err := x.h.List(context.Background())
	if err != nil || len(views) != 1 || views[0].Status != nodes.StatusConnected || !views[0].Cloud || views[0].Version != "9.9.9" ||
		!strings.Contains(strings.Join(views[0].Capabilities, " "), wire.CapIdlePolicy) {
		t.Fatalf("list: %+v, %v", views, err)
	}

	// An agent call carries the agent (never its model key) and the runner's errors keep
	// their class.
	ag := store.Agent{ID: "a1", AccountID: "acc", Name: "Ada", Computer: "vm",
		Model: &store.AgentModel{APIKeySealed: []byte("sealed-key")}, CreatedAt: time.Now()}
	if err := x.st.CreateAgent(ag); err != nil {
		t.Fatal(err)
	}
	if _, err := remote.Act(context.Background(), "acc", "a1", "fly"); !errors.Is(err, fault.ErrInvalid) {
		t.Fatalf("unknown action over the link: %v", err)
	}
	if _, err := remote.Act(context.Background(), "other", "a1", "start"); !errors.Is(err, fault.ErrNotFound) {
		t.Fatalf("another account's agent: %v", err)
	}
	v, err := remote.Agent(context.Background(), "acc", "a1")
	if err != nil || v.AgentID != "a1" || v.Desktop.State != "absent" {
		t.Fatalf("agent view over the link: %+v, %v", v, err)
	}
	if _, err := remote.Link(context.Background(), v.Desktop.ID); !errors.Is(err, fault.ErrNotFound) {
		t.Fatalf("link to a desktop that does not run: %v", err)
	}

	// Revoke drops the link at once; the runner is refused and Run ends.
	if err := x.h.Revoke(c.ID); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if !errors.Is(err, runner.ErrRefused) || !errors.Is(err, fault.ErrForbidden) {
			t.Fatalf("Run after revoke: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the revoked runner still runs")
	}
	if x.h.Connected(c.ID) {
		t.Fatal("revoked runner still connected")
	}
	if _, err := remote.Status(context.Background()); !errors.Is(err, fault.ErrUnavailable) || !strings.Contains(err.Error(), "revoked") {
		t.Fatalf("status after revoke: %v", err)
	}
	if _, err := x.h.Known(c.ID); !errors.Is(err, fault.ErrConflict) {
		t.Fatalf("Known after revoke: %v", err)
	}
	x.mu.Lock()
	_, dropped := x.drops[c.ID]
	x.mu.Unlock()
	if !dropped {
		t.Fatal("OnDisconnect was not called")
	}
}

func TestConnectRefusals(t *testing.T) {
	x := newHub(t)
	c, err := x.h.Create("box", false, x.srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	url := "ws" + strings.TrimPrefix(x.srv.URL, "http") + wire.ConnectPath
	dial := func(h http.Header) (*websocket.Conn, int) {
		ws, resp, err := websocket.DefaultDialer.Dial(url, h)
		if err != nil {
			if resp == nil {
				t.Fatal(err)
			}
			return nil, resp.StatusCode
		}
		return ws, 101
	}
	for name, h := range map[string]http.Header{
		"no token":     {},
		"wrong secret": {"Authorization": {"Bearer " + c.ID + ".wrong"}},
		"unknown id":   {"Authorization": {"Bearer r-000000000000.x"}},
		"malformed":    {"Authorization": {"Bearer " + c.ID}},
	} {
		if _, code := dial(h); code != http.StatusUnauthorized {
			t.Errorf("%s: HTTP %d, want 401", name, code)
		}
	}
	if _, code := dial(http.Header{"Authorization": {"Bearer " + c.Token}, "Origin": {"http://evil.example"}}); code != http.StatusForbidden {
		t.Errorf("upgrade from a web page: HTTP %d, want 403", code)
	}
	// A runner speaking another protocol is told what to update.
	ws, code := dial(http.Header{"Authorization": {"Bearer " + c.Token}})
	if code != 101 {
		t.Fatalf("good token: HTTP %d", code)
	}
	ws.WriteJSON(wire.Hello{Protocol: wire.Protocol + 1, Version: "99"})
	var w wire.Welcome
	err = ws.ReadJSON(&w)
	var ce *websocket.CloseError
	if !errors.As(err, &ce) || ce.Code != websocket.ClosePolicyViolation || !strings.Contains(ce.Text, "update the runner to version 9.9.9") {
		t.Fatalf("protocol mismatch: %v", err)
	}
	ws.Close()
	if x.h.Connected(c.ID) {
		t.Fatal("a refused runner is connected")
	}
}

// proxy forwards TCP connections to target until cut closes them all.
type proxy struct {
	ln     net.Listener
	target string
	mu     sync.Mutex
	conns  []net.Conn
}

func newProxy(t *testing.T, target string) *proxy {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &proxy{ln: ln, target: target}
	t.Cleanup(func() { ln.Close(); p.cut() })
	go func() {
		for {
			in, err := ln.Accept()
			if err != nil {
				return
			}
			out, err := net.Dial("tcp", target)
			if err != nil {
				in.Close()
				continue
			}
			p.mu.Lock()
			p.conns = append(p.conns, in, out)
			p.mu.Unlock()
			go func() { io.Copy(out, in); out.Close() }()
			go func() { io.Copy(in, out); in.Close() }()
		}
	}()
	return p
}

func (p *proxy) cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range p.conns {
		c.Close()
	}
	p.conns = nil
}

// TestReconnect: the link breaks (as a network cut or a server restart does); the runner
// comes back by itself.
func TestReconnect(t *testing.T) {
	x := newHub(t)
	c, err := x.h.Create("box", false, x.srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	p := newProxy(t, strings.TrimPrefix(x.srv.URL, "http://"))
	startRunner(t, "http://"+p.ln.Addr().String(), c.Token)
	waitFor(t, "the runner to connect", func() bool { return x.h.Connected(c.ID) })
	p.cut()
	waitFor(t, "the drop to be noticed", func() bool {
		x.mu.Lock()
		defer x.mu.Unlock()
		_, ok := x.drops[c.ID]
		return ok
	})
	waitFor(t, "the runner to reconnect", func() bool { return x.h.Connected(c.ID) })
	remote, _ := x.h.Node(c.ID)
	if _, err := remote.Status(context.Background()); err != nil {
		t.Fatalf("status after reconnecting: %v", err)
	}
}
