package api

import (
	"context"
	"encoding/json"
	"io"
	"log"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jezek/xgb"

	"cubicle/backend/control"
	"cubicle/backend/liveview"
	"cubicle/backend/screen"
	"cubicle/backend/screen/screentest"
	"cubicle/internal/testenv"
)

// The live view's own tests are in backend/liveview; these check what the API adds: the
// route's login, origin and ownership checks, and the file routes that reach the same desktop.

// agentDesktops stands in for the VM manager: the agents' desktops (absent until set).
type agentDesktops struct{ m sync.Map } // agent id → liveview.Desktop

func (a *agentDesktops) set(agentID string, d liveview.Desktop) { a.m.Store(agentID, d) }

func (a *agentDesktops) Desktop(_ context.Context, _, agentID string) (liveview.Desktop, error) {
	if d, ok := a.m.Load(agentID); ok {
		return d.(liveview.Desktop), nil
	}
	return liveview.Desktop{State: "absent"}, nil
}

// liveEnv is the computer route and the file routes behind the guard, with a real live view
// over fake desktops, on a real httptest server.
type liveEnv struct {
	f        *fixture
	ts       *httptest.Server
	desktops *agentDesktops
}

func newLiveEnv(t *testing.T) *liveEnv {
	t.Helper()
	log := slog.New(slog.NewTextHandler(testenv.Writer(t), nil))
	e := &liveEnv{desktops: &agentDesktops{}}
	ctl := control.New(control.Config{Logger: log})
	if err := ctl.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	hubs := screen.New(screen.Config{Observer: ctl, Logger: log})
	ch, err := liveview.New(liveview.Config{Desktops: e.desktops, Control: ctl, Screens: hubs, Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	e.f = newFixture(t, func(c *Config) { c.LiveView = ch })
	mux := http.NewServeMux()
	mux.HandleFunc("GET /api/app/agents/{id}/computer", e.f.srv.computerRoute)
	e.f.srv.fileRoutes(mux)
	e.ts = httptest.NewServer(newGuard([]string{"127.0.0.1", "localhost"}, []string{"wails://wails"}, securityHeaders(mux)))
	t.Cleanup(func() {
		e.ts.Close()
		ch.Close()
		hubs.Close()
		ctl.Close()
	})
	return e
}

// url is the computer route of agentID as a websocket URL.
func (e *liveEnv) url(agentID string) string {
	return strings.Replace(e.ts.URL, "http://", "ws://", 1) + "/api/app/agents/" + agentID + "/computer"
}

func authHeader(token string) http.Header {
	return http.Header{"Authorization": {"Bearer " + token}}
}

func TestComputerUpgradeRefusals(t *testing.T) {
	e := newLiveEnv(t)
	f := e.f
	own := f.newAgent(f.admin, "mine")
	bobs := f.newAgent(f.user, "bobs")
	tests := []struct {
		name   string
		url    string
		header http.Header
		want   int // 0: the upgrade succeeds
	}{
		{"no credentials", e.url(own), nil, http.StatusUnauthorized},
		{"bad token", e.url(own), authHeader("nope"), http.StatusUnauthorized},
		{"cross-origin", e.url(own), http.Header{"Authorization": {"Bearer " + f.admin}, "Origin": {"http://evil.example"}}, http.StatusForbidden},
		{"cross-site without origin", e.url(own), http.Header{"Authorization": {"Bearer " + f.admin}, "Sec-Fetch-Site": {"cross-site"}}, http.StatusForbidden},
		{"foreign host name", strings.Replace(e.url(own), "127.0.0.1", "localhost.evil", 1), authHeader(f.admin), -1},
		{"another account's agent", e.url(bobs), authHeader(f.admin), http.StatusNotFound},
		{"no such agent", e.url("nope"), authHeader(f.admin), http.StatusNotFound},
		{"bearer", e.url(own), authHeader(f.admin), 0},
		{"cookie, same origin", e.url(own), http.Header{"Cookie": {SessionCookie + "=" + f.admin}, "Origin": {e.ts.URL}}, 0},
		{"query token, trusted origin", e.url(own) + "?access_token=" + url.QueryEscape(f.admin), http.Header{"Origin": {"wails://wails"}}, 0},
		{"query token, foreign origin", e.url(own) + "?access_token=" + url.QueryEscape(f.admin), http.Header{"Origin": {"http://evil.example"}}, http.StatusForbidden},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, resp, err := screentest.Dial(t, tt.url, tt.header, true)
			switch {
			case tt.want == 0 && err != nil:
				t.Fatalf("refused: %v (%v)", err, resp)
			case tt.want == 0:
				st := c.Expect("status", "", 5*time.Second)
				if st["state"] != "absent" || st["agentId"] != own {
					t.Errorf("first status %v", st)
				}
			case tt.want < 0 && err == nil:
				t.Fatal("upgrade accepted")
			case tt.want > 0 && (resp == nil || resp.StatusCode != tt.want):
				t.Fatalf("got %v, %v; want %d", err, resp, tt.want)
			}
		})
	}
	t.Run("query token only on upgrades", func(t *testing.T) {
		resp, err := http.Get(strings.Replace(e.url(own), "ws", "http", 1) + "?access_token=" + url.QueryEscape(f.admin))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusUnauthorized {
			t.Fatalf("plain GET with a query token: %d, want 401", resp.StatusCode)
		}
	})
	t.Run("plain GET answers the status", func(t *testing.T) {
		req, _ := http.NewRequest("GET", strings.Replace(e.url(own), "ws", "http", 1), nil)
		req.Header.Set("Authorization", "Bearer "+f.admin)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var st map[string]any
		json.NewDecoder(resp.Body).Decode(&st)
		if resp.StatusCode != 200 || st["type"] != "status" || st["state"] != "absent" {
			t.Fatalf("%d %v", resp.StatusCode, st)
		}
	})
}

func TestMain(m *testing.M) {
	xgb.Logger = log.New(io.Discard, "", 0) // "no .Xauthority" notes from the test's X clients
	code := m.Run()
	screentest.Cleanup()
	os.Exit(code)
}
