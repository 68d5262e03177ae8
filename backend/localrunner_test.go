package backend

import (
	"bytes"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"cubicle/backend/events"
	"cubicle/backend/fault"
	"cubicle/backend/fleet"
	"cubicle/backend/nodes"
	"cubicle/backend/store"
	"cubicle/backend/vm"
)

// startLocalNode starts a backend without an engine on data directory dir with node "local"
// reached as mode says, behind its HTTP handler.
func startLocalNode(t *testing.T, dir, mode string) (*Backend, func(method, path string) (int, string)) {
	t.Helper()
	b, err := New(Config{DataDir: dir, Engine: "none", LocalNode: mode, AllowedHosts: []string{"127.0.0.1"},
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Start(t.Context()); err != nil {
		b.Close()
		t.Fatal(err)
	}
	if err := b.WaitEngine(t.Context()); err != nil {
		b.Close()
		t.Fatal(err)
	}
	ts := httptest.NewServer(b.API.Handler())
	t.Cleanup(ts.Close)
	sess, err := b.LocalSession()
	if err != nil {
		t.Fatal(err)
	}
	return b, func(method, path string) (int, string) {
		t.Helper()
		req, _ := http.NewRequest(method, ts.URL+path, nil)
		req.Header.Set("Authorization", "Bearer "+sess.Token)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		raw, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(raw)
	}
}

// waitLocalLinked waits (bounded) until node "local" is reached over the managed local
// runner's link: the runner connects behind Start, and placement moves node local onto its
// link a moment after the link is up.
func waitLocalLinked(t *testing.T, b *Backend) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		n, err := b.fleet.Node(nodes.LocalID)
		if _, linked := n.(*nodes.Remote); err == nil && linked {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("node local is not reached over the managed local runner after 30 s (%T, %v)", n, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// waitLocal waits (bounded) until node "local"'s link is up or down as want says.
func waitLocal(t *testing.T, b *Backend, want bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for b.Nodes.Connected(nodes.LocalID) != want {
		if time.Now().After(deadline) {
			t.Fatalf("node local connected=%v after 30 s, want %v", !want, want)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestManagedLocalRunner: with CUBICLE_LOCAL_NODE=runner node "local" is served by the
// managed local runner over the hub's accept path: its credential is made once, sealed
// (the data file holds no token), reused after a restart; it is neither listed nor revocable;
// the Local VM routes go over its link (they fail closed while it is down) and it reconnects
// by itself when the link breaks. A bad switch value is refused with what to use.
func TestManagedLocalRunner(t *testing.T) {
	dir := t.TempDir()
	if _, err := New(Config{DataDir: dir, Engine: "none", LocalNode: "sideways"}); !errors.Is(err, fault.ErrInvalid) ||
		!strings.Contains(err.Error(), `"runner"`) {
		t.Fatalf("bad switch: %v", err)
	}
	b, call := startLocalNode(t, dir, LocalNodeRunner)
	waitLocal(t, b, true) // it connects in the background (TestStartDoesNotWaitForLocalRunner)
	waitLocalLinked(t, b) // and node local moves onto its link (the hub's OnConnect)
	hello, _ := b.Nodes.Hello(nodes.LocalID)
	if hello.Name != "this computer" || hello.EngineError == "" {
		t.Fatalf("hello of the managed runner: %+v", hello)
	}
	rec, err := b.Store.Runner(nodes.LocalID)
	if err != nil || !rec.Managed || len(rec.TokenHash) != 32 || len(rec.SecretSealed) == 0 {
		t.Fatalf("registry record: %+v, %v", rec, err)
	}
	tok := b.local.r.NodeID() // the runner serves node local
	if tok != nodes.LocalID {
		t.Fatalf("managed runner node %q", tok)
	}
	if code, body := call("GET", "/api/app/admin/local-vm"); code != 200 || !strings.Contains(body, "turned off") {
		t.Fatalf("status over the link: %d %s", code, body)
	}
	if code, body := call("GET", "/api/app/admin/runners"); code != 200 || strings.Contains(body, `"local"`) {
		t.Fatalf("the managed runner is listed as an external runner: %d %s", code, body)
	}
	if code, body := call("DELETE", "/api/app/admin/runners/local"); code != 400 {
		t.Fatalf("revoke local: %d %s", code, body)
	}

	// Node local's token is not guessable from outside: the public accept path refuses a
	// made-up secret, and the real one (never shown) only hashes to the registry.
	req := httptest.NewRequest("GET", "/api/runner/connect", nil)
	req.Host = "127.0.0.1"
	req.Header.Set("Authorization", "Bearer local.not-the-secret")
	w := httptest.NewRecorder()
	b.API.Handler().ServeHTTP(w, req)
	if w.Code != http.StatusUnauthorized || !b.Nodes.Connected(nodes.LocalID) {
		t.Fatalf("a guessed local token: %d %s", w.Code, w.Body)
	}

	// The link breaks: calls fail closed, then the runner is back by itself.
	b.local.ln.drop()
	waitLocal(t, b, false) // the runner waits at least 250 ms before it dials again
	waitLocal(t, b, true)
	if code, body := call("GET", "/api/app/admin/local-vm"); code != 200 {
		t.Fatalf("status after the reconnect: %d %s", code, body)
	}
	b.local.ln.mu.Lock()
	open := len(b.local.ln.open)
	b.local.ln.mu.Unlock()
	if open != 2 {
		t.Fatalf("%d in-memory connection ends open after a reconnect, want the link's 2", open)
	}
	// The runner stopped: the local node's routes go nowhere else (one code path).
	if err := b.local.stop(); err != nil {
		t.Fatal(err)
	}
	waitLocal(t, b, false)
	if code, body := call("GET", "/api/app/admin/local-vm"); code != 503 || !strings.Contains(body, "this computer (local)") {
		t.Fatalf("status with the runner stopped: %d %s", code, body)
	}
	b.local.cancel = nil
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}

	// The data file does not hold the token; the sealing key is in the secrets (0600).
	tokSecret := func() string {
		key, err := os.ReadFile(filepath.Join(dir, "secrets", "local-runner.key"))
		if err != nil {
			t.Fatal(err)
		}
		st, err := store.Open(filepath.Join(dir, DBFile), store.Options{})
		if err != nil {
			t.Fatal(err)
		}
		defer st.Close()
		h, _ := nodes.New(nodes.Config{Store: st})
		tok, err := h.LocalCredential(key)
		if err != nil {
			t.Fatal(err)
		}
		return tok
	}
	tok1 := tokSecret()
	raw, err := os.ReadFile(filepath.Join(dir, DBFile))
	if err != nil {
		t.Fatal(err)
	}
	if _, sec, _ := strings.Cut(tok1, "."); bytes.Contains(raw, []byte(sec)) {
		t.Fatal("the data file holds the local runner's secret in the clear")
	}
	if fi, err := os.Stat(filepath.Join(dir, "secrets", "local-runner.key")); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("sealing key: %v %v", fi.Mode(), err)
	}

	// A server restart: the same credential, connected again without anyone doing anything.
	b2, call2 := startLocalNode(t, dir, LocalNodeRunner)
	defer b2.Close()
	if code, body := call2("GET", "/api/app/admin/local-vm"); code != 200 {
		t.Fatalf("status after the restart: %d %s", code, body)
	}
	b2.Close()
	if tok2 := tokSecret(); tok2 != tok1 {
		t.Fatal("the restart made a new credential")
	}

	// Secrets replaced (the key file lost): a new credential, the runner still connects.
	os.Remove(filepath.Join(dir, "secrets", "local-runner.key"))
	b3, call3 := startLocalNode(t, dir, LocalNodeRunner)
	defer b3.Close()
	if code, body := call3("GET", "/api/app/admin/local-vm"); code != 200 {
		t.Fatalf("status with a new key: %d %s", code, body)
	}
	b3.Close()
	if tokSecret() == tok1 {
		t.Fatal("a lost sealing key kept the old credential")
	}

	// Direct: no runner, the routes call the manager.
	b4, call4 := startLocalNode(t, dir, LocalNodeDirect)
	defer b4.Close()
	if b4.local != nil || b4.Nodes.Connected(nodes.LocalID) {
		t.Fatal("direct mode started the managed runner")
	}
	if code, body := call4("GET", "/api/app/admin/local-vm"); code != 200 {
		t.Fatalf("status direct: %d %s", code, body)
	}
}

// TestStartDoesNotWaitForLocalRunner (issue 31 item 1): the server answers while its managed
// local runner is still connecting. Start returns with the runner's accept path held shut;
// /api/health and node "local"'s routes answer at once (the VM manager the runner wraps serves
// them), the runner shows as connecting; once the accept path opens the runner connects,
// shows as connected and node "local" is reached over its link.
func TestStartDoesNotWaitForLocalRunner(t *testing.T) {
	b, err := New(Config{DataDir: t.TempDir(), Engine: "none", LocalNode: LocalNodeRunner, AllowedHosts: []string{"127.0.0.1"},
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	sub := b.Events.Subscribe(events.SubscribeOptions{Types: []events.Type{events.RunnerStatus}})
	defer sub.Close()
	b.local.gate = make(chan struct{})
	started := make(chan error, 1)
	go func() { started <- b.Start(t.Context()) }()
	select {
	case err := <-started:
		if err != nil {
			t.Fatalf("Start: %v", err)
		}
	case <-time.After(15 * time.Second):
		close(b.local.gate)
		t.Fatal("Start waits for the managed local runner's connection")
	}
	if b.Nodes.Connected(nodes.LocalID) {
		t.Fatal("the runner connected through a closed accept path")
	}
	ts := httptest.NewServer(b.API.Handler())
	defer ts.Close()
	sess, err := b.LocalSession()
	if err != nil {
		t.Fatal(err)
	}
	get := func(path string) (int, string) {
		req, _ := http.NewRequest("GET", ts.URL+path, nil)
		req.Header.Set("Authorization", "Bearer "+sess.Token)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		raw, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(raw)
	}
	if code, body := get("/api/health"); code != 200 {
		t.Fatalf("health while the runner connects: %d %s", code, body)
	}
	if code, body := get("/api/app/admin/local-vm"); code != 200 || !strings.Contains(body, "turned off") {
		t.Fatalf("node local's status while the runner connects: %d %s", code, body)
	}
	if v, _ := b.fleet.Local(); !isManager(v) {
		t.Fatal("node local is not served by the VM manager while the runner connects")
	}
	close(b.local.gate)
	waitLocal(t, b, true)
	deadline := time.Now().Add(10 * time.Second)
	for !b.local.Connected() && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	if v, _ := b.fleet.Local(); isManager(v) {
		t.Fatal("node local is not reached over the runner's link once it is up")
	}
	if code, body := get("/api/app/admin/local-vm"); code != 200 || !strings.Contains(body, "turned off") {
		t.Fatalf("node local's status over the link: %d %s", code, body)
	}
	var states []string
	for len(states) < 2 {
		select {
		case e := <-sub.C():
			if r, ok := e.Data.(events.Runner); ok && r.NodeID == nodes.LocalID {
				states = append(states, r.State)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("runner states published: %v, want connecting then connected", states)
		}
	}
	if states[0] != events.RunnerConnecting || states[1] != events.RunnerConnected {
		t.Fatalf("runner states published: %v, want connecting then connected", states)
	}
}

func isManager(v fleet.Node) bool { _, ok := v.(*vm.Manager); return ok }
