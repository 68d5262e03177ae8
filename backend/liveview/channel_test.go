package liveview

import (
	"bytes"
	"context"
	"errors"
	"image/jpeg"
	"io"
	"log"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gorilla/websocket"
	"github.com/jezek/xgb"

	"cubicle/backend/auth"
	"cubicle/backend/control"
	"cubicle/backend/profile"
	"cubicle/backend/screen"
	"cubicle/backend/screen/screentest"
	"cubicle/backend/store"
	"cubicle/internal/testenv"
)

// Displays :82–:85 belong to the computer channel's tests and benchmarks.

// fakeDesktops stands in for the VM manager: it maps agents to desktops. The desktops
// themselves are real drivers on real Xvfb displays.
type fakeDesktops struct {
	mu    sync.Mutex
	desks map[string]Desktop // agent id → desktop
	calls atomic.Int64
}

func (f *fakeDesktops) Desktop(ctx context.Context, accountID, agentID string) (Desktop, error) {
	f.calls.Add(1)
	f.mu.Lock()
	defer f.mu.Unlock()
	d, ok := f.desks[agentID]
	if !ok {
		return Desktop{State: "absent"}, nil
	}
	return d, nil
}

func (f *fakeDesktops) set(agentID string, d Desktop) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.desks[agentID] = d
}

// testPassword is every test account's password.
const testPassword = "correct horse battery staple"

// computerServer is the HTTP front's part the channel relies on, over a real store with an
// admin and a user logged in: real sessions and agents. It takes a testing.TB so benchmarks
// can use it too.
type computerServer struct {
	auth     *auth.Service
	profiles *profile.Service
	log      *slog.Logger
	admin    string // admin session token
	user     string // session token of bob (account user1)
}

func newComputerServer(tb testing.TB) *computerServer {
	tb.Helper()
	st, err := store.Open(filepath.Join(tb.TempDir(), "cubicle.db"), store.Options{})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { st.Close() })
	var log *slog.Logger
	if _, bench := tb.(*testing.B); bench {
		log = slog.New(slog.NewTextHandler(io.Discard, nil))
	} else {
		log = slog.New(slog.NewTextHandler(testenv.Writer(tb), nil))
	}
	as, err := auth.New(auth.Config{Accounts: st, Key: []byte(strings.Repeat("k", 32)), Logger: log})
	if err != nil {
		tb.Fatal(err)
	}
	if _, err := as.EnsureAdmin(auth.Bootstrap{Username: "admin", Password: testPassword}); err != nil {
		tb.Fatal(err)
	}
	hash, err := auth.HashPassword(testPassword)
	if err != nil {
		tb.Fatal(err)
	}
	if err := st.CreateAccount(store.Account{ID: "user1", Username: "bob", PasswordHash: hash, Role: store.RoleMember}); err != nil {
		tb.Fatal(err)
	}
	cs := &computerServer{auth: as, profiles: profile.New(st, log), log: log}
	for _, u := range []struct {
		name string
		tok  *string
	}{{"admin", &cs.admin}, {"bob", &cs.user}} {
		p, err := as.Login(u.name, testPassword, "test")
		if err != nil {
			tb.Fatal(err)
		}
		*u.tok = p.Token
	}
	return cs
}

// route is the computer route as the HTTP front serves it (package api: server.go's
// computerRoute): the session from a bearer token or, on an upgrade, ?access_token=; the
// agent must be the caller's; both checked again while the connection lasts.
func (f *computerServer) route(ch *Channel) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		tok, _ := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
		if tok == "" {
			tok = r.URL.Query().Get("access_token")
		}
		p, err := f.auth.Authenticate(tok)
		if err != nil {
			http.Error(w, err.Error(), http.StatusUnauthorized)
			return
		}
		mine := func(agentID string) error {
			_, err := f.profiles.Get(p.AccountID, agentID)
			return err
		}
		c := Caller{AccountID: p.AccountID, Username: p.Username, AgentID: r.PathValue("id"), Owns: mine}
		if err := mine(c.AgentID); err != nil {
			http.Error(w, err.Error(), http.StatusNotFound)
			return
		}
		c.Valid = func() error {
			_, err := f.auth.Authenticate(tok)
			return errors.Join(err, mine(c.AgentID))
		}
		if err := ch.Serve(w, r, c); err != nil {
			http.Error(w, err.Error(), http.StatusServiceUnavailable)
		}
	}
}

