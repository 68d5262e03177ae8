package engine

import (
	"cmp"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"net/http"
	"os"
	"strings"
	"syscall"
	"time"
)

// DialFunc opens a connection to an endpoint's API: unix sockets, Windows named pipes and
// plain TCP (TLS, when the endpoint needs it, is layered on top by the caller).
type DialFunc func(ctx context.Context, ep Endpoint) (net.Conn, error)

// Dial connects to a local or tcp:// endpoint; ssh:// endpoints need the engine clients (see
// DiscoverOptions.ProbeSSH).
func Dial(ctx context.Context, ep Endpoint) (net.Conn, error) {
	var d net.Dialer
	switch ep.Scheme() {
	case "unix":
		return d.DialContext(ctx, "unix", SocketPath(ep.Socket))
	case "npipe":
		return dialPipe(ctx, pipePath(ep.Socket))
	case "tcp":
		return d.DialContext(ctx, "tcp", strings.TrimPrefix(ep.Socket, "tcp://"))
	case "ssh":
		return nil, errors.New("ssh endpoints are reached through the engine clients' ssh support")
	}
	return nil, fmt.Errorf("unsupported engine address %q: want unix://, npipe://, tcp:// or ssh://", redactURI(ep.Socket))
}

// versionReply is the part of GET /version both engines answer.
type versionReply struct {
	Version    string `json:"Version"`
	APIVersion string `json:"ApiVersion"`
	Platform   struct {
		Name string `json:"Name"`
	} `json:"Platform"`
	Components []struct {
		Name string `json:"Name"`
	} `json:"Components"`
}

// Ping probes an endpoint URI (unix://, npipe://, plain tcp://) with GET /_ping, and GET
// /version unless Podman answered. It reports the engine that answered (Podman answers the
// Docker API too, and says so in a header), its version and the Docker-compatible API
// version.
func Ping(ctx context.Context, uri string, timeout time.Duration) (kind Kind, version, apiVersion string, err error) {
	r, err := probe(ctx, Endpoint{Socket: normalizeHost(uri)}, Dial, timeout)
	return r.kind, r.version, r.apiVersion, err
}

// probeResult is what an engine said about itself.
type probeResult struct {
	kind                Kind
	version, apiVersion string
	desktop             bool // Docker Desktop said so in /version's Platform.Name
}

// probe asks the engine at ep, connecting with dial (TLS on top when ep.TLS is set).
func probe(ctx context.Context, ep Endpoint, dial DialFunc, timeout time.Duration) (probeResult, error) {
	var r probeResult
	ctx, cancel := context.WithTimeout(ctx, cmp.Or(timeout, time.Second))
	defer cancel()
	scheme := "http"
	var tlsConf *tls.Config
	if ep.TLS != nil {
		c, err := ep.TLS.Config()
		if err != nil {
			return r, err
		}
		tlsConf, scheme = c, "https"
	}
	tr := &http.Transport{
		DialContext:     func(ctx context.Context, _, _ string) (net.Conn, error) { return dial(ctx, ep) },
		TLSClientConfig: tlsConf,
	}
	if tlsConf != nil {
		host := strings.TrimPrefix(ep.Socket, "tcp://")
		if h, _, err := net.SplitHostPort(host); err == nil {
			tlsConf.ServerName = h
		}
		tr.DialTLSContext = func(ctx context.Context, _, _ string) (net.Conn, error) {
			c, err := dial(ctx, ep)
			if err != nil {
				return nil, err
			}
			tc := tls.Client(c, tlsConf)
			if err := tc.HandshakeContext(ctx); err != nil {
				c.Close()
				return nil, err
			}
			return tc, nil
		}
	}
	defer tr.CloseIdleConnections()
	return pingHTTP(ctx, &http.Client{Transport: tr}, scheme+"://engine")
}

// PingDial probes an engine through any connection dial opens (e.g. an ssh connection
// helper's), as Ping does.
func PingDial(ctx context.Context, dial func(ctx context.Context) (net.Conn, error), timeout time.Duration) (kind Kind, version, apiVersion string, err error) {
	r, err := probe(ctx, Endpoint{}, func(ctx context.Context, _ Endpoint) (net.Conn, error) { return dial(ctx) }, timeout)
	return r.kind, r.version, r.apiVersion, err
}

// pingHTTP is the probe proper: GET /_ping, then /version for Docker.
func pingHTTP(ctx context.Context, hc *http.Client, base string) (probeResult, error) {
	var r probeResult
	get := func(p string) (*http.Response, error) {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+p, nil)
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
		return r, err
	}
	resp.Body.Close()
	// Podman names its version in the ping headers; asking /version would make it fork
	// conmon and the OCI runtime, which takes seconds on a busy host.
	if v := resp.Header.Get("Libpod-API-Version"); v != "" {
		return probeResult{kind: Podman, version: v, apiVersion: resp.Header.Get("API-Version")}, nil
	}
	r.kind = Docker
	resp, err = get("/version")
	if err != nil {
		return r, err
	}
	defer resp.Body.Close()
	var v versionReply
	if err := json.NewDecoder(resp.Body).Decode(&v); err != nil {
		return r, fmt.Errorf("GET /version: %w", err)
	}
	for _, c := range v.Components {
		if c.Name == "Podman Engine" {
			r.kind = Podman
		}
	}
	r.version, r.apiVersion = v.Version, v.APIVersion
	r.desktop = strings.Contains(v.Platform.Name, "Docker Desktop")
	return r, nil
}

