package backend

import (
	"context"
	"log/slog"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"testing"
	"time"

	"cubicle/internal/mcpconformance"
)

// conformanceMust are the server scenarios of @modelcontextprotocol/conformance that Cubicle's
// /mcp must pass: they test the protocol itself, not the suite's fixture tools. The others
// (tools-call-*, resources-*, prompts-*, completion-*, elicitation-*) call tools, resources and prompts named by the suite (test_simple_text,
// test://static-text, …) that only its reference server has; they are listed, with the
// reason, in tests/mcp/conformance-baseline.yml: the suite fails if one of them passes
// unexpectedly or one not listed fails, and the test checks each failed only for that reason.
var conformanceMust = []string{"server-initialize", "ping", "tools-list", "logging-set-level", "resources-list",
	"prompts-list", "server-sse-multiple-streams", "dns-rebinding-protection"}

// TestMCPConformanceSuite runs the official MCP conformance suite (npm
// @modelcontextprotocol/conformance, on the Node 22 it needs, both from tests/mcp) against the
// /mcp of a real server. The suite sends no Authorization header, so it talks to a proxy in
// this test that adds the token's and passes everything else (Host and Origin included)
// through unchanged: the DNS-rebinding scenario's forged Host and Origin reach the server.
func TestMCPConformanceSuite(t *testing.T) {
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
	mcpconformance.Run(t, ctx, mcpconformance.Suite{URL: proxy.URL + "/mcp", Baseline: "conformance-baseline.yml",
		Artifacts: "mcp-conformance", Must: conformanceMust, Fixture: mcpconformance.Fixtures})
}
