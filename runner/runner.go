// Package runner is an execution node (SPEC §4): the process `cubicle runner` runs on a machine
// whose desktops a Cubicle server drives. A Runner owns its machine's container engine, its
// desktops (a vm.Manager with their guest links and idle timers) and its node settings, image
// and instance records in its own bbolt file (backend/store) in its data directory.
//
// It dials out to its server (no inbound port: it works behind NAT) at GET /api/runner/connect,
// says hello, and serves the server's calls over one multiplexed session (runner/wire): desktop
// lifecycle, the relay of a desktop's driver (the server's guest.Client speaks the guest
// protocol end to end over a stream), tunnels, and the host tools of agents placed on it (their
// commands and files on this machine, unless started with --no-host-tools). When the link ends it reconnects with backoff
// and jitter; a server that refuses its token (revoked) ends Run. While no server is connected
// nobody holds its desktops, so their idle timers run and a dynamic desktop stops by the
// runner's own idle policy.
//
// Recordings (recording.go): a runner with a desktop engine records its own desktops under its
// data directory (backend/recording), takes the server's markers for them and serves them to
// the server on demand (wire.CapRecording).
//
// Updates (update.go): told of another version for it by the server (Welcome.Update with
// --auto-update, or wire.OpUpdate when an administrator presses Update), a runner downloads
// the binary over its token, verifies size, SHA-256 and that it runs as that version, renames
// it over its executable and makes Run return ErrRestart; the caller closes it and Reexec
// starts the new version. A failed update changes nothing and is reported.
//
// The server runs one runner in its own process too: the managed local runner (NewManaged,
// node "local"), which serves the server's own desktops' manager over an in-memory connection
// with the same session code. Package runner therefore does not import the backend; the
// cubicle binary hands New its engine discovery (Config.ConnectEngine).
//
// Ownership: Run owns the connection loop and one goroutine per stream; Close stops the
// desktops' manager, the engine and the store (a managed runner's belong to the server).
package runner

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/gorilla/websocket"
	"github.com/hashicorp/yamux"

	"cubicle/backend/deskegress"
	"cubicle/backend/fault"
	"cubicle/backend/hostwall"
	"cubicle/backend/link"
	"cubicle/backend/sandbox"
	"cubicle/backend/store"
	"cubicle/backend/vm"
	"cubicle/images"
	"cubicle/runner/wire"
)

// DBFile is the runner's store file inside its data directory.
const DBFile = "runner.db"

// Config configures a Runner. Server, Token and DataDir are required.
type Config struct {
	Server  string // the server's base URL, http(s)://host:port
	Token   string // the runner's token, as the server showed it once: "<node id>.<secret>"
	Name    string // for people; "" = the host name
	DataDir string
	// Engine chooses the desktops' engine ("" = $CUBICLE_ENGINE or auto-detect, "podman",
	// "docker", "kubernetes", "none"); GuestLink how drivers are reached ("" =
	// $CUBICLE_GUEST_LINK or auto).
	Engine, GuestLink string
	// Kubernetes holds the cluster's settings when Engine is "kubernetes" (kubeconfig,
	// namespace, registry…; its Kind is ignored), as backend.Config.Kubernetes does for the
	// server. The caller overlays the environment (engineconn.KubeEnv) on its flags.
	Kubernetes store.EngineSettings
	Version    string
	Logger     *slog.Logger
	// MaxBackoff caps the wait between connection attempts (default 30 s).
	MaxBackoff time.Duration
	// AutoUpdate: when the server's welcome names another version for this runner (its update
	// channel), download it, verify it, replace the executable and restart (Run returns
	// ErrRestart). Without it the runner updates only when an administrator asks (Update).
	AutoUpdate bool
	// Executable is the file an update replaces ("" = os.Executable()).
	Executable string
	// DropCapabilities are left out of the hello. Test-only: it makes a runner look like an
	// older one (cubicle runner reads them from $CUBICLE_RUNNER_TEST_DROP_CAPS).
	DropCapabilities []string
	// NoHostTools (--no-host-tools) keeps the host tools off this machine: the runner does not
	// advertise wire.CapHostTools and refuses their ops.
	NoHostTools bool
	// HostSandbox forces the host tools' sandbox (sandbox.Kind: bwrap, landlock, none; "" =
	// $CUBICLE_HOST_SANDBOX, else the best this machine has).
	HostSandbox string
	// ConnectEngine connects the desktops' engine that s chooses (s is Kubernetes with Kind
	// set to Engine; mode the guest link's). The cubicle binary passes the backend's
	// discovery (backend.ConnectRunnerEngine); nil leaves the runner without an engine.
	ConnectEngine func(ctx context.Context, s store.EngineSettings, mode link.Mode, log *slog.Logger) (Engine, error)
	// EgressLookup resolves the names of desktops' egress allow-lists (nil: this machine's
	// resolver; tests point names at their own services).
	EgressLookup deskegress.LookupFunc
	// Dial, when set, replaces the network dial to Server (the managed local runner's
	// in-memory connection); no proxy is used then.
	Dial func(ctx context.Context, network, addr string) (net.Conn, error)
}

