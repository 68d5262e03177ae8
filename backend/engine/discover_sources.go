package engine

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/BurntSushi/toml"
)

// The sources of candidate endpoints. Each reads files or runs the podman CLI; none probes.

// environ is what the sources read: the environment and the platform's directories.
type environ struct {
	opts       DiscoverOptions
	goos       string
	uid        int
	home       string // $HOME, %USERPROFILE% on Windows
	configDir  string // $XDG_CONFIG_HOME or ~/.config; %APPDATA% on Windows
	runtimeDir string // $XDG_RUNTIME_DIR or /run/user/UID (Linux, not root)
	podman     string // the podman CLI, "" when missing
	vmPaths    []string
}

func newEnviron(o DiscoverOptions) *environ {
	e := &environ{opts: o, goos: o.GOOS, uid: *o.UID}
	if e.goos == "windows" {
		e.home = cmp.Or(o.Getenv("USERPROFILE"), o.Getenv("HOMEDRIVE")+o.Getenv("HOMEPATH"))
		e.configDir = o.Getenv("APPDATA")
	} else {
		e.home = o.Getenv("HOME")
		e.configDir = o.Getenv("XDG_CONFIG_HOME")
		if e.configDir == "" && e.home != "" {
			e.configDir = filepath.Join(e.home, ".config")
		}
	}
	if e.goos == "linux" {
		e.runtimeDir = o.Getenv("XDG_RUNTIME_DIR")
		if e.runtimeDir == "" && e.uid > 0 {
			e.runtimeDir = "/run/user/" + strconv.Itoa(e.uid)
		}
	}
	if p, err := o.LookPath("podman"); err == nil {
		e.podman = p
	}
	if e.home != "" {
		e.vmPaths = []string{
			filepath.Join(e.home, ".docker", "run") + "/",
			filepath.Join(e.home, ".docker", "desktop") + "/",
			filepath.Join(e.home, ".orbstack") + "/",
			filepath.Join(e.home, ".rd") + "/",
		}
	}
	for _, d := range e.colimaDirs() {
		e.vmPaths = append(e.vmPaths, d+"/")
	}
	return e
}

// homePath joins elements under the home directory ("" without one).
func (e *environ) homePath(elem ...string) string {
	if e.home == "" {
		return ""
	}
	return filepath.Join(append([]string{e.home}, elem...)...)
}

// sys returns a system-wide path, under SystemRoot in tests.
func (e *environ) sys(p string) string {
	if e.opts.SystemRoot == "" {
		return p
	}
	return filepath.Join(e.opts.SystemRoot, p)
}

func unixURI(path string) string {
	if path == "" {
		return ""
	}
	return "unix://" + filepath.ToSlash(path)
}

// local is an endpoint of a socket on this machine.
func (e *environ) local(kind Kind, source, path string) Endpoint {
	return Endpoint{Kind: kind, Source: source, Socket: unixURI(path), Rootless: e.uid != 0 && e.goos != "windows"}
}

// fromEnv reads CONTAINER_HOST (with CONTAINER_SSHKEY) and DOCKER_HOST (with
// DOCKER_TLS_VERIFY and DOCKER_CERT_PATH).
func (e *environ) fromEnv() []Endpoint {
	var out []Endpoint
	if uri := normalizeHost(e.opts.Getenv("CONTAINER_HOST")); uri != "" {
		out = append(out, Endpoint{Kind: Podman, Source: SourceContainerHost, Socket: uri,
			Identity: expandHome(e.opts.Getenv("CONTAINER_SSHKEY"), e.home), Rootless: e.uid != 0})
	}
	if uri := normalizeHost(e.opts.Getenv("DOCKER_HOST")); uri != "" {
		ep := Endpoint{Kind: Docker, Source: SourceDockerHost, Socket: uri, Rootless: e.uid != 0}
		if ep.Scheme() == "tcp" {
			certs := cmp.Or(e.opts.Getenv("DOCKER_CERT_PATH"), e.dockerConfigDir())
			verify := e.opts.Getenv("DOCKER_TLS_VERIFY")
			if verify != "" || e.opts.Getenv("DOCKER_CERT_PATH") != "" {
				ep.TLS = tlsFilesIn(certs, verify == "" || verify == "0" || verify == "false")
			}
		}
		out = append(out, ep)
	}
	return out
}

