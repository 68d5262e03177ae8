package cli

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"cubicle/backend/engine"
	"cubicle/internal/testenv"
)

// TestDoctorJSONFindsEveryLocation runs `cubicle doctor --json` with a temporary HOME and
// runtime directory in which every Unix location of this platform leads to a real Podman API
// service (one service; each location is a symlink to its socket), plus a docker context and
// a Podman connection written by the podman CLI. Each must be listed with its source,
// reachable and with a version, in the JSON shape the README documents.
func TestDoctorJSONFindsEveryLocation(t *testing.T) {
	podman := testenv.Program(t, "podman")
	base := testenv.TempDir(t)
	home, runtimeDir := filepath.Join(base, "h"), filepath.Join(base, "r")
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	svc, err := engine.StartPodmanService(ctx, filepath.Join(base, "svc", "podman.sock"), nil)
	if err != nil {
		t.Fatalf("start podman service: %v", err)
	}
	t.Cleanup(func() { svc.Close() })
	link := func(path string) string {
		t.Helper()
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(engine.SocketPath(svc.Socket()), path); err != nil {
			t.Fatal(err)
		}
		return "unix://" + path
	}

	// The docker CLI's files for a current context "work".
	ctxSock := link(filepath.Join(home, "ctx.sock"))
	sum := sha256.Sum256([]byte("work"))
	meta := filepath.Join(home, ".docker", "contexts", "meta", hex.EncodeToString(sum[:]))
	must(t, os.MkdirAll(meta, 0o755))
	must(t, os.WriteFile(filepath.Join(meta, "meta.json"), []byte(fmt.Sprintf(`{"Name":"work","Metadata":{},"Endpoints":{"docker":{"Host":%q,"SkipTLSVerify":false}}}`, ctxSock)), 0o644))
	must(t, os.WriteFile(filepath.Join(home, ".docker", "config.json"), []byte(`{"currentContext":"work"}`), 0o600))
	// A Podman connection, added by the podman CLI to a private containers.conf.
	conf := filepath.Join(base, "containers.conf")
	must(t, os.WriteFile(conf, nil, 0o644))
	connSock := link(filepath.Join(home, "conn.sock"))
	add := exec.Command(podman, "system", "connection", "add", "dev", connSock)
	add.Env = append(os.Environ(), "HOME="+home, "CONTAINERS_CONF="+conf)
	if out, err := add.CombinedOutput(); err != nil {
		t.Fatalf("podman system connection add: %v\n%s", err, out)
	}

	vars := map[string]string{
		"HOME":            home,
		"XDG_RUNTIME_DIR": runtimeDir,
		"CONTAINERS_CONF": conf,
		"CONTAINER_HOST":  link(filepath.Join(base, "ch.sock")),
		"DOCKER_HOST":     link(filepath.Join(base, "dh.sock")),
	}
	want := map[string]string{ // socket → source
		vars["CONTAINER_HOST"]: engine.SourceContainerHost,
		vars["DOCKER_HOST"]:    engine.SourceDockerHost,
		ctxSock:                engine.SourceDockerContext,
		link(filepath.Join(runtimeDir, "podman", "podman.sock")):       engine.SourceRootless,
		link(filepath.Join(runtimeDir, "docker.sock")):                 engine.SourceRootless,
		link(filepath.Join(home, ".docker", "desktop", "docker.sock")): engine.SourceDockerDesktop,
		link(filepath.Join(home, ".colima", "default", "docker.sock")): engine.SourceColima,
		link(filepath.Join(home, ".rd", "docker.sock")):                engine.SourceRancherDesktop,
		connSock: engine.SourcePodmanConnection,
	}
	if _, _, _, err := engine.Ping(ctx, "unix:///run/podman/podman.sock", 3*time.Second); err == nil {
		want["unix:///run/podman/podman.sock"] = engine.SourceRootful // the system's own service
	}

	e, out, errb := testEnv(vars)
	if code := run(ctx, e, []string{"doctor", "--json", "--data-dir", filepath.Join(base, "data")}); code != 0 {
		t.Fatalf("doctor --json exit %d\nstdout %s\nstderr %s", code, out, errb)
	}
	var report struct {
		Engines []map[string]any `json:"engines"`
		Checks  []map[string]any `json:"checks"`
		OK      *bool            `json:"ok"`
	}
	if err := json.Unmarshal([]byte(out.String()), &report); err != nil {
		t.Fatalf("doctor --json printed no JSON: %v\n%s", err, out)
	}
	if report.OK == nil || !*report.OK || len(report.Checks) == 0 {
		t.Fatalf("report: ok=%v checks=%v", report.OK, report.Checks)
	}
	found := map[string]map[string]any{}
	for _, ep := range report.Engines {
		for _, k := range []string{"kind", "source", "socket", "reachable", "version", "remote"} {
			if _, ok := ep[k]; !ok && !(k == "version" && ep["reachable"] == false) {
				t.Errorf("engine %v lacks %q", ep, k)
			}
		}
		s, _ := ep["socket"].(string)
		found[s] = ep
	}
	for sock, source := range want {
		ep, ok := found[sock]
		switch {
		case !ok:
			t.Errorf("%s (%s) not listed", sock, source)
		case ep["source"] != source || ep["reachable"] != true || ep["kind"] != "podman" || ep["version"] == "" || ep["remote"] != false:
			t.Errorf("%s listed as %v, want source %s, reachable podman", sock, ep, source)
		}
	}
	if t.Failed() {
		t.Logf("doctor --json:\n%s", out)
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