// Engine is the runner's connected engine as the runner uses it: where its desktops run
// (Desktops, else Client) and the local engine that builds their images (Client).
type Engine struct {
	Kind string // the desktops' engine: "podman", "docker", "kubernetes"
	// Client is the local container engine: it builds the desktops' images and, unless
	// Desktops is set, runs them. With Desktops set it may be nil (no local engine answers):
	// desktops still run but images cannot be prepared here (ImagesProblem says why).
	Client EngineClient
	// Desktops, when set, is where desktops run instead of Client (a Kubernetes cluster):
	// they are not on this machine, so no host wall applies to them.
	Desktops vm.Engine
	// Policies, with Desktops, writes a desktop's egress policy as the cluster's own object
	// (a NetworkPolicy of its Pod: *kubernetes.Client); nil: policies are not enforced there.
	Policies ClusterEgress
	// Registry, when set, is where prepared images are pushed (images.Publisher, over plain
	// HTTP with RegistryInsecure): Desktops pulls them from there by digest.
	Registry         string
	RegistryInsecure bool
	ImagesProblem    string      // why images cannot be prepared ("" when they can)
	MapsUsers        bool        // desktops get their own user namespace
	Link             link.Choice // how desktops' drivers are reached
	Close            func() error
}

// ClusterEgress writes the egress policy of desktop id (a container of Engine.Desktops) as
// the cluster's object, p's names resolved with lookup; open removes it.
type ClusterEgress interface {
	SetEgress(ctx context.Context, id string, p store.EgressPolicy, lookup deskegress.LookupFunc) error
}

// EngineClient runs desktops and builds their images (and pushes them to a registry).
type EngineClient interface {
	vm.Engine
	images.Engine
	images.Pusher
}

// Runner is one execution node. Create it with New, Run it, Close it.
type Runner struct {
	cfg    Config
	log    *slog.Logger
	nodeID string
	st     *store.Store
	vms    *vm.Manager
	engine *Engine
	hello  wire.Hello
	// sandbox runs the host tools (nil on the managed runner, which runs none).
	sandbox *sandbox.Sandbox
	watch   *watchers // the server's OpWatch streams (nil for the managed runner)
	// egress enforces the desktops' egress policies (nil for the managed runner, whose
	// desktops are the server's, and where desktops are not on this machine).
	egress *deskegress.Manager
	// policies writes them as the cluster's objects where desktops run on a cluster
	// (Engine.Policies; nil otherwise). At most one of egress and policies is set.
	policies ClusterEgress
	// rec records the runner's desktops (recording.go; nil for the managed runner, whose
	// node the server records, and for a runner without an engine).
	rec *recorder
	// managed: the server's own node served in its process (NewManaged); the desktops'
	// manager and the store are the server's, which starts and closes them.
	managed bool
	// ops is the dispatch table (op name → handler), built once by dispatch.
	opsOnce sync.Once
	ops     map[string]handler

	mu         sync.Mutex
	busy       map[string]bool // desktops the server marked busy in this session
	connected  bool
	restart    chan struct{} // closed when a verified update asks Run to end with ErrRestart
	restarting bool
	failed     string // the SHA-256 of an automatic update that failed (not retried on every reconnect)
	failedWhy  string
}

