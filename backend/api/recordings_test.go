package api

import (
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"cubicle/backend/computerwire"
	"cubicle/backend/fault"
	"cubicle/backend/recording"
	"cubicle/backend/screen"
	"cubicle/internal/testenv"
)

// newRecordingFixture is the fixture with a real recording service on a temporary directory
// holding one recording of bob's agent and one of the admin's.
func newRecordingFixture(t *testing.T) (f *fixture, bobAgent, adminAgent string) {
	t.Helper()
	dir := t.TempDir()
	var svc *recording.Service
	f = newFixture(t, func(c *Config) {
		var err error
		svc, err = recording.New(recording.Config{Dir: dir, Screens: screen.New(screen.Config{}), Logger: testenv.Logger(t, slog.LevelInfo),
			Link: func(context.Context, string) (screen.RegionSource, error) { return nil, fault.Unavailable("none") }})
		if err != nil {
			t.Fatal(err)
		}
		c.Recordings = recording.Local{Service: svc}
	})
	t.Cleanup(func() { svc.Close() })
	bobAgent, adminAgent = f.newAgent(f.user, "Bob's"), f.newAgent(f.admin, "Admin's")
	bob, _ := f.store.Account("user1")
	admin, _ := f.store.Account(f.adminID())
	key := func(at time.Duration) recording.Record {
		return recording.Record{Kind: recording.KindUpdate, Flags: recording.FlagKey, At: at, Data: []byte("CBFR key")}
	}
	now := time.Now().UTC()
	for _, r := range []struct{ id, account, agent string }{{"rec-bob", bob.ID, bobAgent}, {"rec-admin", admin.ID, adminAgent}} {
		info := recording.Info{ID: r.id, DesktopID: "d-" + r.id, Node: "local", AccountID: r.account, AgentIDs: []string{r.agent},
			StartedAt: now.Add(-time.Minute), EndedAt: now, Markers: []recording.Marker{{At: 1500, Kind: "tool", Label: "computer: screenshot", RunID: "run-1"}}}
		err := recording.WriteRecording(dir, info, [][]recording.Record{{key(0),
			{Kind: recording.KindText, At: 10 * time.Millisecond, Data: []byte(`{"type":"pointer","x":1,"y":2}`)}, key(2 * time.Second)}})
		if err != nil {
			t.Fatal(err)
		}
	}
	// The service read the directory when it was made: open it again to list them.
	svc2, err := recording.New(recording.Config{Dir: dir, Screens: screen.New(screen.Config{}),
		Link: func(context.Context, string) (screen.RegionSource, error) { return nil, fault.Unavailable("none") }})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { svc2.Close() })
	f.srv.cfg.Recordings = recording.Local{Service: svc2}
	return f, bobAgent, adminAgent
}

func TestRecordingRoutesScoping(t *testing.T) {
	f, bobAgent, adminAgent := newRecordingFixture(t)
	base := func(agent string) string { return "/api/app/agents/" + agent + "/recordings" }
	for _, tc := range []struct {
		name string
		r    req
		want int
	}{
		{"no login", req{method: "GET", path: base(bobAgent)}, 401},
		{"own list", req{method: "GET", path: base(bobAgent), cookie: f.user}, 200},
		{"another account's agent", req{method: "GET", path: base(adminAgent), cookie: f.user}, 404},
		{"own recording", req{method: "GET", path: base(bobAgent) + "/rec-bob", cookie: f.user}, 200},
		{"another account's recording through an own agent", req{method: "GET", path: base(bobAgent) + "/rec-admin", cookie: f.user}, 404},
		{"an admin does not read another account's recordings", req{method: "GET", path: base(bobAgent) + "/rec-bob", cookie: f.admin}, 404},
		{"no such recording", req{method: "GET", path: base(bobAgent) + "/nope", cookie: f.user}, 404},
		{"own screenshot of a marker without one", req{method: "GET", path: base(bobAgent) + "/rec-bob/markers/0/screenshot", cookie: f.user}, 404},
		{"screenshot marker not a number", req{method: "GET", path: base(bobAgent) + "/rec-bob/markers/x/screenshot", cookie: f.user}, 400},
		{"replay without upgrade", req{method: "GET", path: base(bobAgent) + "/rec-bob/replay", cookie: f.user}, 400},
		{"replay of another account's", req{method: "GET", path: base(adminAgent) + "/rec-admin/replay", cookie: f.user}, 404},
		{"replay bad speed", req{method: "GET", path: base(bobAgent) + "/rec-bob/replay?speed=100", cookie: f.user}, 400},
		{"replay bad from", req{method: "GET", path: base(bobAgent) + "/rec-bob/replay?from=-3", cookie: f.user}, 400},
		{"member deletes another account's", req{method: "DELETE", path: base(adminAgent) + "/rec-admin", cookie: f.user}, 404},
		{"member reads settings", req{method: "GET", path: "/api/app/admin/recordings", cookie: f.user}, 403},
		{"member changes settings", req{method: "PUT", path: "/api/app/admin/recordings", cookie: f.user, body: `{"keepDays":1}`}, 403},
		{"admin bad settings", req{method: "PUT", path: "/api/app/admin/recordings", cookie: f.admin, body: `{"keepDays":-1}`}, 400},
		{"admin bad quota", req{method: "PUT", path: "/api/app/admin/recordings", cookie: f.admin, body: `{"maxBytes":12}`}, 400},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rec := f.do(tc.r)
			if rec.Code != tc.want {
				t.Errorf("%s %s = %d %s, want %d", tc.r.method, tc.r.path, rec.Code, rec.Body, tc.want)
			}
		})
	}
	list := decodeBody[[]recording.Info](t, f.do(req{method: "GET", path: base(bobAgent), cookie: f.user}))
	if len(list) != 1 || list[0].ID != "rec-bob" || list[0].DesktopID != "d-rec-bob" || list[0].Keyframes != 2 ||
		len(list[0].Markers) != 1 || list[0].Markers[0].RunID != "run-1" || list[0].Markers[0].At != 1500 {
		t.Errorf("bob's list: %+v", list)
	}
	// Settings: only the fields sent change; a bad value changed nothing.
	st := decodeBody[recordingSettingsJSON](t, f.do(req{method: "PUT", path: "/api/app/admin/recordings", cookie: f.admin, body: `{"neverRecord":["local"]}`}))
	if st.KeepDays != recording.DefaultKeepDays || len(st.NeverRecord) != 1 || st.Count != 2 {
		t.Errorf("settings after a partial change: %+v", st)
	}
	// Deleting: the owner, or an administrator through the agent's path.
	if rec := f.do(req{method: "DELETE", path: base(bobAgent) + "/rec-bob", cookie: f.user}); rec.Code != 204 {
		t.Errorf("owner deletes: %d %s", rec.Code, rec.Body)
	}
	if rec := f.do(req{method: "GET", path: base(bobAgent) + "/rec-bob", cookie: f.user}); rec.Code != 404 {
		t.Errorf("after deleting: %d", rec.Code)
	}
	if rec := f.do(req{method: "DELETE", path: base(adminAgent) + "/rec-admin", cookie: f.admin}); rec.Code != 204 {
		t.Errorf("admin deletes: %d %s", rec.Code, rec.Body)
	}
}

