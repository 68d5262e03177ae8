// Package docker is Cubicle's container engine adapter for the Docker Engine API. It
// negotiates the API version with the daemon (so it also drives Podman's Docker-compatible
// service), creates every container hardened (see CreateContainer), and translates client
// errors into cubicle/backend/fault classes at its boundary.
//
// A *Client is safe for concurrent use.
package docker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"strings"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/docker/cli/cli/connhelper"
	"github.com/docker/docker/client"

	"cubicle/backend/engine"
	"cubicle/backend/fault"
)

// Options tune Connect. The zero value is usable.
type Options struct {
	// Logger receives debug lines; nil discards them.
	Logger *slog.Logger
	// HostLimits overrides the rlimit ceilings containers are clamped to. Nil reads them from
	// this process and, when visible, the daemon process (engine.ReadHostLimits) for a
	// unix socket; other addresses leave the rlimits to the daemon.
	HostLimits *engine.HostLimits
	// TLS are the client certificates a tcp:// daemon wants (a docker context's, or
	// DOCKER_CERT_PATH's); nil talks plain HTTP.
	TLS *engine.TLSFiles
}

// Client is a connection to one Docker Engine API endpoint.
type Client struct {
	api    *client.Client
	socket string
	limits engine.HostLimits
	logger *slog.Logger
	// podman is true when Podman's Docker-compatible service answers rather than Docker.
	// Podman then needs tlsVerify=false on pulls and pushes from insecure registries, a
	// parameter the Docker client cannot send.
	podman bool
}

// Connect opens a client for the daemon at uri, negotiates the API version and checks that
// it answers. uri is a unix socket (unix:///var/run/docker.sock), a Windows named pipe
// (npipe:////./pipe/docker_engine), tcp://host:port (TLS with opts.TLS) or ssh://user@host,
// reached like the docker CLI does: `ssh … docker system dial-stdio` on the remote host
// (docker's connection helper). An unreachable daemon is fault.ErrUnavailable.
func Connect(ctx context.Context, uri string, opts Options) (*Client, error) {
	op := "connect to docker at " + uri
	copts, err := clientOptions(uri, opts.TLS)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", op, err)
	}
	api, err := client.NewClientWithOpts(copts...)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", op, fault.Invalid("%v", err))
	}
	if _, err := api.Ping(ctx); err != nil {
		api.Close()
		return nil, fail(op, err)
	}
	c := &Client{api: api, socket: uri, logger: opts.Logger}
	if c.logger == nil {
		c.logger = slog.New(slog.DiscardHandler)
	}
	if path := engine.SocketPath(uri); path != "" {
		// Podman says so in the ping headers, cheaper than /version on Podman.
		if kind, _, _, err := engine.Ping(ctx, uri, 5*time.Second); err == nil && kind == engine.Podman {
			c.podman = true
		}
	} else if v, err := api.ServerVersion(ctx); err == nil {
		for _, comp := range v.Components {
			if comp.Name == "Podman Engine" {
				c.podman = true
			}
		}
	}
	switch {
	case opts.HostLimits != nil:
		c.limits = *opts.HostLimits
	case engine.SocketPath(uri) != "":
		c.limits = engine.ReadHostLimits(engine.SocketPath(uri))
	}
	c.logger.Debug("connected to docker", "uri", uri, "api", api.ClientVersion(), "podman", c.podman,
		"nofile", c.limits.NoFile, "nproc", c.limits.NProc)
	return c, nil
}

// clientOptions are the Docker client options that reach uri.
func clientOptions(uri string, tlsFiles *engine.TLSFiles) ([]client.Opt, error) {
	opts := []client.Opt{client.WithAPIVersionNegotiation()}
	switch scheme, _, _ := strings.Cut(uri, "://"); scheme {
	case "unix", "npipe":
		return append(opts, client.WithHost(uri)), nil
	case "tcp":
		opts = append(opts, client.WithHost(uri))
		if tlsFiles != nil {
			conf, err := tlsFiles.Config()
			if err != nil {
				return nil, fault.Invalid("TLS files: %v", err)
			}
			opts = append(opts, client.WithScheme("https"),
				client.WithHTTPClient(&http.Client{Transport: &http.Transport{TLSClientConfig: conf, Proxy: http.ProxyFromEnvironment}}))
		}
		return opts, nil
	case "ssh":
		helper, err := connhelper.GetConnectionHelper(uri)
		if err != nil {
			return nil, fault.Invalid("%v", err)
		}
		return append(opts, client.WithHost(helper.Host), client.WithDialContext(helper.Dialer)), nil
	}
	return nil, fault.Invalid("the address must be unix://, npipe://, tcp:// or ssh://")
}

// PingSSH probes the Docker daemon at an ssh:// address through docker's connection helper
// (discovery's engine.DiscoverOptions.ProbeSSH for Docker endpoints).
func PingSSH(ctx context.Context, uri string, timeout time.Duration) (engine.Kind, string, string, error) {
	helper, err := connhelper.GetConnectionHelper(uri)
	if err != nil {
		return "", "", "", err
	}
	return engine.PingDial(ctx, func(ctx context.Context) (net.Conn, error) { return helper.Dialer(ctx, "tcp", "") }, timeout)
}

