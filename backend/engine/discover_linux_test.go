package engine

import (
	"bytes"
	"context"
	"crypto/sha256"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"cubicle/internal/testenv"
)

// requirePodman returns the podman CLI, or skips (fails with CUBICLE_REQUIRE_ALL=1).
func requirePodman(t *testing.T) string {
	t.Helper()
	p := testenv.Program(t, "podman")
	return p
}

// fileSum is a file's SHA-256 ("" when it does not exist).
func fileSum(path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	sum := sha256.Sum256(b)
	return fmt.Sprintf("%x", sum)
}

// TestDiscoverEveryUnixLocation serves a real Podman API service at every Unix location
// discovery knows, under a temporary HOME, XDG_RUNTIME_DIR and system root, with a real
// docker context, real Podman connections (added by the podman CLI into a private
// containers.conf, and a Podman 5 podman-connections.json) and a Podman machine whose
// inspect output names its socket. One service listens; every location is a symlink to its
// socket, so each probe is a real API call through that path. Discovery must find each with
// the right source, reachable, and mark the VM-backed ones.
func TestDiscoverEveryUnixLocation(t *testing.T) {
	podman := requirePodman(t)
	systemConf := "/etc/containers/containers.conf"
	before := fileSum(systemConf)
	t.Cleanup(func() {
		if after := fileSum(systemConf); after != before {
			t.Errorf("%s changed during the test", systemConf)
		}
	})

	base := testenv.TempDir(t)
	home, runtimeDir, sys := filepath.Join(base, "h"), filepath.Join(base, "r"), filepath.Join(base, "s")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	logger := slog.New(slog.NewTextHandler(testenv.Writer(t), nil))
	svc, err := StartPodmanService(ctx, filepath.Join(base, "svc", "podman.sock"), logger)
	if err != nil {
		t.Fatalf("start podman service: %v", err)
	}
	t.Cleanup(func() { svc.Close() })
	real := SocketPath(svc.Socket())
	link := func(path string) string {
		t.Helper()
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(real, path); err != nil {
			t.Fatal(err)
		}
		return "unix://" + path
	}

	// Files the desktop apps and the CLIs write, in their real formats.
	ctxSock := link(filepath.Join(home, "ctx.sock"))
	writeDockerContext(t, home, "work", ctxSock)
	conf := filepath.Join(base, "containers.conf")
	if err := os.WriteFile(conf, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	cliEnv := append(os.Environ(), "HOME="+home, "CONTAINERS_CONF="+conf, "XDG_CONFIG_HOME="+filepath.Join(home, ".config"))
	connSock := link(filepath.Join(home, "conn.sock"))
	add := exec.Command(podman, "system", "connection", "add", "--default", "viacli", connSock)
	add.Env = cliEnv
	if out, err := add.CombinedOutput(); err != nil {
		t.Fatalf("podman system connection add: %v\n%s", err, out)
	}
	if !bytes.Contains(must(os.ReadFile(conf)), []byte("viacli")) {
		t.Fatalf("podman did not write the connection to %s", conf)
	}
	jsonSock := link(filepath.Join(home, "p5.sock"))
	p5 := fmt.Sprintf(`{"Connection":{"Default":"","Connections":{"p5":{"URI":%q,"Identity":"","IsMachine":false}}},"Farm":{}}`, jsonSock)
	if err := os.MkdirAll(filepath.Join(home, ".config", "containers"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(home, ".config", "containers", "podman-connections.json"), []byte(p5), 0o644); err != nil {
		t.Fatal(err)
	}
	machineSock := link(filepath.Join(home, ".local", "share", "containers", "podman", "machine", "qemu", "podman.sock"))

	env := map[string]string{
		"HOME":            home,
		"XDG_RUNTIME_DIR": runtimeDir,
		"XDG_CONFIG_HOME": filepath.Join(home, ".config"),
		"CONTAINERS_CONF": conf,
		"CONTAINER_HOST":  link(filepath.Join(base, "ch.sock")),
		"DOCKER_HOST":     link(filepath.Join(base, "dh.sock")),
	}
	var cliCalls []string
	runCLIFake := func(ctx context.Context, cenv []string, name string, args ...string) ([]byte, error) {
		cliCalls = append(cliCalls, strings.Join(args, " "))
		if len(args) > 1 && args[0] == "machine" {
			// No VM runs here: the machine's inspect output is made up, its socket is real.
			if args[1] == "list" {
				return []byte(`[{"Name":"podman-machine-default*","Default":true,"Running":true}]`), nil
			}
			return []byte(fmt.Sprintf(`[{"Name":"podman-machine-default","State":"running","Rootful":false,"ConnectionInfo":{"PodmanSocket":{"Path":%q},"PodmanPipe":null}}]`, SocketPath(machineSock))), nil
		}
		return runCLI(ctx, cenv, name, args...) // the real podman CLI
	}
	uid := 1000
	discover := func(goos string, look func(string) (string, error)) map[string]Endpoint {
		t.Helper()
		eps, err := Discover(ctx, DiscoverOptions{Getenv: envMap(env), LookPath: look, RunCLI: runCLIFake,
			UID: &uid, GOOS: goos, SystemRoot: sys, Timeout: 10 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		by := map[string]Endpoint{}
		for _, ep := range eps {
			t.Logf("%s: %s", goos, ep.Describe())
			by[ep.Socket] = ep
		}
		return by
	}
	type want struct {
		source string
		uri    string
		vm     bool
	}
	check := func(by map[string]Endpoint, wants []want) {
		t.Helper()
		for _, w := range wants {
			ep, ok := by[w.uri]
			switch {
			case !ok:
				t.Errorf("%s: %s not discovered", w.source, w.uri)
			case ep.Source != w.source || !ep.Reachable || ep.Kind != Podman || ep.Version == "" || ep.VM != w.vm || ep.Remote:
				t.Errorf("%s: %s found as %+v; want source %s, reachable Podman, vm=%v", w.source, w.uri, ep, w.source, w.vm)
			}
		}
	}

	linux := []want{
		{SourceContainerHost, env["CONTAINER_HOST"], false},
		{SourceDockerHost, env["DOCKER_HOST"], false},
		{SourceDockerContext, ctxSock, false},
		{SourceRootless, link(filepath.Join(runtimeDir, "podman", "podman.sock")), false},
		{SourceRootless, link(filepath.Join(runtimeDir, "docker.sock")), false},
		{SourceRootful, link(filepath.Join(sys, "run", "podman", "podman.sock")), false},
		{SourceRootful, link(filepath.Join(sys, "var", "run", "docker.sock")), false},
		{SourcePodmanMachine, machineSock, true},
		{SourceDockerDesktop, link(filepath.Join(home, ".docker", "desktop", "docker.sock")), true},
		{SourceColima, link(filepath.Join(home, ".colima", "default", "docker.sock")), true},
		{SourceColima, link(filepath.Join(home, ".colima", "work", "docker.sock")), true},
		{SourceRancherDesktop, link(filepath.Join(home, ".rd", "docker.sock")), true},
		{SourcePodmanConnection, connSock, false},
		{SourcePodmanConnection, jsonSock, false},
	}
	withCLI := func(name string) (string, error) {
		if name == "podman" {
			return podman, nil
		}
		return "", exec.ErrNotFound
	}
	check(discover("linux", withCLI), linux)
	if !strings.Contains(strings.Join(cliCalls, "\n"), "system connection list --format json") {
		t.Errorf("the podman CLI was not asked for its connections: %q", cliCalls)
	}

	// Without the CLI the connections still come from the files it wrote; the machine,
	// which only the CLI knows, is gone.
	by := discover("linux", noCLI)
	check(by, []want{{SourcePodmanConnection, connSock, false}, {SourcePodmanConnection, jsonSock, false}})
	if _, ok := by[machineSock]; ok {
		t.Error("a Podman machine was listed without the podman CLI")
	}

	darwin := []want{
		{SourceContainerHost, env["CONTAINER_HOST"], true},
		{SourceDockerContext, ctxSock, true},
		{SourcePodmanMachine, machineSock, true},
		{SourceDockerDesktop, link(filepath.Join(home, ".docker", "run", "docker.sock")), true},
		{SourceDockerDesktop, "unix://" + filepath.Join(sys, "var", "run", "docker.sock"), true},
		{SourceColima, "unix://" + filepath.Join(home, ".colima", "default", "docker.sock"), true},
		{SourceOrbStack, link(filepath.Join(home, ".orbstack", "run", "docker.sock")), true},
		{SourceRancherDesktop, "unix://" + filepath.Join(home, ".rd", "docker.sock"), true},
		{SourcePodmanConnection, connSock, true},
	}
	check(discover("darwin", withCLI), darwin)

	// A location whose engine went away is reported so, with the way to start it.
	os.Remove(filepath.Join(home, ".colima", "default", "docker.sock"))
	ep := discover("linux", withCLI)["unix://"+filepath.Join(home, ".colima", "default", "docker.sock")]
	if ep.Reachable || !strings.Contains(ep.Err, "no socket") || ep.Fix != "colima start" {
		t.Errorf("colima without its socket: %+v", ep)
	}
}

// TestDiscoverTCP serves a real Podman API service on loopback TCP: CONTAINER_HOST=tcp://…
// is found, reachable and remote.
func TestDiscoverTCP(t *testing.T) {
	podman := requirePodman(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	cmd := exec.Command(podman, "system", "service", "--time=0", "tcp://"+addr)
	cmd.SysProcAttr = serviceProcAttr()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Signal(stopSignal)
		done := make(chan struct{})
		go func() { cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			cmd.Process.Kill()
			<-done
		}
	})
	uri := "tcp://" + addr
	deadline := time.Now().Add(time.Minute)
	for {
		if _, _, _, err := Ping(context.Background(), uri, time.Second); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("podman service on %s did not answer", uri)
		}
		time.Sleep(50 * time.Millisecond)
	}
	uid := 1000
	eps, err := Discover(context.Background(), DiscoverOptions{
		Getenv: envMap(map[string]string{"CONTAINER_HOST": uri, "HOME": testenv.TempDir(t)}), LookPath: noCLI,
		UID: &uid, GOOS: "linux", SystemRoot: testenv.TempDir(t), Timeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if ep := eps[0]; ep.Socket != uri || ep.Source != SourceContainerHost || !ep.Reachable || ep.Kind != Podman || !ep.Remote || ep.VM {
		t.Fatalf("tcp endpoint: %+v", ep)
	}
	if ep, ok := Pick(eps); !ok || ep.Socket != uri {
		t.Fatalf("Pick = %+v, want the tcp endpoint", ep)
	}
}

// TestDiscoverRootfulSystemSocket checks the real system location: CI runs a rootful Podman
// service at /run/podman/podman.sock.
func TestDiscoverRootfulSystemSocket(t *testing.T) {
	requirePodman(t)
	const sock = "unix:///run/podman/podman.sock"
	if _, _, _, err := Ping(context.Background(), sock, 3*time.Second); err != nil {
		testenv.Missing(t, "no rootful Podman service at %s: %v", sock, err)
	}
	root := 0
	eps, err := Discover(context.Background(), DiscoverOptions{Getenv: envMap(map[string]string{"HOME": testenv.TempDir(t)}),
		LookPath: noCLI, UID: &root, GOOS: "linux", Timeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if ep := eps[0]; ep.Socket != sock || ep.Source != SourceRootful || !ep.Reachable || ep.Kind != Podman || ep.VM || ep.Remote || ep.Rootless {
		t.Fatalf("first endpoint for root: %+v", ep)
	}
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}
