package engine

import (
	"cmp"
	"context"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"strings"
	"sync"
	"time"
)

// Where a candidate endpoint came from (Endpoint.Source).
const (
	SourceContainerHost    = "CONTAINER_HOST"    // $CONTAINER_HOST (Podman's remote URI)
	SourceDockerHost       = "DOCKER_HOST"       // $DOCKER_HOST
	SourceDockerContext    = "docker-context"    // the docker CLI's current context (~/.docker)
	SourcePodmanConnection = "podman-connection" // podman system connection list, containers.conf, podman-connections.json
	SourcePodmanMachine    = "podman-machine"    // the API socket or pipe of a Podman machine
	SourceDockerDesktop    = "docker-desktop"    // Docker Desktop's sockets and named pipes
	SourceColima           = "colima"            // ~/.colima/<profile>/docker.sock
	SourceOrbStack         = "orbstack"          // ~/.orbstack/run/docker.sock
	SourceRancherDesktop   = "rancher-desktop"   // ~/.rd/docker.sock
	SourceRootless         = "rootless"          // $XDG_RUNTIME_DIR/podman/podman.sock, $XDG_RUNTIME_DIR/docker.sock
	SourceRootful          = "rootful"           // /run/podman/podman.sock, /var/run/docker.sock (Linux)
	SourceOwned            = "cubicle"           // a Podman service Cubicle started itself (StartPodmanService)
)

// DiscoverOptions tune Discover. The zero value probes the real environment.
type DiscoverOptions struct {
	// Prefer puts endpoints of this kind first (from CUBICLE_ENGINE or a setting); "" keeps
	// the default order (see Candidates).
	Prefer Kind
	// Timeout bounds each probe; 0 means one second (ssh endpoints get five times as long).
	Timeout time.Duration
	// ProbeSSH checks an ssh:// endpoint through the engine clients' own ssh support
	// (docker's connection helper, the Podman bindings' ssh connection), which this package
	// does not link; engineconn.DiscoverEngines provides it. Nil leaves ssh endpoints unprobed
	// (not reachable, with Err saying so).
	ProbeSSH func(ctx context.Context, ep Endpoint, timeout time.Duration) (kind Kind, version, apiVersion string, err error)

	// The rest replace the real environment in tests.

	// Getenv replaces os.Getenv. The podman CLI that discovery runs sees the same values for
	// the variables that locate its configuration (HOME, XDG_*, CONTAINERS_CONF, …).
	Getenv func(string) string
	// LookPath replaces exec.LookPath.
	LookPath func(string) (string, error)
	// RunCLI replaces running a command-line tool (podman) and reading its output; env is
	// the environment it must see (nil: this process's).
	RunCLI func(ctx context.Context, env []string, name string, args ...string) ([]byte, error)
	// UID replaces os.Getuid when non-nil.
	UID *int
	// GOOS replaces runtime.GOOS: which platform's candidates to list.
	GOOS string
	// SystemRoot is prepended to the system-wide socket paths (/run/podman/podman.sock,
	// /var/run/docker.sock) so that tests can serve them from a temporary directory.
	SystemRoot string
	// Dial replaces how probes connect to a unix, npipe or tcp endpoint (tests use it for
	// named pipes on other OSes); nil dials for real.
	Dial DialFunc

	defaulted bool // withDefaults ran
	customEnv bool // Getenv was given: CLIs run see its values
}

