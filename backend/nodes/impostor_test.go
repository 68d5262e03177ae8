package nodes_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gorilla/websocket"
	"github.com/hashicorp/yamux"

	"cubicle/backend/events"
	"cubicle/backend/nodes"
	"cubicle/backend/store"
	"cubicle/backend/vm"
	"cubicle/runner"
	"cubicle/runner/wire"
)

// events records what the hub publishes.
type eventLog struct {
	mu  sync.Mutex
	evs []events.Runner
}

func (l *eventLog) Publish(t events.Type, _ events.Audience, data any) {
	if r, ok := data.(events.Runner); ok && t == events.RunnerStatus {
		l.mu.Lock()
		l.evs = append(l.evs, r)
		l.mu.Unlock()
	}
}

func (l *eventLog) runners() []events.Runner {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]events.Runner(nil), l.evs...)
}

func newEventHub(t *testing.T) (*nodes.Hub, *httptest.Server, *eventLog, *store.Store) {
	t.Helper()
	st, err := store.Open(filepath.Join(t.TempDir(), "s.db"), store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	log := &eventLog{}
	h, err := nodes.New(nodes.Config{Store: st, Version: "9.9.9", Events: log})
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.Handle("GET "+wire.ConnectPath, h)
	srv := httptest.NewServer(mux)
	t.Cleanup(func() {
		srv.Close()
		h.Close()
		st.Close()
	})
	return h, srv, log, st
}

// fakeRunner speaks the runner's side of the link with a real token but answers every op
// with answer(op): what a tampered runner could say. It returns the dial's HTTP status when
// the server refuses it.
func fakeRunner(t *testing.T, server, token string, answer func(op string) any) (status int, refusal string) {
	t.Helper()
	url := "ws" + strings.TrimPrefix(server, "http") + wire.ConnectPath
	ws, resp, err := websocket.DefaultDialer.Dial(url, http.Header{"Authorization": {"Bearer " + token}})
	if err != nil {
		if resp == nil {
			t.Fatalf("dial: %v", err)
		}
		var body struct{ Error string }
		json.NewDecoder(resp.Body).Decode(&body)
		return resp.StatusCode, body.Error
	}
	t.Cleanup(func() { ws.Close() })
	if err := ws.WriteJSON(wire.Hello{Protocol: wire.Protocol, Version: "9.9.9", OS: "linux", Arch: "amd64", Capabilities: []string{}}); err != nil {
		t.Fatal(err)
	}
	var welcome wire.Welcome
	if err := ws.ReadJSON(&welcome); err != nil {
		t.Fatal(err)
	}
	sess, err := yamux.Server(wire.NewConn(ws), wire.SessionConfig())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sess.Close() })
	go func() {
		for {
			st, err := sess.Accept()
			if err != nil {
				return
			}
			go func() {
				defer st.Close()
				var req wire.Request
				if wire.ReadFrame(st, &req) != nil {
					return
				}
				raw, _ := json.Marshal(answer(req.Op))
				wire.WriteFrame(st, wire.Response{Result: raw})
			}()
		}
	}()
	return http.StatusSwitchingProtocols, ""
}

