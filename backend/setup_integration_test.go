package backend

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"cubicle/backend/setup"
	"cubicle/internal/testenv"
)

// setupEnv is a backend behind its real HTTP handler, called as its administrator.
type setupEnv struct {
	t     *testing.T
	b     *Backend
	ts    *httptest.Server
	token string
}

func newSetupEnv(t *testing.T, cfg Config) *setupEnv {
	t.Helper()
	cfg.Logger = testenv.Logger(t, slog.LevelInfo)
	cfg.AllowedHosts = []string{"127.0.0.1"}
	b, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	storeID := b.Store.Identity().ID
	t.Cleanup(func() { removeStoreObjects(t, storeID) })
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	t.Cleanup(func() { b.Close() })
	if err := b.Start(ctx); err != nil {
		t.Fatal(err)
	}
	if err := b.WaitEngine(ctx); err != nil { // it connects behind the start
		t.Fatal(err)
	}
	ts := httptest.NewServer(b.API.Handler())
	t.Cleanup(ts.Close)
	p, err := b.LocalSession()
	if err != nil {
		t.Fatal(err)
	}
	return &setupEnv{t: t, b: b, ts: ts, token: p.Token}
}

func (e *setupEnv) call(method, path, body string) (int, string) {
	e.t.Helper()
	r, _ := http.NewRequest(method, e.ts.URL+path, strings.NewReader(body))
	r.Header.Set("Authorization", "Bearer "+e.token)
	if method != "GET" {
		r.Header.Set("Content-Type", "application/json")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	resp, err := http.DefaultClient.Do(r.WithContext(ctx))
	if err != nil {
		e.t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(raw)
}

func (e *setupEnv) must(method, path, body string, status int) string {
	e.t.Helper()
	code, out := e.call(method, path, body)
	if code != status {
		e.t.Fatalf("%s %s: %d %s; want %d", method, path, code, out, status)
	}
	return out
}

// setup is GET /api/app/admin/setup.
func (e *setupEnv) setup() setup.Status {
	e.t.Helper()
	var st setup.Status
	if err := json.Unmarshal([]byte(e.must("GET", "/api/app/admin/setup", "", 200)), &st); err != nil {
		e.t.Fatal(err)
	}
	return st
}

// waitImage polls the image step until it is want (or fails the test after limit).
func (e *setupEnv) waitImage(want setup.State, limit time.Duration) setup.Status {
	e.t.Helper()
	deadline := time.Now().Add(limit)
	for {
		st := e.setup()
		if st.Image.State == want {
			return st
		}
		if st.Image.State == setup.Failed || time.Now().After(deadline) {
			e.t.Fatalf("image step is %+v, want %s", st.Image, want)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

func wantStep(t *testing.T, name string, got setup.Step, want setup.State, detail string) {
	t.Helper()
	if got.State != want || !strings.Contains(got.Detail, detail) {
		t.Fatalf("%s step = %+v, want %s with %q", name, got, want, detail)
	}
}

// TestSetupFirstRun walks the first-run path (issue 30) through a fresh data directory with
// the real engine, a real preparation of the standard image (started by the first start, cancelled,
// started again) and the scripted model: every step moves from needed to done, read through
// GET /api/app/admin/setup. Without an engine, step 1 says what to do and nothing is prepared;
// a later start of the same data directory prepares nothing by itself.
func TestSetupFirstRun(t *testing.T) {
	testenv.RootPodman(t)
	if testing.Short() {
		t.Skip("real engine test; run without -short")
	}

	t.Run("no engine", func(t *testing.T) {
		e := newSetupEnv(t, Config{DataDir: filepath.Join(t.TempDir(), "data"), Engine: "none", PrepareOnFirstStart: true})
		st := e.setup()
		// Podman is installed here, so the check finds it: Cubicle was started without it.
		wantStep(t, "engine", st.Engine, setup.Needed, "restart Cubicle")
		wantStep(t, "image", st.Image, setup.Needed, "engine first")
		if st.Done || len(e.b.VMs.PrepareStates()) != 0 {
			t.Fatalf("without an engine: done %v, preparations %+v", st.Done, e.b.VMs.PrepareStates())
		}
	})

	dir := filepath.Join(t.TempDir(), "data")
	e := newSetupEnv(t, Config{DataDir: dir, Engine: "podman", PrepareOnFirstStart: true})
	if !e.b.FirstStart {
		t.Fatal("a new data directory's start is not its first start")
	}
	st := e.setup()
	wantStep(t, "engine", st.Engine, setup.Done, "podman")
	wantStep(t, "model", st.Model, setup.Needed, "no model is set")
	wantStep(t, "agents", st.Agents, setup.Needed, "no agent yet")
	if st.Done {
		t.Fatalf("done on a fresh data directory: %+v", st)
	}

	// (2) The first start prepares the standard image by itself; an administrator cancels
	// it, and starts it again.
	e.waitImage(setup.Working, time.Minute)
	if code, out := e.call("POST", "/api/app/admin/setup/image/cancel", ""); code == 200 {
		if !strings.Contains(out, `"cancelled":true`) {
			t.Fatalf("cancel answered %s", out)
		}
		wantStep(t, "image", e.setup().Image, setup.Needed, "cancelled")
		e.must("POST", "/api/app/admin/setup/image/cancel", "", 409) // nothing runs now
		e.must("POST", "/api/app/admin/local-vm/prepare", `{"imageKey":"standard"}`, 202)
	} else {
		// The preparation ended between the two calls (a reused image and a quick probe).
		t.Logf("cancel: %d %s", code, out)
		if code != 409 {
			t.Fatalf("cancel answered %d %s", code, out)
		}
	}
	st = e.waitImage(setup.Done, 30*time.Minute)
	wantStep(t, "image", st.Image, setup.Done, "standard image is ready")

	// (3) The model: set (with the scripted model), a failed test, a passing test.
	model := &scriptedModel{}
	srv := httptest.NewServer(model)
	defer srv.Close()
	e.must("PUT", "/api/app/admin/model", `{"baseUrl":"`+srv.URL+`/v1","model":"scripted","apiKey":"sk-test","allowPrivate":true}`, 200)
	wantStep(t, "model", e.setup().Model, setup.Needed, "not tested")
	e.must("POST", "/api/app/admin/model/test", "", 200) // the script is empty: the model answers 500
	wantStep(t, "model", e.setup().Model, setup.Failed, "test of scripted")
	model.push(textStep("pong"))
	if out := e.must("POST", "/api/app/admin/model/test", "", 200); !strings.Contains(out, `"ok":true`) {
		t.Fatalf("model test: %s", out)
	}
	wantStep(t, "model", e.setup().Model, setup.Done, "answered its test")

	// (4) The first agent, with its computer chosen.
	var ag struct {
		ID string `json:"id"`
	}
	json.Unmarshal([]byte(e.must("POST", "/api/app/agents", `{"name":"Ada"}`, 201)), &ag)
	e.must("PUT", "/api/app/agents/"+ag.ID+"/computer-selection", `{"computer":"none","allowHostEnvironment":false}`, 200)
	wantStep(t, "agents", e.setup().Agents, setup.Needed, "Ada has no computer")
	e.must("PUT", "/api/app/agents/"+ag.ID+"/computer-selection", `{"computer":"vm","allowHostEnvironment":false}`, 200)
	st = e.setup()
	wantStep(t, "agents", st.Agents, setup.Done, "Ada works on its vm computer")
	if !st.Done {
		t.Fatalf("every step done but the status is not: %+v", st)
	}
	// The members' route answers states only.
	var mine setup.Status
	json.Unmarshal([]byte(e.must("GET", "/api/app/setup", "", 200)), &mine)
	if !mine.Done || mine.Image.Detail != "" || !mine.Image.Admin {
		t.Fatalf("GET /api/app/setup = %+v", mine)
	}

	// A later start of the same data directory prepares nothing by itself.
	e.b.Close()
	e2 := newSetupEnv(t, Config{DataDir: dir, Engine: "podman", PrepareOnFirstStart: true})
	if e2.b.FirstStart {
		t.Fatal("the second start of a data directory counts as its first")
	}
	time.Sleep(time.Second)
	if p := e2.b.VMs.PrepareStates(); len(p) != 0 {
		t.Fatalf("a later start prepares: %+v", p)
	}
	if st := e2.setup(); !st.Done {
		t.Fatalf("after a restart: %+v", st)
	}
}