// normalizeHost accepts an engine address as the docker and podman CLIs do: a URI, or a
// bare absolute socket path.
func normalizeHost(h string) string {
	h = strings.TrimSpace(h)
	switch {
	case h == "":
		return ""
	case strings.HasPrefix(h, "/"):
		return "unix://" + h
	}
	return h
}

// dockerConfigDir is $DOCKER_CONFIG or ~/.docker.
func (e *environ) dockerConfigDir() string {
	if d := e.opts.Getenv("DOCKER_CONFIG"); d != "" {
		return d
	}
	return e.homePath(".docker")
}

// dockerContext reads the docker CLI's current context ($DOCKER_CONTEXT, else config.json's
// currentContext) from ~/.docker/contexts/meta/<sha256 of the name>/meta.json. The default
// context is DOCKER_HOST or the platform's socket, listed by the other sources.
func (e *environ) dockerContext() []Endpoint {
	dir := e.dockerConfigDir()
	if dir == "" {
		return nil
	}
	name := e.opts.Getenv("DOCKER_CONTEXT")
	if name == "" {
		var cfg struct {
			CurrentContext string `json:"currentContext"`
		}
		if b, err := os.ReadFile(filepath.Join(dir, "config.json")); err == nil {
			_ = json.Unmarshal(b, &cfg)
		}
		name = cfg.CurrentContext
	}
	if name == "" || name == "default" {
		return nil
	}
	sum := sha256.Sum256([]byte(name))
	id := hex.EncodeToString(sum[:])
	var meta struct {
		Endpoints map[string]struct {
			Host          string `json:"Host"`
			SkipTLSVerify bool   `json:"SkipTLSVerify"`
		} `json:"Endpoints"`
	}
	b, err := os.ReadFile(filepath.Join(dir, "contexts", "meta", id, "meta.json"))
	if err != nil || json.Unmarshal(b, &meta) != nil {
		return nil
	}
	d := meta.Endpoints["docker"]
	uri := normalizeHost(d.Host)
	if uri == "" {
		return nil
	}
	ep := Endpoint{Kind: Docker, Source: SourceDockerContext, Name: name, Socket: uri, Rootless: e.uid != 0}
	if strings.HasPrefix(uri, "tcp://") {
		if t := tlsFilesIn(filepath.Join(dir, "contexts", "tls", id, "docker"), d.SkipTLSVerify); t != nil {
			ep.TLS = t
		} else if d.SkipTLSVerify {
			ep.TLS = &TLSFiles{SkipVerify: true}
		}
	}
	return []Endpoint{ep}
}

// tlsFilesIn returns the ca.pem, cert.pem and key.pem of dir that exist (nil: none).
func tlsFilesIn(dir string, skipVerify bool) *TLSFiles {
	have := func(name string) string {
		p := filepath.Join(dir, name)
		if _, err := os.Stat(p); err == nil {
			return p
		}
		return ""
	}
	t := &TLSFiles{CAFile: have("ca.pem"), CertFile: have("cert.pem"), KeyFile: have("key.pem"), SkipVerify: skipVerify}
	if t.CAFile == "" && t.CertFile == "" {
		return nil
	}
	return t
}

// nativeSockets are the Linux engines that share this kernel: rootless sockets in the
// runtime directory and the rootful system sockets (rootful first for root).
func (e *environ) nativeSockets() []Endpoint {
	if e.goos != "linux" {
		return nil
	}
	rootful := []Endpoint{
		{Kind: Podman, Source: SourceRootful, Socket: unixURI(e.sys("/run/podman/podman.sock"))},
		{Kind: Docker, Source: SourceRootful, Socket: unixURI(e.sys("/var/run/docker.sock"))},
	}
	var rootless []Endpoint
	if e.runtimeDir != "" {
		rootless = []Endpoint{
			{Kind: Podman, Source: SourceRootless, Socket: unixURI(filepath.Join(e.runtimeDir, "podman", "podman.sock")), Rootless: true},
			{Kind: Docker, Source: SourceRootless, Socket: unixURI(filepath.Join(e.runtimeDir, "docker.sock")), Rootless: true},
		}
	}
	order := append(rootless, rootful...)
	if e.uid == 0 {
		order = append(rootful, rootless...)
	}
	return podmanFirst(order)
}

