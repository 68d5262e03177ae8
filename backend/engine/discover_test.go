package engine

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"cubicle/internal/testenv"
)

func envMap(m map[string]string) func(string) string { return func(k string) string { return m[k] } }

// noCLI is a LookPath that finds nothing: no podman or docker command-line tool.
func noCLI(string) (string, error) { return "", exec.ErrNotFound }

// listing renders endpoints as "kind:source:uri[:remote][:vm]", with the test's
// directories written as $HOME and $SYS.
func listing(eps []Endpoint, home, sys string) string {
	var s []string
	for _, ep := range eps {
		line := fmt.Sprintf("%s:%s:%s", ep.Kind, ep.Source, ep.Socket)
		if ep.Remote {
			line += ":remote"
		}
		if ep.VM {
			line += ":vm"
		}
		if home != "" {
			line = strings.ReplaceAll(line, filepath.ToSlash(home), "$HOME")
		}
		if sys != "" {
			line = strings.ReplaceAll(line, filepath.ToSlash(sys), "$SYS")
		}
		s = append(s, line)
	}
	return strings.Join(s, "\n")
}

// writeDockerContext writes a docker CLI context the way `docker context create` does, and
// makes it current.
func writeDockerContext(t *testing.T, home, name, host string) {
	t.Helper()
	sum := sha256.Sum256([]byte(name))
	dir := filepath.Join(home, ".docker", "contexts", "meta", hex.EncodeToString(sum[:]))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	meta := fmt.Sprintf(`{"Name":%q,"Metadata":{"Description":"test"},"Endpoints":{"docker":{"Host":%q,"SkipTLSVerify":false}}}`, name, host)
	if err := os.WriteFile(filepath.Join(dir, "meta.json"), []byte(meta), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg := fmt.Sprintf(`{"auths":{},"currentContext":%q}`, name)
	if err := os.WriteFile(filepath.Join(home, ".docker", "config.json"), []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
}

func TestCandidates(t *testing.T) {
	home := testenv.TempDir(t)
	sys := testenv.TempDir(t) // empty: no system containers.conf
	writeDockerContext(t, filepath.Join(home, "ctx"), "colima", "unix://"+filepath.ToSlash(filepath.Join(home, ".colima", "default", "docker.sock")))
	root, user := 0, 1000
	tests := []struct {
		name   string
		env    map[string]string
		uid    *int
		goos   string
		prefer Kind
		want   []string
	}{
		{"linux root", map[string]string{"HOME": home}, &root, "linux", "", []string{
			"podman:rootful:unix://$SYS/run/podman/podman.sock",
			"docker:rootful:unix://$SYS/var/run/docker.sock",
			"docker:docker-desktop:unix://$HOME/.docker/desktop/docker.sock:vm",
			"docker:colima:unix://$HOME/.colima/default/docker.sock:vm",
			"docker:rancher-desktop:unix://$HOME/.rd/docker.sock:vm",
		}},
		{"linux root with a runtime dir", map[string]string{"HOME": home, "XDG_RUNTIME_DIR": "/run/user/0"}, &root, "linux", "", []string{
			"podman:rootful:unix://$SYS/run/podman/podman.sock",
			"podman:rootless:unix:///run/user/0/podman/podman.sock",
			"docker:rootful:unix://$SYS/var/run/docker.sock",
			"docker:rootless:unix:///run/user/0/docker.sock",
			"docker:docker-desktop:unix://$HOME/.docker/desktop/docker.sock:vm",
			"docker:colima:unix://$HOME/.colima/default/docker.sock:vm",
			"docker:rancher-desktop:unix://$HOME/.rd/docker.sock:vm",
		}},
		{"linux user: rootless first, runtime dir from the uid", map[string]string{"HOME": home}, &user, "linux", "", []string{
			"podman:rootless:unix:///run/user/1000/podman/podman.sock",
			"podman:rootful:unix://$SYS/run/podman/podman.sock",
			"docker:rootless:unix:///run/user/1000/docker.sock",
			"docker:rootful:unix://$SYS/var/run/docker.sock",
			"docker:docker-desktop:unix://$HOME/.docker/desktop/docker.sock:vm",
			"docker:colima:unix://$HOME/.colima/default/docker.sock:vm",
			"docker:rancher-desktop:unix://$HOME/.rd/docker.sock:vm",
		}},
		{"prefer docker", map[string]string{"HOME": home, "XDG_RUNTIME_DIR": "/x"}, &user, "linux", Docker, []string{
			"docker:rootless:unix:///x/docker.sock",
			"docker:rootful:unix://$SYS/var/run/docker.sock",
			"docker:docker-desktop:unix://$HOME/.docker/desktop/docker.sock:vm",
			"docker:colima:unix://$HOME/.colima/default/docker.sock:vm",
			"docker:rancher-desktop:unix://$HOME/.rd/docker.sock:vm",
			"podman:rootless:unix:///x/podman/podman.sock",
			"podman:rootful:unix://$SYS/run/podman/podman.sock",
		}},
		{"environment first, an address listed once", map[string]string{"HOME": home,
			"DOCKER_HOST": "unix://" + filepath.ToSlash(sys) + "/run/podman/podman.sock", "CONTAINER_HOST": "/srv/p.sock"}, &root, "linux", "", []string{
			"podman:CONTAINER_HOST:unix:///srv/p.sock",
			"docker:DOCKER_HOST:unix://$SYS/run/podman/podman.sock",
			"docker:rootful:unix://$SYS/var/run/docker.sock",
			"docker:docker-desktop:unix://$HOME/.docker/desktop/docker.sock:vm",
			"docker:colima:unix://$HOME/.colima/default/docker.sock:vm",
			"docker:rancher-desktop:unix://$HOME/.rd/docker.sock:vm",
		}},
		{"remote hosts", map[string]string{"HOME": home, "DOCKER_HOST": "tcp://10.0.0.5:2375",
			"CONTAINER_HOST": "ssh://core@build.example:2222/run/podman/podman.sock"}, &root, "linux", "", []string{
			"podman:CONTAINER_HOST:ssh://core@build.example:2222/run/podman/podman.sock:remote",
			"docker:DOCKER_HOST:tcp://10.0.0.5:2375:remote",
			"podman:rootful:unix://$SYS/run/podman/podman.sock",
			"docker:rootful:unix://$SYS/var/run/docker.sock",
			"docker:docker-desktop:unix://$HOME/.docker/desktop/docker.sock:vm",
			"docker:colima:unix://$HOME/.colima/default/docker.sock:vm",
			"docker:rancher-desktop:unix://$HOME/.rd/docker.sock:vm",
		}},
		{"current docker context, VM by its path", map[string]string{"HOME": home, "DOCKER_CONFIG": filepath.Join(home, "ctx", ".docker")}, &root, "linux", "", []string{
			"docker:docker-context:unix://$HOME/.colima/default/docker.sock:vm",
			"podman:rootful:unix://$SYS/run/podman/podman.sock",
			"docker:rootful:unix://$SYS/var/run/docker.sock",
			"docker:docker-desktop:unix://$HOME/.docker/desktop/docker.sock:vm",
			"docker:rancher-desktop:unix://$HOME/.rd/docker.sock:vm",
		}},
		{"DOCKER_CONTEXT=default means DOCKER_HOST or the sockets", map[string]string{"HOME": home, "DOCKER_CONFIG": filepath.Join(home, "ctx", ".docker"), "DOCKER_CONTEXT": "default"}, &root, "linux", "", []string{
			"podman:rootful:unix://$SYS/run/podman/podman.sock",
			"docker:rootful:unix://$SYS/var/run/docker.sock",
			"docker:docker-desktop:unix://$HOME/.docker/desktop/docker.sock:vm",
			"docker:colima:unix://$HOME/.colima/default/docker.sock:vm",
			"docker:rancher-desktop:unix://$HOME/.rd/docker.sock:vm",
		}},
		{"macOS: every local engine is in a VM", map[string]string{"HOME": home}, &user, "darwin", "", []string{
			"docker:docker-desktop:unix://$HOME/.docker/run/docker.sock:vm",
			"docker:docker-desktop:unix://$SYS/var/run/docker.sock:vm",
			"docker:colima:unix://$HOME/.colima/default/docker.sock:vm",
			"docker:orbstack:unix://$HOME/.orbstack/run/docker.sock:vm",
			"docker:rancher-desktop:unix://$HOME/.rd/docker.sock:vm",
		}},
		{"macOS: DOCKER_HOST socket is VM-backed too", map[string]string{"HOME": home, "DOCKER_HOST": "unix:///tmp/other.sock"}, &user, "darwin", "", []string{
			"docker:DOCKER_HOST:unix:///tmp/other.sock:vm",
			"docker:docker-desktop:unix://$HOME/.docker/run/docker.sock:vm",
			"docker:docker-desktop:unix://$SYS/var/run/docker.sock:vm",
			"docker:colima:unix://$HOME/.colima/default/docker.sock:vm",
			"docker:orbstack:unix://$HOME/.orbstack/run/docker.sock:vm",
			"docker:rancher-desktop:unix://$HOME/.rd/docker.sock:vm",
		}},
		{"Windows: named pipes", map[string]string{"USERPROFILE": home}, &user, "windows", "", []string{
			"podman:podman-machine:npipe:////./pipe/podman-machine-default:vm",
			"docker:docker-desktop:npipe:////./pipe/docker_engine:vm",
			"docker:docker-desktop:npipe:////./pipe/dockerDesktopLinuxEngine:vm",
		}},
		{"Windows: DOCKER_HOST pipe first", map[string]string{"USERPROFILE": home, "DOCKER_HOST": "npipe:////./pipe/my_engine"}, &user, "windows", "", []string{
			"docker:DOCKER_HOST:npipe:////./pipe/my_engine:vm",
			"podman:podman-machine:npipe:////./pipe/podman-machine-default:vm",
			"docker:docker-desktop:npipe:////./pipe/docker_engine:vm",
			"docker:docker-desktop:npipe:////./pipe/dockerDesktopLinuxEngine:vm",
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			opts := DiscoverOptions{Getenv: envMap(tt.env), LookPath: noCLI, UID: tt.uid, GOOS: tt.goos, Prefer: tt.prefer, SystemRoot: sys}
			got := listing(Candidates(context.Background(), opts), home, sys)
			if want := strings.Join(tt.want, "\n"); got != want {
				t.Fatalf("Candidates =\n%s\nwant\n%s", got, want)
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
		{"podman missing", Endpoint{Kind: Podman, Source: SourceRootful}, false, "install Podman"},
		{"podman rootful", Endpoint{Kind: Podman, Source: SourceRootful, CLI: "/usr/bin/podman", Socket: "unix:///run/podman/podman.sock"}, false, "sudo systemctl start podman.socket (or: sudo podman system service --time=0 unix:///run/podman/podman.sock &)"},
		{"podman rootless", Endpoint{Kind: Podman, Source: SourceRootless, CLI: "/usr/bin/podman", Socket: "unix:///run/user/1000/podman/podman.sock"}, false, "systemctl --user start podman.socket"},
		{"docker missing", Endpoint{Kind: Docker, Source: SourceRootful}, false, "install Docker"},
		{"docker denied", Endpoint{Kind: Docker, Source: SourceRootful, CLI: "/usr/bin/docker"}, true, "usermod -aG docker"},
		{"docker rootful", Endpoint{Kind: Docker, Source: SourceRootful, CLI: "/usr/bin/docker"}, false, "sudo systemctl start docker"},
		{"docker rootless", Endpoint{Kind: Docker, Source: SourceRootless, CLI: "/usr/bin/docker"}, false, "systemctl --user start docker"},
		{"DOCKER_HOST", Endpoint{Kind: Docker, Source: SourceDockerHost, Socket: "tcp://h:2375"}, false, "start the engine at tcp://h:2375, or unset DOCKER_HOST"},
		{"docker context", Endpoint{Kind: Docker, Source: SourceDockerContext, Name: "colima"}, false, `docker context "colima"`},
		{"podman connection", Endpoint{Kind: Podman, Source: SourcePodmanConnection, Name: "prod", Socket: "ssh://u:secret@h/run/p.sock"}, false, "podman system connection remove prod"},
		{"podman machine", Endpoint{Kind: Podman, Source: SourcePodmanMachine, Name: "podman-machine-default"}, false, "podman machine start podman-machine-default"},
		{"docker desktop", Endpoint{Kind: Docker, Source: SourceDockerDesktop}, false, "start Docker Desktop"},
		{"colima profile", Endpoint{Kind: Docker, Source: SourceColima, Name: "work"}, false, "colima start --profile work"},
		{"orbstack", Endpoint{Kind: Docker, Source: SourceOrbStack}, false, "OrbStack"},
		{"rancher", Endpoint{Kind: Docker, Source: SourceRancherDesktop}, false, "Rancher Desktop"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := fixFor(tt.ep, tt.denied)
			if !strings.Contains(got, tt.want) {
				t.Fatalf("fixFor = %q, want it to contain %q", got, tt.want)
			}
			if strings.Contains(got, "secret") {
				t.Fatalf("fixFor shows a password: %q", got)
			}
		})
	}
}

// serveUnix serves h on a unix socket in a temporary directory and returns its URI.
func serveUnix(t *testing.T, h http.Handler) string {
	sock := filepath.Join(shortDir(t), "e.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewUnstartedServer(h)
	srv.Listener = ln
	srv.Start()
	t.Cleanup(srv.Close)
	return "unix://" + filepath.ToSlash(sock)
}

// shortDir is a temporary directory with a short path: unix socket paths are limited to
// about 100 bytes.
func shortDir(t *testing.T) string {
	t.Helper()
	return testenv.TempDir(t)
}

// dockerLike and podmanLike answer the probe as Docker Desktop and Podman do.
var (
	dockerLike = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/_ping":
			w.Header().Set("API-Version", "1.47")
			fmt.Fprint(w, "OK")
		case "/version":
			fmt.Fprint(w, `{"Platform":{"Name":"Docker Desktop 4.36.0 (175267)"},"Version":"27.3.1","ApiVersion":"1.47","Components":[{"Name":"Engine"}]}`)
		default:
			http.NotFound(w, r)
		}
	})
	podmanLike = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Libpod-API-Version", "5.2.0")
		w.Header().Set("API-Version", "1.41")
		fmt.Fprint(w, "OK")
	})
)