// Endpoint is one candidate engine and what probing it found.
type Endpoint struct {
	Kind   Kind   `json:"kind"`           // the engine that answered; the expected one when nothing answered
	Socket string `json:"socket"`         // URI: unix:///path, npipe:////./pipe/name, tcp://host:port, ssh://user@host[:port]/path
	Source string `json:"source"`         // where the candidate came from: one of the Source* constants
	Name   string `json:"name,omitempty"` // the docker context, Podman connection or machine it came from

	// Remote is true for an engine reached over the network (tcp://, ssh://): it cannot see
	// this machine's files, so nothing can be bind-mounted from here.
	Remote bool `json:"remote"`
	// VM is true for an engine that runs its containers in a Linux VM on this machine
	// (Docker Desktop, Podman machine, Colima, OrbStack, Rancher Desktop; every local engine
	// on macOS and Windows): a unix socket created in a bind mount is not reachable from here.
	VM       bool `json:"vm"`
	Rootless bool `json:"rootless"`

	// Identity is the ssh private key of an ssh:// Podman connection.
	Identity string `json:"-"`
	// TLS holds the client certificates of a tcp:// endpoint that needs them.
	TLS *TLSFiles `json:"-"`

	// CLI is the path of the kind's command-line tool ("" when not installed). Cubicle can
	// start its own Podman service when the podman CLI is present (StartPodmanService).
	CLI        string `json:"cli,omitempty"`
	Reachable  bool   `json:"reachable"`
	Version    string `json:"version,omitempty"`    // server version, e.g. "4.3.1"
	APIVersion string `json:"apiVersion,omitempty"` // Docker-compatible API version, e.g. "1.41"
	Err        string `json:"error,omitempty"`      // why it is not reachable, for people
	Fix        string `json:"fix,omitempty"`        // what would fix it, for people
}

// TLSFiles are the PEM files of a TLS client (docker's ca.pem, cert.pem, key.pem).
type TLSFiles struct {
	CAFile, CertFile, KeyFile string
	SkipVerify                bool
}

// Scheme returns the endpoint URI's scheme: "unix", "npipe", "tcp" or "ssh".
func (ep Endpoint) Scheme() string {
	s, _, _ := strings.Cut(ep.Socket, "://")
	return s
}

