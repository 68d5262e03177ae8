package backend

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"cubicle/backend/auth"
	"cubicle/backend/computerwire"
	"cubicle/backend/models"
	"cubicle/backend/recording"
	"cubicle/backend/vm"
	"cubicle/internal/runnertest"
	"cubicle/internal/testenv"
	"cubicle/runner"
	"cubicle/runner/wire"
)

// Environment of the runner child of TestRecordingOnARunner (a runner process it can kill -9).
const (
	recChildEnv  = "CUBICLE_TEST_RECORDING_RUNNER"
	recServerEnv = "CUBICLE_TEST_RECORDING_SERVER"
	recTokenEnv  = "CUBICLE_TEST_RECORDING_TOKEN"
)

// TestRecordingOnARunner: a runner records its own desktops (issue 24 item 4). A real server
// without an engine of its own; a runner on the real Podman engine in a child process (as
// `cubicle runner --engine podman` runs, over HTTP and its yamux link). A chat turn with the
// scripted model starts the agent's desktop on the runner, shoots a screenshot and starts a
// terminal whose clock changes the screen all the time. Then: the recording is under the
// runner's data directory and none under the server's; the server watches no region stream
// of the desktop and records none; the server's API lists the recording with the tool
// call's marker (made on the server, sent over the link) and its screenshot, and a replay
// from the marker draws frames. The runner is killed with SIGKILL mid-recording and started
// again on the same data directory: the recording is listed ended, at most 2 s short of the
// kill, and plays; deleting it through the server removes it on the runner. With the runner
// stopped, the list answers 503 saying the runner cannot be reached.
func TestRecordingOnARunner(t *testing.T) {
	if os.Getenv(recChildEnv) != "" {
		recordingRunnerChild(t)
		return
	}
	testenv.RootPodman(t)
	if testing.Short() {
		t.Skip("real desktop test; run without -short")
	}
	began := time.Now()
	dir := t.TempDir()
	log := testenv.Logger(t, slog.LevelWarn)
	serverDir, runnerDir := filepath.Join(dir, "server"), filepath.Join(dir, "runner")
	b, err := New(Config{DataDir: serverDir, Engine: "none", LocalNode: LocalNodeDirect,
		AllowedHosts: []string{"127.0.0.1"}, Logger: log.With("side", "server")})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	t.Cleanup(func() { b.Close() })
	if err := b.Start(ctx); err != nil {
		t.Fatal(err)
	}
	if err := b.WaitEngine(ctx); err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(b.API.Handler())
	t.Cleanup(srv.Close)
	created, err := b.Nodes.Create("recording runner", false, srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	node := created.ID
	t.Cleanup(func() { removeLabelled(t, map[string]string{vm.LabelNode: node}) })

	// The runner in a child process of this test binary.
	logf, err := os.Create(filepath.Join(dir, "runner-child.log"))
	if err != nil {
		t.Fatal(err)
	}
	defer logf.Close()
	child := exec.Command(os.Args[0], "-test.run", "^TestRecordingOnARunner$", "-test.v", "-test.timeout", "60m")
	child.Env = append(os.Environ(), recChildEnv+"="+runnerDir, recServerEnv+"="+srv.URL, recTokenEnv+"="+created.Token)
	child.Stdout, child.Stderr = logf, logf
	if err := child.Start(); err != nil {
		t.Fatal(err)
	}
	killed := false
	defer func() {
		if !killed {
			child.Process.Kill()
			child.Wait()
		}
	}()
	childLog := func() string { raw, _ := os.ReadFile(logf.Name()); return string(raw) }
	waitFor(t, "the runner child to connect", 2*time.Minute, func() bool { return b.Nodes.Connected(node) })
	if h, _ := b.Nodes.Hello(node); !strings.Contains(strings.Join(h.Capabilities, " "), "recording-v1") {
		t.Fatalf("the runner's hello lacks recording-v1: %v", h.Capabilities)
	}
	vms, err := b.fleet.Node(node)
	if err != nil {
		t.Fatal(err)
	}
	pctx, pcancel := context.WithTimeout(ctx, 30*time.Minute)
	defer pcancel()
	if _, err := vms.Prepare(pctx, "standard"); err != nil {
		t.Fatalf("prepare on the runner: %v\n%s", err, childLog())
	}
	t.Logf("runner connected, image prepared: %v", time.Since(began).Round(time.Millisecond))

	adminAcc, err := b.Auth.Admin()
	if err != nil {
		t.Fatal(err)
	}
	admin := auth.Principal{AccountID: adminAcc.ID, Username: adminAcc.Username, Role: adminAcc.Role}
	ada, err := b.Profiles.Create(admin.AccountID, "Ada")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.fleet.Place(ctx, admin.AccountID, ada.ID, node); err != nil {
		t.Fatalf("place the agent on the runner: %v", err)
	}
	model := &scriptedModel{}
	msrv := httptest.NewServer(model)
	defer msrv.Close()
	allow := true
	if _, err := b.Models.Set(models.Update{BaseURL: msrv.URL + "/v1", Model: "scripted", AllowPrivate: &allow}); err != nil {
		t.Fatal(err)
	}
	clock := `setsid xfce4-terminal --disable-server --maximize --hide-menubar -x sh -c 'while :; do date +%T.%N; sleep 0.05; done' >/dev/null 2>&1 & sleep 3; echo started`
	model.push(
		callStep("s1", "computer_screenshot", map[string]any{}),
		callStep("s2", "computer_shell", map[string]any{"command": clock}),
		textStep("done"),
	)
	res := results(turn(t, b, admin.AccountID, ada.ID, "r1", "record something"))
	if res["s1"][0] != "success" || res["s2"][0] != "success" {
		t.Fatalf("the turn's tools: %+v\n%s", res, childLog())
	}
	av, err := vms.Agent(ctx, admin.AccountID, ada.ID)
	if err != nil || av.Desktop.State != vm.StateRunning {
		t.Fatalf("the agent's desktop: %+v, %v", av.Desktop, err)
	}
	desk := av.Desktop.ID

	ap, err := b.Auth.Issue(adminAcc)
	if err != nil {
		t.Fatal(err)
	}
	base := "/api/app/agents/" + ada.ID + "/recordings"
	list := func() ([]recording.Info, int) {
		var l []recording.Info
		code := apiJSON(t, srv, ap.Token, "GET", base, nil, &l)
		return l, code
	}
	// The tool calls' markers come from the server over the link.
	var rec recording.Info
	waitFor(t, "the recording with the screenshot's marker", time.Minute, func() bool {
		l, code := list()
		for _, i := range l {
			for _, m := range i.Markers {
				if i.DesktopID == desk && m.Kind == recording.MarkTool && m.Tool == "computer_screenshot" && m.Screenshot {
					rec = i
					return code == http.StatusOK
				}
			}
		}
		return false
	})
	t.Logf("listed through the server: %s, %d markers, node %s (%v)", rec.ID, len(rec.Markers), rec.Node, time.Since(began).Round(time.Millisecond))
	if rec.Node != node || !rec.Live {
		t.Fatalf("recording %+v: want live, on node %s", rec, node)
	}
	waitFor(t, "the recording's first segment on the runner's disk", time.Minute, func() bool {
		_, err := os.Stat(filepath.Join(runnerDir, "recordings", rec.ID, "seg-000001"))
		return err == nil
	})
	if ents, _ := os.ReadDir(filepath.Join(serverDir, "recordings")); len(ents) > 1 || (len(ents) == 1 && ents[0].Name() != "settings.json") {
		t.Fatalf("the server's data dir has recordings: %v", ents)
	}
	if n := b.Screens.RegionViewers(desk); n != 0 || b.Recordings.Recording(desk) != "" {
		t.Fatalf("the server watches the runner's desktop (%d region viewers, recording %q): the stream crosses the link", n, b.Recordings.Recording(desk))
	}
	shotAt := -1
	for i, m := range rec.Markers {
		if m.Tool == "computer_screenshot" {
			shotAt = i
		}
	}
	if m := rec.Markers[shotAt]; m.RunID == "" || m.AgentID != ada.ID || !strings.HasPrefix(m.Label, "computer_screenshot") || m.BeganAt > m.At {
		t.Errorf("the tool call's marker %+v: want its run id, agent, label and start", m)
	}
	shot := getBytes(t, srv, ap.Token, fmt.Sprintf("%s/%s/markers/%d/screenshot", base, rec.ID, shotAt))
	if len(shot) < 1000 {
		t.Fatalf("the marker's screenshot from the runner: %d bytes", len(shot))
	}
	if frames := replayFrom(t, srv, ap.Token, base+"/"+rec.ID, rec.Markers[shotAt].At); frames == 0 {
		t.Fatal("the replay from the marker drew nothing")
	}

	// kill -9 the runner while the clock changes the screen, and start it again.
	time.Sleep(4 * time.Second)
	killedAt := time.Now()
	child.Process.Kill()
	child.Wait()
	killed = true
	waitFor(t, "the server to see the runner gone", time.Minute, func() bool { return !b.Nodes.Connected(node) })
	if _, code := list(); code != http.StatusServiceUnavailable {
		t.Errorf("the list while the runner is away: %d, want 503", code)
	}
	tr := runnertest.Start(t, runner.Config{Server: srv.URL, Token: created.Token, DataDir: runnerDir, Engine: "podman",
		ConnectEngine: ConnectRunnerEngine, NoHostTools: true, MaxBackoff: time.Second, Logger: log.With("side", "runner")})
	waitFor(t, "the runner to come back", 2*time.Minute, func() bool { return b.Nodes.Connected(node) })
	var after recording.Info
	waitFor(t, "the killed recording listed ended", time.Minute, func() bool {
		l, _ := list()
		for _, i := range l {
			if i.ID == rec.ID && !i.Live {
				after = i
				return true
			}
		}
		return false
	})
	lost := killedAt.Sub(after.StartedAt) - time.Duration(after.DurationMs)*time.Millisecond
	t.Logf("killed after %v; the recording holds %d ms (lost %v), %d keyframes; notes %q", killedAt.Sub(after.StartedAt).Round(time.Millisecond),
		after.DurationMs, lost.Round(time.Millisecond), after.Keyframes, after.Notes)
	if lost > 2*time.Second {
		t.Errorf("the runner's kill -9 lost %v of the recording, want at most 2 s", lost)
	}
	if frames := replayFrom(t, srv, ap.Token, base+"/"+rec.ID, max(after.DurationMs-1000, 0)); frames == 0 {
		t.Error("the replay of the killed recording drew nothing")
	}

	// Deleting through the server removes it on the runner.
	if code := apiJSON(t, srv, ap.Token, "DELETE", base+"/"+rec.ID, nil, nil); code != http.StatusNoContent {
		t.Fatalf("delete: %d", code)
	}
	if _, err := os.Stat(filepath.Join(runnerDir, "recordings", rec.ID)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the deleted recording is still on the runner: %v", err)
	}
	if code := apiJSON(t, srv, ap.Token, "GET", base+"/"+rec.ID, nil, nil); code != http.StatusNotFound {
		t.Errorf("the deleted recording: %d, want 404", code)
	}

	// The administrator's settings reach the runner: "never record" this node ends the
	// recording the restarted runner began, and its retention is the one set.
	var st struct{ KeepDays int }
	if code := apiJSON(t, srv, ap.Token, "PUT", "/api/app/admin/recordings", map[string]any{"keepDays": 5, "neverRecord": []string{node}}, &st); code != http.StatusOK || st.KeepDays != 5 {
		t.Fatalf("set the recording settings: %d %+v", code, st)
	}
	waitFor(t, "the runner to stop recording and keep 5 days", time.Minute, func() bool {
		raw, _ := os.ReadFile(filepath.Join(runnerDir, "recordings", "settings.json"))
		var rs recording.Settings
		if json.Unmarshal(raw, &rs) != nil || rs.KeepDays != 5 || len(rs.NeverRecord) != 1 || rs.NeverRecord[0] != node {
			return false
		}
		l, _ := list()
		for _, i := range l {
			if i.Live {
				return false
			}
		}
		return len(l) > 0
	})

	// The runner stopped: the list says its recordings cannot be reached.
	tr.Stop()
	waitFor(t, "the server to see the runner gone", time.Minute, func() bool { return !b.Nodes.Connected(node) })
	var e struct{ Error string }
	if code := apiJSON(t, srv, ap.Token, "GET", base, nil, &e); code != http.StatusServiceUnavailable || !strings.Contains(e.Error, "runner") {
		t.Errorf("the list with the runner away: %d %q, want 503 saying the runner cannot be reached", code, e.Error)
	}
	t.Logf("done: %v", time.Since(began).Round(time.Millisecond))
}

// recordingRunnerChild is the runner process of TestRecordingOnARunner: it runs until killed.
func recordingRunnerChild(t *testing.T) {
	r, err := runner.New(runner.Config{Server: os.Getenv(recServerEnv), Token: os.Getenv(recTokenEnv), DataDir: os.Getenv(recChildEnv),
		Engine: "podman", ConnectEngine: ConnectRunnerEngine, NoHostTools: true, MaxBackoff: time.Second,
		Logger: slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))})
	if err != nil {
		t.Fatal(err)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM)
	defer stop()
	r.Run(ctx)
	r.Close()
}