// computerEnv is the channel behind the front's route on a real httptest server.
type computerEnv struct {
	f        *computerServer
	ts       *httptest.Server
	ch       *Channel
	ctl      *control.Manager
	hubs     *screen.Hubs
	desktops *fakeDesktops
	adminID  string
}

func newComputerEnv(t testing.TB, f *computerServer, cfg Config) *computerEnv {
	t.Helper()
	return newComputerEnvTTL(t, f, cfg, 0)
}

// newComputerEnvTTL is newComputerEnv with a lease lifetime (0: the default).
func newComputerEnvTTL(t testing.TB, f *computerServer, cfg Config, ttl time.Duration) *computerEnv {
	t.Helper()
	e := &computerEnv{f: f, desktops: &fakeDesktops{desks: map[string]Desktop{}}}
	var chp atomic.Pointer[Channel]
	e.ctl = control.New(control.Config{Logger: f.log, LeaseTTL: ttl, OnChange: func(c control.Change) {
		if ch := chp.Load(); ch != nil {
			ch.ControlChanged(c)
		}
	}})
	if err := e.ctl.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	e.hubs = screen.New(screen.Config{Observer: e.ctl, Logger: f.log})
	cfg.Desktops, cfg.Control, cfg.Screens, cfg.Logger = e.desktops, e.ctl, e.hubs, f.log
	ch, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	chp.Store(ch)
	e.ch = ch
	mux := http.NewServeMux()
	mux.Handle("GET /api/app/agents/{id}/computer", f.route(ch))
	e.ts = httptest.NewServer(mux)
	t.Cleanup(func() {
		e.ts.Close()
		ch.Close()
		e.hubs.Close()
		e.ctl.Close()
	})
	p, err := f.auth.Authenticate(f.admin)
	if err != nil {
		t.Fatal(err)
	}
	e.adminID = p.AccountID
	return e
}

func (e *computerEnv) agent(t testing.TB, account, name string) string {
	t.Helper()
	a, err := e.f.profiles.Create(account, name)
	if err != nil {
		t.Fatal(err)
	}
	return a.ID
}

func (e *computerEnv) url(agentID string) string {
	return "ws" + strings.TrimPrefix(e.ts.URL, "http") + "/api/app/agents/" + agentID + "/computer"
}

func authHeader(token string) http.Header {
	return http.Header{"Authorization": {"Bearer " + token}}
}

func (e *computerEnv) connect(t testing.TB, token, agentID string) *screentest.Client {
	t.Helper()
	c, resp, err := screentest.Dial(t, e.url(agentID), authHeader(token), true)
	if err != nil {
		code := 0
		if resp != nil {
			code = resp.StatusCode
		}
		t.Fatalf("dial %s: %v (%d)", agentID, err, code)
	}
	return c
}

func wantReply(t *testing.T, r map[string]any, typ, reason string) {
	t.Helper()
	if r["type"] != typ || (reason != "" && r["reason"] != reason) {
		t.Fatalf("reply %v, want type %q reason %q", r, typ, reason)
	}
}