// SSHClient names the engine client whose ssh support reaches an ssh:// endpoint: Docker's
// (`ssh … docker system dial-stdio`) for addresses from DOCKER_HOST or a docker context,
// which name a Docker host, whatever engine answers there; Podman's (a unix-socket channel
// to the socket in the address's path) for the rest.
func (ep Endpoint) SSHClient() Kind {
	if ep.Source == SourceDockerHost || ep.Source == SourceDockerContext {
		return Docker
	}
	return Podman
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

// Discover lists the engines this machine can reach, in order of preference (see
// Candidates), and probes each in parallel (_ping, then version) with a short timeout. It
// never fails because an engine is missing: each Endpoint says what was found and how to fix
// it. The first Reachable endpoint (see Pick) is the one to use.
func Discover(ctx context.Context, opts DiscoverOptions) ([]Endpoint, error) {
	opts = opts.withDefaults()
	eps := Candidates(ctx, opts)
	clis := map[Kind]string{}
	for _, k := range []Kind{Podman, Docker} {
		if p, err := opts.LookPath(string(k)); err == nil {
			clis[k] = p
		}
	}
	var wg sync.WaitGroup
	for i := range eps {
		eps[i].CLI = clis[eps[i].Kind]
		wg.Add(1)
		go func(ep *Endpoint) {
			defer wg.Done()
			probeEndpoint(ctx, ep, opts)
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

// withDefaults fills in the real environment for unset fields.
func (o DiscoverOptions) withDefaults() DiscoverOptions {
	if o.defaulted {
		return o
	}
	o.defaulted = true
	o.customEnv = o.Getenv != nil
	if o.Getenv == nil {
		o.Getenv = os.Getenv
	}
	if o.RunCLI == nil {
		o.RunCLI = runCLI
	}
	if o.LookPath == nil {
		o.LookPath = exec.LookPath
	}
	if o.UID == nil {
		uid := os.Getuid()
		o.UID = &uid
	}
	o.GOOS = cmp.Or(o.GOOS, runtime.GOOS)
	o.Timeout = cmp.Or(o.Timeout, time.Second)
	return o
}

// Candidates lists the endpoints to probe, without probing, in this order:
//
//  1. CONTAINER_HOST, then DOCKER_HOST: what the user set for this shell;
//  2. the docker CLI's current context, when it is not "default";
//  3. the native Linux sockets: rootless first for a user, rootful first for root;
//  4. the engines of desktop apps, which run their containers in a VM: Podman machine,
//     Docker Desktop, Colima, OrbStack, Rancher Desktop;
//  5. Podman's connections (the default one first), which also cover remote Podman hosts.
//
// Within a step Podman comes before Docker. With opts.Prefer, every endpoint of that kind
// comes first, in the same order. An address listed twice keeps its first place.
func Candidates(ctx context.Context, opts DiscoverOptions) []Endpoint {
	opts = opts.withDefaults()
	e := newEnviron(opts)
	var all []Endpoint
	all = append(all, e.fromEnv()...)
	all = append(all, e.dockerContext()...)
	all = append(all, e.nativeSockets()...)
	all = append(all, e.vmSockets(ctx)...)
	all = append(all, e.podmanConnections(ctx)...)
	if opts.Prefer != "" {
		slices.SortStableFunc(all, func(a, b Endpoint) int {
			return boolRank(a.Kind != opts.Prefer) - boolRank(b.Kind != opts.Prefer)
		})
	}
	seen := map[string]bool{}
	out := all[:0:0]
	for _, ep := range all {
		if ep.Socket == "" || seen[ep.Socket] {
			continue
		}
		seen[ep.Socket] = true
		ep.Remote = ep.Scheme() == "tcp" || ep.Scheme() == "ssh"
		if !ep.Remote && (opts.GOOS != "linux" || isVMSource(ep.Source) || e.vmSourceOf(ep.Socket) != "") {
			ep.VM = true
		}
		out = append(out, ep)
	}
	return out
}

// isVMSource reports whether a source's engines run containers in a Linux VM on this
// machine.
func isVMSource(source string) bool {
	switch source {
	case SourcePodmanMachine, SourceDockerDesktop, SourceColima, SourceOrbStack, SourceRancherDesktop:
		return true
	}
	return false
}

func boolRank(b bool) int {
	if b {
		return 1
	}
	return 0
}

// unixPath returns the path of a unix:// URI (or a bare absolute path).
func unixPath(uri string) (string, bool) {
	switch {
	case strings.HasPrefix(uri, "unix://"):
		p := strings.TrimPrefix(uri, "unix://")
		return p, strings.HasPrefix(p, "/") || isWindowsAbs(p)
	case strings.HasPrefix(uri, "/"):
		return uri, true
	}
	return "", false
}

// isWindowsAbs reports whether p is a Windows drive path (C:\… or C:/…).
func isWindowsAbs(p string) bool {
	return len(p) >= 3 && p[1] == ':' && (p[2] == '\\' || p[2] == '/') &&
		('a' <= p[0]|0x20 && p[0]|0x20 <= 'z')
}

// SocketPath returns the file system path of a unix socket URI ("" for other schemes).
func SocketPath(uri string) string {
	p, _ := unixPath(uri)
	return p
}

// pipeURI turns a Windows pipe path (\\.\pipe\name) into a docker-style npipe URI
// (npipe:////./pipe/name).
func pipeURI(path string) string {
	return "npipe://" + strings.ReplaceAll(path, `\`, "/")
}

// pipePath turns an npipe URI back into the pipe path Windows opens (\\.\pipe\name).
func pipePath(uri string) string {
	p := strings.TrimPrefix(uri, "npipe://")
	return strings.ReplaceAll(p, "/", `\`)
}

// redactURI hides a password in a URI for messages.
func redactURI(uri string) string {
	u, err := url.Parse(uri)
	if err != nil || u.User == nil {
		return uri
	}
	if _, ok := u.User.Password(); ok {
		u.User = url.UserPassword(u.User.Username(), "xxx")
	}
	return u.String()
}

// Describe is a one-line summary of an endpoint for logs and `cubicle doctor`.
func (ep Endpoint) Describe() string {
	where := ep.Source
	if ep.Name != "" {
		where += " " + ep.Name
	}
	if ep.Reachable {
		return fmt.Sprintf("%s %s at %s (%s, API %s)", ep.Kind, ep.Version, redactURI(ep.Socket), where, ep.APIVersion)
	}
	return fmt.Sprintf("%s at %s (%s): %s; fix: %s", ep.Kind, redactURI(ep.Socket), where, ep.Err, ep.Fix)
}
