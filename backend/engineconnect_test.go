package backend

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"cubicle/backend/engineconn"
	"cubicle/backend/events"
	"cubicle/backend/nodes"
	"cubicle/backend/store"
	"cubicle/backend/vm"
)

// TestServerAnswersWhileEngineConnects (issue 31 item 1): the engine's discovery and
// connection were on the server's start (backend.New), so nothing answered until the engine
// did. Here the engine's connection is held back: New and Start must return, /api/health and
// the Local VM status answer at once — the engine shown as connecting, the desktops as they
// were recorded (unreachable meanwhile, nothing changed or added) — and an action that needs
// the engine answers 503 "still connecting" without creating anything. Once the connection
// goes on, the engine this machine has (or the reason it has none) is in force: the same
// desktop records, the action no longer refused for connecting, the runner announced with
// its engine.
func TestServerAnswersWhileEngineConnects(t *testing.T) {
	gate := make(chan struct{})
	var once sync.Once
	open := func() { once.Do(func() { close(gate) }) }
	var real atomic.Bool // the real connection succeeded
	held := func(ctx context.Context, s store.EngineSettings, log *slog.Logger) (*engineconn.ConnectedEngine, error) {
		select {
		case <-gate:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		eng, err := engineconn.ConnectEngineWith(ctx, s, log)
		real.Store(err == nil)
		return eng, err
	}
	dir := t.TempDir()
	// A desktop the data directory already has (its container is gone: the engine decides).
	pre, err := New(Config{DataDir: dir, Engine: "none", AllowedHosts: []string{"127.0.0.1"}, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now().UTC()
	kept := store.VMInstance{ID: "vm-kept", NodeID: "local", Scope: "shared", AccountID: "nobody", State: vm.StateStopped,
		ContainerName: "cubicle-vm-kept", ContainerID: "0123456789ab", CreatedAt: now, UpdatedAt: now}
	if err := pre.Store.PutVMInstance(kept); err != nil {
		t.Fatal(err)
	}
	pre.Close()

	b, err := New(Config{DataDir: dir, Engine: "podman", AllowedHosts: []string{"127.0.0.1"},
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), LocalNode: LocalNodeRunner,
		engineConnect: held, engineWait: 300 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	defer open() // Close waits for the connection: let it end (first of the deferred)
	sub := b.Events.Subscribe(events.SubscribeOptions{Types: []events.Type{events.RunnerStatus}})
	defer sub.Close()
	started := make(chan error, 1)
	go func() { started <- b.Start(t.Context()) }()
	select {
	case err := <-started:
		if err != nil {
			t.Fatalf("Start: %v", err)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("Start waits for the container engine's connection")
	}
	ts := httptest.NewServer(b.API.Handler())
	defer ts.Close()
	sess, err := b.LocalSession()
	if err != nil {
		t.Fatal(err)
	}
	call := func(method, path, body string) (int, string) {
		t.Helper()
		req, _ := http.NewRequest(method, ts.URL+path, strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+sess.Token)
		if body != "" {
			req.Header.Set("Content-Type", "application/json")
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		raw, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(raw)
	}
	if code, body := call("GET", "/api/health", ""); code != 200 {
		t.Fatalf("health while the engine connects: %d %s", code, body)
	}
	var st vm.Status
	status := func() {
		t.Helper()
		code, body := call("GET", "/api/app/admin/local-vm", "")
		if code != 200 {
			t.Fatalf("Local VM status: %d %s", code, body)
		}
		st = vm.Status{}
		if err := json.Unmarshal([]byte(body), &st); err != nil {
			t.Fatal(err)
		}
	}
	status()
	if !st.Engine.Connecting || !strings.Contains(st.Engine.Problem, vm.ErrConnecting) {
		t.Fatalf("engine while it connects: %+v, want connecting", st.Engine)
	}
	if len(st.Instances) != 1 || st.Instances[0].ID != kept.ID || st.Instances[0].State != vm.StateStopped {
		t.Fatalf("desktops while the engine connects: %+v, want the recorded one as it was", st.Instances)
	}
	if code, body := call("GET", "/api/app/admin/local-vm/engine", ""); code != 200 || !strings.Contains(body, `"connecting":true`) {
		t.Fatalf("engine status while it connects: %d %s", code, body)
	}
	code, body := call("POST", "/api/app/agents", `{"name":"Ada"}`)
	if code != 201 {
		t.Fatalf("create agent while the engine connects: %d %s", code, body)
	}
	var ag struct{ ID string }
	json.Unmarshal([]byte(body), &ag)
	if code, body := call("POST", "/api/app/agents/"+ag.ID+"/local-vm/start", ""); code != 503 || !strings.Contains(body, vm.ErrConnecting) {
		t.Fatalf("desktop start while the engine connects: %d %s, want 503 saying it still connects", code, body)
	}
	if ins, _ := b.Store.VMInstances("local"); len(ins) != 1 || ins[0] != kept {
		t.Fatalf("records after a refused start: %+v, want only the one there was, unchanged", ins)
	}
	if code, _ := call("GET", "/api/app/admin/housekeeping", ""); code != 503 {
		t.Fatalf("leftovers while the engine connects: %d, want 503", code)
	}

	open()
	wctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	if err := b.WaitEngine(wctx); err != nil {
		t.Fatal(err)
	}
	status()
	if st.Engine.Connecting || st.Engine.Found != real.Load() {
		t.Fatalf("engine once connected: %+v (connection succeeded: %v)", st.Engine, real.Load())
	}
	if ins, _ := b.Store.VMInstances("local"); len(ins) != 1 || ins[0].ID != kept.ID {
		t.Fatalf("records once the engine is there: %+v, want the one there was (not lost, not doubled)", ins)
	}
	code, body = call("POST", "/api/app/agents/"+ag.ID+"/local-vm/start", "")
	if strings.Contains(body, vm.ErrConnecting) {
		t.Fatalf("desktop start once the engine is there: %d %s, still refused as connecting", code, body)
	}
	t.Logf("desktop start once the engine is there (no image prepared): %d %s", code, body)
	// Node local is announced connecting (no engine yet), then with the engine it has.
	var seen []events.Runner
	deadline := time.After(20 * time.Second)
	for {
		select {
		case e := <-sub.C():
			if r, ok := e.Data.(events.Runner); ok && r.NodeID == nodes.LocalID {
				seen = append(seen, r)
			}
		case <-deadline:
			t.Fatalf("node local's announcements: %+v, want connecting, then connected naming its engine", seen)
		}
		if n := len(seen); n > 0 && seen[n-1].State == events.RunnerConnected && (seen[n-1].Engine != "") == real.Load() {
			break
		}
	}
	if seen[0].State != events.RunnerConnecting || seen[0].EngineError != vm.ErrConnecting {
		t.Fatalf("node local's first announcement: %+v, want connecting while its engine connects", seen[0])
	}
}