func TestRecordingReplayStream(t *testing.T) {
	f, bobAgent, _ := newRecordingFixture(t)
	ts := httptest.NewServer(f.srv.Handler())
	defer ts.Close()
	u := "ws" + strings.TrimPrefix(ts.URL, "http") + "/api/app/agents/" + bobAgent + "/recordings/rec-bob/replay?from=1000&speed=8&access_token=" + f.user
	h := http.Header{"Host": {"127.0.0.1"}}
	d := websocket.Dialer{Subprotocols: []string{computerwire.Subprotocol}, HandshakeTimeout: 5 * time.Second}
	ws, resp, err := d.Dial(strings.Replace(u, ts.Listener.Addr().String(), "127.0.0.1:"+port(ts.URL), 1), h)
	if err != nil {
		t.Fatalf("dial: %v (%v)", err, resp)
	}
	defer ws.Close()
	if ws.Subprotocol() != computerwire.Subprotocol {
		t.Errorf("subprotocol %q", ws.Subprotocol())
	}
	ws.SetReadDeadline(time.Now().Add(10 * time.Second))
	read := func() (int, []byte) {
		t.Helper()
		mt, raw, err := ws.ReadMessage()
		if err != nil {
			t.Fatalf("read: %v", err)
		}
		return mt, raw
	}
	// From 1 s: the keyframe at 0 s and the pointer after it, then where the replay is.
	if mt, raw := read(); mt != websocket.BinaryMessage || string(raw) != "CBFR key" {
		t.Errorf("first message %d %q, want the keyframe", mt, raw)
	}
	if mt, raw := read(); mt != websocket.TextMessage || !strings.Contains(string(raw), `"pointer"`) {
		t.Errorf("second message %d %q, want the pointer", mt, raw)
	}
	var pos recording.Position
	_, raw := read()
	if json.Unmarshal(raw, &pos); pos.Type != "replay" || !pos.Seeked || pos.At != 1000 || pos.Speed != 8 || pos.DurationMs != 2000 {
		t.Errorf("position %s", raw)
	}
	// Then the keyframe at 2 s, an eighth of a second later, and the end.
	if mt, raw := read(); mt != websocket.BinaryMessage || string(raw) != "CBFR key" {
		t.Errorf("next %d %q, want the second keyframe", mt, raw)
	}
	for {
		_, raw := read()
		json.Unmarshal(raw, &pos)
		if pos.State == "ended" {
			break
		}
	}
	// A seek back draws the first keyframe again.
	ws.WriteJSON(recording.Control{Type: "seek", At: 0})
	if mt, raw := read(); mt != websocket.BinaryMessage {
		t.Errorf("after a seek: %d %q, want a keyframe", mt, raw)
	}
}

func port(u string) string { return u[strings.LastIndex(u, ":")+1:] }