// TestDiscoverProbe probes a socket per answer kind: a Docker-like and a Podman-like HTTP
// server on unix sockets, a dead socket file and a missing one.
func TestDiscoverProbe(t *testing.T) {
	docker := serveUnix(t, dockerLike)
	podman := serveUnix(t, podmanLike)
	dead := filepath.Join(shortDir(t), "dead.sock")
	ln, err := net.Listen("unix", dead)
	if err != nil {
		t.Fatal(err)
	}
	ln.(*net.UnixListener).SetUnlinkOnClose(false)
	ln.Close()
	runtime := shortDir(t)

	uid := 1000
	opts := DiscoverOptions{
		Getenv: envMap(map[string]string{"CONTAINER_HOST": podman, "DOCKER_HOST": docker, "XDG_RUNTIME_DIR": runtime}),
		LookPath: func(name string) (string, error) {
			if name == "podman" {
				return "/usr/bin/podman-not-run", nil
			}
			return "", exec.ErrNotFound
		},
		RunCLI: func(ctx context.Context, env []string, name string, args ...string) ([]byte, error) {
			return nil, fmt.Errorf("%s %v: not run in this test", name, args)
		},
		UID:        &uid,
		GOOS:       "linux",
		SystemRoot: shortDir(t),
		Timeout:    5 * time.Second,
	}
	eps, err := Discover(context.Background(), opts)
	if err != nil {
		t.Fatal(err)
	}
	by := map[string]Endpoint{}
	for _, ep := range eps {
		by[ep.Socket] = ep
	}
	if ep := by[podman]; !ep.Reachable || ep.Kind != Podman || ep.Version != "5.2.0" || ep.APIVersion != "1.41" || ep.CLI != "/usr/bin/podman-not-run" || ep.VM {
		t.Errorf("podman-like endpoint: %+v", ep)
	}
	if ep := by[docker]; !ep.Reachable || ep.Kind != Docker || ep.Version != "27.3.1" || ep.APIVersion != "1.47" || ep.CLI != "" || !ep.VM {
		t.Errorf("docker-like endpoint (Docker Desktop says so, so VM): %+v", ep)
	}
	rootless := by["unix://"+filepath.ToSlash(filepath.Join(runtime, "podman", "podman.sock"))]
	if rootless.Reachable || !strings.Contains(rootless.Err, "no socket") || !strings.Contains(rootless.Fix, "systemctl --user start podman.socket") {
		t.Errorf("missing rootless podman socket: %+v", rootless)
	}
	if first, ok := Pick(eps); !ok || first.Socket != podman {
		t.Errorf("Pick = %+v, %v; want the CONTAINER_HOST socket", first, ok)
	}

	if _, _, _, err := Ping(context.Background(), "unix://"+dead, time.Second); err == nil {
		t.Error("Ping(dead socket) succeeded")
	}
	ep := Endpoint{Kind: Docker, Socket: "unix://" + dead, Source: SourceRootful, CLI: "/usr/bin/docker"}
	probeEndpoint(context.Background(), &ep, opts.withDefaults())
	if ep.Reachable || !strings.Contains(ep.Err, "nothing is listening") || ep.Fix != "sudo systemctl start docker" {
		t.Errorf("dead docker socket: %+v", ep)
	}
	ep = Endpoint{Kind: Docker, Socket: "ssh://u@h", Source: SourceDockerHost}
	probeEndpoint(context.Background(), &ep, opts.withDefaults())
	if ep.Reachable || !strings.Contains(ep.Err, "not probed") {
		t.Errorf("ssh endpoint without ProbeSSH: %+v", ep)
	}
}

