package engine

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// DiscoverOptions tune Discover. The zero value probes the real environment.
type DiscoverOptions struct {
	// Prefer puts endpoints of this kind first (from CUBICLE_ENGINE or a setting); "" keeps
	// the default order, Podman before Docker.
	Prefer Kind
	// Timeout bounds each probe; 0 means one second.
	Timeout time.Duration
	// Getenv and LookPath replace os.Getenv and exec.LookPath in tests; UID replaces
	// os.Getuid when non-nil.
	Getenv   func(string) string
	LookPath func(string) (string, error)
	UID      *int
}

// Endpoint is one candidate engine socket and what probing it found.
type Endpoint struct {
	Kind     Kind   // the engine that answered; the expected one when nothing answered
	Socket   string // unix:///path
	Source   string // where the candidate came from: "CONTAINER_HOST", "DOCKER_HOST", "rootless", "rootful"
	Rootless bool
	// CLI is the path of the kind's command-line tool ("" when not installed). Cubicle can
	// start its own Podman service when the podman CLI is present (StartPodmanService).
	CLI        string
	Reachable  bool
	Version    string // server version, e.g. "4.3.1"
	APIVersion string // Docker-compatible API version the socket speaks, e.g. "1.41"
	Err        string // why it is not reachable, for people
	Fix        string // the command that would fix it, for people
}

// ParseKind reads an engine name as given in CUBICLE_ENGINE or a setting ("" is allowed and
// means no preference).
func ParseKind(s string) (Kind, error) {
	switch k := Kind(strings.ToLower(strings.TrimSpace(s))); k {
	case "", Podman, Docker:
		return k, nil
	default:
		return "", fmt.Errorf("engine %q: want podman or docker", s)
	}
}

// Discover lists the engine sockets of this machine in order of preference and probes each
// over HTTP (_ping, then version) with a short timeout, in parallel. It never fails because
// an engine is missing: each Endpoint says what was found and how to fix it. The first
// Reachable endpoint (see Pick) is the one to use.
func Discover(ctx context.Context, opts DiscoverOptions) ([]Endpoint, error) {
	getenv, look := opts.Getenv, opts.LookPath
	if getenv == nil {
		getenv = os.Getenv
	}
	if look == nil {
		look = exec.LookPath
	}
	uid := os.Getuid()
	if opts.UID != nil {
		uid = *opts.UID
	}
	timeout := cmp.Or(opts.Timeout, time.Second)
	eps := Candidates(getenv, uid, opts.Prefer)
	clis := map[Kind]string{}
	for _, k := range []Kind{Podman, Docker} {
		if p, err := look(string(k)); err == nil {
			clis[k] = p
		}
	}
	var wg sync.WaitGroup
	for i := range eps {
		eps[i].CLI = clis[eps[i].Kind]
		wg.Add(1)
		go func(ep *Endpoint) {
			defer wg.Done()
			probeEndpoint(ctx, ep, timeout)
		}(&eps[i])
	}
	wg.Wait()
	return eps, ctx.Err()
}

// Pick returns the first reachable endpoint.
func Pick(eps []Endpoint) (Endpoint, bool) {
	for _, ep := range eps {
		if ep.Reachable {
			return ep, true
		}
	}
	return Endpoint{}, false
}

// Candidates lists the sockets to probe, without probing: the socket named by CONTAINER_HOST
// (Podman) or DOCKER_HOST (Docker) when it is a unix URI, then the rootless and rootful
// default sockets (rootful first for root), Podman before Docker unless prefer says otherwise.
// Duplicate paths are listed once.
func Candidates(getenv func(string) string, uid int, prefer Kind) []Endpoint {
	runtimeDir := getenv("XDG_RUNTIME_DIR")
	if runtimeDir == "" && uid != 0 {
		runtimeDir = "/run/user/" + strconv.Itoa(uid)
	}
	var podman, docker []Endpoint
	if p, ok := unixPath(getenv("CONTAINER_HOST")); ok {
		podman = append(podman, Endpoint{Kind: Podman, Socket: "unix://" + p, Source: "CONTAINER_HOST", Rootless: uid != 0})
	}
	if p, ok := unixPath(getenv("DOCKER_HOST")); ok {
		docker = append(docker, Endpoint{Kind: Docker, Socket: "unix://" + p, Source: "DOCKER_HOST", Rootless: uid != 0})
	}
	rootful := []Endpoint{
		{Kind: Podman, Socket: "unix:///run/podman/podman.sock", Source: "rootful"},
		{Kind: Docker, Socket: "unix:///var/run/docker.sock", Source: "rootful"},
	}
	var rootless []Endpoint
	if runtimeDir != "" {
		rootless = []Endpoint{
			{Kind: Podman, Socket: "unix://" + filepath.Join(runtimeDir, "podman/podman.sock"), Source: "rootless", Rootless: true},
			{Kind: Docker, Socket: "unix://" + filepath.Join(runtimeDir, "docker.sock"), Source: "rootless", Rootless: true},
		}
	}
	defaults := append(rootless, rootful...)
	if uid == 0 {
		defaults = append(rootful, rootless...)
	}
	for _, ep := range defaults {
		if ep.Kind == Podman {
			podman = append(podman, ep)
		} else {
			docker = append(docker, ep)
		}
	}
	all := append(podman, docker...)
	if prefer == Docker {
		all = append(docker, podman...)
	}
	seen := map[string]bool{}
	out := all[:0:0]
	for _, ep := range all {
		if !seen[ep.Socket] {
			seen[ep.Socket] = true
			out = append(out, ep)
		}
	}
	return out
}

