package backend

import (
	"context"
	"encoding/json"
	"io/fs"
	"log/slog"
	"maps"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"
)

// conformanceMust are the server scenarios of @modelcontextprotocol/conformance that Cubicle's
// /mcp must pass: they test the protocol itself, not the suite's fixture tools. The others
// (tools-call-*, resources-*, prompts-*, completion-*, logging-*, elicitation-*, json-schema-*,
// server-sse-*) call tools, resources and prompts named by the suite (test_simple_text,
// test://static-text, …) that only its reference server has; they are listed, with the
// reason, in tests/mcp/conformance-baseline.yml, and the suite fails if one of them passes
// unexpectedly or one not listed fails.
var conformanceMust = []string{"server-initialize", "ping", "tools-list", "logging-set-level", "resources-list",
	"prompts-list", "server-sse-multiple-streams", "dns-rebinding-protection"}

// TestMCPConformanceSuite runs the official MCP conformance suite (npm
// @modelcontextprotocol/conformance, on the Node 22 it needs, both from tests/mcp) against the
// /mcp of a real server. The suite sends no Authorization header, so it talks to a proxy in
// this test that adds the token's and passes everything else (Host and Origin included)
// through unchanged: the DNS-rebinding scenario's forged Host and Origin reach the server.
func TestMCPConformanceSuite(t *testing.T) {
	dir, err := filepath.Abs(filepath.Join("..", "tests", "mcp"))
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, "node_modules", ".bin")
	if _, err := os.Stat(filepath.Join(bin, "conformance")); err != nil {
		t.Fatalf("the conformance suite is not installed: run `npm ci` in tests/mcp (%v)", err)
	}

	b, err := New(Config{DataDir: t.TempDir(), Engine: "none", AllowedHosts: []string{"127.0.0.1"},
		Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	if err := b.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	srv := httptest.NewServer(b.API.Handler())
	defer srv.Close()
	target, err := url.Parse(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	sess, err := b.LocalSession()
	if err != nil {
		t.Fatal(err)
	}
	admin, err := b.Auth.Admin()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.Profiles.Create(admin.ID, "Ada"); err != nil {
		t.Fatal(err)
	}
	_, secret := makeToken(t, srv, sess.Token, map[string]any{"name": "conformance"})

	proxy := httptest.NewServer(&httputil.ReverseProxy{
		Rewrite: func(r *httputil.ProxyRequest) {
			r.SetURL(target)
			r.Out.Host = r.In.Host // the server's Host check sees what the suite sent
			r.Out.Header.Set("Authorization", "Bearer "+secret)
		},
		FlushInterval: -1, // event streams pass at once
	})
	defer proxy.Close()

	// The suite's results are kept with the other test artifacts (a directory per scenario).
	out, err := filepath.Abs(filepath.Join("..", "test-artifacts", "mcp-conformance"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.RemoveAll(out); err != nil {
		t.Fatal(err)
	}
	cmd := exec.CommandContext(ctx, filepath.Join(bin, "conformance"), "server", "--url", proxy.URL+"/mcp",
		"--expected-failures", filepath.Join(dir, "conformance-baseline.yml"), "-o", out)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "PATH="+bin+string(os.PathListSeparator)+os.Getenv("PATH"))
	log, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("the conformance suite failed (%v):\n%s", err, log)
	}

	// The suite's own verdict passed; check the scenarios that must pass did run and pass (an
	// empty run, or one that skipped them, would pass the baseline too), and that every other
	// failed only because it asked for a fixture Cubicle does not have.
	passed := map[string]bool{}
	fixture := regexp.MustCompile(`unknown (tool|prompt) "test_|Resource not found|method not found: "(completion/complete|resources/subscribe)"`)
	if err := filepath.WalkDir(out, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || filepath.Base(p) != "checks.json" {
			return err
		}
		raw, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		var checks []struct {
			Status       string `json:"status"`
			ErrorMessage string `json:"errorMessage"`
		}
		if err := json.Unmarshal(raw, &checks); err != nil {
			return err
		}
		scenario := filepath.Base(filepath.Dir(p))
		ok := len(checks) > 0
		for _, c := range checks {
			if c.Status == "SUCCESS" || c.Status == "INFO" {
				continue
			}
			ok = false
			if !fixture.MatchString(c.ErrorMessage) {
				t.Errorf("scenario %s failed for another reason than a missing fixture: %s %s", scenario, c.Status, c.ErrorMessage)
			}
		}
		passed[scenario] = ok
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if len(passed) < 20 {
		t.Errorf("only %d scenarios ran", len(passed))
	}
	for _, s := range conformanceMust {
		found := false
		for name, ok := range passed {
			if strings.HasPrefix(name, "server-"+s+"-") {
				found = true
				if !ok {
					t.Errorf("scenario %s did not pass", name)
				}
			}
		}
		if !found {
			t.Errorf("scenario %s did not run (results: %v)", s, slices.Sorted(maps.Keys(passed)))
		}
	}
	if t.Failed() {
		t.Logf("suite output:\n%s", log)
	}
}
