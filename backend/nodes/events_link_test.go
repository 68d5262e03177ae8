package nodes_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"cubicle/backend/events"
	"cubicle/backend/nodes"
	"cubicle/backend/store"
	"cubicle/runner/wire"
)

// TestRunnerEventsOverTheLink: an in-process runner (no engine) over a real link; the hub
// publishes it connected with its hello and counts, the runner's own settings changes arrive
// through its event stream (wire.OpWatch) as node.changed, and revocation is published.
func TestRunnerEventsOverTheLink(t *testing.T) {
	st, err := store.Open(filepath.Join(t.TempDir(), "server.db"), store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	bus := events.New(events.Config{})
	h, err := nodes.New(nodes.Config{Store: st, Version: "9.9.9", Events: bus})
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.Handle("GET "+wire.ConnectPath, h)
	srv := httptest.NewServer(mux)
	t.Cleanup(func() {
		srv.Close()
		h.Close()
		bus.Close()
		st.Close()
	})
	sub := bus.Subscribe(events.SubscribeOptions{Buffer: 1024})
	defer sub.Close()
	next := func(what string, ok func(events.Event) bool) events.Event {
		t.Helper()
		timeout := time.After(30 * time.Second)
		for {
			select {
			case e := <-sub.C():
				if ok(e) {
					return e
				}
			case <-timeout:
				t.Fatalf("no event: %s", what)
			}
		}
	}

	c, err := h.Create("box", false, srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	startRunner(t, srv.URL, c.Token)
	e := next("connected", func(e events.Event) bool {
		r, ok := e.Data.(events.Runner)
		return ok && r.NodeID == c.ID && r.State == events.RunnerConnected
	})
	r := e.Data.(events.Runner)
	if e.Audience != events.AdminsOnly || r.Name != "box" || r.Version != "9.9.9" || !slices.Contains(r.Capabilities, wire.CapEvents) ||
		r.Desktops == nil || r.Desktops.Max < 1 {
		t.Fatalf("connected event: %+v (audience %+v)", r, e.Audience)
	}

	remote, err := h.Node(c.ID)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := remote.SetPolicy(context.Background(), "per-agent", 3); err != nil {
		t.Fatal(err)
	}
	next("the runner's capacity from its event stream", func(e events.Event) bool {
		n, ok := e.Data.(events.Node)
		return ok && n.NodeID == c.ID && n.MaxInstances == 3 && n.Isolation == "per-agent"
	})
	next("the runner's status with its new capacity", func(e events.Event) bool {
		x, ok := e.Data.(events.Runner)
		return ok && x.NodeID == c.ID && x.Desktops != nil && x.Desktops.Max == 3
	})

	if err := h.Revoke(c.ID); err != nil {
		t.Fatal(err)
	}
	next("revoked", func(e events.Event) bool {
		x, ok := e.Data.(events.Runner)
		return ok && x.NodeID == c.ID && x.State == events.RunnerRevoked
	})
}