// TestRunnerCannotClaimAnotherNode: whatever node id a runner writes into its answers
// (nodeId "local", another runner's id), the server shows the node the token authenticated.
func TestRunnerCannotClaimAnotherNode(t *testing.T) {
	h, srv, _, st := newEventHub(t)
	if err := st.CreateAgent(store.Agent{ID: "a1", AccountID: "acc", Name: "Ada", Computer: "vm", CreatedAt: time.Now()}); err != nil {
		t.Fatal(err)
	}
	c, err := h.Create("liar", false, srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	lie := vm.InstanceView{ID: "d1", NodeID: "local", Scope: "agent", AccountID: "acc", AgentID: "a1", State: "running"}
	fakeRunner(t, srv.URL, c.Token, func(op string) any {
		switch op {
		case wire.OpStatus:
			return vm.Status{NodeID: "local", Instances: []vm.InstanceView{lie}}
		case wire.OpAdminAct:
			return lie
		case wire.OpAgent, wire.OpAct:
			return vm.AgentView{AgentID: "a1", Desktop: lie}
		case wire.OpAgentData:
			return vm.AgentData{AgentID: "a1", Desktops: []vm.InstanceView{lie}, Shared: &lie}
		}
		return struct{}{}
	})
	waitFor(t, "the runner to connect", func() bool { return h.Connected(c.ID) })
	remote, err := h.Node(c.ID)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	stat, err := remote.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if stat.NodeID != c.ID || len(stat.Instances) != 1 || stat.Instances[0].NodeID != c.ID {
		t.Fatalf("status of runner %s shows node %q, desktops %+v", c.ID, stat.NodeID, stat.Instances)
	}
	v, err := remote.AdminAct(ctx, "d1", "stop", false)
	if err != nil || v.NodeID != c.ID {
		t.Fatalf("admin action answer shows node %q (%v)", v.NodeID, err)
	}
	av, err := remote.Agent(ctx, "acc", "a1")
	if err != nil || av.Desktop.NodeID != c.ID {
		t.Fatalf("agent view shows node %q (%v)", av.Desktop.NodeID, err)
	}
	d, err := remote.AgentData(ctx, "acc", "a1", false)
	if err != nil || len(d.Desktops) != 1 || d.Desktops[0].NodeID != c.ID || d.Shared == nil || d.Shared.NodeID != c.ID {
		t.Fatalf("agent data shows %+v (%v)", d, err)
	}
}

// TestSecondRunnerOnOneTokenIsRefused: while a runner's link is alive, a second process with
// the same token is refused (409, saying why), the first keeps its link, and the
// administrators are told (a runner.status event and the runner's duplicate field).
func TestSecondRunnerOnOneTokenIsRefused(t *testing.T) {
	h, srv, log, _ := newEventHub(t)
	c, err := h.Create("box", false, srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	calls := 0
	var mu sync.Mutex
	fakeRunner(t, srv.URL, c.Token, func(op string) any {
		mu.Lock()
		calls++
		mu.Unlock()
		return vm.Status{NodeID: c.ID}
	})
	waitFor(t, "the first runner to connect", func() bool { return h.Connected(c.ID) })
	code, why := fakeRunner(t, srv.URL, c.Token, func(string) any { return vm.Status{} })
	if code != http.StatusConflict || !strings.Contains(why, "already connected") {
		t.Fatalf("second runner on one token: HTTP %d %q; want 409 saying the runner is already connected", code, why)
	}
	// The first still answers over its link.
	remote, _ := h.Node(c.ID)
	if _, err := remote.Status(context.Background()); err != nil || !h.Connected(c.ID) {
		t.Fatalf("the first runner lost its link: %v", err)
	}
	views, err := h.List(context.Background())
	if err != nil || len(views) != 1 || views[0].Duplicate == nil || views[0].Duplicate.From == "" || views[0].Duplicate.At.IsZero() {
		t.Fatalf("the runner's view does not tell the admin of the second process: %+v, %v", views, err)
	}
	told := false
	for _, ev := range log.runners() {
		told = told || (ev.NodeID == c.ID && ev.Duplicate != nil)
	}
	if !told {
		t.Fatalf("no runner.status event told of the second process: %+v", log.runners())
	}
	// A real runner refused so stops with a clear error instead of knocking forever.
	r, err := runner.New(runner.Config{Server: srv.URL, Token: c.Token, DataDir: t.TempDir(), Engine: "none", Version: "9.9.9",
		MaxBackoff: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := r.Run(ctx); !errors.Is(err, runner.ErrRefused) || !strings.Contains(err.Error(), "already connected") {
		t.Fatalf("a real second runner: %v; want it refused, saying another process is connected", err)
	}
}