// ErrRefused is returned by Run when the server refused the runner's token (revoked or
// unknown): retrying cannot help.
var ErrRefused = fault.Forbidden("the server refused this runner")

// NodeIDOf returns the node id a runner token names, or a fault.ErrInvalid error.
func NodeIDOf(token string) (string, error) {
	id, secret, ok := strings.Cut(token, ".")
	if !ok || id == "" || secret == "" {
		return "", fault.Invalid("the runner token is malformed: copy the whole token the server showed when the runner was added (Settings → Runners)")
	}
	return id, nil
}

// New opens the runner's store, connects its engine and builds its desktops' manager.
func New(cfg Config) (*Runner, error) {
	if cfg.Server == "" || cfg.Token == "" || cfg.DataDir == "" {
		return nil, fault.Invalid("runner: --server, --token and a data directory are required")
	}
	u, err := url.Parse(cfg.Server)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fault.Invalid("runner: --server %q is not an http(s) URL like http://192.0.2.10:8765", cfg.Server)
	}
	node, err := NodeIDOf(cfg.Token)
	if err != nil {
		return nil, err
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.MaxBackoff <= 0 {
		cfg.MaxBackoff = 30 * time.Second
	}
	if cfg.Name == "" {
		cfg.Name, _ = os.Hostname()
	}
	// Absolute, once: the host tools' guard protects it (checkHostPath) wherever they start.
	if cfg.DataDir, err = filepath.Abs(cfg.DataDir); err != nil {
		return nil, fmt.Errorf("data dir: %w", err)
	}
	if err := os.MkdirAll(cfg.DataDir, 0o700); err != nil {
		return nil, fmt.Errorf("create data dir %s: %w", cfg.DataDir, err)
	}
	st, err := store.Open(filepath.Join(cfg.DataDir, DBFile), store.Options{Logger: cfg.Logger})
	if err != nil {
		return nil, fmt.Errorf("open runner store: %w", err)
	}
	r := &Runner{cfg: cfg, log: cfg.Logger, nodeID: node, st: st, busy: map[string]bool{}, watch: newWatchers(), restart: make(chan struct{})}
	if !cfg.NoHostTools {
		if r.sandbox, err = newSandbox(cfg.HostSandbox); err != nil {
			r.Close()
			return nil, err
		}
		if r.sandbox.Kind() == sandbox.None {
			r.log.Warn("host tools on this runner have no OS sandbox: they run only where an administrator allowed that for this node", "why", r.sandbox.Problem())
		} else {
			r.log.Info("host tools run in an OS sandbox", "kind", r.sandbox.Kind())
		}
	}
	if err := r.buildVMs(); err != nil {
		r.Close()
		return nil, err
	}
	if r.engine != nil && !slices.Contains(cfg.DropCapabilities, wire.CapRecording) {
		if err := r.buildRecorder(); err != nil {
			r.Close()
			return nil, err
		}
	}
	return r, nil
}