// podmanFirst orders Podman endpoints before Docker ones, keeping the order within each.
func podmanFirst(eps []Endpoint) []Endpoint {
	slices.SortStableFunc(eps, func(a, b Endpoint) int { return boolRank(a.Kind != Podman) - boolRank(b.Kind != Podman) })
	return eps
}

// vmSockets are the engines of desktop apps that run containers in a Linux VM.
func (e *environ) vmSockets(ctx context.Context) []Endpoint {
	out := e.podmanMachines(ctx)
	switch e.goos {
	case "windows":
		out = append(out,
			Endpoint{Kind: Podman, Source: SourcePodmanMachine, Name: "podman-machine-default", Socket: "npipe:////./pipe/podman-machine-default"},
			Endpoint{Kind: Docker, Source: SourceDockerDesktop, Socket: "npipe:////./pipe/docker_engine"},
			Endpoint{Kind: Docker, Source: SourceDockerDesktop, Socket: "npipe:////./pipe/dockerDesktopLinuxEngine"},
		)
		return out
	case "darwin":
		out = append(out,
			e.local(Docker, SourceDockerDesktop, e.homePath(".docker", "run", "docker.sock")),
			e.local(Docker, SourceDockerDesktop, e.sys("/var/run/docker.sock")),
		)
	default:
		out = append(out, e.local(Docker, SourceDockerDesktop, e.homePath(".docker", "desktop", "docker.sock")))
	}
	for _, p := range e.colimaSockets() {
		ep := e.local(Docker, SourceColima, p)
		ep.Name = filepath.Base(filepath.Dir(p))
		out = append(out, ep)
	}
	if e.goos == "darwin" {
		out = append(out, e.local(Docker, SourceOrbStack, e.homePath(".orbstack", "run", "docker.sock")))
	}
	out = append(out, e.local(Docker, SourceRancherDesktop, e.homePath(".rd", "docker.sock")))
	return out
}

// colimaDirs are where Colima keeps its profiles: $COLIMA_HOME, else ~/.colima and
// $XDG_CONFIG_HOME/colima (newer releases).
func (e *environ) colimaDirs() []string {
	if e.goos == "windows" {
		return nil
	}
	if d := e.opts.Getenv("COLIMA_HOME"); d != "" {
		return []string{d}
	}
	var dirs []string
	if p := e.homePath(".colima"); p != "" {
		dirs = append(dirs, p)
	}
	if e.configDir != "" {
		dirs = append(dirs, filepath.Join(e.configDir, "colima"))
	}
	return dirs
}

// colimaSockets lists the default profile's socket (whether it exists or not, so that
// doctor names it) and every other profile's that exists.
func (e *environ) colimaSockets() []string {
	dirs := e.colimaDirs()
	if len(dirs) == 0 {
		return nil
	}
	out := []string{filepath.Join(dirs[0], "default", "docker.sock")}
	for _, d := range dirs {
		found, _ := filepath.Glob(filepath.Join(d, "*", "docker.sock"))
		slices.Sort(found)
		out = append(out, found...)
	}
	return out
}

// vmSourceOf names the VM-backed desktop app a local socket belongs to ("" for none).
func (e *environ) vmSourceOf(uri string) string {
	if strings.HasPrefix(uri, "npipe://") {
		p := strings.ToLower(uri)
		switch {
		case strings.HasSuffix(p, "/docker_engine"), strings.HasSuffix(p, "/dockerdesktoplinuxengine"):
			return SourceDockerDesktop
		case strings.Contains(p, "/podman-"):
			return SourcePodmanMachine
		}
		return ""
	}
	p := SocketPath(uri)
	if p == "" {
		return ""
	}
	if strings.Contains(filepath.ToSlash(p), "/containers/podman/machine/") || strings.Contains(filepath.Base(p), "podman-machine") {
		return SourcePodmanMachine
	}
	p = filepath.ToSlash(p)
	for _, prefix := range e.vmPaths {
		if strings.HasPrefix(p, filepath.ToSlash(prefix)) {
			return "vm"
		}
	}
	return ""
}

