package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"cubicle/backend"
	"cubicle/backend/mcpserver"
	"cubicle/internal/mcpconformance"
	"cubicle/internal/testenv"
)

// bridgeConformanceMust are the suite's scenarios that `cubicle mcp` must pass: the protocol
// itself, answered by the bridge (initialize, ping, logging/setLevel, the resources and prompts
// lists) or forwarded to the server (tools/list), and several concurrent requests in one session.
var bridgeConformanceMust = []string{"server-initialize", "ping", "tools-list", "logging-set-level", "resources-list",
	"prompts-list", "server-sse-multiple-streams"}

// TestMCPConformanceBridge runs the official MCP conformance suite against `cubicle mcp`: the
// real command line (this test binary re-run as `cubicle mcp --server URL` with
// $CUBICLE_TOKEN, as a client launches it) bridging to /mcp of a real server. The suite drives
// HTTP servers only, so a relay in this test (mcp_relay_test.go) puts each session's bridge
// process behind streamable HTTP and does nothing but move its JSON-RPC lines. The suite's
// expected failures are tests/mcp/conformance-baseline-bridge.yml: /mcp's (fixtures only the
// suite's reference server has) and the DNS-rebinding scenario, which tests an HTTP server's
// Host and Origin checks — the bridge has no HTTP side, and the relay is test code.
func TestMCPConformanceBridge(t *testing.T) {
	b, err := backend.New(backend.Config{DataDir: t.TempDir(), Engine: "none", AllowedHosts: []string{"127.0.0.1"},
		Logger: testenv.Logger(t, slog.LevelWarn)})
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
	secret := apiToken(t, srv.URL, sess.Token)

	relay := newStdioRelay(func() *exec.Cmd {
		cmd := exec.Command(os.Args[0], "mcp", "--server", srv.URL, "--log-level", "info")
		cmd.Env = append(os.Environ(), envChild+"=1", "CUBICLE_TOKEN="+secret)
		return cmd
	}, t.Logf)
	hs := httptest.NewServer(relay)
	ended := false
	end := func() { // the bridges first: their sessions hold the servers' connections
		if ended {
			return
		}
		ended = true
		for id, how := range relay.Close() {
			t.Errorf("bridge process of session %s did not end by itself at the end of its stdin: %s", id, how)
		}
		hs.Close()
	}
	defer end()
	res := mcpconformance.Run(t, ctx, mcpconformance.Suite{URL: hs.URL + "/mcp", Baseline: "conformance-baseline-bridge.yml",
		Artifacts: "mcp-conformance-bridge", Must: bridgeConformanceMust, Fixture: mcpconformance.Fixtures,
		OtherReason: map[string]*regexp.Regexp{
			// the relay accepts any Host and Origin: it is the test's HTTP side, not Cubicle's
			"dns-rebinding-protection": regexp.MustCompile(`^Expected HTTP 4xx for invalid Host/Origin headers, got 200$`),
		}})
	end()

	// The bridge offered the real server's tools, and every session was a process of its own.
	var tools struct{ Tools []string }
	if c := res.Checks["tools-list"]; len(c) == 0 || json.Unmarshal(c[0].Details, &tools) != nil ||
		!slices.Equal(slices.Sorted(slices.Values(tools.Tools)), slices.Sorted(slices.Values(mcpserver.ToolNames()))) {
		t.Errorf("tools-list did not list /mcp's tools %v: %s", mcpserver.ToolNames(), detailsOf(res.Checks["tools-list"]))
	}
	if n := relay.Started(); n < len(res.Passed) {
		t.Errorf("%d bridge processes for %d scenarios", n, len(res.Passed))
	}
	if n := relay.NotJSON(); n > 0 {
		t.Errorf("the bridge wrote %d lines on stdout that are not JSON-RPC messages (a stdio client breaks on them)", n)
	}
	t.Logf("%d scenarios, %d bridge processes", len(res.Passed), relay.Started())
}

// detailsOf shows a scenario's checks with the details the suite recorded.
func detailsOf(checks []mcpconformance.Check) string {
	var sb strings.Builder
	for _, c := range checks {
		fmt.Fprintf(&sb, "%s %s %s\n", c.ID, c.Status, c.Details)
	}
	return sb.String()
}

// apiToken makes a personal API token through the HTTP API and returns its secret.
func apiToken(t *testing.T, base, session string) string {
	t.Helper()
	req, _ := http.NewRequest("POST", base+"/api/app/account/tokens", strings.NewReader(`{"name":"conformance"}`))
	req.Header.Set("Authorization", "Bearer "+session)
	req.Header.Set("Content-Type", "application/json")
	r, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Body.Close()
	var out struct{ Secret string }
	if err := json.NewDecoder(r.Body).Decode(&out); err != nil || r.StatusCode != http.StatusCreated || out.Secret == "" {
		t.Fatalf("create token: %d %v %+v", r.StatusCode, err, out)
	}
	return out.Secret
}
