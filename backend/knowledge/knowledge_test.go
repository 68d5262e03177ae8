package knowledge

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"cubicle/backend/agent"
	"cubicle/backend/fault"
	"cubicle/backend/store"
)

func testLogger(t testing.TB) *slog.Logger {
	return slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelDebug}))
}

var testKey = []byte("0123456789abcdef0123456789abcdef")

// fixture is a Service over a real store in a temporary directory, reopenable.
type fixture struct {
	t    testing.TB
	path string
	st   *store.Store
	svc  *Service
}

func newFixture(t testing.TB) *fixture {
	f := &fixture{t: t, path: filepath.Join(t.TempDir(), "cubicle.db")}
	f.open()
	t.Cleanup(f.close)
	return f
}

func (f *fixture) open() {
	f.t.Helper()
	st, err := store.Open(f.path, store.Options{Logger: testLogger(f.t), KeepBackups: -1})
	if err != nil {
		f.t.Fatal(err)
	}
	svc, err := New(Config{Store: st, Key: testKey, Logger: testLogger(f.t)})
	if err != nil {
		f.t.Fatal(err)
	}
	f.st, f.svc = st, svc
}

func (f *fixture) close() {
	if f.svc != nil {
		f.svc.Close()
		f.st.Close()
		f.svc, f.st = nil, nil
	}
}

// run is a finished turn on a task.
type run struct {
	account, request, result string
	tools                    []string
	failed                   bool
}

var seq int

func (f *fixture) record(r run) string {
	f.t.Helper()
	seq++
	at := time.Date(2026, 12, 1, 10, 0, seq, 0, time.UTC)
	o := agent.Outcome{Info: agent.TurnInfo{UserID: r.account, AgentID: "agent-" + r.account, AgentName: "Ada", SessionID: "s" + string(rune('a'+seq%26)), TurnID: "t"},
		RequestID: "req" + string(rune('A'+seq%26)), RequestAt: at, Request: r.request, Result: r.result, StartedAt: at, EndedAt: at.Add(time.Minute)}
	for _, n := range r.tools {
		o.Tools = append(o.Tools, agent.ToolStep{Name: n, State: agent.StateSuccess})
	}
	if r.failed {
		o.Error = "the model endpoint answered 500"
	}
	f.svc.Record(o)
	return o.Request
}

// tasks are distinct tasks of account "acme"; "other" has one close to the first.
var tasks = []run{
	{account: "acme", request: "Install nginx and serve the static site on port 8080", tools: []string{"computer_shell", "computer_shell", "computer_write_file"},
		result: "nginx is serving /var/www/site on :8080"},
	{account: "acme", request: "Compress the holiday photos into a zip archive", tools: []string{"computer_shell"},
		result: "Created ~/photos.zip (42 MB)"},
	{account: "acme", request: "Find the cheapest flight from Berlin to Lisbon in the browser", tools: []string{"browser_navigate", "browser_screenshot"},
		result: "Cheapest: 89 EUR on 12 January"},
	{account: "acme", request: "Write a Python script that renames the invoices by date", tools: []string{"computer_write_file", "computer_shell"},
		result: "rename_invoices.py renamed 31 files", failed: true},
	{account: "other", request: "Install nginx as a reverse proxy for the web server", tools: []string{"computer_shell"},
		result: "nginx proxies :80 to :3000"},
}

// paraphrases are queries in other words, each with the request it must find first.
var paraphrases = []struct{ query, want string }{
	{"set up a web server with nginx", tasks[0].request},
	{"zip up my photos", tasks[1].request},
	{"cheap flights to Lisbon", tasks[2].request},
	{"renaming invoice files with python", tasks[3].request},
}

