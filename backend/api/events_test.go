package api

import (
	"bufio"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"cubicle/backend/events"
	"cubicle/backend/store"
)

// eventsFixture is the API fixture with a real event bus behind GET /api/app/events, served by
// a real HTTP server (the stream needs a connection that flushes).
func eventsFixture(t *testing.T) (*fixture, *events.Bus, *httptest.Server) {
	t.Helper()
	f := newFixture(t)
	bus := events.New(events.Config{})
	t.Cleanup(func() { bus.Close() })
	cfg := f.srv.cfg
	cfg.Events = bus
	var err error
	if f.srv, err = New(cfg); err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(f.srv.Handler())
	t.Cleanup(ts.Close)
	return f, bus, ts
}

// stream is one open event stream as a client reads it.
type stream struct {
	t      *testing.T
	msgs   chan map[string]any
	ids    chan string
	cancel context.CancelFunc
	status int
}

// openStream opens GET /api/app/events with the session token (and a Last-Event-ID).
func openStream(t *testing.T, ts *httptest.Server, token, lastID string) *stream {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	r, _ := http.NewRequestWithContext(ctx, "GET", ts.URL+"/api/app/events", nil)
	r.Host = "127.0.0.1:8765"
	if token != "" {
		r.Header.Set("Authorization", "Bearer "+token)
	}
	if lastID != "" {
		r.Header.Set("Last-Event-ID", lastID)
	}
	resp, err := ts.Client().Do(r)
	if err != nil {
		t.Fatal(err)
	}
	s := &stream{t: t, msgs: make(chan map[string]any, 100), ids: make(chan string, 100), cancel: cancel, status: resp.StatusCode}
	if resp.StatusCode != http.StatusOK {
		resp.Body.Close()
		return s
	}
	if ct := resp.Header.Get("Content-Type"); !strings.HasPrefix(ct, "text/event-stream") {
		t.Fatalf("content type %q", ct)
	}
	go func() {
		defer resp.Body.Close()
		sc := bufio.NewScanner(resp.Body)
		for sc.Scan() {
			line := sc.Text()
			if id, ok := strings.CutPrefix(line, "id: "); ok {
				s.ids <- id
			}
			if data, ok := strings.CutPrefix(line, "data: "); ok {
				var m map[string]any
				if json.Unmarshal([]byte(data), &m) != nil {
					t.Errorf("not JSON: %q", data)
					continue
				}
				s.msgs <- m
			}
		}
		close(s.msgs)
	}()
	return s
}

// next waits (bounded; nothing polls) for the stream's next message.
func (s *stream) next() map[string]any {
	s.t.Helper()
	select {
	case m, ok := <-s.msgs:
		if !ok {
			s.t.Fatal("the stream ended")
		}
		return m
	case <-time.After(5 * time.Second):
		s.t.Fatal("no message within 5 s")
	}
	return nil
}

// until reads messages until one of type typ and returns the types it skipped.
func (s *stream) until(typ string) (map[string]any, []string) {
	s.t.Helper()
	var skipped []string
	for {
		m := s.next()
		if m["type"] == typ {
			return m, skipped
		}
		skipped = append(skipped, m["type"].(string)+":"+dataField(m, "instanceId"))
	}
}

func dataField(m map[string]any, k string) string {
	d, _ := m["data"].(map[string]any)
	v, _ := d[k].(string)
	return v
}

func TestEventStreamScope(t *testing.T) {
	f, bus, ts := eventsFixture(t)
	admin := openStream(t, ts, f.admin, "")
	member := openStream(t, ts, f.user, "")
	for who, s := range map[string]*stream{"admin": admin, "member": member} {
		hello := s.next()
		if hello["type"] != streamHello || hello["epoch"] != bus.Epoch() || hello["admin"] != (who == "admin") {
			t.Fatalf("%s hello %v", who, hello)
		}
	}
	adminID, _ := f.auth.Authenticate(f.admin)
	pub := []struct {
		t    events.Type
		aud  events.Audience
		data events.Desktop
	}{
		{events.DesktopState, events.ForAccount("user1", true), events.Desktop{InstanceID: "bobs-desktop", State: "running"}},
		{events.DesktopState, events.ForAccount(adminID.AccountID, true), events.Desktop{InstanceID: "admins-desktop"}},
		{events.TimelineEntry, events.ForAccount(adminID.AccountID, false), events.Desktop{InstanceID: "admins-chat"}},
		{events.TimelineEntry, events.ForAccount("user1", false), events.Desktop{InstanceID: "bobs-chat"}},
		{events.DesktopStats, events.AdminsOnly, events.Desktop{InstanceID: "stats"}},
		{events.ImagesChanged, events.Everyone, events.Desktop{InstanceID: "end"}},
	}
	for _, p := range pub {
		bus.Publish(p.t, p.aud, p.data)
	}
	want := map[string][]string{
		// The admin sees every desktop, its own chats and admin events — not bob's chat.
		"admin": {"desktop.state:bobs-desktop", "desktop.state:admins-desktop", "timeline.entry:admins-chat", "desktop.stats:stats"},
		// Bob sees his own desktop and chat only.
		"member": {"desktop.state:bobs-desktop", "timeline.entry:bobs-chat"},
	}
	for who, s := range map[string]*stream{"admin": admin, "member": member} {
		end, got := s.until(string(events.ImagesChanged))
		if strings.Join(got, " ") != strings.Join(want[who], " ") {
			t.Errorf("%s received %v, want %v", who, got, want[who])
		}
		id, _ := end["id"].(string)
		if !strings.HasPrefix(id, bus.Epoch()+"-") {
			t.Errorf("event id %q", id)
		}
		if d := end["data"].(map[string]any); d["instanceId"] != "end" {
			t.Errorf("payload %v", d)
		}
	}
}