func TestComputerChannelWithRealDriver(t *testing.T) {
	d := screentest.Start(t, 82, 640, 400)
	painter := screentest.NewPainter(t, d)
	f := newComputerServer(t)
	e := newComputerEnv(t, f, Config{})
	agent := e.agent(t, e.adminID, "researcher")
	other := e.agent(t, e.adminID, "writer") // shares the desktop
	bobs := e.agent(t, "user1", "bobs")      // a fixed desktop both accounts may use
	for _, a := range []string{agent, other, bobs} {
		e.desktops.set(a, Desktop{ID: "desk-1", State: "running", Client: d.Client, Shared: true})
	}

	const viewers = 3
	cs := make([]*screentest.Client, viewers)
	for i := range cs {
		cs[i] = e.connect(t, f.admin, agent)
	}
	c := cs[0]
	t.Run("every viewer gets status, then frames", func(t *testing.T) {
		for i, v := range cs {
			st := v.Status(5*time.Second, func(st map[string]any) bool { return st["streaming"] == true })
			if st["desktopId"] != "desk-1" || st["state"] != "running" || st["control"] != nil {
				t.Errorf("viewer %d status %v", i, st)
			}
			m, ok := v.FrameAfter(0, 5*time.Second)
			if !ok {
				t.Fatalf("viewer %d: no frame", i)
			}
			if m.Frame.Encoding != frameJPEG || m.Frame.Width != 640 || m.Frame.Height != 400 {
				t.Errorf("viewer %d: header %+v", i, m.Frame)
			}
			if img, err := jpeg.Decode(bytes.NewReader(m.Data)); err != nil || img.Bounds().Dx() != 640 {
				t.Errorf("viewer %d: JPEG: %v", i, err)
			}
		}
		if n := e.hubs.Viewers("desk-1"); n != viewers {
			t.Errorf("hub has %d viewers, want %d (one stream for all)", n, viewers)
		}
	})
	for _, v := range cs {
		v.Quiet(300 * time.Millisecond)
	}
	t.Run("an idle screen sends nothing", func(t *testing.T) {
		before := c.BytesRead()
		if m, ok := c.Next(time.Second); ok {
			t.Fatalf("message while idle: %+v", m.JSON)
		}
		if n := c.BytesRead() - before; n > 0 {
			t.Errorf("%d bytes in 1 s while idle", n)
		}
	})
	t.Run("a drawing reaches every viewer", func(t *testing.T) {
		after := c.Frame()
		painter.Fill(10, 300, 40, 40)
		for i, v := range cs {
			if _, ok := v.FrameAfter(after, 3*time.Second); !ok {
				t.Fatalf("viewer %d: no changed frame", i)
			}
		}
	})
	click := func(lease map[string]any, frame uint64) map[string]any {
		return map[string]any{"type": "input", "token": lease["token"], "version": lease["version"],
			"frameId": frame, "action": "click", "x": 200, "y": 200}
	}
	var lease map[string]any
	t.Run("input without control is refused", func(t *testing.T) {
		r := c.Call(map[string]any{"type": "input", "token": "x", "version": 1, "frameId": c.Frame(), "action": "click", "x": 1, "y": 1})
		wantReply(t, r, "error", string(control.ReasonNotHolder))
	})
	t.Run("take over, input changes the screen", func(t *testing.T) {
		lease = c.Call(map[string]any{"type": "take_over"})
		wantReply(t, lease, "lease", "")
		if lease["desktopId"] != "desk-1" || lease["token"] == "" || lease["version"].(float64) < 1 {
			t.Fatalf("lease %v", lease)
		}
		st := cs[1].Status(3*time.Second, func(st map[string]any) bool { return st["control"] != nil })
		ctl := st["control"].(map[string]any)
		if ctl["name"] != "admin" || ctl["kind"] != "person" || ctl["expiresAt"] == nil || ctl["version"] != lease["version"] {
			t.Errorf("others see control %v", ctl)
		}
		c.Quiet(200 * time.Millisecond)
		after := c.Frame()
		r := c.Call(click(lease, after))
		wantReply(t, r, "ok", "")
		if _, ok := c.FrameAfter(after, 3*time.Second); !ok {
			t.Fatal("no changed frame after the click")
		}
		r = c.Call(map[string]any{"type": "input", "token": lease["token"], "version": lease["version"],
			"frameId": c.Frame(), "action": "type", "text": "hi 你好"})
		wantReply(t, r, "ok", "")
	})
	t.Run("renew extends the lease", func(t *testing.T) {
		r := c.Call(map[string]any{"type": "renew", "token": lease["token"]})
		wantReply(t, r, "lease", "")
		if r["token"] != lease["token"] || r["version"] != lease["version"] || r["renewInSeconds"].(float64) <= 0 {
			t.Fatalf("renew %v (lease %v)", r, lease)
		}
	})
	t.Run("fencing", func(t *testing.T) {
		c.Quiet(200 * time.Millisecond)
		frame := c.Frame()
		oc := e.connect(t, f.admin, other)
		oc.FrameAfter(0, 5*time.Second)
		bc := e.connect(t, f.user, bobs)
		bc.FrameAfter(0, 5*time.Second)
		tests := []struct {
			name   string
			client *screentest.Client
			msg    map[string]any
			reason string
		}{
			{"stale version", c, map[string]any{"type": "input", "token": lease["token"], "version": lease["version"].(float64) - 1, "frameId": frame, "action": "click", "x": 5, "y": 5}, string(control.ReasonStaleVersion)},
			{"wrong token", c, map[string]any{"type": "input", "token": "00", "version": lease["version"], "frameId": frame, "action": "click", "x": 5, "y": 5}, string(control.ReasonNotHolder)},
			{"no frame", c, map[string]any{"type": "input", "token": lease["token"], "version": lease["version"], "action": "click", "x": 5, "y": 5}, string(control.ReasonNoFrame)},
			{"a frame never sent", c, click(lease, frame+1000), reasonUnknownFrame},
			{"another agent's channel", oc, click(lease, oc.Frame()), string(control.ReasonWrongAgent)},
			{"another account", bc, click(lease, bc.Frame()), string(control.ReasonWrongAccount)},
			{"second person takes over", bc, map[string]any{"type": "take_over"}, string(control.ReasonPersonControlling)},
			{"bad action", c, map[string]any{"type": "input", "token": lease["token"], "version": lease["version"], "frameId": frame, "action": "fly"}, "invalid"},
			{"unknown message", c, map[string]any{"type": "reboot"}, reasonBadMessage},
		}
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				tt.client.Quiet(100 * time.Millisecond)
				after := tt.client.Frame()
				r := tt.client.Call(tt.msg)
				wantReply(t, r, "error", tt.reason)
				if tt.name == "second person takes over" && !strings.Contains(r["message"].(string), "admin") {
					t.Errorf("refusal does not name the holder: %v", r["message"])
				}
				if m, ok := tt.client.FrameAfter(after, 300*time.Millisecond); ok {
					t.Errorf("refused input changed the screen (frame %d)", m.Frame.ID)
				}
			})
		}
	})
	t.Run("hand back, then the same input is refused", func(t *testing.T) {
		r := c.Call(map[string]any{"type": "hand_back", "token": lease["token"]})
		wantReply(t, r, "ok", "")
		cs[1].Status(3*time.Second, func(st map[string]any) bool { return st["control"] == nil })
		c.Quiet(200 * time.Millisecond)
		after := c.Frame()
		r = c.Call(click(lease, after))
		wantReply(t, r, "error", string(control.ReasonHandedBack))
		if _, ok := c.FrameAfter(after, 400*time.Millisecond); ok {
			t.Error("input after hand back changed the screen")
		}
	})
	t.Run("switch hands back the other desktop first", func(t *testing.T) {
		d2 := screentest.Start(t, 83, 320, 240)
		second := e.agent(t, e.adminID, "second")
		e.desktops.set(second, Desktop{ID: "desk-2", State: "running", Client: d2.Client})
		c2 := e.connect(t, f.admin, second)
		c2.FrameAfter(0, 5*time.Second)
		l1 := c.Call(map[string]any{"type": "take_over"})
		wantReply(t, l1, "lease", "")
		l2 := c2.Call(map[string]any{"type": "switch", "fromAgentId": agent, "fromToken": l1["token"]})
		wantReply(t, l2, "lease", "")
		if l2["desktopId"] != "desk-2" {
			t.Fatalf("switch lease %v", l2)
		}
		r := c.Call(click(l1, c.Frame()))
		wantReply(t, r, "error", string(control.ReasonHandedBack))
		r = c2.Call(click(l2, c2.Frame()))
		wantReply(t, r, "ok", "")
		r = c2.Call(map[string]any{"type": "switch", "fromAgentId": bobs, "fromToken": l2["token"]})
		wantReply(t, r, "error", "not_found")
		c2.Call(map[string]any{"type": "hand_back", "token": l2["token"]})
	})
}

