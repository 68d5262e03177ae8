package runner_test

import (
	"context"
	"encoding/json"
	"log/slog"
	"net"
	"net/http"
	"net/http/cookiejar"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"cubicle/backend"
	"cubicle/backend/auth"
	"cubicle/backend/cli"
	"cubicle/backend/events"
	"cubicle/backend/nodes"
	"cubicle/backend/vm"
	"cubicle/internal/testenv"
)

// startServerIn is startServer on data directory dir; ready runs after the backend started and
// before it serves (so a subscription misses nothing a runner does once it can connect). The
// returned stop ends the server (idempotent; it also runs at cleanup).
func startServerIn(t *testing.T, dir, listen string, ready func(*server)) (*server, func()) {
	t.Helper()
	log := testenv.Logger(t, slog.LevelWarn)
	host, _, _ := net.SplitHostPort(listen)
	b, err := backend.New(backend.Config{DataDir: dir, Engine: "none", Logger: log,
		AllowedHosts: []string{"127.0.0.1", host}, Version: cli.Version,
		Admin: auth.Bootstrap{Username: adminUser, Password: adminPass}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	if err := b.Start(ctx); err != nil {
		t.Fatal(err)
	}
	if err := b.WaitEngine(ctx); err != nil {
		t.Fatal(err)
	}
	jar, _ := cookiejar.New(nil)
	s := &server{b: b, http: &http.Client{Jar: jar, Timeout: 20 * time.Minute}}
	if ready != nil {
		ready(s)
	}
	ln, err := net.Listen("tcp", listen)
	if err != nil {
		t.Fatal(err)
	}
	s.url = "http://" + ln.Addr().String()
	done := make(chan struct{})
	go func() {
		defer close(done)
		b.Serve(ctx, ln)
	}()
	var once sync.Once
	stop := func() {
		once.Do(func() {
			cancel()
			<-done
			b.Close()
		})
	}
	t.Cleanup(stop)
	s.do(t, "POST", "/api/auth/login", map[string]string{"username": adminUser, "password": adminPass}, http.StatusOK, nil)
	return s, stop
}

// watcher reads one subscription of the server's bus and keeps what it saw.
type watcher struct {
	t    *testing.T
	name string
	sub  *events.Subscription
	seen []events.Event
}

func (s *server) watch(t *testing.T, name string, v events.Viewer) *watcher {
	w := &watcher{t: t, name: name, sub: s.b.Events.Subscribe(events.SubscribeOptions{Viewer: &v, Buffer: 4096})}
	t.Cleanup(w.sub.Close)
	return w
}

// next waits (within limit) for an event of type typ that ok accepts and returns its payload.
func (w *watcher) next(typ events.Type, limit time.Duration, what string, ok func(any) bool) any {
	w.t.Helper()
	timeout := time.After(limit)
	for {
		select {
		case e, open := <-w.sub.C():
			if !open {
				w.t.Fatalf("%s: the bus closed while waiting for %s", w.name, what)
			}
			w.seen = append(w.seen, e)
			if e.Type == typ && ok(e.Data) {
				return e.Data
			}
		case <-timeout:
			w.t.Fatalf("%s: no %s event (%s) within %v; saw %s", w.name, typ, what, limit, w.summary())
		}
	}
}

// drain reads what is buffered now and keeps it.
func (w *watcher) drain() {
	for {
		select {
		case e, open := <-w.sub.C():
			if !open {
				return
			}
			w.seen = append(w.seen, e)
		default:
			return
		}
	}
}

func (w *watcher) summary() string {
	var b strings.Builder
	for _, e := range w.seen {
		raw, _ := json.Marshal(e.Data)
		b.WriteString("\n  " + string(e.Type) + " " + string(raw))
	}
	return b.String()
}

// saw reports whether some kept event of type typ concerns node (its nodeId).
func (w *watcher) saw(typ events.Type, node string) bool {
	for _, e := range w.seen {
		raw, _ := json.Marshal(e.Data)
		if e.Type == typ && strings.Contains(string(raw), `"nodeId":"`+node+`"`) {
			return true
		}
	}
	return false
}

func runnerState(node, state string) func(any) bool {
	return func(d any) bool { r, ok := d.(events.Runner); return ok && r.NodeID == node && r.State == state }
}

func desktopState(id, state string) func(any) bool {
	return func(d any) bool { x, ok := d.(events.Desktop); return ok && x.InstanceID == id && x.State == state }
}

// TestRunnerEventsOnBus: a real `cubicle runner` process with the real engine; what happens
// to it and its desktops reaches the server's event bus for those who may see it —
// administrators see the runner come, go and be revoked; a member sees their own agent's
// desktop on the runner start, become unreachable when the runner is killed and run again
// when it comes back (reconciled from the runner's report), and another member sees nothing
// of it.
func TestRunnerEventsOnBus(t *testing.T) {
	needEngine(t)
	serverDir := filepath.Join(t.TempDir(), "server")
	s, stopServer := startServerIn(t, serverDir, "127.0.0.1:0", nil)

	// Two members: Mia (whose agent runs on the runner) and Olaf (who has nothing there).
	member := func(name string) (string, *server) {
		var acc struct{ ID string }
		s.do(t, "POST", "/api/app/admin/users", map[string]string{"username": name, "password": "Pass-Word-9-x7Q", "role": "member"},
			http.StatusCreated, &acc)
		jar, _ := cookiejar.New(nil)
		m := &server{b: s.b, url: s.url, http: &http.Client{Jar: jar, Timeout: 20 * time.Minute}}
		m.do(t, "POST", "/api/auth/login", map[string]string{"username": name, "password": "Pass-Word-9-x7Q"}, http.StatusOK, nil)
		return acc.ID, m
	}
	miaID, mia := member("mia")
	olafID, olaf := member("olaf")
	var olafAgent struct{ ID string }
	olaf.do(t, "POST", "/api/app/agents", map[string]string{"name": "Otto"}, http.StatusCreated, &olafAgent)

	admins := s.watch(t, "admin", events.Viewer{Account: "someone-else", Admin: true})
	mias := s.watch(t, "mia", events.Viewer{Account: miaID})
	olafs := s.watch(t, "olaf", events.Viewer{Account: olafID})

	var created nodes.Created
	s.do(t, "POST", "/api/app/admin/runners", map[string]any{"name": "event box"}, http.StatusCreated, &created)
	node := created.ID
	t.Cleanup(func() { removeNodeObjects(t, node) })
	runDir := filepath.Join(t.TempDir(), "runner")
	args := []string{"--server", s.url, "--token", created.Token, "--data-dir", runDir, "--engine", "podman"}
	r := startRunner(t, nil, args...)

	// The runner's arrival, with its hello and desktop counts, for administrators.
	up := admins.next(events.RunnerStatus, 2*time.Minute, "runner connected", runnerState(node, events.RunnerConnected)).(events.Runner)
	if up.Name != "event box" || up.OS == "" || up.Engine != "podman" || !slices.Contains(up.Capabilities, "events-v1") ||
		up.Desktops == nil || up.Desktops.Max < 1 {
		t.Fatalf("runner connected event: %+v", up)
	}

	// Preparation on the runner: its progress, named by the runner's node.
	s.do(t, "POST", "/api/app/admin/local-vm/prepare?wait=1&node="+node, map[string]string{"imageKey": "standard"}, http.StatusOK, nil)
	admins.next(events.PrepareProgress, time.Minute, "the runner's preparation ended", func(d any) bool {
		p, ok := d.(events.Prepare)
		return ok && p.NodeID == node && !p.Running && p.Error == ""
	})
	admins.next(events.ImagesChanged, time.Minute, "the runner's images", func(d any) bool {
		i, ok := d.(events.Images)
		return ok && i.NodeID == node && slices.Contains(i.Prepared, "standard")
	})

	// The node's settings, changed through ?node=, come back from the runner as node.changed;
	// the local node's capacity stays what it was (capacity is per node).
	var localBefore, localAfter vm.Status
	s.do(t, "GET", "/api/app/admin/local-vm?node=local", nil, http.StatusOK, &localBefore)
	s.do(t, "PUT", "/api/app/admin/local-vm/policy?node="+node, map[string]any{"isolation": "per-agent", "maxInstances": 3}, http.StatusOK, nil)
	admins.next(events.NodeChanged, time.Minute, "the runner's capacity", func(d any) bool {
		n, ok := d.(events.Node)
		return ok && n.NodeID == node && n.MaxInstances == 3
	})
	s.do(t, "GET", "/api/app/admin/local-vm", nil, http.StatusOK, &localAfter)
	if localAfter.NodeID != "local" || localAfter.Policy != localBefore.Policy {
		t.Fatalf("the runner's policy reached the local node: %+v → %+v", localBefore.Policy, localAfter.Policy)
	}

	// Mia's agent on the runner; its desktop starts there.
	var ag struct{ ID string }
	mia.do(t, "POST", "/api/app/agents", map[string]string{"name": "Ada"}, http.StatusCreated, &ag)
	s.do(t, "PUT", "/api/app/admin/users/"+miaID+"/host-access", map[string]any{"nodeId": node, "placement": true}, http.StatusOK, nil)
	mia.do(t, "PUT", "/api/app/agents/"+ag.ID+"/node", map[string]string{"nodeId": node}, http.StatusOK, nil)
	var av vm.AgentView
	mia.do(t, "POST", "/api/app/agents/"+ag.ID+"/local-vm/create", nil, http.StatusOK, &av)
	desk := av.Desktop.ID
	run := mias.next(events.DesktopState, time.Minute, "Mia's desktop running", desktopState(desk, vm.StateRunning)).(events.Desktop)
	if run.NodeID != node || run.AgentID != ag.ID || run.AccountID != miaID {
		t.Fatalf("Mia's desktop event: %+v", run)
	}
	admins.next(events.DesktopState, time.Minute, "Mia's desktop running (admin)", desktopState(desk, vm.StateRunning))
	admins.next(events.RunnerStatus, time.Minute, "one desktop running", func(d any) bool {
		x, ok := d.(events.Runner)
		return ok && x.NodeID == node && x.Desktops != nil && x.Desktops.Running == 1 && x.Desktops.Max == 3
	})

	// kill -9: the desktop is unreachable for Mia, the runner disconnected for administrators.
	r.cmd.Process.Kill()
	r.exitCode(t, time.Minute)
	gone := mias.next(events.DesktopState, time.Minute, "Mia's desktop unreachable", desktopState(desk, events.DesktopUnreachable)).(events.Desktop)
	if gone.Previous != vm.StateRunning || gone.LastError == "" {
		t.Fatalf("unreachable event: %+v", gone)
	}
	down := admins.next(events.RunnerStatus, time.Minute, "runner disconnected", runnerState(node, events.RunnerDisconnected)).(events.Runner)
	if down.LastSeen.IsZero() {
		t.Fatalf("disconnected event without lastSeen: %+v", down)
	}

	// It comes back: the runner's report reconciles, the desktop runs again for Mia.
	r = startRunner(t, nil, args...)
	back := mias.next(events.DesktopState, 2*time.Minute, "Mia's desktop running again", desktopState(desk, vm.StateRunning)).(events.Desktop)
	if back.Previous != events.DesktopUnreachable {
		t.Fatalf("reconciled event: %+v", back)
	}
	admins.next(events.RunnerStatus, time.Minute, "runner connected again", runnerState(node, events.RunnerConnected))

	// The server restarts: the runner reconnects by itself and the new server's stream shows
	// its desktop again (reconciled), with nobody doing anything.
	stopServer()
	var admins2, mias2 *watcher
	s, _ = startServerIn(t, serverDir, strings.TrimPrefix(s.url, "http://"), func(s2 *server) {
		admins2 = s2.watch(t, "admin after restart", events.Viewer{Account: "someone-else", Admin: true})
		mias2 = s2.watch(t, "mia after restart", events.Viewer{Account: miaID})
	})
	admins2.next(events.RunnerStatus, 2*time.Minute, "runner connected after the server restarted", runnerState(node, events.RunnerConnected))
	mias2.next(events.DesktopState, time.Minute, "Mia's desktop after the server restarted", desktopState(desk, vm.StateRunning))
	mias = mias2

	// Revoke: cut off at once, and said so.
	s.do(t, "DELETE", "/api/app/admin/runners/"+node, nil, http.StatusOK, nil)
	admins2.next(events.RunnerStatus, time.Minute, "runner revoked", runnerState(node, events.RunnerRevoked))
	mias.next(events.DesktopState, time.Minute, "Mia's desktop unreachable after revoke", desktopState(desk, events.DesktopUnreachable))
	r.exitCode(t, 3*time.Minute)

	// Who saw what: members never see runners; Olaf never sees Mia's desktop or anything of
	// the runner's node.
	mias.drain()
	olafs.drain()
	for _, e := range mias.seen {
		if e.Type == events.RunnerStatus || e.Type == events.PrepareProgress {
			t.Fatalf("a member saw %s", e.Type)
		}
	}
	for _, typ := range []events.Type{events.DesktopState, events.RunnerStatus, events.PrepareProgress} {
		if olafs.saw(typ, node) {
			t.Fatalf("Olaf saw a %s event of the runner's node:%s", typ, olafs.summary())
		}
	}
}