func TestKeywordRetrievalFindsTheRightRunFirst(t *testing.T) {
	f := newFixture(t)
	for _, r := range tasks {
		f.record(r)
	}
	check := func(t *testing.T) {
		for _, p := range paraphrases {
			res, err := f.svc.Search(t.Context(), "acme", p.query, 5)
			if err != nil {
				t.Fatalf("%q: %v", p.query, err)
			}
			if res.Mode != ModeKeyword {
				t.Errorf("%q: mode %q, want keyword (no embeddings endpoint)", p.query, res.Mode)
			}
			if len(res.Hits) == 0 || res.Hits[0].Request != p.want {
				t.Errorf("%q: first hit %+v, want %q", p.query, res.Hits, p.want)
			}
			for _, h := range res.Hits {
				if strings.Contains(h.Request, "reverse proxy") {
					t.Errorf("%q: another account's run came back: %+v", p.query, h)
				}
			}
		}
		res, err := f.svc.Search(t.Context(), "other", "set up a web server with nginx", 5)
		if err != nil || len(res.Hits) != 1 || !strings.Contains(res.Hits[0].Request, "reverse proxy") {
			t.Errorf("other's search = %+v, %v; want only its own run", res, err)
		}
		res, err = f.svc.Search(t.Context(), "nobody", "nginx", 5)
		if err != nil || len(res.Hits) != 0 {
			t.Errorf("an account without runs found %+v, %v", res, err)
		}
	}
	t.Run("fresh", check)
	// The store is the truth: after a restart the index is rebuilt from it.
	f.close()
	f.open()
	t.Run("after restart", check)

	res, err := f.svc.Search(t.Context(), "acme", "invoices", 1)
	if err != nil || len(res.Hits) != 1 {
		t.Fatalf("invoices: %+v, %v", res, err)
	}
	h := res.Hits[0]
	if h.Status != StatusFailed || h.Error == "" || strings.Join(h.Tools, ",") != "computer_write_file,computer_shell" ||
		h.ToolCalls != 2 || h.Link != "#/agents/agent-acme" || h.SessionID == "" || h.EndedAt.IsZero() {
		t.Errorf("hit = %+v", h)
	}
	text := FormatResult(res)
	for _, want := range []string{"[failed]", "computer_write_file → computer_shell", "rename_invoices.py", "#/agents/agent-acme", "keyword search (BM25)"} {
		if !strings.Contains(text, want) {
			t.Errorf("tool text lacks %q:\n%s", want, text)
		}
	}
}

func TestBadQueries(t *testing.T) {
	f := newFixture(t)
	for _, c := range []struct {
		q     string
		limit int
	}{{"", 5}, {"   ", 5}, {strings.Repeat("x", MaxQuery+1), 5}, {"ok", -1}, {"ok", MaxLimit + 1}, {"bad \xff", 1}} {
		if _, err := f.svc.Search(t.Context(), "acme", c.q, c.limit); !errors.Is(err, fault.ErrInvalid) {
			t.Errorf("Search(%.20q, %d) = %v, want invalid", c.q, c.limit, err)
		}
	}
}

// TestPausedTurnIsIndexedOnceWhole: a turn that waits for a confirmation is not indexed; the
// turn that answers it records the whole run under the same id.
func TestPausedTurnIsIndexedOnceWhole(t *testing.T) {
	f := newFixture(t)
	at := time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)
	o := agent.Outcome{Info: agent.TurnInfo{UserID: "acme", SessionID: "s1"}, RequestID: "m1", RequestAt: at, Request: "Delete the old backups",
		Tools: []agent.ToolStep{{Name: "computer_shell", State: agent.StateSuccess}}, Paused: true}
	f.svc.Record(o)
	if runs, _ := f.st.KnowledgeRuns("acme"); len(runs) != 0 {
		t.Fatalf("a paused turn was indexed: %+v", runs)
	}
	o.Paused = false
	o.Tools = append(o.Tools, agent.ToolStep{Name: "computer_shell", State: agent.StateSuccess})
	o.Result = "Removed 3 backups"
	f.svc.Record(o)
	f.svc.Record(o) // again (e.g. a second answer): still one record
	runs, err := f.st.KnowledgeRuns("acme")
	if err != nil || len(runs) != 1 || len(runs[0].Tools) != 2 || runs[0].Status != StatusSuccess {
		t.Fatalf("runs = %+v, %v", runs, err)
	}
}

func TestKeepDropsTheOldest(t *testing.T) {
	f := newFixture(t)
	f.svc.cfg.Keep = 3
	for i := range 5 {
		f.record(run{account: "acme", request: "task number " + string(rune('a'+i)) + " about turnips"})
	}
	res, err := f.svc.Search(t.Context(), "acme", "turnips", 10)
	if err != nil || len(res.Hits) != 3 {
		t.Fatalf("hits = %+v, %v", res.Hits, err)
	}
	runs, _ := f.st.KnowledgeRuns("acme")
	if len(runs) != 3 || !strings.Contains(runs[0].Request, "task number c") {
		t.Errorf("stored runs = %+v", runs)
	}
}

func TestClear(t *testing.T) {
	f := newFixture(t)
	for _, r := range tasks {
		f.record(r)
	}
	if n, err := f.svc.Clear("acme"); err != nil || n != 4 {
		t.Fatalf("Clear(acme) = %d, %v", n, err)
	}
	if res, _ := f.svc.Search(t.Context(), "acme", "nginx", 5); len(res.Hits) != 0 {
		t.Errorf("cleared account still finds %+v", res.Hits)
	}
	if res, _ := f.svc.Search(t.Context(), "other", "nginx", 5); len(res.Hits) != 1 {
		t.Errorf("clearing acme touched other: %+v", res.Hits)
	}
	if n, err := f.svc.Clear(""); err != nil || n != 1 {
		t.Fatalf("Clear(all) = %d, %v", n, err)
	}
}