func TestComputerStoppedDesktopKeepsTheSocketOpen(t *testing.T) {
	d := screentest.Start(t, 84, 320, 200)
	f := newComputerServer(t)
	e := newComputerEnv(t, f, Config{})
	agent := e.agent(t, e.adminID, "sleepy")
	e.desktops.set(agent, Desktop{ID: "desk-s", State: "stopped"})
	c := e.connect(t, f.admin, agent)
	st := c.Expect("status", "", 5*time.Second)
	if st["state"] != "stopped" || st["streaming"] != false || !strings.Contains(st["message"].(string), "does not start") {
		t.Fatalf("status %v", st)
	}
	calls := e.desktops.calls.Load()
	r := c.Call(map[string]any{"type": "take_over"})
	wantReply(t, r, "error", reasonNotRunning)
	if e.hubs.Streaming("desk-s") {
		t.Fatal("a stream runs for a stopped desktop")
	}
	if got := e.desktops.calls.Load(); got != calls {
		t.Errorf("take over of a stopped desktop looked it up again (%d calls)", got-calls)
	}
	e.desktops.set(agent, Desktop{ID: "desk-s", State: "running", Client: d.Client})
	e.ch.Refresh()
	c.Status(5*time.Second, func(st map[string]any) bool { return st["streaming"] == true })
	if _, ok := c.FrameAfter(0, 5*time.Second); !ok {
		t.Fatal("no frame once the desktop runs")
	}
	e.desktops.set(agent, Desktop{ID: "desk-s", State: "stopped"})
	e.ch.Refresh()
	c.Status(5*time.Second, func(st map[string]any) bool { return st["state"] == "stopped" })
	waitUntil(t, "the stream to stop", func() bool { return !e.hubs.Streaming("desk-s") })
}

