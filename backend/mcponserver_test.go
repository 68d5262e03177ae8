//go:build linux

package backend

import (
	"encoding/hex"
	"errors"
	"io"
	"log/slog"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"cubicle/backend/agent"
	"cubicle/backend/auth"
	"cubicle/backend/fault"
	"cubicle/backend/hostaccess"
	"cubicle/backend/mcpclient"
	"cubicle/backend/models"
	"cubicle/backend/nodes"
	"cubicle/backend/profile"
	"cubicle/backend/sandbox"
	"cubicle/backend/store"
)

// TestMCPClientStdioOnServer: a stdio MCP server an administrator marked "runs on the server"
// runs on this machine in the OS sandbox of host tools — bubblewrap and Landlock both — for
// accounts with host access only. Through real chat turns with the scripted model: the admin's
// agent lists and calls it; the server's process reads a decoy file next to the data
// directory, but the sandbox keeps it from the data directory's session-signing key (the
// same command, so the refusal is the kernel's); a member without the grant is not offered
// its tools and a call is refused saying why; granted, the member's agent uses it; the
// server's process ends when the service closes.
func TestMCPClientStdioOnServer(t *testing.T) {
	script, err := os.ReadFile("mcpclient/testdata/stdio-server.sh")
	if err != nil {
		t.Fatal(err)
	}
	for _, mode := range []sandbox.Kind{sandbox.Bwrap, sandbox.Landlock} {
		t.Run(string(mode), func(t *testing.T) {
			t.Setenv(sandbox.EnvMode, string(mode))
			data := t.TempDir()
			b, err := New(Config{DataDir: data, Engine: "none", AllowedHosts: []string{"127.0.0.1"},
				Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
			if err != nil {
				t.Fatal(err)
			}
			defer b.Close()
			if k := b.sandbox.Kind(); k != mode {
				t.Fatalf("sandbox %s, want %s (%s)", k, mode, b.sandbox.Problem())
			}
			root, err := b.Auth.Admin()
			if err != nil {
				t.Fatal(err)
			}
			admin, err := b.Auth.Issue(root)
			if err != nil {
				t.Fatal(err)
			}
			model := &scriptedModel{}
			msrv := httptest.NewServer(model)
			defer msrv.Close()
			allow := true
			if _, err := b.Models.Set(models.Update{BaseURL: msrv.URL + "/v1", Model: "scripted", AllowPrivate: &allow}); err != nil {
				t.Fatal(err)
			}
			agentOf := func(account, name string) string {
				a, err := b.Profiles.Create(account, name)
				if err != nil {
					t.Fatal(err)
				}
				if _, err := b.Profiles.SelectComputer(account, a.ID, profile.Selection{Computer: "none"}); err != nil {
					t.Fatal(err)
				}
				return a.ID
			}
			ada := agentOf(root.ID, "Ada")

			key := filepath.Join(data, "secrets", "session.key") // the server's session-signing key
			if _, err := os.Stat(key); err != nil {
				t.Fatal(err)
			}
			decoy := filepath.Join(t.TempDir(), "decoy")
			if err := os.WriteFile(decoy, []byte("decoy-bytes"), 0o600); err != nil {
				t.Fatal(err)
			}
			name, tr, cmd, yes := "host", mcpclient.TransportStdio, "/bin/sh", true
			marker := "cubicle-onserver-test-" + filepath.Base(data) // $0 of the servers' shells
			mk := func(name, file string) string {
				srv, err := b.MCPClient.Create(admin, mcpclient.Input{Name: &name, Transport: &tr, Command: &cmd, OnServer: &yes,
					Args: []string{"-c", string(script), marker}, Env: map[string]*string{"MCP_TEST_FILE": &file},
					Policy: &store.MCPPolicy{Default: "allow"}})
				if err != nil {
					t.Fatal(err)
				}
				if !srv.OnServer {
					t.Fatalf("created without onServer: %+v", srv)
				}
				return srv.ID
			}
			// onServer is for commands: an HTTP server with it is refused, and nothing is saved.
			hn, ht, hu := "web", mcpclient.TransportHTTP, "https://mcp.example.com/mcp"
			if _, err := b.MCPClient.Create(admin, mcpclient.Input{Name: &hn, Transport: &ht, URL: &hu, OnServer: &yes}); !errors.Is(err, fault.ErrInvalid) ||
				!strings.Contains(err.Error(), "onServer is for stdio servers") {
				t.Fatalf("an http server on the server: %v", err)
			}
			if list, err := b.MCPClient.List(admin); err != nil || len(list) != 0 {
				t.Fatalf("after the refusal: %v %v", list, err)
			}
			keySrv, decoyName := mk(name, key), "decoy"
			decoySrv := mk(decoyName, decoy)
			if _, err := b.MCPClient.SetAgentServers(admin, ada, []string{keySrv, decoySrv}); err != nil {
				t.Fatal(err)
			}

			model.push(
				callStep("w", "mcp_host_whoami", map[string]any{}),
				callStep("k", "mcp_host_peek", map[string]any{}),
				callStep("d", "mcp_decoy_peek", map[string]any{}),
				textStep("done"),
			)
			res := results(turn(t, b, root.ID, ada, "s1", "use the server's MCP server"))
			if got := toolsOffered(t, model, 0); !hasAll(got, "mcp_host_whoami", "mcp_host_peek", "mcp_decoy_peek") {
				t.Fatalf("offered %v", got)
			}
			if res["w"][0] != agent.StateSuccess || !strings.Contains(res["w"][1], "pid=") {
				t.Fatalf("whoami on the server: %+v", res["w"])
			}
			if res["d"][0] != agent.StateSuccess || !strings.Contains(res["d"][1], "read="+hex.EncodeToString([]byte("decoy-bytes"))) {
				t.Fatalf("the decoy next to the data directory: %+v", res["d"])
			}
			raw, _ := os.ReadFile(key)
			if res["k"][0] != agent.StateSuccess || !strings.Contains(res["k"][1], "refused") ||
				strings.Contains(res["k"][1], hex.EncodeToString(raw[:min(len(raw), 8)])) {
				t.Fatalf("the session key must not be readable by the server's MCP server: %+v", res["k"])
			}
			// The refusal is the sandbox's, said so to the agent and recorded for an
			// administrator's review like host_shell's; the decoy's read recorded nothing.
			if !strings.Contains(res["k"][1], "sandbox: the sandbox refused access to "+key) {
				t.Fatalf("the agent is not told the sandbox refused the key: %q", res["k"][1])
			}
			refusals, err := b.Store.SandboxRefusals()
			if err != nil {
				t.Fatal(err)
			}
			if len(refusals) != 1 || refusals[0].Path != key || refusals[0].AgentID != ada || refusals[0].AccountID != root.ID ||
				refusals[0].Node != nodes.LocalID || refusals[0].Write || refusals[0].Hidden == "" {
				t.Fatalf("recorded refusals %+v, want the key's read by Ada on node local", refusals)
			}

			// A member without host access: the tools are not offered, a call is refused.
			member, err := b.Auth.CreateAccount(admin, auth.NewAccount{Username: "mia", Password: "Long-pass-of-the-member-1"})
			if err != nil {
				t.Fatal(err)
			}
			mia := agentOf(member.ID, "Mia")
			if _, err := b.MCPClient.SetAgentServers(admin, mia, []string{decoySrv}); err != nil {
				t.Fatal(err)
			}
			first := model.requests()
			model.push(callStep("m1", "mcp_decoy_peek", map[string]any{}), textStep("done"))
			res = results(turn(t, b, member.ID, mia, "s2", "try it"))
			if got := toolsOffered(t, model, first); hasAll(got, "mcp_decoy_peek") {
				t.Fatalf("offered without host access: %v", got)
			}
			if res["m1"][0] == agent.StateSuccess || strings.Contains(res["m1"][1], "read=") {
				t.Fatalf("called without host access: %+v", res["m1"])
			}
			// Granted, the member's agent uses it (in a process of its own).
			if err := b.HostAccess.Grant(root.ID, member.ID, hostaccess.LocalNode, hostaccess.Access{HostTools: true}); err != nil {
				t.Fatal(err)
			}
			first = model.requests()
			model.push(callStep("m2", "mcp_decoy_peek", map[string]any{}), textStep("done"))
			res = results(turn(t, b, member.ID, mia, "s3", "again"))
			if got := toolsOffered(t, model, first); !hasAll(got, "mcp_decoy_peek") {
				t.Fatalf("not offered with host access: %v", got)
			}
			if res["m2"][0] != agent.StateSuccess || !strings.Contains(res["m2"][1], "read=") {
				t.Fatalf("with host access: %+v", res["m2"])
			}

			// Closing the service ends the servers' processes (found by the marker in their
			// command lines: in bubblewrap they have pids of their own namespace).
			if n := countProcs(t, marker); n == 0 {
				t.Fatal("no server process found before Close")
			}
			b.MCPClient.Close()
			if n := countProcs(t, marker); n != 0 {
				t.Fatalf("%d server processes left after Close", n)
			}
		})
	}
}

// countProcs counts the processes whose command line holds marker.
func countProcs(t *testing.T, marker string) int {
	t.Helper()
	n := 0
	dirs, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	for _, f := range dirs {
		if raw, err := os.ReadFile(f); err == nil && strings.Contains(string(raw), marker) {
			n++
		}
	}
	return n
}