// concepts are the dimensions of the scripted embeddings: a text's vector counts the words
// of each concept it contains, so paraphrases land near each other.
var concepts = [][]string{
	{"photo", "photos", "picture", "pictures", "image", "images"},
	{"compress", "zip", "archive", "shrink", "bundle", "pack"},
	{"web", "browser", "online", "internet"},
	{"cat", "cats", "kitten"},
	{"save", "download", "keep"},
	{"server", "nginx", "serve", "serving", "host"},
}

func conceptVector(text string) []float32 {
	v := make([]float32, len(concepts))
	for _, w := range strings.FieldsFunc(strings.ToLower(text), func(r rune) bool { return !(r >= 'a' && r <= 'z') }) {
		for i, c := range concepts {
			for _, cw := range c {
				if w == cw {
					v[i]++
				}
			}
		}
	}
	return v
}

// embeddingsServer is a scripted OpenAI-compatible embeddings endpoint.
type embeddingsServer struct {
	*httptest.Server
	mu     sync.Mutex
	calls  int
	auth   []string
	broken bool
}

func newEmbeddingsServer(t *testing.T) *embeddingsServer {
	e := &embeddingsServer{}
	e.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var req struct {
			Model string   `json:"model"`
			Input []string `json:"input"`
		}
		e.mu.Lock()
		e.calls++
		e.auth = append(e.auth, r.Header.Get("Authorization"))
		broken := e.broken
		e.mu.Unlock()
		if r.Method != http.MethodPost || r.URL.Path != "/v1/embeddings" || json.NewDecoder(r.Body).Decode(&req) != nil || req.Model != "concepts-1" {
			http.Error(w, `{"error":"bad request"}`, http.StatusBadRequest)
			return
		}
		if broken {
			http.Error(w, `{"error":"overloaded"}`, http.StatusServiceUnavailable)
			return
		}
		type item struct {
			Index     int       `json:"index"`
			Embedding []float32 `json:"embedding"`
		}
		out := struct {
			Data []item `json:"data"`
		}{}
		for i := len(req.Input) - 1; i >= 0; i-- { // out of order: the index says which
			out.Data = append(out.Data, item{Index: i, Embedding: conceptVector(req.Input[i])})
		}
		json.NewEncoder(w).Encode(out)
	}))
	t.Cleanup(e.Close)
	return e
}

func TestVectorsReRank(t *testing.T) {
	f := newFixture(t)
	emb := newEmbeddingsServer(t)
	zipRun := run{account: "acme", request: "Compress the holiday photos into a zip archive", tools: []string{"computer_shell"}, result: "Created photos.zip"}
	catRun := run{account: "acme", request: "Find pictures of cats on the web and save one", tools: []string{"browser_navigate"}, result: "Saved cat.jpg"}
	otherRun := run{account: "other", request: "Shrink my pictures into one bundle please", result: "done"}
	f.record(catRun) // indexed before the endpoint was configured: a search embeds it
	const query = "shrink my pictures into one bundle"
	// Keyword only: "pictures" matches the cat run; the zip run shares no word.
	res, err := f.svc.Search(t.Context(), "acme", query, 5)
	if err != nil || res.Mode != ModeKeyword || len(res.Hits) != 1 || res.Hits[0].Request != catRun.request {
		t.Fatalf("keyword search = %+v, %v", res, err)
	}
	key := "sk-embed"
	yes := true
	v, err := f.svc.SetEmbeddings(EmbeddingsUpdate{BaseURL: emb.URL + "/v1", Model: "concepts-1", APIKey: &key, AllowPrivate: &yes})
	if err != nil || !v.Configured || !v.HasAPIKey || v.BaseURL != emb.URL+"/v1" {
		t.Fatalf("SetEmbeddings = %+v, %v", v, err)
	}
	if raw, _ := f.st.EmbeddingSettings(); strings.Contains(string(raw.APIKeySealed), key) || len(raw.APIKeySealed) == 0 {
		t.Fatalf("the key is not sealed at rest: %q", raw.APIKeySealed)
	}
	f.record(zipRun)
	f.record(otherRun)
	waitVector(t, f, "acme", zipRun.request)
	res, err = f.svc.Search(t.Context(), "acme", query, 5)
	if err != nil || res.Mode != ModeHybrid || res.Notice != "" {
		t.Fatalf("hybrid search = %+v, %v", res, err)
	}
	if len(res.Hits) != 2 || res.Hits[0].Request != zipRun.request || res.Hits[1].Request != catRun.request {
		t.Fatalf("hybrid hits = %+v; want the zip run first, then the cat run", res.Hits)
	}
	for _, h := range res.Hits {
		if strings.Contains(h.Request, "please") {
			t.Fatalf("another account's run: %+v", h)
		}
	}
	emb.mu.Lock()
	for _, a := range emb.auth {
		if a != "Bearer "+key {
			t.Errorf("Authorization = %q", a)
		}
	}
	emb.mu.Unlock()
	if !strings.Contains(FormatResult(res), "re-ranked by embeddings") {
		t.Errorf("tool text does not say how: %s", FormatResult(res))
	}
	// Vectors survive a restart (stored with the run).
	f.close()
	f.open()
	runs, _ := f.st.KnowledgeRuns("acme")
	for _, r := range runs {
		if len(r.Vector) == 0 || r.VectorModel != "concepts-1" {
			t.Errorf("run %q has no stored vector", r.Request)
		}
	}
	// An endpoint that fails: keyword results, and the result says why.
	emb.mu.Lock()
	emb.broken = true
	emb.mu.Unlock()
	res, err = f.svc.Search(t.Context(), "acme", query, 5)
	if err != nil || res.Mode != ModeKeyword || !strings.Contains(res.Notice, "503") || len(res.Hits) != 1 {
		t.Fatalf("search with a failing endpoint = %+v, %v", res, err)
	}
	// Turning vectors off.
	if v, err := f.svc.SetEmbeddings(EmbeddingsUpdate{}); err != nil || v.Configured || v.HasAPIKey {
		t.Fatalf("clear embeddings = %+v, %v", v, err)
	}
	if st, err := f.svc.Stats("acme"); err != nil || st.Mode != ModeKeyword || st.Runs != 2 {
		t.Fatalf("Stats = %+v, %v", st, err)
	}
}

