package cli

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/cookiejar"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"cubicle/backend/engine"
	"cubicle/backend/engine/podman"
	"cubicle/backend/fault"
	"cubicle/backend/store"
	"cubicle/backend/vm"
	"cubicle/internal/testenv"
)

// envChild makes the test binary run the command line given as its arguments (a real
// `cubicle serve` process the crash test can kill -9).
const envChild = "CUBICLE_CLI_TEST_CHILD"

func TestMain(m *testing.M) {
	if os.Getenv(envChild) == "1" {
		os.Exit(Main(os.Args[1:], DesktopShell{}))
	}
	os.Exit(m.Run())
}

// child is a `cubicle serve` process.
type child struct {
	cmd *exec.Cmd
	url string
	out *syncBuffer
}

func startServe(t *testing.T, dir string) *child {
	t.Helper()
	cmd := exec.Command(os.Args[0], "serve", "--listen", "127.0.0.1:0", "--data-dir", dir)
	cmd.Env = append(os.Environ(), envChild+"=1", "CUBICLE_ENGINE=podman",
		"CUBICLE_ADMIN_USER=boss", "CUBICLE_ADMIN_PASSWORD=pass-word-1", "CUBICLE_MODEL_BASE_URL=", "CUBICLE_MODEL=",
		FirstRunPrepareEnv+"=off")
	out := &syncBuffer{}
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	c := &child{cmd: cmd, out: out}
	deadline := time.Now().Add(time.Minute)
	for c.url == "" {
		c.url = regexp.MustCompile(`http://127\.0\.0\.1:\d+/`).FindString(out.String())
		if time.Now().After(deadline) {
			cmd.Process.Kill()
			cmd.Wait()
			t.Fatalf("serve did not start: %s", out)
		}
		time.Sleep(20 * time.Millisecond)
	}
	return c
}

// client is a logged-in API client of a child.
type client struct {
	t    *testing.T
	base string
	http *http.Client
	user string
}

func login(t *testing.T, c *child) *client {
	t.Helper()
	jar, _ := cookiejar.New(nil)
	cl := &client{t: t, base: c.url, http: &http.Client{Jar: jar}}
	var me struct {
		User struct{ ID string } `json:"user"`
	}
	cl.do("POST", "api/auth/login", `{"username":"boss","password":"pass-word-1"}`, 200, &me)
	cl.user = me.User.ID
	return cl
}

