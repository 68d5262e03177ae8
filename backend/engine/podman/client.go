// Package podman is Cubicle's container engine adapter for Podman. It talks to a Podman API
// service (rootful or rootless, 4.x or 5.x) through the Podman v5 Go bindings, creates every
// container hardened (see CreateContainer), and translates the bindings' errors into
// cubicle/backend/fault classes at its boundary.
//
// A *Client is safe for concurrent use. Build with the tags the bindings need:
// remote,exclude_graphdriver_btrfs,btrfs_noversion,exclude_graphdriver_devicemapper,containers_image_openpgp
// (and libsqlite3, so that go-sqlite3, which the bindings pull in, links the system's SQLite).
package podman

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	osuser "os/user"
	"strconv"
	"strings"
	"time"

	"github.com/blang/semver/v4"
	"github.com/containers/common/pkg/ssh"
	"github.com/containers/podman/v5/pkg/bindings"
	"github.com/containers/podman/v5/pkg/bindings/system"
	"github.com/containers/podman/v5/pkg/errorhandling"

	"cubicle/backend/engine"
	"cubicle/backend/fault"
)

// Options tune Connect. The zero value is usable.
type Options struct {
	// Logger receives debug lines about requests; nil discards them.
	Logger *slog.Logger
	// HostLimits overrides the rlimit ceilings containers are clamped to. Nil reads them from
	// this process and, when visible, the service process (engine.ReadHostLimits) for a unix
	// socket; other addresses leave the rlimits to the service.
	HostLimits *engine.HostLimits
	// Identity is the ssh private key for an ssh:// address ("" tries $CONTAINER_SSHKEY,
	// ssh_config and the ssh agent, as podman does).
	Identity string
	// Machine marks an ssh:// address of a Podman machine: podman skips host key checks for
	// those, whose keys change with every machine.
	Machine bool
}

// Client is a connection to one Podman API service.
type Client struct {
	conn    context.Context // the bindings keep their connection in a context; only its values are used
	socket  string
	version semver.Version // the service's API version, used to gate newer features
	limits  engine.HostLimits
	logger  *slog.Logger
}

// Connect opens a client for the Podman service at uri and checks that it answers. uri is a
// unix socket (unix:///run/podman/podman.sock), tcp://host:port, or
// ssh://user@host[:port]/path/to/podman.sock through the bindings' own ssh connection.
// Named pipes (Podman machine on Windows) speak the Docker API: connect them with the docker
// adapter. An unreachable service is fault.ErrUnavailable.
func Connect(ctx context.Context, uri string, opts Options) (*Client, error) {
	op := "connect to podman at " + uri
	switch scheme, _, _ := strings.Cut(uri, "://"); scheme {
	case "unix", "tcp", "ssh":
	case "npipe":
		return nil, fmt.Errorf("%s: %w", op, fault.Invalid("the Podman bindings cannot open named pipes; the pipe speaks the Docker API: use the docker adapter"))
	default:
		return nil, fmt.Errorf("%s: %w", op, fault.Invalid("the address must be unix://, tcp:// or ssh://"))
	}
	conn, err := bindings.NewConnectionWithIdentity(ctx, uri, opts.Identity, opts.Machine)
	if err != nil {
		return nil, engine.Wrap(op, 0, err)
	}
	c := &Client{conn: conn, socket: uri, logger: opts.Logger}
	if c.logger == nil {
		c.logger = slog.New(slog.DiscardHandler)
	}
	if v := bindings.ServiceVersion(conn); v != nil {
		c.version = *v
	}
	if !c.atLeast(4, 0) {
		return nil, fmt.Errorf("%s: %w", op, fault.Unavailable("Podman %s is too old: Cubicle needs Podman 4.0 or newer", c.version))
	}
	switch {
	case opts.HostLimits != nil:
		c.limits = *opts.HostLimits
	case engine.SocketPath(uri) != "":
		c.limits = engine.ReadHostLimits(engine.SocketPath(uri))
	}
	c.logger.Debug("connected to podman", "uri", uri, "api", c.version.String(),
		"nofile", c.limits.NoFile, "nproc", c.limits.NProc)
	return c, nil
}