// A desktop whose driver did not answer when the channel looked it up (its link still
// connecting: the desktop runs, no event comes when the link is up) is looked up again.
func TestComputerDriverThatAnswersLater(t *testing.T) {
	d := screentest.Start(t, 84, 320, 200)
	f := newComputerServer(t)
	e := newComputerEnv(t, f, Config{})
	agent := e.agent(t, e.adminID, "late")
	e.desktops.set(agent, Desktop{ID: "desk-l", State: "running", Message: "connecting to the driver timed out"})
	c := e.connect(t, f.admin, agent)
	st := c.Expect("status", "", 5*time.Second)
	if st["state"] != "running" || st["streaming"] != false {
		t.Fatalf("status %v", st)
	}
	calls := e.desktops.calls.Load()
	e.desktops.set(agent, Desktop{ID: "desk-l", State: "running", Client: d.Client}) // no event
	c.Status(10*time.Second, func(st map[string]any) bool { return st["streaming"] == true })
	if _, ok := c.FrameAfter(0, 5*time.Second); !ok {
		t.Fatal("no frame once the driver answers")
	}
	if got := e.desktops.calls.Load() - calls; got < 1 || got > 3 {
		t.Errorf("looked the desktop up %d times before its driver answered, want 1–3", got)
	}
}

