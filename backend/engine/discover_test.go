package engine

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"cubicle/backend/fault"
)

func envMap(m map[string]string) func(string) string { return func(k string) string { return m[k] } }

func sockets(eps []Endpoint) string {
	var s []string
	for _, ep := range eps {
		s = append(s, fmt.Sprintf("%s:%s:%s", ep.Kind, ep.Source, strings.TrimPrefix(ep.Socket, "unix://")))
	}
	return strings.Join(s, " ")
}

func TestCandidates(t *testing.T) {
	tests := []struct {
		name   string
		env    map[string]string
		uid    int
		prefer Kind
		want   string
	}{
		{"root defaults", nil, 0, "",
			"podman:rootful:/run/podman/podman.sock docker:rootful:/var/run/docker.sock"},
		{"root with runtime dir", map[string]string{"XDG_RUNTIME_DIR": "/run/user/0"}, 0, "",
			"podman:rootful:/run/podman/podman.sock podman:rootless:/run/user/0/podman/podman.sock docker:rootful:/var/run/docker.sock docker:rootless:/run/user/0/docker.sock"},
		{"user: rootless first, runtime dir from uid", nil, 1000, "",
			"podman:rootless:/run/user/1000/podman/podman.sock podman:rootful:/run/podman/podman.sock docker:rootless:/run/user/1000/docker.sock docker:rootful:/var/run/docker.sock"},
		{"prefer docker", map[string]string{"XDG_RUNTIME_DIR": "/x"}, 1000, Docker,
			"docker:rootless:/x/docker.sock docker:rootful:/var/run/docker.sock podman:rootless:/x/podman/podman.sock podman:rootful:/run/podman/podman.sock"},
		{"env hosts first, duplicates once", map[string]string{"DOCKER_HOST": "unix:///run/podman/podman.sock", "CONTAINER_HOST": "unix:///srv/p.sock"}, 0, "",
			"podman:CONTAINER_HOST:/srv/p.sock podman:rootful:/run/podman/podman.sock docker:rootful:/var/run/docker.sock"},
		{"tcp hosts ignored", map[string]string{"DOCKER_HOST": "tcp://1.2.3.4:2375"}, 0, "",
			"podman:rootful:/run/podman/podman.sock docker:rootful:/var/run/docker.sock"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := sockets(Candidates(envMap(tt.env), tt.uid, tt.prefer)); got != tt.want {
				t.Fatalf("Candidates =\n  %s\nwant\n  %s", got, tt.want)
			}
		})
	}
}

func TestParseKind(t *testing.T) {
	for in, want := range map[string]Kind{"": "", "podman": Podman, " Docker ": Docker} {
		if got, err := ParseKind(in); err != nil || got != want {
			t.Errorf("ParseKind(%q) = %q, %v", in, got, err)
		}
	}
	if _, err := ParseKind("lxc"); err == nil {
		t.Error("ParseKind(lxc) succeeded")
	}
}

func TestFixFor(t *testing.T) {
	tests := []struct {
		name   string
		ep     Endpoint
		denied bool
		want   string
	}{
		{"podman missing", Endpoint{Kind: Podman, Source: "rootful"}, false, "install Podman"},
		{"podman rootful", Endpoint{Kind: Podman, Source: "rootful", CLI: "/usr/bin/podman", Socket: "unix:///run/podman/podman.sock"}, false, "sudo systemctl start podman.socket (or: sudo podman system service --time=0 unix:///run/podman/podman.sock &)"},
		{"podman rootless", Endpoint{Kind: Podman, Source: "rootless", CLI: "/usr/bin/podman", Socket: "unix:///run/user/1000/podman/podman.sock"}, false, "systemctl --user start podman.socket"},
		{"docker missing", Endpoint{Kind: Docker, Source: "rootful"}, false, "install Docker"},
		{"docker denied", Endpoint{Kind: Docker, Source: "rootful", CLI: "/usr/bin/docker"}, true, "usermod -aG docker"},
		{"docker rootful", Endpoint{Kind: Docker, Source: "rootful", CLI: "/usr/bin/docker"}, false, "sudo systemctl start docker"},
		{"docker rootless", Endpoint{Kind: Docker, Source: "rootless", CLI: "/usr/bin/docker"}, false, "systemctl --user start docker"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := fixFor(tt.ep, tt.denied); !strings.Contains(got, tt.want) {
				t.Fatalf("fixFor = %q, want it to contain %q", got, tt.want)
			}
		})
	}
}