// PingSSH probes the Podman service at an ssh:// address (ssh://user@host[:port]/socket)
// through the ssh layer Podman's bindings use (containers/common/pkg/ssh: key or agent
// authentication, known_hosts in ~/.ssh, trust on first use) and closes the connection
// afterwards. It is discovery's engine.DiscoverOptions.ProbeSSH for Podman endpoints. It
// never asks for a password: without a key (identity, $CONTAINER_SSHKEY, an ssh agent or a
// password in the address) it fails saying so. The port is tried first within timeout; the
// ssh handshake itself is bounded by that layer (40 s).
func PingSSH(ctx context.Context, uri, identity string, machine bool, timeout time.Duration) (engine.Kind, string, string, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	u, err := url.Parse(uri)
	if err != nil || u.Scheme != "ssh" {
		return "", "", "", fmt.Errorf("%q is not an ssh:// address", uri)
	}
	if u.Path == "" || u.Path == "/" {
		return "", "", "", errors.New("the address names no socket: ssh://user@host/run/user/UID/podman/podman.sock")
	}
	identity = cmp.Or(identity, os.Getenv("CONTAINER_SSHKEY"))
	_, hasPassword := u.User.Password()
	if identity == "" && os.Getenv("SSH_AUTH_SOCK") == "" && !hasPassword {
		return "", "", "", errors.New("no ssh key for this connection: give it one (podman system connection add --identity KEY …) or start an ssh agent")
	}
	port := 22
	if u.Port() != "" {
		if port, err = strconv.Atoi(u.Port()); err != nil {
			return "", "", "", fmt.Errorf("port %q: %w", u.Port(), err)
		}
	}
	var d net.Dialer
	c, err := d.DialContext(ctx, "tcp", net.JoinHostPort(u.Hostname(), strconv.Itoa(port)))
	if err != nil {
		return "", "", "", err
	}
	c.Close()
	user := u.User
	if user == nil {
		cur, err := osuser.Current()
		if err != nil {
			return "", "", "", err
		}
		user = url.User(cur.Username)
	}
	client, err := ssh.Dial(&ssh.ConnectionDialOptions{Host: u.Hostname(), Port: port, User: user, Identity: identity,
		InsecureIsMachineConnection: machine}, ssh.GolangMode)
	if err != nil {
		return "", "", "", err
	}
	defer client.Close()
	return engine.PingDial(ctx, func(context.Context) (net.Conn, error) { return ssh.DialNet(client, "unix", u) }, timeout)
}

// Close releases idle connections. Calls in flight are not interrupted.
func (c *Client) Close() error {
	if cl, err := bindings.GetClient(c.conn); err == nil && cl.Client != nil {
		cl.Client.CloseIdleConnections()
	}
	return nil
}

// Info describes the service.
func (c *Client) Info(ctx context.Context) (engine.Info, error) {
	in, err := system.Info(c.ctx(ctx), nil)
	if err != nil {
		return engine.Info{}, fail("podman info", err)
	}
	info := engine.Info{
		Kind:       engine.Podman,
		Socket:     c.socket,
		APIVersion: c.version.String(),
		Arch:       in.Host.Arch,
		OS:         in.Host.OS,
		Rootless:   in.Host.Security.Rootless,

		OperatingSystem: in.Host.Distribution.Distribution,
	}
	if in.Version.Version != "" {
		info.Version = in.Version.Version
	}
	if in.Version.APIVersion != "" {
		info.APIVersion = in.Version.APIVersion
	}
	return info, nil
}

// ctx returns a context with the caller's deadline and cancellation that also carries the
// bindings' connection.
func (c *Client) ctx(ctx context.Context) context.Context { return callCtx{ctx, c.conn} }

// atLeast reports whether the service's API version is at least major.minor.
func (c *Client) atLeast(major, minor uint64) bool {
	return c.version.GE(semver.Version{Major: major, Minor: minor})
}

// callCtx overlays the caller's context (deadline, cancellation, values) on the connection
// context (values only), so the bindings find their connection while honouring the caller.
type callCtx struct {
	context.Context
	conn context.Context
}

func (c callCtx) Value(key any) any {
	if v := c.Context.Value(key); v != nil {
		return v
	}
	return c.conn.Value(key)
}

// fail translates a bindings error for op into a fault class by the HTTP status the service
// answered (errorhandling.ErrorModel carries it); errors without a status are transport
// failures and mean the service is unavailable.
func fail(op string, err error) error {
	if err == nil {
		return nil
	}
	var em *errorhandling.ErrorModel
	if errors.As(err, &em) {
		code := em.ResponseCode
		if code >= 500 && (strings.Contains(em.Because, "no such container") || strings.Contains(em.Message, "no such container")) {
			// A container removed while the service looked it up (listed a moment ago, then
			// gone): Podman answers 500 "does not exist in database: no such container". It
			// is absent, as a 404 would say.
			code = http.StatusNotFound
		}
		return engine.Wrap(op, code, err)
	}
	var pm *errorhandling.PodConflictErrorModel
	if errors.As(err, &pm) {
		return engine.Wrap(op, pm.Code(), err)
	}
	return engine.Wrap(op, 0, err)
}

// failStream translates an error reported inside a 200 response stream (build, pull, push):
// the service answered but could not do the work.
func failStream(op string, err error) error {
	if err == nil {
		return nil
	}
	var em *errorhandling.ErrorModel
	if errors.As(err, &em) {
		return engine.Wrap(op, em.ResponseCode, err)
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return engine.Wrap(op, 0, err)
	}
	return engine.Wrap(op, 500, err)
}