// Config builds the TLS client configuration from the PEM files.
func (t *TLSFiles) Config() (*tls.Config, error) {
	c := &tls.Config{InsecureSkipVerify: t.SkipVerify, MinVersion: tls.VersionTLS12}
	if t.CAFile != "" {
		pem, err := os.ReadFile(t.CAFile)
		if err != nil {
			return nil, err
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("%s holds no PEM certificate", t.CAFile)
		}
		c.RootCAs = pool
	}
	if t.CertFile != "" && t.KeyFile != "" {
		cert, err := tls.LoadX509KeyPair(t.CertFile, t.KeyFile)
		if err != nil {
			return nil, err
		}
		c.Certificates = []tls.Certificate{cert}
	}
	return c, nil
}

// probeEndpoint fills in reachability, versions and, when unreachable, Err and Fix.
func probeEndpoint(ctx context.Context, ep *Endpoint, opts DiscoverOptions) {
	var (
		r   probeResult
		err error
	)
	if ep.Scheme() == "ssh" {
		if opts.ProbeSSH == nil {
			ep.Err = "not probed: ssh engines are checked by the app and `cubicle doctor`"
			ep.Fix = fixFor(*ep, false)
			return
		}
		r.kind, r.version, r.apiVersion, err = opts.ProbeSSH(ctx, *ep, 5*opts.Timeout)
	} else {
		dial := opts.Dial
		if dial == nil {
			dial = Dial
		}
		r, err = probe(ctx, *ep, dial, opts.Timeout)
	}
	if err == nil {
		ep.Kind, ep.Reachable, ep.Version, ep.APIVersion = r.kind, true, r.version, r.apiVersion
		if r.desktop && !ep.Remote {
			ep.VM = true
		}
		return
	}
	where := redactURI(ep.Socket)
	switch ep.Scheme() {
	case "unix":
		where = SocketPath(ep.Socket)
	case "npipe":
		where = pipePath(ep.Socket)
	}
	switch {
	case errors.Is(err, fs.ErrNotExist) && ep.Scheme() == "npipe":
		ep.Err = "no named pipe " + where
	case errors.Is(err, fs.ErrNotExist):
		ep.Err = "no socket at " + where
	case errors.Is(err, syscall.ECONNREFUSED):
		ep.Err = "nothing is listening on " + where
	case errors.Is(err, fs.ErrPermission):
		ep.Err = "permission denied on " + where
	default:
		ep.Err = err.Error()
	}
	ep.Fix = fixFor(*ep, errors.Is(err, fs.ErrPermission))
}

// fixFor returns what a person does to make ep answer.
func fixFor(ep Endpoint, denied bool) string {
	path := SocketPath(ep.Socket)
	switch {
	case ep.Source == SourceContainerHost || ep.Source == SourceDockerHost:
		return fmt.Sprintf("start the engine at %s, or unset %s to use another", redactURI(ep.Socket), ep.Source)
	case ep.Source == SourceDockerContext:
		return fmt.Sprintf("start the engine of docker context %q, or switch with `docker context use default`", ep.Name)
	case ep.Source == SourcePodmanConnection:
		return fmt.Sprintf("start the engine of Podman connection %q (%s), or remove it: podman system connection remove %s", ep.Name, redactURI(ep.Socket), ep.Name)
	case ep.Source == SourcePodmanMachine:
		return "podman machine start " + ep.Name
	case ep.Source == SourceDockerDesktop:
		return "start Docker Desktop"
	case ep.Source == SourceColima:
		if ep.Name != "" && ep.Name != "default" {
			return "colima start --profile " + ep.Name
		}
		return "colima start"
	case ep.Source == SourceOrbStack:
		return "start OrbStack (orb start)"
	case ep.Source == SourceRancherDesktop:
		return "start Rancher Desktop (with the dockerd (moby) container engine)"
	case ep.Kind == Podman && ep.CLI == "":
		return "install Podman (Debian/Ubuntu: sudo apt-get install podman), or see https://podman.io/docs/installation"
	case ep.Kind == Docker && ep.CLI == "":
		return "install Docker, see https://docs.docker.com/engine/install/"
	case ep.Kind == Docker && denied:
		return "sudo usermod -aG docker $USER, then log out and in again"
	case ep.Kind == Podman && denied:
		return "run Cubicle as the socket's owner, or use the rootless socket: systemctl --user start podman.socket"
	case ep.Kind == Podman && ep.Source == SourceRootful:
		return "sudo systemctl start podman.socket (or: sudo podman system service --time=0 unix://" + path + " &)"
	case ep.Kind == Podman:
		return "systemctl --user start podman.socket (or: podman system service --time=0 unix://" + path + " &)"
	case ep.Source == SourceRootless:
		return "systemctl --user start docker"
	default:
		return "sudo systemctl start docker"
	}
}