func waitUntil(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestComputerSlowViewer(t *testing.T) {
	d := screentest.Start(t, 85, 640, 400)
	painter := screentest.NewPainter(t, d)
	f := newComputerServer(t)
	e := newComputerEnv(t, f, Config{WriteTimeout: time.Second})
	agent := e.agent(t, e.adminID, "busy")
	e.desktops.set(agent, Desktop{ID: "desk-b", State: "running", Client: d.Client})
	fast := e.connect(t, f.admin, agent)
	slow, _, err := screentest.Dial(t, e.url(agent), authHeader(f.admin), false)
	if err != nil {
		t.Fatal(err)
	}
	_ = slow
	fast.FrameAfter(0, 5*time.Second)
	runtime.GC()
	var m0 runtime.MemStats
	runtime.ReadMemStats(&m0)
	// Frames that compress badly fill the socket buffers quickly; the animation runs until
	// the server has dropped the client that reads nothing (its writes time out).
	ctx, cancel := context.WithTimeout(context.Background(), 40*time.Second)
	defer cancel()
	done := make(chan struct{})
	go func() { defer close(done); painter.AnimateNoise(ctx, 30*time.Millisecond) }()
	defer func() { cancel(); <-done }()
	frames := 0
	start := time.Now()
	for ctx.Err() == nil && e.hubs.Viewers("desk-b") > 1 {
		if _, ok := fast.FrameAfter(fast.Frame(), 500*time.Millisecond); ok {
			frames++
		}
		if time.Since(start) > 30*time.Second {
			t.Fatal("the client that reads nothing was not dropped within 30 s")
		}
	}
	el := time.Since(start)
	fps := float64(frames) / el.Seconds()
	runtime.GC()
	var m1 runtime.MemStats
	runtime.ReadMemStats(&m1)
	grew := int64(m1.HeapAlloc) - int64(m0.HeapAlloc)
	t.Logf("slow client dropped after %v; fast viewer meanwhile %.1f fps (%d frames); heap grew %d KiB",
		el.Round(time.Millisecond), fps, frames, grew>>10)
	if frames < 5 || fps < 3 {
		t.Errorf("a slow viewer stalled the fast one: %d frames, %.1f fps", frames, fps)
	}
	if grew > 16<<20 {
		t.Errorf("heap grew by %d MiB: frames are queued for the slow client", grew>>20)
	}
	if _, ok := fast.FrameAfter(fast.Frame(), 3*time.Second); !ok {
		t.Error("the fast viewer stopped getting frames")
	}
	fast.WS.Close()
	waitUntil(t, "the stream to stop when the last viewer leaves", func() bool { return !e.hubs.Streaming("desk-b") })
}

func (e *computerEnv) open() int {
	e.ch.mu.Lock()
	defer e.ch.mu.Unlock()
	return len(e.ch.conns)
}

func TestComputerKeepaliveAndClose(t *testing.T) {
	f := newComputerServer(t)
	// 300 ms, not less: under the race detector on a loaded machine (CI) a client that does
	// answer can miss 2.5 intervals of 100 ms, and its connection is then closed as silent.
	e := newComputerEnv(t, f, Config{PingInterval: 300 * time.Millisecond})
	agent := e.agent(t, e.adminID, "pinged")
	e.desktops.set(agent, Desktop{ID: "desk-p", State: "stopped"})
	live := e.connect(t, f.admin, agent)
	live.Expect("status", "", 5*time.Second)
	if _, _, err := screentest.Dial(t, e.url(agent), authHeader(f.admin), false); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "both connections to register", func() bool { return e.open() == 2 })
	// The client that reads nothing answers no ping: closed after 2.5 ping intervals.
	waitUntil(t, "the silent client to be closed", func() bool { return e.open() == 1 })
	time.Sleep(time.Second) // more than 2.5 intervals: a client that answers stays
	if e.open() != 1 {
		t.Fatal("the client that answers pings was closed")
	}
	done := make(chan struct{})
	go func() { e.ch.Close(); close(done) }()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("Close did not return")
	}
	for {
		var m screentest.Msg
		select {
		case m = <-live.Messages():
		case <-time.After(3 * time.Second):
			t.Fatal("no close after Close")
		}
		if m.Closed != nil {
			if !websocket.IsCloseError(m.Closed, websocket.CloseGoingAway) {
				t.Errorf("closed with %v, want going away", m.Closed)
			}
			break
		}
	}
	if e.open() != 0 {
		t.Fatalf("%d connections left after Close", e.open())
	}
	if _, resp, err := screentest.Dial(t, e.url(agent), authHeader(f.admin), true); err == nil || resp == nil || resp.StatusCode != http.StatusServiceUnavailable {
		t.Fatalf("upgrade after Close: %v %v, want 503", err, resp)
	}
}