// TestDiscoverNamedPipes goes through the Windows code path on any OS: the candidates of
// GOOS=windows, probed through a dialer that stands in for the named pipes (the real pipe
// dialer is tested on Windows, see pipe_windows_test.go).
func TestDiscoverNamedPipes(t *testing.T) {
	dockerSrv, podmanSrv := httptest.NewServer(dockerLike), httptest.NewServer(podmanLike)
	defer dockerSrv.Close()
	defer podmanSrv.Close()
	docker, podman := "tcp://"+dockerSrv.Listener.Addr().String(), "tcp://"+podmanSrv.Listener.Addr().String()
	var mu sync.Mutex
	dialed := map[string]bool{}
	uid := 1000
	opts := DiscoverOptions{
		Getenv:   envMap(map[string]string{"USERPROFILE": shortDir(t)}),
		LookPath: noCLI,
		UID:      &uid,
		GOOS:     "windows",
		Timeout:  5 * time.Second,
		Dial: func(ctx context.Context, ep Endpoint) (net.Conn, error) {
			mu.Lock()
			dialed[pipePath(ep.Socket)] = true
			mu.Unlock()
			switch pipePath(ep.Socket) {
			case `\\.\pipe\docker_engine`:
				return Dial(ctx, Endpoint{Socket: docker})
			case `\\.\pipe\podman-machine-default`:
				return Dial(ctx, Endpoint{Socket: podman})
			}
			return nil, fmt.Errorf("open %s: %w", pipePath(ep.Socket), os.ErrNotExist)
		},
	}
	eps, err := Discover(context.Background(), opts)
	if err != nil {
		t.Fatal(err)
	}
	got := listing(eps, "", "")
	want := "podman:podman-machine:npipe:////./pipe/podman-machine-default:vm\n" +
		"docker:docker-desktop:npipe:////./pipe/docker_engine:vm\n" +
		"docker:docker-desktop:npipe:////./pipe/dockerDesktopLinuxEngine:vm"
	if got != want {
		t.Fatalf("endpoints =\n%s\nwant\n%s", got, want)
	}
	if !eps[0].Reachable || eps[0].Version != "5.2.0" || !eps[1].Reachable || eps[1].Version != "27.3.1" {
		t.Errorf("pipes with an engine behind them: %+v, %+v", eps[0], eps[1])
	}
	if eps[2].Reachable || !strings.Contains(eps[2].Err, `\\.\pipe\dockerDesktopLinuxEngine`) || eps[2].Fix != "start Docker Desktop" {
		t.Errorf("pipe without an engine: %+v", eps[2])
	}
	if len(dialed) != 3 {
		t.Errorf("dialed %v, want the three pipes", dialed)
	}
	if _, err := Dial(context.Background(), Endpoint{Socket: "npipe:////./pipe/docker_engine"}); err == nil && !isWindows() {
		t.Error("dialing a named pipe outside Windows succeeded")
	}
}