// getBytes GETs path with a bearer session and returns the body (a non-200 fails the test).
func getBytes(t *testing.T, srv *httptest.Server, session, path string) []byte {
	t.Helper()
	req, _ := http.NewRequest("GET", srv.URL+path, nil)
	req.Header.Set("Authorization", "Bearer "+session)
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	var sb strings.Builder
	buf := make([]byte, 32<<10)
	for {
		n, err := res.Body.Read(buf)
		sb.Write(buf[:n])
		if err != nil {
			break
		}
	}
	if res.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %d %s", path, res.StatusCode, sb.String())
	}
	return []byte(sb.String())
}

// replayFrom opens the replay of recording path at from (ms) and returns how many binary
// update messages came before the position message of the seek.
func replayFrom(t *testing.T, srv *httptest.Server, session, path string, from int64) int {
	t.Helper()
	u := "ws" + strings.TrimPrefix(srv.URL, "http") + path + fmt.Sprintf("/replay?from=%d&speed=4&access_token=%s", from, session)
	d := websocket.Dialer{Subprotocols: []string{computerwire.Subprotocol}, HandshakeTimeout: 10 * time.Second}
	ws, resp, err := d.Dial(u, http.Header{"Origin": {srv.URL}})
	if err != nil {
		code := 0
		if resp != nil {
			code = resp.StatusCode
		}
		t.Fatalf("replay %s: %v (%d)", path, err, code)
	}
	defer ws.Close()
	ws.SetReadDeadline(time.Now().Add(30 * time.Second))
	frames := 0
	for {
		typ, raw, err := ws.ReadMessage()
		if err != nil {
			t.Fatalf("replay %s: %v after %d frames", path, err, frames)
		}
		if typ == websocket.BinaryMessage {
			frames++
			continue
		}
		var p recording.Position
		if json.Unmarshal(raw, &p) == nil && p.Type == "replay" && p.Seeked {
			t.Logf("replay from %d ms: %d update messages drew the screen at %d ms (duration %d ms)", from, frames, p.At, p.DurationMs)
			return frames
		}
	}
}

