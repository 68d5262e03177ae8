package backend

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"cubicle/backend/agent"
	"cubicle/backend/agent/tools"
	"cubicle/backend/engine/podman"
	"cubicle/backend/engineconn"
	"cubicle/backend/fault"
	"cubicle/backend/models"
	"cubicle/backend/store"
	"cubicle/backend/vm"
	"cubicle/internal/testenv"
)

// scriptedModel is an OpenAI-compatible chat-completions server that answers each request
// with the next scripted tool call (or text). It stands in for the language model only; the
// runtime, guard, tools, binding, engine, image and driver under it are all real.
type scriptedModel struct {
	mu    sync.Mutex
	steps []string // one SSE body per request
	seen  [][]byte
}

func (m *scriptedModel) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	raw, _ := io.ReadAll(r.Body)
	m.mu.Lock()
	m.seen = append(m.seen, raw)
	var step string
	if len(m.steps) > 0 {
		step, m.steps = m.steps[0], m.steps[1:]
	}
	m.mu.Unlock()
	if step == "" {
		http.Error(w, "script exhausted", 500)
		return
	}
	w.Header().Set("Content-Type", "text/event-stream")
	io.WriteString(w, step)
}

func (m *scriptedModel) push(steps ...string) {
	m.mu.Lock()
	m.steps = append(m.steps, steps...)
	m.mu.Unlock()
}

func callStep(id, name string, args map[string]any) string {
	a, _ := json.Marshal(args)
	s, _ := json.Marshal(string(a))
	return `data: {"choices":[{"delta":{"tool_calls":[{"index":0,"id":"` + id + `","type":"function","function":{"name":"` + name + `","arguments":` + string(s) + `}}]}}]}` + "\n\n" +
		`data: {"choices":[{"delta":{},"finish_reason":"tool_calls"}]}` + "\n\ndata: [DONE]\n\n"
}

func textStep(text string) string {
	s, _ := json.Marshal(text)
	return `data: {"choices":[{"delta":{"content":` + string(s) + `}}]}` + "\n\n" +
		`data: {"choices":[{"delta":{},"finish_reason":"stop"}]}` + "\n\ndata: [DONE]\n\n"
}

// turn runs one chat turn and returns its events.
func turn(t *testing.T, b *Backend, user, agentID, session, input string) []agent.Event {
	t.Helper()
	var evs []agent.Event
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	err := b.Chat.Run(ctx, agent.Turn{SessionID: session, UserID: user, AgentID: agentID, AgentName: "Ada", Input: input},
		func(e agent.Event) { evs = append(evs, e) })
	if err != nil {
		t.Fatal(err)
	}
	return evs
}

// results maps tool call ids to their end state and text.
func results(evs []agent.Event) map[string][2]string {
	out := map[string][2]string{}
	text := map[string]string{}
	for _, e := range evs {
		switch e.Type {
		case agent.ToolResultTextDelta:
			text[e.ToolCallID] += e.Delta
		case agent.ToolResultEnd:
			out[e.ToolCallID] = [2]string{e.State, text[e.ToolCallID]}
		}
	}
	return out
}

