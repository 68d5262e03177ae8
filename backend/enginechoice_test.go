package backend

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"cubicle/backend/api"
	"cubicle/backend/engineconn"
	"cubicle/backend/store"
)

// TestEngineRoutes drives Settings → Local VM → "Where desktops run" over HTTP on a real
// Backend (no container engine): admins only, a requestId required, every kind of bad input
// refused with 400 (or 503 for a cluster that does not answer) saying what to fix and saving
// nothing, then a valid choice saved; the process's own flag still decides what runs.
func TestEngineRoutes(t *testing.T) {
	for _, v := range []string{"CUBICLE_ENGINE", engineconn.EnvKubeconfig, engineconn.EnvKubeContext, engineconn.EnvKubeNamespace, engineconn.EnvKubeStorageClass,
		engineconn.EnvKubeVolumeSize, engineconn.EnvKubeRegistry, engineconn.EnvKubeInsecure} {
		t.Setenv(v, "")
	}
	dir := t.TempDir()
	b, err := New(Config{DataDir: dir, Engine: "none", AllowedHosts: []string{"127.0.0.1"},
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	t.Cleanup(func() { b.Close() })
	if err := b.Start(ctx); err != nil {
		t.Fatal(err)
	}
	if err := b.WaitEngine(ctx); err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go b.Serve(ctx, ln)
	admin, err := b.LocalSession()
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Store.CreateAccount(store.Account{ID: "u-member", Username: "member", Role: store.RoleMember}); err != nil {
		t.Fatal(err)
	}
	member, err := b.Auth.Issue(store.Account{ID: "u-member", Username: "member", Role: store.RoleMember})
	if err != nil {
		t.Fatal(err)
	}
	base := "http://" + ln.Addr().String()
	call := func(token, method, body string) (int, string) {
		t.Helper()
		req, _ := http.NewRequest(method, base+"/api/app/admin/local-vm/engine", strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+token)
		if body != "" {
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set("Origin", base)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		raw, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(raw)
	}
	status := func() api.EngineStatus {
		t.Helper()
		code, body := call(admin.Token, "GET", "")
		if code != 200 {
			t.Fatalf("GET engine: %d %s", code, body)
		}
		var st api.EngineStatus
		if err := json.Unmarshal([]byte(body), &st); err != nil {
			t.Fatalf("%v: %s", err, body)
		}
		return st
	}

	st := status()
	if st.Active != "" || st.Settings.Kind != "none" || st.Saved != (store.EngineSettings{}) || st.RestartNeeded ||
		len(st.Overrides) != 1 || st.Overrides[0] != "flags" || !strings.Contains(st.Problem, "turned off") {
		t.Fatalf("initial status = %+v", st)
	}
	if code, body := call(member.Token, "GET", ""); code != 403 {
		t.Fatalf("a member reads the engine: %d %s", code, body)
	}
	if code, body := call(member.Token, "PUT", `{"requestId":"m1","kind":"docker"}`); code != 403 {
		t.Fatalf("a member sets the engine: %d %s", code, body)
	}

	kc := filepath.Join(dir, "unreachable.kubeconfig")
	if err := os.WriteFile(kc, []byte(`apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "https://127.0.0.1:1"}}]
users: [{name: u, user: {token: t}}]
contexts: [{name: x, context: {cluster: c, user: u, namespace: cubicle}}]
current-context: x
`), 0o600); err != nil {
		t.Fatal(err)
	}
	notYAML := filepath.Join(dir, "not-a-kubeconfig")
	if err := os.WriteFile(notYAML, []byte("\x00\x01 not yaml: [\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for i, tt := range []struct{ name, body, want string }{
		{"no requestId", `{"kind":"docker"}`, "requestId"},
		{"unknown kind", `{"requestId":"r1","kind":"lxc"}`, "want podman, docker, kubernetes or none"},
		{"not JSON", `{"requestId":`, ""},
		{"kubernetes without a registry", `{"requestId":"r1","kind":"kubernetes","kubeconfig":"` + kc + `"}`, "no image registry"},
		{"a registry read as a Docker Hub user", `{"requestId":"r1","kind":"kubernetes","kubeconfig":"` + kc + `","registry":"cubicle"}`, "must contain a dot or a port"},
		{"a registry with a scheme", `{"requestId":"r1","kind":"kubernetes","kubeconfig":"` + kc + `","registry":"http://r.example.com"}`, "want host[:port][/path]"},
		{"a registry with a shell", `{"requestId":"r1","kind":"kubernetes","kubeconfig":"` + kc + `","registry":"r.example.com;rm -rf /"}`, "want host[:port][/path]"},
		{"a kubeconfig that does not exist", `{"requestId":"r1","kind":"kubernetes","kubeconfig":"` + dir + `/nope","registry":"r.example.com"}`, "cannot be read"},
		{"a file that is no kubeconfig", `{"requestId":"r1","kind":"kubernetes","kubeconfig":"` + notYAML + `","registry":"r.example.com"}`, "kubeconfig"},
		{"a volume size that is no quantity", `{"requestId":"r1","kind":"kubernetes","kubeconfig":"` + kc + `","registry":"r.example.com","volumeSize":"lots"}`, "volume size"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			body := strings.Replace(tt.body, `"requestId":"r1"`, fmt.Sprintf(`"requestId":"bad-%d"`, i), 1)
			code, body := call(admin.Token, "PUT", body)
			if code != 400 || !strings.Contains(body, tt.want) {
				t.Fatalf("PUT %s = %d %s, want 400 saying %q", tt.body, code, body, tt.want)
			}
			if st := status(); st.Saved != (store.EngineSettings{}) {
				t.Fatalf("refused input was saved: %+v", st.Saved)
			}
		})
	}
	t.Run("a cluster that does not answer", func(t *testing.T) {
		code, body := call(admin.Token, "PUT", `{"requestId":"r2","kind":"kubernetes","kubeconfig":"`+kc+`","registry":"r.example.com"}`)
		if code != 503 || !strings.Contains(body, "was not saved") || !strings.Contains(body, "does not answer") {
			t.Fatalf("PUT an unreachable cluster = %d %s, want 503 saying it was not saved", code, body)
		}
		if st := status(); st.Saved != (store.EngineSettings{}) {
			t.Fatalf("an unreachable cluster was saved: %+v", st.Saved)
		}
	})

	code, body := call(admin.Token, "PUT", `{"requestId":"r3","kind":" Docker ","registry":"ignored.example.com"}`)
	if code != 200 {
		t.Fatalf("PUT docker: %d %s", code, body)
	}
	st = status()
	if st.Saved != (store.EngineSettings{Kind: "docker"}) || st.Settings.Kind != "none" || st.RestartNeeded {
		t.Fatalf("after saving docker under --engine none: %+v (the flag decides; the cluster fields of another kind are dropped)", st)
	}
	// the same requestId again is a no-op, even with another body
	if code, body := call(admin.Token, "PUT", `{"requestId":"r3","kind":"podman"}`); code != 200 || status().Saved.Kind != "docker" {
		t.Fatalf("a repeated requestId changed the choice: %d %s", code, body)
	}
}