// cliEnv is the environment the podman CLI runs with: this process's, with the variables
// that locate Podman's configuration taken from opts.Getenv when that was given.
func (e *environ) cliEnv() []string {
	if !e.opts.customEnv {
		return nil
	}
	keys := []string{"HOME", "USERPROFILE", "APPDATA", "XDG_CONFIG_HOME", "XDG_DATA_HOME", "XDG_RUNTIME_DIR",
		"CONTAINERS_CONF", "PODMAN_CONNECTIONS_CONF", "CONTAINER_HOST", "CONTAINER_CONNECTION"}
	env := slices.DeleteFunc(os.Environ(), func(kv string) bool {
		k, _, _ := strings.Cut(kv, "=")
		return slices.Contains(keys, k)
	})
	for _, k := range keys {
		if v := e.opts.Getenv(k); v != "" {
			env = append(env, k+"="+v)
		}
	}
	return env
}

// runCLI runs a command-line tool with a deadline and returns its standard output.
func runCLI(ctx context.Context, env []string, name string, args ...string) ([]byte, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Env = env
	return cmd.Output()
}

// podmanMachines asks the podman CLI for its machines' API sockets (macOS, Linux) or named
// pipes (Windows): podman machine list, then podman machine inspect.
func (e *environ) podmanMachines(ctx context.Context) []Endpoint {
	if e.podman == "" {
		return nil
	}
	b, err := e.opts.RunCLI(ctx, e.cliEnv(), e.podman, "machine", "list", "--format", "json")
	if err != nil {
		return nil
	}
	var list []struct {
		Name    string `json:"Name"`
		Default bool   `json:"Default"`
	}
	if json.Unmarshal(b, &list) != nil || len(list) == 0 {
		return nil
	}
	slices.SortStableFunc(list, func(a, b struct {
		Name    string `json:"Name"`
		Default bool   `json:"Default"`
	}) int {
		return boolRank(!a.Default) - boolRank(!b.Default)
	})
	args := []string{"machine", "inspect"}
	for _, m := range list {
		args = append(args, strings.TrimSuffix(m.Name, "*"))
	}
	b, err = e.opts.RunCLI(ctx, e.cliEnv(), e.podman, args...)
	if err != nil {
		return nil
	}
	var machines []struct {
		Name           string `json:"Name"`
		ConnectionInfo struct {
			PodmanSocket *struct{ Path string } `json:"PodmanSocket"`
			PodmanPipe   *struct{ Path string } `json:"PodmanPipe"`
		} `json:"ConnectionInfo"`
		Rootful bool `json:"Rootful"`
	}
	if json.Unmarshal(b, &machines) != nil {
		return nil
	}
	var out []Endpoint
	for _, m := range machines {
		ep := Endpoint{Kind: Podman, Source: SourcePodmanMachine, Name: m.Name, Rootless: !m.Rootful, VM: true}
		switch ci := m.ConnectionInfo; {
		case e.goos == "windows" && ci.PodmanPipe != nil && ci.PodmanPipe.Path != "":
			ep.Socket = pipeURI(ci.PodmanPipe.Path)
		case ci.PodmanSocket != nil && ci.PodmanSocket.Path != "":
			ep.Socket = unixURI(ci.PodmanSocket.Path)
		default:
			continue
		}
		out = append(out, ep)
	}
	return out
}

// podmanConnection is one of Podman's saved connections.
type podmanConnection struct {
	Name      string `json:"Name"`
	URI       string `json:"URI"`
	Identity  string `json:"Identity"`
	Default   bool   `json:"Default"`
	IsMachine bool   `json:"IsMachine"`
}

// podmanConnections lists Podman's saved connections, the default one first: from
// `podman system connection list --format json` when the CLI is installed, and from the
// files it keeps them in (containers.conf's [engine.service_destinations] and Podman 5's
// podman-connections.json) either way. $CONTAINER_CONNECTION names the default.
func (e *environ) podmanConnections(ctx context.Context) []Endpoint {
	byName := map[string]podmanConnection{}
	var order []string
	add := func(c podmanConnection) {
		if c.Name == "" || c.URI == "" {
			return
		}
		if _, ok := byName[c.Name]; !ok {
			order = append(order, c.Name)
			byName[c.Name] = c
		}
	}
	if e.podman != "" {
		if b, err := e.opts.RunCLI(ctx, e.cliEnv(), e.podman, "system", "connection", "list", "--format", "json"); err == nil {
			var list []podmanConnection
			if json.Unmarshal(b, &list) == nil {
				for _, c := range list {
					add(c)
				}
			}
		}
	}
	for _, c := range e.connectionFiles() {
		add(c)
	}
	def := e.opts.Getenv("CONTAINER_CONNECTION")
	if def == "" {
		for _, n := range order {
			if byName[n].Default {
				def = n
			}
		}
	}
	slices.SortStableFunc(order, func(a, b string) int { return boolRank(a != def) - boolRank(b != def) })
	var out []Endpoint
	for _, n := range order {
		c := byName[n]
		out = append(out, Endpoint{Kind: Podman, Source: SourcePodmanConnection, Name: n, Socket: normalizeHost(c.URI),
			Identity: expandHome(c.Identity, e.home), VM: c.IsMachine, Rootless: rootlessURI(c.URI)})
	}
	return out
}