// TestAgentOnRealDesktop drives the real runtime with a scripted model against a real desktop:
// the standard image in a real Podman container with the real driver.
func TestAgentOnRealDesktop(t *testing.T) {
	b, dir, _ := startOnRealDesktop(t, slog.LevelWarn)
	var inst store.VMInstance
	defer func() {
		b.Close()
		if inst.ID == "" || b.engine == nil {
			return
		}
		cctx, ccancel := context.WithTimeout(context.Background(), time.Minute)
		defer ccancel()
		eng, err := engineconn.ConnectEngine(cctx, "podman", b.log)
		if err != nil {
			return
		}
		defer eng.Close()
		eng.Client.RemoveContainer(cctx, inst.ContainerName, true)
		if v, ok := eng.Client.(interface {
			RemoveVolume(ctx context.Context, name string) error
		}); ok {
			v.RemoveVolume(cctx, inst.WorkspaceVol)
			v.RemoveVolume(cctx, inst.ProfileVol)
		}
	}()

	admin, err := b.Auth.Admin()
	if err != nil {
		t.Fatal(err)
	}
	ag, err := b.Profiles.Create(admin.ID, "Ada")
	if err != nil {
		t.Fatal(err)
	}
	model := &scriptedModel{}
	srv := httptest.NewServer(model)
	defer srv.Close()
	if _, err := b.Models.Set(models.Update{BaseURL: srv.URL + "/v1", Model: "scripted", AllowPrivate: &allowLoopback}); err != nil {
		t.Fatal(err)
	}

	// Turn 1: screenshot, open a terminal with a shortcut, write a file, read it back with the
	// shell; a host tool is refused because the host environment is not allowed.
	model.push(
		callStep("c1", "computer_screenshot", map[string]any{}),
		callStep("c2", "computer_key", map[string]any{"keys": "ctrl+alt+t"}),
		callStep("c3", "computer_write_file", map[string]any{"path": "notes/hello.txt", "content": "héllo 你好"}),
		callStep("c4", "computer_shell", map[string]any{"command": "cat notes/hello.txt && whoami && pwd"}),
		callStep("c5", "host_shell", map[string]any{"command": "echo from-host"}),
		textStep("done"),
	)
	evs := turn(t, b, admin.ID, ag.ID, "s1", "look around")
	res := results(evs)
	for _, id := range []string{"c1", "c2", "c3", "c4"} {
		if res[id][0] != agent.StateSuccess {
			t.Fatalf("%s: %q %q", id, res[id][0], res[id][1])
		}
	}
	images := 0
	for _, e := range evs {
		if e.Type == agent.ToolResultDataDelta && e.Data != nil && e.Data.Type == "image" && len(e.Data.Data) > 1000 {
			images++
		}
	}
	if images < 2 {
		t.Fatalf("screenshots returned: %d", images)
	}
	if out := res["c4"][1]; !strings.Contains(out, "héllo 你好") || !strings.Contains(out, "cua") || !strings.Contains(out, tools.Workspace) {
		t.Fatalf("shell output: %q", out)
	}
	if res["c5"][0] != agent.StateDenied || !strings.Contains(res["c5"][1], "Allow host environment") {
		t.Fatalf("host tool without permission: %+v", res["c5"])
	}
	if inst, err = instanceOf(b, admin.ID, ag.ID); err != nil {
		t.Fatal(err)
	}

	// Turn 2: with the host environment allowed, a 25 MiB file is copied in and a larger one
	// is refused; a dangerous command asks for confirmation.
	hostDir := filepath.Join(dir, "host")
	os.MkdirAll(hostDir, 0o755)
	if _, err := b.Store.UpdateAgent(ag.ID, func(a *store.Agent) error {
		a.Computer, a.AllowHostEnvironment, a.WorkDir = "vm", true, hostDir
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	big := make([]byte, tools.MaxCopy)
	rand.Read(big)
	os.WriteFile(filepath.Join(hostDir, "ok.bin"), big, 0o644)
	os.WriteFile(filepath.Join(hostDir, "big.bin"), append(big, 1), 0o644)
	model.push(
		callStep("d1", "host_shell", map[string]any{"command": "pwd"}),
		callStep("d2", "computer_copy_file", map[string]any{"from": "host", "source": "ok.bin", "target": "ok.bin"}),
		callStep("d3", "computer_copy_file", map[string]any{"from": "host", "source": "big.bin", "target": "big.bin"}),
		callStep("d4", "computer_shell", map[string]any{"command": "sha256sum ok.bin; ls big.bin"}),
		callStep("d5", "computer_shell", map[string]any{"command": "pkill -x nosuchproc; rm -rf /home/cua/workspace/notes"}),
		textStep("removed"),
	)
	evs = turn(t, b, admin.ID, ag.ID, "s1", "copy and clean")
	res = results(evs)
	if res["d1"][0] != agent.StateSuccess || !strings.Contains(res["d1"][1], hostDir) {
		t.Fatalf("host shell: %+v", res["d1"])
	}
	if res["d2"][0] != agent.StateSuccess {
		t.Fatalf("25 MiB copy: %+v", res["d2"])
	}
	if res["d3"][0] != agent.StateError || !strings.Contains(res["d3"][1], fmt.Sprint(tools.MaxCopy)) {
		t.Fatalf("oversized copy: %+v", res["d3"])
	}
	if !strings.Contains(res["d4"][1], sha256hex(big)) || !strings.Contains(res["d4"][1], "No such file") {
		t.Fatalf("copied file in the desktop: %q", res["d4"][1])
	}
	var confirm *agent.Event
	for i := range evs {
		if evs[i].Type == agent.RequireUserConfirm {
			confirm = &evs[i]
		}
	}
	if confirm == nil || len(confirm.ToolCalls) != 1 || confirm.ToolCalls[0].ID != "d5" {
		t.Fatalf("no confirmation for rm -rf: %v", confirm)
	}
	// Turn 3: the person confirms; the command runs and the model finishes.
	evs = turn(t, b, admin.ID, ag.ID, "s1", "yes")
	if res := results(evs); res["d5"][0] != agent.StateSuccess {
		t.Fatalf("confirmed command: %+v", res["d5"])
	}
	model.push(callStep("e1", "computer_shell", map[string]any{"command": "test -e notes && echo still-there || echo gone"}), textStep("checked"))
	evs = turn(t, b, admin.ID, ag.ID, "s1", "check")
	if out := results(evs)["e1"][1]; !strings.Contains(out, "gone") {
		t.Fatalf("after confirmed rm: %q", out)
	}
	// Every call is in the execution history.
	runs, err := b.Store.ToolRuns(admin.ID, "s1")
	if err != nil || len(runs) < 10 {
		t.Fatalf("history: %d runs, %v", len(runs), err)
	}
}

func instanceOf(b *Backend, account, agentID string) (store.VMInstance, error) {
	v, err := b.VMs.Agent(context.Background(), account, agentID)
	if err != nil {
		return store.VMInstance{}, err
	}
	if v.Desktop.State != "running" {
		return store.VMInstance{}, fmt.Errorf("desktop %s is %s", v.Desktop.ID, v.Desktop.State)
	}
	return b.Store.VMInstance(v.Desktop.ID)
}

func sha256hex(b []byte) string { return fmt.Sprintf("%x", sha256.Sum256(b)) }

// startOnRealDesktop starts a Backend on a temporary data directory with the real Podman
// engine and the standard image prepared; it fails (CUBICLE_REQUIRE_ALL=1) or skips without
// root and the Podman service. The Backend closes when the test ends; callers that remove
// their containers afterwards call b.Close first (it runs once).
func startOnRealDesktop(t *testing.T, level slog.Level) (b *Backend, dir string, ctx context.Context) {
	t.Helper()
	b, dir, ctx = startOnRealEngine(t, level)
	pctx, pcancel := context.WithTimeout(ctx, 30*time.Minute)
	defer pcancel()
	if _, err := b.VMs.Prepare(pctx, "standard"); err != nil {
		t.Fatalf("prepare: %v", err)
	}
	return b, dir, ctx
}

// startOnRealEngine is startOnRealDesktop without preparing an image: the node of its fresh
// data directory has no prepared image.
func startOnRealEngine(t *testing.T, level slog.Level) (b *Backend, dir string, ctx context.Context) {
	t.Helper()
	testenv.RootPodman(t)
	if testing.Short() {
		t.Skip("real desktop test; run without -short")
	}
	dir = t.TempDir()
	log := testenv.Logger(t, level)
	b, err := New(Config{DataDir: filepath.Join(dir, "data"), Engine: "podman", AllowedHosts: []string{"127.0.0.1"}, Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	// Last of all (cleanups run in reverse): remove every container and volume this data
	// directory made, found by its store id.
	storeID := b.Store.Identity().ID
	t.Cleanup(func() { removeStoreObjects(t, storeID) })
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	t.Cleanup(func() { b.Close() })
	if err := b.Start(ctx); err != nil {
		t.Fatal(err)
	}
	if err := b.WaitEngine(ctx); err != nil {
		t.Fatal(err)
	}
	if (b.local != nil) != (localNodeModeOf(t) == LocalNodeRunner) {
		t.Fatalf("node local is not reached as %s=%q says", LocalNodeEnv, os.Getenv(LocalNodeEnv))
	}
	return b, dir, ctx
}

// localNodeModeOf is how this test's backends reach node "local".
func localNodeModeOf(t *testing.T) string {
	m, err := localNodeMode("")
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// allowLoopback is the administrator's allowance for the scripted model on 127.0.0.1.
var allowLoopback = true

// removeStoreObjects removes the containers and volumes labelled with store id.
func removeStoreObjects(t testing.TB, id string) {
	removeLabelled(t, map[string]string{vm.LabelStore: id})
}

// removeLabelled removes the containers and volumes that carry the labels of sel.
func removeLabelled(t testing.TB, sel map[string]string) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	eng, err := podman.Connect(ctx, "unix:///run/podman/podman.sock", podman.Options{})
	if err != nil {
		t.Logf("cleanup: %v", err)
		return
	}
	defer eng.Close()
	cs, _ := eng.ListContainers(ctx, sel)
	for _, c := range cs {
		eng.StopContainer(ctx, c.ID, 5*time.Second) // a user namespace's /dev/shm: see vm's ensureRunning
		if err := eng.RemoveContainer(ctx, c.ID, true); err != nil && !errors.Is(err, fault.ErrNotFound) {
			t.Logf("cleanup: %v", err)
		}
	}
	vs, _ := eng.ListVolumes(ctx, sel)
	for _, v := range vs {
		if err := eng.RemoveVolume(ctx, v); err != nil && !errors.Is(err, fault.ErrNotFound) {
			t.Logf("cleanup: %v", err)
		}
	}
}