// TestDiscoverTLS probes DOCKER_HOST=tcp://… with DOCKER_TLS_VERIFY and DOCKER_CERT_PATH:
// the engine only talks to clients with a certificate it trusts, as dockerd --tlsverify does.
func TestDiscoverTLS(t *testing.T) {
	certs := testenv.TempDir(t)
	ca, caKey := newCert(t, nil, nil, "test CA", true)
	serverCert, serverKey := newCert(t, ca, caKey, "127.0.0.1", false)
	clientCert, clientKey := newCert(t, ca, caKey, "client", false)
	writePEM(t, filepath.Join(certs, "ca.pem"), "CERTIFICATE", ca.Raw)
	writePEM(t, filepath.Join(certs, "cert.pem"), "CERTIFICATE", clientCert.Raw)
	writeKey(t, filepath.Join(certs, "key.pem"), clientKey)

	pool := x509.NewCertPool()
	pool.AddCert(ca)
	srv := httptest.NewUnstartedServer(dockerLike)
	srv.TLS = &tls.Config{
		Certificates: []tls.Certificate{{Certificate: [][]byte{serverCert.Raw}, PrivateKey: serverKey}},
		ClientCAs:    pool,
		ClientAuth:   tls.RequireAndVerifyClientCert,
	}
	srv.StartTLS()
	defer srv.Close()
	host := "tcp://" + srv.Listener.Addr().String()

	uid := 1000
	discover := func(env map[string]string) Endpoint {
		t.Helper()
		env["HOME"] = certs
		eps, err := Discover(context.Background(), DiscoverOptions{Getenv: envMap(env), LookPath: noCLI, UID: &uid,
			GOOS: "linux", SystemRoot: shortDir(t), Timeout: 5 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		if eps[0].Source != SourceDockerHost {
			t.Fatalf("first endpoint %+v, want DOCKER_HOST", eps[0])
		}
		return eps[0]
	}
	if ep := discover(map[string]string{"DOCKER_HOST": host, "DOCKER_TLS_VERIFY": "1", "DOCKER_CERT_PATH": certs}); !ep.Reachable || !ep.Remote || ep.VM || ep.Version != "27.3.1" {
		t.Errorf("TLS endpoint with the client certificate: %+v", ep)
	}
	if ep := discover(map[string]string{"DOCKER_HOST": host}); ep.Reachable {
		t.Errorf("plain HTTP to a TLS engine answered: %+v", ep)
	}
	other := testenv.TempDir(t)
	writePEM(t, filepath.Join(other, "ca.pem"), "CERTIFICATE", ca.Raw)
	if ep := discover(map[string]string{"DOCKER_HOST": host, "DOCKER_TLS_VERIFY": "1", "DOCKER_CERT_PATH": other}); ep.Reachable || ep.Err == "" {
		t.Errorf("TLS without a client certificate answered: %+v", ep)
	}
}

func isWindows() bool { return filepath.Separator == '\\' }

// newCert makes a certificate signed by parent (self-signed when parent is nil).
func newCert(t *testing.T, parent *x509.Certificate, parentKey *ecdsa.PrivateKey, name string, isCA bool) (*x509.Certificate, *ecdsa.PrivateKey) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(time.Now().UnixNano()),
		Subject:      pkix.Name{CommonName: name},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
		IsCA:         isCA, BasicConstraintsValid: true,
	}
	if ip := net.ParseIP(name); ip != nil {
		tmpl.IPAddresses = []net.IP{ip}
	}
	signer, signerKey := tmpl, key
	if parent != nil {
		signer, signerKey = parent, parentKey
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, signer, &key.PublicKey, signerKey)
	if err != nil {
		t.Fatal(err)
	}
	c, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return c, key
}

func writePEM(t *testing.T, path, typ string, der []byte) {
	t.Helper()
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
}

func writeKey(t *testing.T, path string, key *ecdsa.PrivateKey) {
	t.Helper()
	der, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	writePEM(t, path, "EC PRIVATE KEY", der)
}

// TestDiscoverHost runs discovery on this machine; with CUBICLE_REQUIRE_ALL=1 an engine must
// be found.
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
		testenv.Missing(t, "no engine reachable on this machine")
	}
	if ep.Version == "" || ep.Kind == "" {
		t.Fatalf("picked endpoint lacks kind or version: %+v", ep)
	}
}