// rootlessURI guesses whether a Podman connection reaches a rootless service: ssh as a user
// other than root, or a socket outside the system's /run/podman.
func rootlessURI(uri string) bool {
	if u, err := url.Parse(uri); err == nil && u.Scheme == "ssh" {
		return u.User == nil || u.User.Username() != "root"
	}
	p := SocketPath(uri)
	return !strings.HasPrefix(p, "/run/podman/") && !strings.HasPrefix(p, "/var/run/podman/")
}

// connectionFiles reads the connections Podman keeps in containers.conf files (the system
// ones, then the user's; $CONTAINERS_CONF alone when set) and in podman-connections.json.
// Later files override earlier ones, as in Podman.
func (e *environ) connectionFiles() []podmanConnection {
	var files []string
	if c := e.opts.Getenv("CONTAINERS_CONF"); c != "" {
		files = []string{c}
	} else {
		if e.goos != "windows" {
			files = append(files, e.sys("/usr/share/containers/containers.conf"), e.sys("/etc/containers/containers.conf"))
			drop, _ := filepath.Glob(e.sys("/etc/containers/containers.conf.d/*.conf"))
			files = append(files, drop...)
		}
		if e.configDir != "" {
			files = append(files, filepath.Join(e.configDir, "containers", "containers.conf"))
			drop, _ := filepath.Glob(filepath.Join(e.configDir, "containers", "containers.conf.d", "*.conf"))
			files = append(files, drop...)
		}
	}
	conns := map[string]podmanConnection{}
	active := ""
	for _, f := range files {
		var conf struct {
			Engine struct {
				ActiveService       string `toml:"active_service"`
				ServiceDestinations map[string]struct {
					URI       string `toml:"uri"`
					Identity  string `toml:"identity"`
					IsMachine bool   `toml:"is_machine"`
				} `toml:"service_destinations"`
			} `toml:"engine"`
		}
		if _, err := toml.DecodeFile(f, &conf); err != nil {
			continue
		}
		if conf.Engine.ActiveService != "" {
			active = conf.Engine.ActiveService
		}
		for name, d := range conf.Engine.ServiceDestinations {
			conns[name] = podmanConnection{Name: name, URI: d.URI, Identity: d.Identity, IsMachine: d.IsMachine}
		}
	}
	jsonFile := e.opts.Getenv("PODMAN_CONNECTIONS_CONF")
	if jsonFile == "" && e.configDir != "" {
		jsonFile = filepath.Join(e.configDir, "containers", "podman-connections.json")
	}
	if b, err := os.ReadFile(jsonFile); err == nil {
		var pc struct {
			Connection struct {
				Default     string `json:"Default"`
				Connections map[string]struct {
					URI       string `json:"URI"`
					Identity  string `json:"Identity"`
					IsMachine bool   `json:"IsMachine"`
				} `json:"Connections"`
			} `json:"Connection"`
		}
		if json.Unmarshal(b, &pc) == nil {
			if pc.Connection.Default != "" {
				active = pc.Connection.Default
			}
			for name, d := range pc.Connection.Connections {
				conns[name] = podmanConnection{Name: name, URI: d.URI, Identity: d.Identity, IsMachine: d.IsMachine}
			}
		}
	}
	names := make([]string, 0, len(conns))
	for n := range conns {
		names = append(names, n)
	}
	slices.Sort(names)
	out := make([]podmanConnection, 0, len(names))
	for _, n := range names {
		c := conns[n]
		c.Default = n == active
		out = append(out, c)
	}
	return out
}

// expandHome expands a leading ~/ (ssh identities are often written so).
func expandHome(p, home string) string {
	if home != "" && (strings.HasPrefix(p, "~/") || strings.HasPrefix(p, `~\`)) {
		return filepath.Join(home, p[2:])
	}
	return p
}