func (c *client) do(method, path, body string, want int, out any) {
	c.t.Helper()
	req, _ := http.NewRequest(method, c.base+path, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	res, err := c.http.Do(req)
	if err != nil {
		c.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	if res.StatusCode != want {
		c.t.Fatalf("%s %s: %d %s, want %d", method, path, res.StatusCode, b, want)
	}
	if out != nil {
		if err := json.Unmarshal(b, out); err != nil {
			c.t.Fatalf("%s %s: %v in %s", method, path, err, b)
		}
	}
}

// chat sends input to the agent's session s1 and calls on for every event type, stopping
// when on returns false or the stream ends; it returns the event types seen.
func (c *client) chat(agentID, input string, on func(typ string) bool) []string {
	c.t.Helper()
	body, _ := json.Marshal(map[string]string{"sessionId": "s1", "userId": c.user, "agentId": agentID, "input": input})
	req, _ := http.NewRequest("POST", c.base+"api/app/chat", bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "text/event-stream")
	res, err := c.http.Do(req)
	if err != nil {
		c.t.Fatalf("chat: %v", err)
	}
	defer res.Body.Close()
	var seen []string
	sc := bufio.NewScanner(res.Body)
	sc.Buffer(make([]byte, 1<<20), 8<<20)
	for sc.Scan() {
		line, ok := strings.CutPrefix(sc.Text(), "data:")
		if !ok {
			continue
		}
		var e struct{ Type string }
		json.Unmarshal([]byte(strings.TrimSpace(line)), &e)
		seen = append(seen, e.Type)
		if !on(e.Type) {
			break
		}
	}
	return seen
}

// TestKill9MidTurn runs a real `cubicle serve` (the test binary as the program) with a real
// desktop, starts an operator-mode turn whose shell command blocks, and kills the process
// (SIGKILL) while the command runs. The next start must show the person's message, a turn
// marked interrupted in the conversation, the tool run INTERRUPTED in the history, and the
// desktop adopted as running — and the data file must be sound.
func TestKill9MidTurn(t *testing.T) {
	if testing.Short() {
		testenv.Missing(t, "a kill -9 of a real turn does not run with -short")
	}
	testenv.RootPodman(t)
	dir, err := os.MkdirTemp("", "ck9-") // short: the driver socket path must stay under 108 bytes
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	defer cleanupStore(t, filepath.Join(dir, "cubicle.db"))

	c := startServe(t, dir)
	killed := false
	defer func() {
		if !killed {
			c.cmd.Process.Kill()
			c.cmd.Wait()
		}
	}()
	api := login(t, c)
	api.http.Timeout = 30 * time.Minute
	api.do("POST", "api/app/admin/local-vm/prepare?wait=1", `{"imageKey":"standard"}`, 200, nil)
	api.http.Timeout = 0
	var ag struct{ ID string }
	api.do("POST", "api/app/agents", `{"name":"Ada"}`, 201, &ag)

	// A first command brings the desktop up; the second blocks, and the process is killed
	// a second after it began.
	if seen := api.chat(ag.ID, "/shell true", func(string) bool { return true }); !contains(seen, "AGENT_END") {
		t.Fatalf("first turn: %v", seen)
	}
	began := make(chan struct{})
	var once sync.Once
	go func() {
		<-began
		time.Sleep(time.Second)
		c.cmd.Process.Signal(syscall.SIGKILL)
	}()
	seen := api.chat(ag.ID, "/shell sleep 120 && echo never", func(typ string) bool {
		if typ == "TOOL_RESULT_START" {
			once.Do(func() { close(began) })
		}
		return true
	})
	c.cmd.Wait()
	killed = true
	t.Logf("events before the kill: %v", seen)
	if contains(seen, "TOOL_RESULT_END") || !contains(seen, "TOOL_RESULT_START") {
		t.Fatalf("the process was not killed mid-tool: %v", seen)
	}
	if r, err := store.Check(filepath.Join(dir, "cubicle.db"), time.Second); err != nil || !r.OK() {
		t.Fatalf("the data file after kill -9: %+v, %v", r, err)
	}

	c = startServe(t, dir)
	killed = false
	api = login(t, c)
	var sess struct {
		History    []map[string]any `json:"history"`
		ActiveTurn any              `json:"activeTurn"`
	}
	api.do("GET", "api/app/chat/sessions/s1", "", 200, &sess)
	raw, _ := json.Marshal(sess.History)
	if !strings.Contains(string(raw), "/shell sleep 120 \\u0026\\u0026 echo never") && !strings.Contains(string(raw), "/shell sleep 120 && echo never") {
		t.Errorf("the person's message is not in the session: %s", raw)
	}
	if sess.ActiveTurn != nil {
		t.Errorf("the turn is still marked running: %v", sess.ActiveTurn)
	}
	last := sess.History[len(sess.History)-1]
	if md, _ := last["metadata"].(map[string]any); md["interrupted"] != true {
		t.Errorf("the session does not end with the interruption notice: %v", last)
	}
	if !strings.Contains(string(raw), `"state":"interrupted"`) {
		t.Errorf("the cut-off call has no interrupted result: %s", raw)
	}
	var tl struct {
		Runs []struct{ Tool, Status string }
	}
	api.do("GET", "api/app/chat/sessions/s1/history", "", 200, &tl)
	// The workspace's snapshot after a turn that changed it is a run of its own; the calls are
	// what this test follows.
	tl.Runs = slices.DeleteFunc(tl.Runs, func(r struct{ Tool, Status string }) bool { return r.Tool == "workspace.snapshot" })
	if len(tl.Runs) != 2 || tl.Runs[0].Status != store.RunSuccess || tl.Runs[1].Status != store.RunInterrupted {
		t.Errorf("tool runs after the restart: %+v; want SUCCESS then INTERRUPTED", tl.Runs)
	}
	var lv struct{ Desktop struct{ State string } }
	api.do("GET", "api/app/agents/"+ag.ID+"/local-vm", "", 200, &lv)
	if lv.Desktop.State != vm.StateRunning {
		t.Errorf("the desktop after the restart: %s, want running (adopted)", lv.Desktop.State)
	}
	// The conversation goes on.
	if seen := api.chat(ag.ID, "/shell echo again", func(string) bool { return true }); !contains(seen, "AGENT_END") {
		t.Errorf("a turn after the restart: %v", seen)
	}
	c.cmd.Process.Signal(syscall.SIGTERM)
	if err := c.cmd.Wait(); err != nil {
		t.Errorf("serve after SIGTERM: %v: %s", err, c.out)
	}
	killed = true
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// cleanupStore removes the containers and volumes of the data file at path (found by its
// store id label).
func cleanupStore(t *testing.T, path string) {
	st, err := store.Open(path, store.Options{KeepBackups: -1})
	if err != nil {
		t.Logf("cleanup: %v", err)
		return
	}
	id := st.Identity().ID
	st.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	eng, err := podman.Connect(ctx, "unix:///run/podman/podman.sock", podman.Options{})
	if err != nil {
		t.Logf("cleanup: %v", err)
		return
	}
	defer eng.Close()
	sel := map[string]string{vm.LabelStore: id, engine.LabelManaged: "true"}
	cs, _ := eng.ListContainers(ctx, sel)
	for _, c := range cs {
		if err := eng.RemoveContainer(ctx, c.ID, true); err != nil && !errors.Is(err, fault.ErrNotFound) {
			t.Logf("cleanup: %v", err)
		}
	}
	vs, _ := eng.ListVolumes(ctx, sel)
	for _, v := range vs {
		if err := eng.RemoveVolume(ctx, v); err != nil {
			t.Logf("cleanup: %v", err)
		}
	}
	t.Logf("cleanup: removed %d containers and %d volumes of store %s", len(cs), len(vs), id)
}