// Close releases the client's connections.
func (c *Client) Close() error { return c.api.Close() }

// Info describes the daemon.
func (c *Client) Info(ctx context.Context) (engine.Info, error) {
	v, err := c.api.ServerVersion(ctx)
	if err != nil {
		return engine.Info{}, fail("docker version", err)
	}
	in, err := c.api.Info(ctx)
	if err != nil {
		return engine.Info{}, fail("docker info", err)
	}
	info := engine.Info{
		Kind:       engine.Docker,
		Socket:     c.socket,
		Version:    v.Version,
		APIVersion: c.api.ClientVersion(),
		Arch:       v.Arch,
		OS:         v.Os,

		OperatingSystem: in.OperatingSystem,
	}
	for _, o := range in.SecurityOptions {
		if o == "name=rootless" {
			info.Rootless = true
		}
	}
	return info, nil
}

// fail translates a Docker client error for op. The client classifies every HTTP answer
// with containerd's errdefs; those classes map onto fault classes here.
func fail(op string, err error) error {
	return engine.Wrap(op, statusOf(err), err)
}

// statusOf recovers the HTTP status class of a client error (0: no answer at all).
func statusOf(err error) int {
	var se *statusError
	switch {
	case err == nil:
		return 0
	case errors.As(err, &se):
		return se.status
	case client.IsErrConnectionFailed(err):
		return 0
	case cerrdefs.IsNotFound(err):
		return http.StatusNotFound
	case cerrdefs.IsConflict(err), cerrdefs.IsAlreadyExists(err):
		return http.StatusConflict
	case cerrdefs.IsNotModified(err):
		return http.StatusNotModified
	case cerrdefs.IsInvalidArgument(err):
		return http.StatusBadRequest
	case cerrdefs.IsUnauthorized(err):
		return http.StatusUnauthorized
	case cerrdefs.IsPermissionDenied(err):
		return http.StatusForbidden
	case cerrdefs.IsUnavailable(err), cerrdefs.IsInternal(err), cerrdefs.IsUnknown(err), cerrdefs.IsNotImplemented(err):
		return http.StatusInternalServerError
	}
	return 0
}

// streamMessage is one line of the daemon's JSON progress streams (build, pull, push, import).
type streamMessage struct {
	Stream      string          `json:"stream"`
	Status      string          `json:"status"`
	ID          string          `json:"id"`
	Progress    string          `json:"progress"`
	Error       *streamError    `json:"errorDetail"`
	ErrorString string          `json:"error"`
	Aux         json.RawMessage `json:"aux"`
}

type streamError struct {
	Message string `json:"message"`
}

// readStream copies a progress stream to w (status lines only, no progress bars) and calls
// aux for every aux payload. An error line ends it with that error.
func readStream(r io.Reader, w io.Writer, aux func(json.RawMessage)) error {
	if w == nil {
		w = io.Discard
	}
	dec := json.NewDecoder(r)
	for {
		var m streamMessage
		if err := dec.Decode(&m); err != nil {
			if errors.Is(err, io.EOF) {
				return nil
			}
			return err
		}
		switch {
		case m.Error != nil:
			return errors.New(m.Error.Message)
		case m.ErrorString != "":
			return errors.New(m.ErrorString)
		case m.Stream != "":
			io.WriteString(w, m.Stream)
		case m.Status != "" && m.Progress == "":
			if m.ID != "" {
				fmt.Fprintf(w, "%s: %s\n", m.ID, m.Status)
			} else {
				fmt.Fprintln(w, m.Status)
			}
		}
		if len(m.Aux) > 0 && aux != nil {
			aux(m.Aux)
		}
	}
}

// rawStream sends a request the Docker client has no option for (used for Podman's
// tlsVerify parameter) and returns the body of a successful answer.
func (c *Client) rawStream(ctx context.Context, method, path string, query url.Values, header http.Header) (io.ReadCloser, error) {
	u := "http://engine/v" + c.api.ClientVersion() + path + "?" + query.Encode()
	req, err := http.NewRequestWithContext(ctx, method, u, nil)
	if err != nil {
		return nil, err
	}
	for k, v := range header {
		req.Header[k] = v
	}
	resp, err := c.api.HTTPClient().Do(req)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode/100 == 2 {
		return resp.Body, nil
	}
	defer resp.Body.Close()
	var m struct{ Message string }
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	if json.Unmarshal(b, &m) != nil || m.Message == "" {
		m.Message = strings.TrimSpace(string(b))
	}
	return nil, &statusError{status: resp.StatusCode, msg: m.Message}
}

// statusError is an HTTP failure from rawStream.
type statusError struct {
	status int
	msg    string
}

func (e *statusError) Error() string { return fmt.Sprintf("HTTP %d: %s", e.status, e.msg) }