// unixPath returns the path of a unix:// URI (or a bare absolute path).
func unixPath(uri string) (string, bool) {
	switch {
	case strings.HasPrefix(uri, "unix://"):
		p := strings.TrimPrefix(uri, "unix://")
		return p, strings.HasPrefix(p, "/")
	case strings.HasPrefix(uri, "/"):
		return uri, true
	}
	return "", false
}

// SocketPath returns the file system path of a unix socket URI.
func SocketPath(uri string) string {
	p, _ := unixPath(uri)
	return p
}

// versionReply is the part of GET /version both engines answer.
type versionReply struct {
	Version    string `json:"Version"`
	APIVersion string `json:"ApiVersion"`
	Components []struct {
		Name string `json:"Name"`
	} `json:"Components"`
}

// Ping probes a unix socket URI with GET /_ping (and GET /version for Docker). It reports
// the engine that answered (Podman answers the Docker API too, and says so in a header), its
// version and the Docker-compatible API version.
func Ping(ctx context.Context, socketURI string, timeout time.Duration) (kind Kind, version, apiVersion string, err error) {
	path := SocketPath(socketURI)
	if path == "" {
		return "", "", "", fmt.Errorf("%q is not a unix socket URI", socketURI)
	}
	ctx, cancel := context.WithTimeout(ctx, cmp.Or(timeout, time.Second))
	defer cancel()
	tr := &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "unix", path)
	}}
	defer tr.CloseIdleConnections()
	hc := &http.Client{Transport: tr}
	get := func(p string) (*http.Response, error) {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://engine"+p, nil)
		if err != nil {
			return nil, err
		}
		resp, err := hc.Do(req)
		if err != nil {
			return nil, err
		}
		if resp.StatusCode != http.StatusOK {
			resp.Body.Close()
			return nil, fmt.Errorf("GET %s: HTTP %d", p, resp.StatusCode)
		}
		return resp, nil
	}
	resp, err := get("/_ping")
	if err != nil {
		return "", "", "", err
	}
	resp.Body.Close()
	// Podman names its version in the ping headers; asking /version would make it fork
	// conmon and the OCI runtime, which takes seconds on a busy host.
	if v := resp.Header.Get("Libpod-API-Version"); v != "" {
		return Podman, v, resp.Header.Get("API-Version"), nil
	}
	resp, err = get("/version")
	if err != nil {
		return Docker, "", "", err
	}
	defer resp.Body.Close()
	var v versionReply
	if err := json.NewDecoder(resp.Body).Decode(&v); err != nil {
		return Docker, "", "", fmt.Errorf("GET /version: %w", err)
	}
	kind = Docker
	for _, c := range v.Components {
		if c.Name == "Podman Engine" {
			kind = Podman
		}
	}
	return kind, v.Version, v.APIVersion, nil
}

// probeEndpoint fills in reachability, versions and, when unreachable, Err and Fix.
func probeEndpoint(ctx context.Context, ep *Endpoint, timeout time.Duration) {
	kind, version, api, err := Ping(ctx, ep.Socket, timeout)
	if err == nil {
		ep.Kind, ep.Reachable, ep.Version, ep.APIVersion = kind, true, version, api
		return
	}
	path := SocketPath(ep.Socket)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		ep.Err = "no socket at " + path
	case errors.Is(err, syscall.ECONNREFUSED):
		ep.Err = "nothing is listening on " + path
	case errors.Is(err, fs.ErrPermission):
		ep.Err = "permission denied on " + path
	default:
		ep.Err = err.Error()
	}
	ep.Fix = fixFor(*ep, errors.Is(err, fs.ErrPermission))
}

// fixFor returns the command a person runs to make ep answer.
func fixFor(ep Endpoint, denied bool) string {
	path := SocketPath(ep.Socket)
	switch {
	case ep.Kind == Podman && ep.CLI == "":
		return "install Podman (Debian/Ubuntu: sudo apt-get install podman), or see https://podman.io/docs/installation"
	case ep.Kind == Docker && ep.CLI == "":
		return "install Docker, see https://docs.docker.com/engine/install/"
	case ep.Kind == Docker && denied:
		return "sudo usermod -aG docker $USER, then log out and in again"
	case ep.Kind == Podman && denied:
		return "run Cubicle as the socket's owner, or use the rootless socket: systemctl --user start podman.socket"
	case ep.Kind == Podman && ep.Source == "rootful":
		return "sudo systemctl start podman.socket (or: sudo podman system service --time=0 unix://" + path + " &)"
	case ep.Kind == Podman:
		return "systemctl --user start podman.socket (or: podman system service --time=0 unix://" + path + " &)"
	case ep.Source == "rootless":
		return "systemctl --user start docker"
	default:
		return "sudo systemctl start docker"
	}
}

// Describe is a one-line summary of an endpoint for logs and `cubicle doctor`.
func (ep Endpoint) Describe() string {
	if ep.Reachable {
		return fmt.Sprintf("%s %s at %s (API %s)", ep.Kind, ep.Version, ep.Socket, ep.APIVersion)
	}
	return fmt.Sprintf("%s at %s: %s; fix: %s", ep.Kind, ep.Socket, ep.Err, ep.Fix)
}