// TestEventStreamResume: a stream reopened with the Last-Event-ID it saw gets what it missed;
// one from another process (epoch) is told to resynchronise.
func TestEventStreamResume(t *testing.T) {
	f, bus, ts := eventsFixture(t)
	s := openStream(t, ts, f.user, "")
	s.next() // hello
	bus.Publish(events.AgentChanged, events.ForAccount("user1", false), events.Agent{AgentID: "a1", Change: "created"})
	s.until(string(events.AgentChanged))
	var last string
	select {
	case last = <-s.ids:
	case <-time.After(5 * time.Second):
		t.Fatal("no id line")
	}
	s.cancel()
	// Missed while disconnected:
	bus.Publish(events.AgentChanged, events.ForAccount("user1", false), events.Agent{AgentID: "a2", Change: "created"})
	bus.Publish(events.AgentChanged, events.ForAccount("user1", false), events.Agent{AgentID: "a3", Change: "created"})

	again := openStream(t, ts, f.user, last)
	again.next() // hello
	for _, want := range []string{"a2", "a3"} {
		m, skipped := again.until(string(events.AgentChanged))
		if dataField(m, "agentId") != want || len(skipped) != 0 {
			t.Fatalf("resumed %v (skipped %v), want %s", m, skipped, want)
		}
	}

	old := openStream(t, ts, f.user, "0123456789ab-7")
	old.next() // hello
	if m := old.next(); m["type"] != streamResync {
		t.Fatalf("a foreign Last-Event-ID: %v, want %s", m, streamResync)
	}
	junk := openStream(t, ts, f.user, "nonsense")
	junk.next()
	if m := junk.next(); m["type"] != streamResync {
		t.Fatalf("a malformed Last-Event-ID: %v", m)
	}
}

func TestEventStreamRefusals(t *testing.T) {
	_, _, ts := eventsFixture(t)
	if s := openStream(t, ts, "", ""); s.status != http.StatusUnauthorized {
		t.Fatalf("no login: %d", s.status)
	}
	if s := openStream(t, ts, "v1.forged.token", ""); s.status != http.StatusUnauthorized {
		t.Fatalf("bad token: %d", s.status)
	}
	f := newFixture(t) // no bus
	rec := f.do(req{method: "GET", path: "/api/app/events", cookie: f.user})
	if rec.Code != http.StatusServiceUnavailable || !strings.Contains(rec.Body.String(), "polling") {
		t.Fatalf("without a bus: %d %s", rec.Code, rec.Body)
	}
}

// TestEventStreamEndsWithTheBus: closing the bus (shutdown) ends open streams.
func TestEventStreamEndsWithTheBus(t *testing.T) {
	f, bus, ts := eventsFixture(t)
	s := openStream(t, ts, f.user, "")
	s.next()
	bus.Close()
	select {
	case _, ok := <-s.msgs:
		if ok {
			t.Fatal("a message after the bus closed")
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the stream stays open after the bus closed")
	}
}

// TestEventStreamEndsWithTheSession: a stream does not outlive its session — a logout ends it
// before it delivers another event, and so does a change of role (an admin's stream demoted to
// member must not go on receiving admin events) or a disabled account.
func TestEventStreamEndsWithTheSession(t *testing.T) {
	f, bus, ts := eventsFixture(t)
	ended := func(s *stream, what string) {
		t.Helper()
		deadline := time.After(15 * time.Second)
		for {
			select {
			case m, ok := <-s.msgs:
				if !ok {
					return
				}
				t.Fatalf("%s: the stream delivered %v", what, m)
			case <-deadline:
				t.Fatalf("%s: the stream stays open", what)
			}
		}
	}
	// Logout: an event for bob right after it is not delivered.
	bob := openStream(t, ts, f.user, "")
	bob.next()
	if rec := f.do(req{method: "POST", path: "/api/auth/logout", bearer: f.user}); rec.Code != http.StatusNoContent {
		t.Fatalf("logout: %d %s", rec.Code, rec.Body)
	}
	bus.Publish(events.DesktopState, events.ForAccount("user1", true), events.Desktop{InstanceID: "after-logout"})
	ended(bob, "after logout")

	// Demotion: the admin's stream ends before an admin-only event reaches it.
	adm := openStream(t, ts, f.admin, "")
	adm.next()
	p, err := f.auth.Authenticate(f.admin)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.store.UpdateAccount(p.AccountID, func(a *store.Account) error { a.Role = store.RoleMember; return nil }); err != nil {
		t.Fatal(err)
	}
	bus.Publish(events.DesktopStats, events.AdminsOnly, events.Desktop{InstanceID: "stats"})
	ended(adm, "after demotion")

	// A disabled account, idle stream: the periodic check ends it.
	tok := f.login("bob", testPassword)
	idle := openStream(t, ts, tok, "")
	idle.next()
	if _, err := f.store.UpdateAccount("user1", func(a *store.Account) error { a.Disabled = true; return nil }); err != nil {
		t.Fatal(err)
	}
	ended(idle, "after the account was disabled")

	// A session that stands keeps its stream.
	if _, err := f.store.UpdateAccount("user1", func(a *store.Account) error { a.Disabled = false; return nil }); err != nil {
		t.Fatal(err)
	}
	tok = f.login("bob", testPassword)
	live := openStream(t, ts, tok, "")
	live.next()
	time.Sleep(2 * sessionRecheck)
	bus.Publish(events.DesktopState, events.ForAccount("user1", true), events.Desktop{InstanceID: "still-here"})
	if m := live.next(); dataField(m, "instanceId") != "still-here" {
		t.Fatalf("a standing session's stream: %v", m)
	}
}