func TestComputerLeaseExpiry(t *testing.T) {
	f := newComputerServer(t)
	e := newComputerEnvTTL(t, f, Config{}, 400*time.Millisecond)
	agent := e.agent(t, e.adminID, "expiring")
	e.desktops.set(agent, Desktop{ID: "desk-e", State: "running"}) // no driver needed
	c := e.connect(t, f.admin, agent)
	c.Expect("status", "", 5*time.Second)
	lease := c.Call(map[string]any{"type": "take_over"})
	wantReply(t, lease, "lease", "")
	st := c.Status(3*time.Second, func(st map[string]any) bool { return st["control"] != nil })
	if ctl := st["control"].(map[string]any); ctl["you"] != true {
		t.Errorf("holder does not see itself as holder: %v", ctl)
	}
	// Not renewed: the expiry is announced to the channel, and the lease is dead.
	c.Status(3*time.Second, func(st map[string]any) bool { return st["control"] == nil })
	r := c.Call(map[string]any{"type": "renew", "token": lease["token"]})
	wantReply(t, r, "error", string(control.ReasonExpired))
}

func TestMain(m *testing.M) {
	xgb.Logger = log.New(io.Discard, "", 0) // "no .Xauthority" notes from the test's X clients
	code := m.Run()
	screentest.Cleanup()
	os.Exit(code)
}

// benchEnv is one real driver at 1280x800 behind the channel, with one client connected over
// a real websocket that has taken over.
type benchEnv struct {
	e       *computerEnv
	c       *screentest.Client
	painter *screentest.Painter
	lease   map[string]any
}

func newBenchEnv(b *testing.B, display int, cfg Config) *benchEnv {
	b.Helper()
	d := screentest.Start(b, display, 1280, 800)
	painter := screentest.NewPainter(b, d)
	cs := newComputerServer(b)
	e := newComputerEnv(b, cs, cfg)
	agent := e.agent(b, e.adminID, "bench")
	e.desktops.set(agent, Desktop{ID: "desk-bench", State: "running", Client: d.Client})
	c := e.connect(b, cs.admin, agent)
	if _, ok := c.FrameAfter(0, 10*time.Second); !ok {
		b.Fatal("no first frame")
	}
	lease := c.Call(map[string]any{"type": "take_over"})
	if lease["type"] != "lease" {
		b.Fatalf("take over: %v", lease)
	}
	c.Quiet(300 * time.Millisecond)
	return &benchEnv{e: e, c: c, painter: painter, lease: lease}
}

func percentile(sorted []float64, p float64) float64 {
	if len(sorted) == 0 {
		return 0
	}
	return sorted[min(len(sorted)-1, int(p*float64(len(sorted))))]
}

func reportLatency(b *testing.B, lat []float64) {
	sort.Float64s(lat)
	b.ReportMetric(percentile(lat, 0.50), "p50-ms")
	b.ReportMetric(percentile(lat, 0.95), "p95-ms")
	b.ReportMetric(0, "ns/op")
}

// BenchmarkComputerInputToFrame: an input message sent over the websocket (checked against the
// lease, performed by the real driver; the painter window draws where it is clicked) until
// the changed frame arrives at the client. Clicks are 50 ms apart, as a fast person's.
func BenchmarkComputerInputToFrame(b *testing.B) {
	be := newBenchEnv(b, 84, Config{})
	lat := make([]float64, 0, b.N)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		time.Sleep(50 * time.Millisecond)
		after := be.c.Frame()
		b.StartTimer()
		start := time.Now()
		be.c.Send(map[string]any{"type": "input", "token": be.lease["token"], "version": be.lease["version"],
			"frameId": after, "action": "click", "x": 100 + (i*37)%1000, "y": 100 + (i*53)%600})
		m, ok := be.c.FrameAfter(after, 5*time.Second)
		if !ok {
			b.Fatal("no frame after the click")
		}
		lat = append(lat, float64(m.At.Sub(start).Microseconds())/1000)
	}
	b.StopTimer()
	reportLatency(b, lat)
}

// BenchmarkComputerFrameLatency: the screen changes (an X client draws, and the X server has
// drawn it) until the changed frame arrives at the websocket client.
func BenchmarkComputerFrameLatency(b *testing.B) {
	be := newBenchEnv(b, 85, Config{})
	lat := make([]float64, 0, b.N)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		time.Sleep(50 * time.Millisecond)
		after := be.c.Frame()
		b.StartTimer()
		start := time.Now()
		be.painter.Fill((i*41)%1200, (i*29)%700, 64, 64)
		m, ok := be.c.FrameAfter(after, 5*time.Second)
		if !ok {
			b.Fatal("no frame after drawing")
		}
		lat = append(lat, float64(m.At.Sub(start).Microseconds())/1000)
	}
	b.StopTimer()
	reportLatency(b, lat)
}