// buildVMs connects the engine and builds the manager of this node's desktops.
func (r *Runner) buildVMs() error {
	log := r.log.With("svc", "vm")
	problem := "Local VM is turned off on this runner (engine \"none\")"
	r.hello = wire.Hello{Protocol: wire.Protocol, Version: r.cfg.Version, OS: runtime.GOOS, Arch: runtime.GOARCH,
		Name: r.cfg.Name, Capabilities: []string{wire.CapIdlePolicy, wire.CapGuestRelay, wire.CapEvents, wire.CapSelfUpdate, wire.CapNodeSettings, wire.CapStats,
			wire.CapPause}}
	if !r.cfg.NoHostTools {
		r.hello.Capabilities = append(r.hello.Capabilities, wire.CapHostTools, wire.CapHostGuard, wire.CapHostSandbox)
	}
	r.hello.Capabilities = slices.DeleteFunc(r.hello.Capabilities, func(c string) bool { return slices.Contains(r.cfg.DropCapabilities, c) })
	mode, err := link.ParseMode(cmp.Or(r.cfg.GuestLink, os.Getenv(link.EnvVar)))
	if err != nil {
		return fault.Invalid("%v", err)
	}
	if r.cfg.Engine != "none" {
		if r.cfg.ConnectEngine == nil {
			problem = "this runner was built without container engine support"
		} else {
			s := r.cfg.Kubernetes
			s.Kind = r.cfg.Engine
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			eng, err := r.cfg.ConnectEngine(ctx, s, mode, log)
			cancel()
			if err != nil {
				problem = err.Error()
			} else {
				problem, r.engine = "", &eng
			}
		}
	}
	cfg := vm.Config{Store: r.st, NodeID: r.nodeID, EngineProblem: problem, DataDir: r.cfg.DataDir, Logger: log,
		HostWall: hostWall, OnChange: r.changed, OnPrepare: r.watch.prepare, OnSettings: r.watch.settings}
	if r.engine != nil {
		cfg.MapUsers = r.engine.MapsUsers
		r.hello.Engine = r.engine.Kind
		cfg.Engine = r.engine.Client
		switch {
		case r.engine.Desktops != nil:
			// not on this machine: no host wall; the egress policy is the cluster's object
			// (a NetworkPolicy of the desktop's Pod), as on the server's own cluster
			cfg.Engine, cfg.HostWall = r.engine.Desktops, nil
			if r.engine.Policies != nil {
				r.policies, cfg.Egress = r.engine.Policies, r.enforceClusterEgress
			}
		default:
			// the same enforcement as the server's own desktops (docs/egress.md)
			r.egress = deskegress.New(deskegress.Config{Logger: r.log.With("svc", "egress"), Lookup: r.cfg.EgressLookup, OnBlocked: r.egressBlocked})
			cfg.Egress = r.enforceEgress
		}
		if cfg.Egress != nil {
			r.hello.Capabilities = append(r.hello.Capabilities, wire.CapEgress)
			r.hello.Capabilities = slices.DeleteFunc(r.hello.Capabilities, func(c string) bool { return slices.Contains(r.cfg.DropCapabilities, c) })
		}
		cfg.Link.Choice = r.engine.Link
		cfg.Images, cfg.ImagesProblem = r.imageBuilder(log)
	} else {
		r.hello.EngineError = problem
	}
	r.vms, err = vm.New(cfg)
	return err
}

// changed is vm.Config.OnChange: the server's event streams and the recordings hear it, and
// a desktop that left running or paused lets go of its egress enforcement (its network
// namespace is going).
func (r *Runner) changed(c vm.InstanceChange) {
	if c.State != vm.StateRunning && c.State != vm.StatePaused && r.egress != nil {
		r.egress.Release(c.InstanceID)
	}
	r.watch.desktop(c)
	if r.rec != nil {
		r.rec.change(c)
	}
}

// imageBuilder is what prepares the desktops' images: built by the local engine, pushed to
// the engine's registry when it has one; nil and why when images cannot be prepared here.
func (r *Runner) imageBuilder(log *slog.Logger) (vm.ImageBuilder, string) {
	e := r.engine
	if e.Client == nil {
		return nil, cmp.Or(e.ImagesProblem, "no local container engine builds images on this runner")
	}
	ib, err := images.New(images.Config{Engine: e.Client, Logger: r.log.With("svc", "images"),
		WorkDir: filepath.Join(r.cfg.DataDir, "images"), Pins: vm.PinSource(r.st, r.nodeID, os.Getenv)})
	if err != nil {
		log.Warn("image preparation unavailable", "err", err)
		return nil, "image preparation is unavailable on this runner: " + err.Error()
	}
	if e.Registry != "" {
		return &images.Publisher{Builder: ib, Engine: e.Client, Registry: e.Registry, Insecure: e.RegistryInsecure}, ""
	}
	return ib, ""
}

// hostWall walls a started desktop off from the runner machine's own services, as the server
// does for its desktops; a runner allows no host port (it has no Settings → Security).
func hostWall(ctx context.Context, pid int, containerID, runDir string) error {
	w, err := hostwall.Plan(pid, nil)
	if err != nil {
		return err
	}
	return hostwall.Apply(pid, hostwall.Proof{ContainerID: containerID, RunDir: runDir, ContainerRunDir: vm.RunDirTarget}, w)
}

