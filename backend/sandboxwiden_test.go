//go:build linux

package backend

import (
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"cubicle/backend/agent"
	"cubicle/backend/api"
	"cubicle/backend/models"
	"cubicle/backend/sandbox"
	"cubicle/backend/store"
)

// TestSandboxWidening: under bubblewrap and Landlock, through real chat turns (the scripted
// model) and the real admin API. A host_shell write outside the writable paths and a read of
// a credential folder (~/.kube) are refused by the kernel, said so in the result, and recorded
// (node, account, agent, path, access, when) — so are host_write_file's and host_read_file's;
// a member may neither list nor approve; a read of
// the data directory's session key cannot be approved (403, why, nothing changed); bad input
// is a 400, an unknown refusal a 404. Approved, the same command succeeds; revoked, it is
// refused again.
func TestSandboxWidening(t *testing.T) {
	for _, mode := range []sandbox.Kind{sandbox.Bwrap, sandbox.Landlock} {
		t.Run(string(mode), func(t *testing.T) {
			t.Setenv(sandbox.EnvMode, string(mode))
			t.Setenv("CUBICLE_TOOL_GUARD", "OFF") // the wall behind the guard is under test
			home := t.TempDir()
			t.Setenv("HOME", home)
			kube := filepath.Join(home, ".kube")
			if err := os.MkdirAll(kube, 0o700); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(kube, "config"), []byte("kube-config-bytes"), 0o600); err != nil {
				t.Fatal(err)
			}
			// Outside the scratch directories (/tmp is writable in the sandbox) and the home.
			wd, _ := os.Getwd()
			outside, err := os.MkdirTemp(wd, "widen-")
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { os.RemoveAll(outside) })

			data := t.TempDir()
			b, err := New(Config{DataDir: data, Engine: "none", AllowedHosts: []string{"127.0.0.1"},
				Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { b.Close() })
			if err := b.Start(t.Context()); err != nil {
				t.Fatal(err)
			}
			if k := b.sandbox.Kind(); k != mode {
				t.Fatalf("sandbox %s, want %s (%s)", k, mode, b.sandbox.Problem())
			}
			admin, adminID, member, _ := LoginAdminAndMember(t, b)
			model := &scriptedModel{}
			msrv := httptest.NewServer(model)
			defer msrv.Close()
			allow := true
			if _, err := b.Models.Set(models.Update{BaseURL: msrv.URL + "/v1", Model: "scripted", AllowPrivate: &allow}); err != nil {
				t.Fatal(err)
			}
			ag, err := b.Profiles.Create(adminID, "Ada")
			if err != nil {
				t.Fatal(err)
			}
			if _, err := b.Store.UpdateAgent(ag.ID, func(a *store.Agent) error { a.Computer, a.AllowHostEnvironment = "host", true; return nil }); err != nil {
				t.Fatal(err)
			}
			n := 0
			tool := func(name string, args map[string]any) [2]string {
				t.Helper()
				n++
				model.push(callStep("c", name, args), textStep("done"))
				return results(turn(t, b, adminID, ag.ID, "s"+string(rune('a'+n)), "run it"))["c"]
			}
			shell := func(cmd string) [2]string { return tool("host_shell", map[string]any{"command": cmd}) }
			call := func(token, method, path, body string) (int, string) {
				t.Helper()
				r := httptest.NewRequest(method, path, strings.NewReader(body))
				r.Host = "127.0.0.1"
				r.Header.Set("Authorization", "Bearer "+token)
				if body != "" {
					r.Header.Set("Content-Type", "application/json")
				}
				rec := httptest.NewRecorder()
				b.API.Handler().ServeHTTP(rec, r)
				return rec.Code, rec.Body.String()
			}
			review := func() api.SandboxReview {
				t.Helper()
				code, body := call(admin, "GET", "/api/app/admin/sandbox", "")
				var v api.SandboxReview
				if code != http.StatusOK || json.Unmarshal([]byte(body), &v) != nil {
					t.Fatalf("review: %d %s", code, body)
				}
				return v
			}
			find := func(path string) api.SandboxRefusal {
				t.Helper()
				v := review()
				i := slices.IndexFunc(v.Refusals, func(r api.SandboxRefusal) bool { return r.Path == path })
				if i < 0 {
					t.Fatalf("no refusal of %s recorded: %+v", path, v.Refusals)
				}
				return v.Refusals[i]
			}
			settings := func() string {
				raw, _ := json.Marshal(b.Security.View().HostSandbox)
				return string(raw)
			}

			// A write outside the writable paths: refused, said so, recorded.
			out := filepath.Join(outside, "out.txt")
			res := shell("echo built > " + out)
			if res[0] == agent.StateSuccess && !strings.Contains(res[1], "refused write access to "+out) {
				t.Fatalf("write outside: %v", res)
			}
			if !strings.Contains(res[1], "refused write access to "+out) {
				t.Fatalf("the refusal is not in the result: %q", res[1])
			}
			if _, err := os.Stat(out); err == nil {
				t.Fatal("the sandbox let the write through")
			}
			w := find(out)
			if !w.Write || w.Node != "local" || w.AccountID != adminID || w.AgentID != ag.ID || w.AgentName != "Ada" || w.At.IsZero() || w.Count != 1 || w.Widened {
				t.Fatalf("recorded: %+v", w)
			}
			// The host file tools' refusals are recorded the same way.
			byTool := filepath.Join(outside, "by-tool.txt")
			if res := tool("host_write_file", map[string]any{"path": byTool, "content": "x"}); res[0] == agent.StateSuccess || !strings.Contains(res[1], "permission denied") {
				t.Fatalf("host_write_file outside: %v", res)
			}
			if r := find(byTool); !r.Write || r.Node != "local" || r.AgentID != ag.ID || r.Count != 1 {
				t.Fatalf("host_write_file's refusal recorded: %+v", r)
			}
			// The data directory's session key (read by a script the agent would have written, so
			// the guard, which refuses the path, does not see it): recorded, never widened.
			key := filepath.Join(data, "secrets", "session.key")
			if err := os.WriteFile(filepath.Join(home, "peek.sh"), []byte("cat "+key+"\n"), 0o644); err != nil {
				t.Fatal(err)
			}
			catKey := "sh peek.sh"
			if res := shell(catKey); !strings.Contains(res[1], "refused access to "+key) {
				t.Fatalf("session key: %v", res)
			}
			k := find(key)
			if k.Write || k.Hidden != data {
				t.Fatalf("session key recorded: %+v", k)
			}

			// Members may not; bad input is a 400; unknown ids a 404; none of it changes anything.
			before := settings()
			for _, c := range []struct {
				name, token, path, body string
				code                    int
				has                     string
			}{
				{"member lists", member, "", "", 403, ""},
				{"member approves", member, "/api/app/admin/sandbox/refusals/" + w.ID + "/approve", "{}", 403, ""},
				{"data directory", admin, "/api/app/admin/sandbox/refusals/" + k.ID + "/approve", "{}", 403, "Cubicle's data directory"},
				{"bad scope", admin, "/api/app/admin/sandbox/refusals/" + w.ID + "/approve", `{"scope":"everything"}`, 400, `use \"path\"`},
				{"unknown field", admin, "/api/app/admin/sandbox/refusals/" + w.ID + "/approve", `{"paths":["/"]}`, 400, ""},
				{"unknown refusal", admin, "/api/app/admin/sandbox/refusals/nope/approve", "{}", 404, "not found"},
				{"revoke nothing", admin, "/api/app/admin/sandbox/revoke", `{"node":"local","path":"` + outside + `","access":"read-write"}`, 404, "not among"},
				{"revoke relative", admin, "/api/app/admin/sandbox/revoke", `{"node":"local","path":"x","access":"read-write"}`, 400, "absolute"},
				{"revoke bad access", admin, "/api/app/admin/sandbox/revoke", `{"node":"local","path":"/x","access":"all"}`, 400, "use"},
			} {
				method := "POST"
				path := c.path
				if path == "" {
					method, path = "GET", "/api/app/admin/sandbox"
				}
				code, body := call(c.token, method, path, c.body)
				if code != c.code || !strings.Contains(body, c.has) {
					t.Errorf("%s: %d %s, want %d with %q", c.name, code, body, c.code, c.has)
				}
			}
			if after := settings(); after != before {
				t.Fatalf("a refused call changed the settings: %s → %s", before, after)
			}

			// Approved (its directory), the same command succeeds; revoked, it is refused again.
			code, body := call(admin, "POST", "/api/app/admin/sandbox/refusals/"+w.ID+"/approve", `{"scope":"directory"}`)
			if code != 200 || !strings.Contains(body, `"widening":{"node":"local","path":"`+outside+`","access":"read-write"}`) {
				t.Fatalf("approve: %d %s", code, body)
			}
			if !find(out).Widened {
				t.Fatal("the refusal is not shown as widened")
			}
			if res := shell("echo built > " + out); res[0] != agent.StateSuccess || strings.Contains(res[1], "refused") {
				t.Fatalf("after the approval: %v", res)
			}
			if raw, err := os.ReadFile(out); err != nil || string(raw) != "built\n" {
				t.Fatalf("written: %q %v", raw, err)
			}
			code, body = call(admin, "POST", "/api/app/admin/sandbox/revoke", `{"node":"local","path":"`+outside+`","access":"read-write"}`)
			if code != 200 {
				t.Fatalf("revoke: %d %s", code, body)
			}
			os.Remove(out)
			if res := shell("echo built > " + out); !strings.Contains(res[1], "refused write access to "+out) {
				t.Fatalf("after the revocation: %v", res)
			}
			if _, err := os.Stat(out); err == nil {
				t.Fatal("written after the revocation")
			}
			if c := find(out).Count; c != 2 {
				t.Fatalf("the same refusal again: count %d, want 2", c)
			}

			// A credential folder: refused and recorded as a read; approved, readable; revoked, not.
			cfg := filepath.Join(kube, "config")
			if res := shell("cat " + cfg); strings.Contains(res[1], "kube-config-bytes") || !strings.Contains(res[1], "refused access to "+cfg) {
				t.Fatalf("~/.kube/config: %v", res)
			}
			r := find(cfg)
			if r.Write || r.Hidden != kube {
				t.Fatalf("~/.kube/config recorded: %+v", r)
			}
			if res := tool("host_read_file", map[string]any{"path": cfg}); strings.Contains(res[1], "kube-config-bytes") {
				t.Fatalf("host_read_file ~/.kube/config: %v", res)
			}
			if c := find(cfg).Count; c != 2 {
				t.Fatalf("host_read_file's refusal of ~/.kube/config: count %d, want 2", c)
			}
			code, body = call(admin, "POST", "/api/app/admin/sandbox/refusals/"+r.ID+"/approve", "")
			if code != 200 || !strings.Contains(body, `"widening":{"node":"local","path":"`+kube+`","access":"read"}`) {
				t.Fatalf("approve reading: %d %s", code, body)
			}
			if res := shell("cat " + cfg); !strings.Contains(res[1], "kube-config-bytes") {
				t.Fatalf("after the approval: %v", res)
			}
			// The data directory stays hidden whatever was widened.
			if res := shell(catKey); !strings.Contains(res[1], "refused access to "+key) {
				t.Fatalf("session key after widening: %v", res)
			}
			if code, body = call(admin, "POST", "/api/app/admin/sandbox/revoke", `{"node":"local","path":"`+kube+`","access":"read"}`); code != 200 {
				t.Fatalf("revoke reading: %d %s", code, body)
			}
			if res := shell("cat " + cfg); strings.Contains(res[1], "kube-config-bytes") {
				t.Fatalf("after the revocation: %v", res)
			}
		})
	}
}