// TestEmbeddingsEgress: a loopback endpoint without the administrator's allowance is never
// called (the egress rule of model endpoints); searches fall back to keywords and say so.
func TestEmbeddingsEgress(t *testing.T) {
	f := newFixture(t)
	emb := newEmbeddingsServer(t)
	f.record(tasks[1])
	if _, err := f.svc.SetEmbeddings(EmbeddingsUpdate{BaseURL: emb.URL + "/v1", Model: "concepts-1"}); err != nil {
		t.Fatal(err)
	}
	res, err := f.svc.Search(t.Context(), "acme", "zip photos", 5)
	if err != nil || res.Mode != ModeKeyword || res.Notice == "" || len(res.Hits) != 1 {
		t.Fatalf("search = %+v, %v", res, err)
	}
	emb.mu.Lock()
	defer emb.mu.Unlock()
	if emb.calls != 0 {
		t.Fatalf("the loopback endpoint was called %d times without allowPrivate", emb.calls)
	}
}

func TestSetEmbeddingsValidates(t *testing.T) {
	f := newFixture(t)
	key := "k"
	for _, u := range []EmbeddingsUpdate{
		{BaseURL: "ftp://x/v1", Model: "m"},
		{BaseURL: "https://", Model: "m"},
		{BaseURL: "https://api.example.com/v1"},
		{BaseURL: "https://user:pw@api.example.com/v1", Model: "m"},
		{BaseURL: "https://api.example.com/v1", Model: strings.Repeat("m", 201)},
	} {
		if _, err := f.svc.SetEmbeddings(u); !errors.Is(err, fault.ErrInvalid) {
			t.Errorf("SetEmbeddings(%+v) = %v, want invalid", u, err)
		}
	}
	if _, err := f.st.EmbeddingSettings(); !errors.Is(err, fault.ErrNotFound) {
		t.Fatalf("a refused setting was saved: %v", err)
	}
	if _, err := f.svc.SetEmbeddings(EmbeddingsUpdate{BaseURL: "https://a.example/v1", Model: "m", APIKey: &key}); err != nil {
		t.Fatal(err)
	}
	// A new base URL drops the key: it only ever goes where it was saved for.
	v, err := f.svc.SetEmbeddings(EmbeddingsUpdate{BaseURL: "https://b.example/v1", Model: "m"})
	if err != nil || v.HasAPIKey {
		t.Fatalf("after a new URL: %+v, %v", v, err)
	}
}

func waitVector(t *testing.T, f *fixture, account, request string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	for ctx.Err() == nil {
		runs, _ := f.st.KnowledgeRuns(account)
		for _, r := range runs {
			if r.Request == request && len(r.Vector) > 0 {
				return
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("run %q got no vector", request)
}