// NodeID is the node this runner serves (from its token).
func (r *Runner) NodeID() string { return r.nodeID }

// VMs is the runner's desktops' manager.
func (r *Runner) VMs() *vm.Manager { return r.vms }

// Connected reports whether a session with the server is up.
func (r *Runner) Connected() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.connected
}

// Run starts the desktops' manager and keeps a session with the server until ctx ends, the
// server refuses the token (ErrRefused) or the manager cannot start.
func (r *Runner) Run(ctx context.Context) error {
	if !r.managed {
		if err := r.vms.Start(ctx); err != nil {
			return fmt.Errorf("start desktops: %w", err)
		}
		if r.rec != nil {
			r.rec.start(ctx)
		}
	}
	backoff := time.Duration(0)
	for {
		began := time.Now()
		err := r.session(ctx)
		if r.restartAsked() || errors.Is(err, ErrRestart) {
			return ErrRestart
		}
		if ctx.Err() != nil {
			return nil
		}
		if errors.Is(err, ErrRefused) {
			return err
		}
		if time.Since(began) > 30*time.Second {
			backoff = 0 // it worked for a while: come back quickly
		}
		backoff = min(max(2*backoff, 500*time.Millisecond), r.cfg.MaxBackoff)
		wait := backoff/2 + rand.N(backoff/2+1) // jitter: runners of a restarted server do not come back in step
		r.log.Warn("runner link ended; reconnecting", "err", err, "in", wait.Round(time.Millisecond))
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(wait):
		}
	}
}

// connectURL is the websocket URL of the server's connect route.
func (r *Runner) connectURL() string {
	u, _ := url.Parse(r.cfg.Server)
	u.Scheme = map[string]string{"http": "ws", "https": "wss"}[u.Scheme]
	u.Path = strings.TrimRight(u.Path, "/") + wire.ConnectPath
	u.RawQuery = ""
	return u.String()
}

// session runs one connection: dial, hello, welcome, then serve streams until it ends.
func (r *Runner) session(ctx context.Context) error {
	hdr := http.Header{"Authorization": {"Bearer " + r.cfg.Token}}
	d := websocket.Dialer{HandshakeTimeout: 15 * time.Second, Proxy: http.ProxyFromEnvironment,
		ReadBufferSize: wire.BufferSize, WriteBufferSize: wire.BufferSize}
	if r.cfg.Dial != nil {
		d.NetDialContext, d.Proxy = r.cfg.Dial, nil
	}
	dctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	ws, resp, err := d.DialContext(dctx, r.connectURL(), hdr)
	cancel()
	if err != nil {
		if resp != nil && (resp.StatusCode == http.StatusUnauthorized || resp.StatusCode == http.StatusForbidden) {
			return fmt.Errorf("%w (HTTP %d): the runner was revoked or its token is wrong; add it again in Settings → Runners and run the new command", ErrRefused, resp.StatusCode)
		}
		if resp != nil && resp.StatusCode == http.StatusConflict {
			// Another process is connected with this token: stop instead of taking turns.
			var body struct{ Error string }
			json.NewDecoder(io.LimitReader(resp.Body, 4096)).Decode(&body)
			return fmt.Errorf("%w (HTTP 409): %s", ErrRefused, cmp.Or(body.Error, "another runner process is already connected with this token"))
		}
		return fmt.Errorf("connect to %s: %w", r.cfg.Server, err)
	}
	defer ws.Close()
	hello := r.hello
	_, hello.UpdateError = r.failedUpdate()
	if st, err := r.vms.Status(ctx); err == nil {
		hello.MaxInstances, hello.Running = st.Policy.MaxInstances, st.Running
	}
	ws.SetWriteDeadline(time.Now().Add(wire.WriteTimeout))
	if err := ws.WriteJSON(hello); err != nil {
		return fmt.Errorf("send hello: %w", err)
	}
	ws.SetReadDeadline(time.Now().Add(30 * time.Second))
	var welcome wire.Welcome
	if err := ws.ReadJSON(&welcome); err != nil {
		var ce *websocket.CloseError
		if errors.As(err, &ce) && ce.Code == websocket.ClosePolicyViolation {
			return fmt.Errorf("%w: %s", ErrRefused, ce.Text)
		}
		return fmt.Errorf("read welcome: %w", err)
	}
	ws.SetReadDeadline(time.Time{})
	ws.SetWriteDeadline(time.Time{})
	if u := welcome.Update; u != nil && r.cfg.AutoUpdate && u.Version != r.cfg.Version && !r.failedBefore(u.SHA256) {
		r.log.Info("the server offers another version for this runner; updating", "from", r.cfg.Version, "to", u.Version)
		err := r.selfUpdate(ctx, *u)
		if err == nil {
			return ErrRestart
		}
		// Keep the old version, and reconnect at once with the reason in the hello, so the
		// server shows it; this binary is not tried again until the runner restarts.
		r.setFailedUpdate(u.SHA256, fmt.Sprintf("update to %s failed: %v", u.Version, err))
		r.log.Error("update failed; the old version keeps running", "to", u.Version, "err", err)
		return fmt.Errorf("automatic update to %s failed: %w", u.Version, err)
	}
	sess, err := yamux.Server(wire.NewConn(ws), wire.SessionConfig())
	if err != nil {
		return err
	}
	r.log.Info("connected to the server", "server", r.cfg.Server, "node", welcome.NodeID, "name", welcome.Name)
	r.setConnected(true)
	defer r.endSession()
	var wg sync.WaitGroup
	defer wg.Wait()
	defer sess.Close()
	stop := context.AfterFunc(ctx, func() { sess.Close() })
	defer stop()
	wg.Add(1)
	go func() { // a verified update ends the session (Run then returns ErrRestart)
		defer wg.Done()
		select {
		case <-r.restart:
			sess.Close()
		case <-sess.CloseChan():
		}
	}()
	sctx, cancelStreams := context.WithCancel(ctx)
	defer cancelStreams()
	for {
		st, err := sess.AcceptStream()
		if err != nil {
			return fmt.Errorf("session ended: %w", err)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			r.serve(sctx, st)
		}()
	}
}