// serveUnix serves h on a unix socket in a temporary directory and returns its URI.
func serveUnix(t *testing.T, h http.Handler) string {
	sock := filepath.Join(t.TempDir(), "e.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewUnstartedServer(h)
	srv.Listener = ln
	srv.Start()
	t.Cleanup(srv.Close)
	return "unix://" + sock
}

// TestDiscoverProbe probes a socket per answer kind: a Docker-like and a Podman-like HTTP
// server on unix sockets, a dead socket file and a missing one.
func TestDiscoverProbe(t *testing.T) {
	dockerLike := serveUnix(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/_ping":
			w.Header().Set("API-Version", "1.47")
			fmt.Fprint(w, "OK")
		case "/version":
			fmt.Fprint(w, `{"Version":"27.3.1","ApiVersion":"1.47","Components":[{"Name":"Engine"}]}`)
		default:
			http.NotFound(w, r)
		}
	}))
	podmanLike := serveUnix(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Libpod-API-Version", "5.2.0")
		w.Header().Set("API-Version", "1.41")
		fmt.Fprint(w, "OK")
	}))
	dead := filepath.Join(t.TempDir(), "dead.sock")
	ln, err := net.Listen("unix", dead)
	if err != nil {
		t.Fatal(err)
	}
	ln.(*net.UnixListener).SetUnlinkOnClose(false)
	ln.Close()
	missing := filepath.Join(t.TempDir(), "missing.sock")

	uid := 1000
	opts := DiscoverOptions{
		Getenv: envMap(map[string]string{
			"CONTAINER_HOST":  podmanLike,
			"DOCKER_HOST":     dockerLike,
			"XDG_RUNTIME_DIR": filepath.Dir(missing),
		}),
		LookPath: func(name string) (string, error) {
			if name == "podman" {
				return "/usr/bin/podman", nil
			}
			return "", exec.ErrNotFound
		},
		UID:     &uid,
		Timeout: 2 * time.Second,
	}
	eps, err := Discover(context.Background(), opts)
	if err != nil {
		t.Fatal(err)
	}
	by := map[string]Endpoint{}
	for _, ep := range eps {
		by[ep.Socket] = ep
	}
	if ep := by[podmanLike]; !ep.Reachable || ep.Kind != Podman || ep.Version != "5.2.0" || ep.APIVersion != "1.41" || ep.CLI != "/usr/bin/podman" {
		t.Errorf("podman-like endpoint: %+v", ep)
	}
	if ep := by[dockerLike]; !ep.Reachable || ep.Kind != Docker || ep.Version != "27.3.1" || ep.APIVersion != "1.47" || ep.CLI != "" {
		t.Errorf("docker-like endpoint: %+v", ep)
	}
	rootless := by["unix://"+filepath.Join(filepath.Dir(missing), "podman/podman.sock")]
	if rootless.Reachable || !strings.Contains(rootless.Err, "no socket") || !strings.Contains(rootless.Fix, "systemctl --user start podman.socket") {
		t.Errorf("missing rootless podman socket: %+v", rootless)
	}
	if first, ok := Pick(eps); !ok || first.Socket != podmanLike {
		t.Errorf("Pick = %+v, %v; want the CONTAINER_HOST socket", first, ok)
	}

	if _, _, _, err := Ping(context.Background(), "unix://"+dead, time.Second); err == nil {
		t.Error("Ping(dead socket) succeeded")
	}
	var ep Endpoint = Endpoint{Kind: Docker, Socket: "unix://" + dead, Source: "rootful", CLI: "/usr/bin/docker"}
	probeEndpoint(context.Background(), &ep, time.Second)
	if ep.Reachable || !strings.Contains(ep.Err, "nothing is listening") || ep.Fix != "sudo systemctl start docker" {
		t.Errorf("dead docker socket: %+v", ep)
	}
}

// TestDiscoverHost runs discovery on this machine; with CUBICLE_REQUIRE_ALL=1 a Podman
// service must be found.
func TestDiscoverHost(t *testing.T) {
	eps, err := Discover(context.Background(), DiscoverOptions{Timeout: 3 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	for _, ep := range eps {
		t.Log(ep.Describe())
	}
	ep, ok := Pick(eps)
	if !ok {
		if os.Getenv("CUBICLE_REQUIRE_ALL") == "1" {
			t.Fatal("no engine reachable (CUBICLE_REQUIRE_ALL=1)")
		}
		t.Skip("no engine reachable on this machine")
	}
	if ep.Version == "" || ep.Kind == "" {
		t.Fatalf("picked endpoint lacks kind or version: %+v", ep)
	}
}

// TestStartPodmanService starts an app-owned Podman service on a private socket, talks to it
// and stops it.
func TestStartPodmanService(t *testing.T) {
	if _, err := exec.LookPath("podman"); err != nil {
		if os.Getenv("CUBICLE_REQUIRE_ALL") == "1" {
			t.Fatal("podman is not installed (CUBICLE_REQUIRE_ALL=1)")
		}
		t.Skip("podman is not installed")
	}
	// Keep the socket path short: unix socket paths are limited to 108 bytes.
	dir, err := os.MkdirTemp("", "cub-svc-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	sock := filepath.Join(dir, "run", "podman.sock")
	logger := slog.New(slog.NewTextHandler(tWriter{t}, &slog.HandlerOptions{Level: slog.LevelDebug}))
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	start := time.Now()
	svc, err := StartPodmanService(ctx, sock, logger)
	if err != nil {
		t.Fatalf("StartPodmanService: %v", err)
	}
	t.Logf("service answered after %v", time.Since(start).Round(time.Millisecond))
	kind, version, _, err := Ping(ctx, svc.Socket(), 5*time.Second)
	if err != nil || kind != Podman || version == "" {
		t.Fatalf("Ping(owned service) = %s %s, %v", kind, version, err)
	}
	if _, err := StartPodmanService(ctx, sock, logger); !errors.Is(err, fault.ErrExists) {
		t.Fatalf("second StartPodmanService on the same socket = %v, want ErrExists", err)
	}
	pid := svc.cmd.Process.Pid
	if err := svc.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	svc.Close() // idempotent
	select {
	case <-svc.Done():
	default:
		t.Fatal("Close returned before the process exited")
	}
	if _, err := os.Stat(fmt.Sprintf("/proc/%d", pid)); err == nil {
		t.Fatalf("service process %d still exists after Close", pid)
	}
	if _, _, _, err := Ping(ctx, svc.Socket(), time.Second); err == nil {
		t.Fatal("socket still answers after Close")
	}
}

// tWriter sends log output to the test log.
type tWriter struct{ t *testing.T }

func (w tWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}