// BenchmarkComputerFPS1280x800: a 1280x800 screen that changes every 5 ms over a quarter of
// its area; frames per second and bytes per frame at a websocket client.
func BenchmarkComputerFPS1280x800(b *testing.B) {
	be := newBenchEnv(b, 84, Config{})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); be.painter.Animate(ctx, 5*time.Millisecond) }()
	defer func() { cancel(); <-done }()
	be.c.FrameAfter(be.c.Frame(), 5*time.Second)
	bytes0 := be.c.BytesRead()
	b.ResetTimer()
	start := time.Now()
	for i := 0; i < b.N; i++ {
		if _, ok := be.c.FrameAfter(be.c.Frame(), 5*time.Second); !ok {
			b.Fatal("the stream stalled")
		}
	}
	el := time.Since(start)
	b.StopTimer()
	b.ReportMetric(float64(b.N)/el.Seconds(), "fps")
	b.ReportMetric(float64(be.c.BytesRead()-bytes0)/float64(b.N)/1024, "KiB/frame")
}

// BenchmarkComputerIdleBytes: bytes per second a websocket client receives from a desktop
// whose screen does not change, over 10 s, with a 5 s ping interval (so keepalives count).
func BenchmarkComputerIdleBytes(b *testing.B) {
	be := newBenchEnv(b, 85, Config{PingInterval: 5 * time.Second})
	be.c.Quiet(time.Second)
	b.ResetTimer()
	var total int64
	var el time.Duration
	for i := 0; i < b.N; i++ {
		n0, start := be.c.BytesRead(), time.Now()
		time.Sleep(10 * time.Second)
		total += be.c.BytesRead() - n0
		el += time.Since(start)
	}
	b.StopTimer()
	b.ReportMetric(float64(total)/el.Seconds(), "B/s")
	b.ReportMetric(0, "ns/op")
}

// An open computer channel ends with its session: logging out, ending the account's sessions
// (a password change) or disabling the account closes it (issue 15, item 1).
func TestComputerChannelEndsWithTheSession(t *testing.T) {
	f := newComputerServer(t)
	e := newComputerEnv(t, f, Config{PingInterval: time.Hour}) // only Reauthenticate can end it here
	agent := e.agent(t, "user1", "bobs")
	e.desktops.set(agent, Desktop{ID: "desk-s", State: "stopped"})
	ended := func(name string, end func(token string)) {
		t.Helper()
		p, err := f.auth.Login("bob", testPassword, "test")
		if err != nil {
			t.Fatal(err)
		}
		c := e.connect(t, p.Token, agent)
		c.Expect("status", "", 5*time.Second)
		end(p.Token)
		e.ch.Reauthenticate()
		deadline := time.After(10 * time.Second)
		for {
			select {
			case m := <-c.Messages():
				if m.Closed != nil {
					if !websocket.IsCloseError(m.Closed, websocket.ClosePolicyViolation) {
						t.Fatalf("%s: closed with %v", name, m.Closed)
					}
					return
				}
			case <-deadline:
				t.Fatalf("%s: the channel stayed open", name)
			}
		}
	}
	ended("log out", func(tok string) {
		if err := f.auth.Revoke(tok); err != nil {
			t.Fatal(err)
		}
	})
	ended("sessions ended", func(string) {
		if err := f.auth.EndSessions("user1"); err != nil {
			t.Fatal(err)
		}
	})
	admin, err := f.auth.Authenticate(f.admin)
	if err != nil {
		t.Fatal(err)
	}
	ended("disabled", func(string) {
		yes := true
		if _, err := f.auth.UpdateAccount(admin, "user1", auth.AccountChange{Disabled: &yes}); err != nil {
			t.Fatal(err)
		}
	})
}