// askRestart ends Run with ErrRestart (after a verified update replaced the executable).
func (r *Runner) askRestart() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.restarting {
		r.restarting = true
		close(r.restart)
	}
}

func (r *Runner) restartAsked() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.restarting
}

// failedUpdate is the SHA-256 of the binary whose automatic update failed, and why.
func (r *Runner) failedUpdate() (sha, why string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.failed, r.failedWhy
}

func (r *Runner) failedBefore(sha string) bool {
	failed, _ := r.failedUpdate()
	return failed == sha
}

func (r *Runner) setFailedUpdate(sha, why string) {
	r.mu.Lock()
	r.failed, r.failedWhy = sha, why
	r.mu.Unlock()
}

func (r *Runner) setConnected(v bool) {
	r.mu.Lock()
	r.connected = v
	r.mu.Unlock()
}

// endSession forgets who the server said was busy: with no server, nobody holds a desktop,
// so their idle timers run (a dynamic desktop stops by this node's idle policy).
func (r *Runner) endSession() {
	r.mu.Lock()
	ids := make([]string, 0, len(r.busy))
	for id := range r.busy {
		ids = append(ids, id)
	}
	r.busy = map[string]bool{}
	r.connected = false
	r.mu.Unlock()
	for _, id := range ids {
		r.vms.MarkIdle(id)
	}
}

// Close stops the desktops' manager (its dynamic desktops stop with it), the engine and the
// store. A managed runner's belong to the server: Close leaves them.
func (r *Runner) Close() error {
	if r.managed {
		return nil
	}
	var errs []error
	if r.rec != nil {
		errs = append(errs, r.rec.close()) // its viewers of the desktops close first
	}
	if r.vms != nil {
		errs = append(errs, r.vms.Close())
	}
	if r.egress != nil {
		errs = append(errs, r.egress.Close()) // after the desktops' manager: none is started any more
	}
	if r.engine != nil && r.engine.Close != nil {
		errs = append(errs, r.engine.Close())
	}
	errs = append(errs, r.st.Close())
	return errors.Join(errs...)
}
