package runner_test

import (
	"bufio"
	"context"
	"encoding/json"
	"net/http"
	"net/http/cookiejar"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"cubicle/backend"
	"cubicle/backend/events"
	"cubicle/backend/nodes"
	"cubicle/backend/vm"
	"cubicle/runner/wire"
)

// streamEvent is one message of GET /api/app/events.
type streamEvent struct {
	Type string          `json:"type"`
	Data json.RawMessage `json:"data"`
}

// openStream opens the server's event stream as s's session and returns its messages; the
// stream ends with the test.
func (s *server) openStream(t *testing.T) <-chan streamEvent {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, "GET", s.url+"/api/app/events", nil)
	req.Header.Set("Accept", "text/event-stream")
	client := &http.Client{Jar: s.http.Jar} // no timeout: the stream stays open
	resp, err := client.Do(req)
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK {
		cancel()
		t.Fatalf("GET /api/app/events: HTTP %d", resp.StatusCode)
	}
	out := make(chan streamEvent, 4096)
	done := make(chan struct{})
	go func() {
		defer close(done)
		defer close(out)
		sc := bufio.NewScanner(resp.Body)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() {
			data, ok := strings.CutPrefix(sc.Text(), "data: ")
			if !ok {
				continue
			}
			var e streamEvent
			if err := json.Unmarshal([]byte(data), &e); err != nil {
				t.Errorf("stream message %q: %v", data, err)
				return
			}
			select {
			case out <- e:
			default:
				t.Errorf("the test's stream buffer is full")
				return
			}
		}
	}()
	t.Cleanup(func() {
		cancel()
		resp.Body.Close()
		<-done
	})
	return out
}

// TestRunnerDesktopStats: a real `cubicle runner` process on the real engine advertises
// stats-v1, and an administrator's event stream (GET /api/app/events) carries desktop.stats
// for the runner's node naming its desktop with the memory it uses. A runner that does not
// advertise stats-v1 (an older one) is skipped quietly — no event for its node, while a
// capable runner publishes one every tick even with no desktop — and a member's stream never
// carries stats.
func TestRunnerDesktopStats(t *testing.T) {
	needEngine(t)
	s := startServerWith(t, "127.0.0.1:0", func(c *backend.Config) { c.StatsInterval = time.Second })

	add := func(name string, env ...string) (string, *proc) {
		var created nodes.Created
		s.do(t, "POST", "/api/app/admin/runners", map[string]any{"name": name}, http.StatusCreated, &created)
		t.Cleanup(func() { removeNodeObjects(t, created.ID) })
		dir := filepath.Join(t.TempDir(), "runner")
		p := startRunnerEnv(t, nil, env, "--server", s.url, "--token", created.Token, "--data-dir", dir, "--engine", "podman")
		return created.ID, p
	}
	node, r := add("stats box")
	older, o := add("older box", "CUBICLE_RUNNER_TEST_DROP_CAPS="+wire.CapStats)
	for _, x := range []struct {
		id string
		p  *proc
	}{{node, r}, {older, o}} {
		deadline := time.Now().Add(2 * time.Minute)
		for s.runnerView(t, x.id).Status != nodes.StatusConnected {
			if time.Now().After(deadline) {
				t.Fatalf("runner %s did not connect:\n%s", x.id, x.p.out.String())
			}
			time.Sleep(200 * time.Millisecond)
		}
	}
	if caps := s.runnerView(t, node).Capabilities; !strings.Contains(strings.Join(caps, " "), wire.CapStats) {
		t.Fatalf("the runner does not advertise %s: %v", wire.CapStats, caps)
	}
	if caps := s.runnerView(t, older).Capabilities; strings.Contains(strings.Join(caps, " "), wire.CapStats) {
		t.Fatalf("the older runner advertises %s: %v", wire.CapStats, caps)
	}

	s.do(t, "POST", "/api/app/admin/local-vm/prepare?wait=1&node="+node, map[string]string{"imageKey": "standard"}, http.StatusOK, nil)
	var ag struct{ ID string }
	s.do(t, "POST", "/api/app/agents", map[string]string{"name": "Meter"}, http.StatusCreated, &ag)
	s.do(t, "PUT", "/api/app/agents/"+ag.ID+"/node", map[string]string{"nodeId": node}, http.StatusOK, nil)
	var av vm.AgentView
	s.do(t, "POST", "/api/app/agents/"+ag.ID+"/local-vm/create", nil, http.StatusOK, &av)
	desk := av.Desktop.ID
	if av.Desktop.State != vm.StateRunning {
		t.Fatalf("the runner's desktop: %+v", av.Desktop)
	}

	// A member, whose stream must never carry stats.
	s.do(t, "POST", "/api/app/admin/users", map[string]string{"username": "mel", "password": "Pass-Word-9-x7Q", "role": "member"},
		http.StatusCreated, nil)
	jar, _ := cookiejar.New(nil)
	mel := &server{b: s.b, url: s.url, http: &http.Client{Jar: jar, Timeout: 5 * time.Minute}}
	mel.do(t, "POST", "/api/auth/login", map[string]string{"username": "mel", "password": "Pass-Word-9-x7Q"}, http.StatusOK, nil)
	melStream := mel.openStream(t)
	adminStream := s.openStream(t)

	// The administrator's stream: stats of the runner's node naming its desktop with nonzero
	// memory. Three of them, to see more than one tick; none of the older runner's node.
	var seen []string
	got := 0
	timeout := time.After(3 * time.Minute)
	for got < 3 {
		select {
		case e, open := <-adminStream:
			if !open {
				t.Fatalf("the admin's stream ended; saw %v", seen)
			}
			if e.Type != string(events.DesktopStats) {
				continue
			}
			var st events.Stats
			if err := json.Unmarshal(e.Data, &st); err != nil {
				t.Fatal(err)
			}
			seen = append(seen, string(e.Data))
			if st.NodeID == older {
				t.Fatalf("stats of the runner without %s: %s", wire.CapStats, e.Data)
			}
			if st.NodeID != node {
				continue
			}
			if len(st.Instances) != 1 || st.Instances[0].InstanceID != desk {
				t.Fatalf("the runner's stats name %s, want exactly its desktop %s", e.Data, desk)
			}
			if x := st.Instances[0]; x.MemoryBytes == 0 || x.CPUPercent < 0 {
				t.Fatalf("the runner's desktop stats: %+v", x)
			}
			t.Logf("runner desktop stats: %s", e.Data)
			got++
		case <-timeout:
			t.Fatalf("fewer than 3 desktop.stats events of node %s within 3 minutes; saw %v\nrunner log:\n%s", node, seen, r.out.String())
		}
	}

	// The member's stream: a node.changed (for everyone) published after those stats comes
	// after anything of them the member could have been sent; no stats before it.
	s.do(t, "PUT", "/api/app/admin/local-vm/idle-policy?node="+node, map[string]any{"requestId": "stats-1", "idleStopMinutes": 30},
		http.StatusOK, nil)
	timeout = time.After(time.Minute)
	for {
		select {
		case e, open := <-melStream:
			if !open {
				t.Fatal("the member's stream ended")
			}
			if e.Type == string(events.DesktopStats) {
				t.Fatalf("a member's stream carried stats: %s", e.Data)
			}
			if e.Type != string(events.NodeChanged) {
				continue
			}
			var n events.Node
			if json.Unmarshal(e.Data, &n) == nil && n.NodeID == node && n.IdleStopMinutes == 30 {
				return
			}
		case <-timeout:
			t.Fatal("the member's stream did not carry the node's change")
		}
	}
}