// TestRecordingOnAnOlderRunner: a runner without recording-v1 (an older one) keeps today's
// behaviour: the server records its desktop through the link, under the server's data
// directory, with the tool call's marker, and the API lists it from there.
func TestRecordingOnAnOlderRunner(t *testing.T) {
	testenv.RootPodman(t)
	if testing.Short() {
		t.Skip("real desktop test; run without -short")
	}
	dir := t.TempDir()
	log := testenv.Logger(t, slog.LevelWarn)
	b, err := New(Config{DataDir: filepath.Join(dir, "server"), Engine: "none", LocalNode: LocalNodeDirect,
		AllowedHosts: []string{"127.0.0.1"}, Logger: log.With("side", "server")})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	t.Cleanup(func() { b.Close() })
	if err := b.Start(ctx); err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(b.API.Handler())
	t.Cleanup(srv.Close)
	created, err := b.Nodes.Create("older runner", false, srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	node := created.ID
	t.Cleanup(func() { removeLabelled(t, map[string]string{vm.LabelNode: node}) })
	runnerDir := filepath.Join(dir, "runner")
	tr := runnertest.Start(t, runner.Config{Server: srv.URL, Token: created.Token, DataDir: runnerDir, Engine: "podman",
		ConnectEngine: ConnectRunnerEngine, NoHostTools: true, MaxBackoff: time.Second, Logger: log.With("side", "runner"),
		DropCapabilities: []string{wire.CapRecording}})
	waitFor(t, "the runner to connect", time.Minute, func() bool { return b.Nodes.Connected(node) })
	vms, err := b.fleet.Node(node)
	if err != nil {
		t.Fatal(err)
	}
	pctx, pcancel := context.WithTimeout(ctx, 30*time.Minute)
	defer pcancel()
	if _, err := vms.Prepare(pctx, "standard"); err != nil {
		t.Fatalf("prepare on the runner: %v", err)
	}
	adminAcc, err := b.Auth.Admin()
	if err != nil {
		t.Fatal(err)
	}
	ada, err := b.Profiles.Create(adminAcc.ID, "Ada")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.fleet.Place(ctx, adminAcc.ID, ada.ID, node); err != nil {
		t.Fatal(err)
	}
	model := &scriptedModel{}
	msrv := httptest.NewServer(model)
	defer msrv.Close()
	allow := true
	if _, err := b.Models.Set(models.Update{BaseURL: msrv.URL + "/v1", Model: "scripted", AllowPrivate: &allow}); err != nil {
		t.Fatal(err)
	}
	model.push(callStep("s1", "computer_screenshot", map[string]any{}), textStep("done"))
	if res := results(turn(t, b, adminAcc.ID, ada.ID, "r1", "record something")); res["s1"][0] != "success" {
		t.Fatalf("the screenshot: %+v", res)
	}
	av, err := vms.Agent(ctx, adminAcc.ID, ada.ID)
	if err != nil {
		t.Fatal(err)
	}
	ap, err := b.Auth.Issue(adminAcc)
	if err != nil {
		t.Fatal(err)
	}
	var rec recording.Info
	waitFor(t, "the server's recording with the screenshot's marker", time.Minute, func() bool {
		var l []recording.Info
		apiJSON(t, srv, ap.Token, "GET", "/api/app/agents/"+ada.ID+"/recordings", nil, &l)
		for _, i := range l {
			for _, m := range i.Markers {
				if i.DesktopID == av.Desktop.ID && m.Tool == "computer_screenshot" && m.Screenshot {
					rec = i
					return true
				}
			}
		}
		return false
	})
	if b.Recordings.Recording(av.Desktop.ID) != rec.ID {
		t.Errorf("the server is not the one recording %s", rec.ID)
	}
	waitFor(t, "the recording's first segment on the server's disk", time.Minute, func() bool {
		_, err := os.Stat(filepath.Join(dir, "server", "recordings", rec.ID, "seg-000001"))
		return err == nil
	})
	if _, err := os.Stat(filepath.Join(runnerDir, "recordings")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the older runner has a recordings directory: %v", err)
	}
	// Its recordings are the server's: listed while it is away.
	tr.Stop()
	waitFor(t, "the server to see the runner gone", time.Minute, func() bool { return !b.Nodes.Connected(node) })
	var l []recording.Info
	if code := apiJSON(t, srv, ap.Token, "GET", "/api/app/agents/"+ada.ID+"/recordings", nil, &l); code != http.StatusOK || len(l) == 0 || l[0].ID != rec.ID {
		t.Errorf("the list with the older runner away: %d %d recordings, want 200 and %s", code, len(l), rec.ID)
	}
}
