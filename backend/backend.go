// Package backend wires Cubicle's services together: backend.New(Config) opens the store and
// builds the services, Start(ctx) starts the long-lived owners, Serve runs the HTTP API on a
// listener, Close stops everything and waits for it. The shells (cli's serve mode, the desktop
// app) only talk to this package and to the HTTP API.
package backend

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"cubicle/backend/api"
	"cubicle/backend/auth"
	"cubicle/backend/doctor"
	"cubicle/backend/engine"
	"cubicle/backend/engine/docker"
	"cubicle/backend/engine/podman"
	"cubicle/backend/fault"
	"cubicle/backend/profile"
	"cubicle/backend/store"
	"cubicle/backend/vm"
	"cubicle/frontend"
	"cubicle/images"
)

// Config configures a Backend. DataDir is required.
type Config struct {
	DataDir string
	Logger  *slog.Logger
	Version string
	// Admin seeds the admin account on first start.
	Admin auth.Bootstrap
	// RequireChosenAdmin refuses to start (fault.ErrForbidden, nothing created) when no admin
	// exists yet and Admin carries no password: a server reachable from other machines must
	// not start with a password only its console has seen.
	RequireChosenAdmin bool
	// AllowedHosts are the host names the HTTP API answers to (see api.Config).
	AllowedHosts []string
	// TrustedOrigins are foreign page origins (the desktop window) allowed to call the API.
	TrustedOrigins []string
	// Doctor checks the environment for the settings page; nil disables the route.
	Doctor func(ctx context.Context) doctor.Report
	// StoreLockTimeout bounds the wait for the data file's lock (default 1 s).
	StoreLockTimeout time.Duration
	// Engine chooses the container engine of the Local VM: "" = $CUBICLE_ENGINE or
	// auto-detect (Podman first; when only the podman CLI is installed Cubicle starts its own
	// service), "podman", "docker", or "none" (Local VM off: its routes say why).
	Engine string
	// ComposeDesktops, when set, puts the Local VM in Compose mode (SPEC §5): these fixed
	// desktops (containers labelled io.cubicle.compose-desktop=<name>) are adopted. Empty:
	// $CUBICLE_COMPOSE_DESKTOPS, a comma-separated list of names (see compose.desktops.yaml).
	ComposeDesktops []vm.ComposeDesktop
}

// Backend is the running set of services.
type Backend struct {
	cfg      Config
	log      *slog.Logger
	Store    *store.Store
	Auth     *auth.Service
	Profiles *profile.Service
	VMs      *vm.Manager
	API      *api.Server
	// Bootstrap says whether the first start created the admin (and its generated password).
	Bootstrap auth.BootstrapResult

	engine   vm.Engine            // nil when no engine was found
	engClose func() error         // releases the engine client
	ownedPod *engine.OwnedService // a Podman service Cubicle started itself

	closeOnce sync.Once
	closeErr  error
}

// DBFile is the store's file name inside the data directory.
const DBFile = "cubicle.db"

// New opens the data directory and builds the services. Nothing runs in the background
// until Start.
func New(cfg Config) (*Backend, error) {
	if cfg.DataDir == "" {
		return nil, errors.New("backend: Config.DataDir is required")
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if err := os.MkdirAll(cfg.DataDir, 0o700); err != nil {
		return nil, fmt.Errorf("create data dir %s: %w", cfg.DataDir, err)
	}
	st, err := store.Open(filepath.Join(cfg.DataDir, DBFile), store.Options{LockTimeout: cfg.StoreLockTimeout, Logger: cfg.Logger})
	if err != nil {
		return nil, fmt.Errorf("open store: %w", err)
	}
	b := &Backend{cfg: cfg, log: cfg.Logger, Store: st}
	if err := b.build(); err != nil {
		b.Close()
		return nil, err
	}
	return b, nil
}

func (b *Backend) build() error {
	key, err := auth.LoadOrCreateKey(filepath.Join(b.cfg.DataDir, "secrets", "session.key"))
	if err != nil {
		return err
	}
	b.Auth, err = auth.New(auth.Config{Accounts: b.Store, Key: key, Logger: b.log.With("svc", "auth")})
	if err != nil {
		return err
	}
	if b.cfg.RequireChosenAdmin && b.cfg.Admin.Password == "" {
		if _, err := b.Auth.Admin(); err != nil {
			return fault.Forbidden("no admin account exists yet; set CUBICLE_ADMIN_USER and CUBICLE_ADMIN_PASSWORD for the first start")
		}
	}
	if b.Bootstrap, err = b.Auth.EnsureAdmin(b.cfg.Admin); err != nil {
		return err
	}
	b.Profiles = profile.New(b.Store, b.log.With("svc", "profile"))
	if b.VMs, err = b.buildVMs(); err != nil {
		return err
	}
	assets, built := frontend.Assets()
	b.API, err = api.New(api.Config{
		Auth: b.Auth, Profiles: b.Profiles, Doctor: b.cfg.Doctor, Logger: b.log.With("svc", "api"), VMs: b.VMs,
		Version: b.cfg.Version, AllowedHosts: b.cfg.AllowedHosts, TrustedOrigins: b.cfg.TrustedOrigins,
		Assets: assets, AssetsBuilt: built,
	})
	return err
}

// The engine adapters satisfy the manager's Engine.
var (
	_ vm.Engine = (*podman.Client)(nil)
	_ vm.Engine = (*docker.Client)(nil)
)

// buildVMs connects the container engine (see Config.Engine), sets up the image builder and
// builds the Local VM manager. A missing engine is not an error: the manager reports it.
func (b *Backend) buildVMs() (*vm.Manager, error) {
	log := b.log.With("svc", "vm")
	problem := "Local VM is turned off (engine \"none\")"
	if b.cfg.Engine != "none" {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		problem = b.connectEngine(ctx, log)
		cancel()
	}
	compose := b.cfg.ComposeDesktops
	if len(compose) == 0 {
		for _, name := range strings.Split(os.Getenv("CUBICLE_COMPOSE_DESKTOPS"), ",") {
			if name = strings.TrimSpace(name); name != "" {
				compose = append(compose, vm.ComposeDesktop{Name: name})
			}
		}
	}
	cfg := vm.Config{Store: b.Store, EngineProblem: problem, DataDir: b.cfg.DataDir, Logger: log, Compose: compose}
	if b.engine != nil {
		cfg.Engine = b.engine
		if eng, ok := b.engine.(images.Engine); ok {
			ib, err := images.New(images.Config{Engine: eng, Logger: b.log.With("svc", "images"),
				WorkDir: filepath.Join(b.cfg.DataDir, "images")})
			if err != nil {
				log.Warn("image preparation unavailable", "err", err)
			} else {
				cfg.Images = ib
			}
		}
	}
	return vm.New(cfg)
}

// connectEngine finds and connects the container engine; it returns what is wrong when none
// can be used ("" when one is connected).
func (b *Backend) connectEngine(ctx context.Context, log *slog.Logger) string {
	pref, err := engine.ParseKind(cmp.Or(b.cfg.Engine, os.Getenv("CUBICLE_ENGINE")))
	if err != nil {
		return err.Error()
	}
	eps, _ := engine.Discover(ctx, engine.DiscoverOptions{Prefer: pref})
	ep, ok := engine.Pick(eps)
	if !ok && pref != engine.Docker {
		for _, e := range eps {
			if e.Kind == engine.Podman && e.CLI != "" {
				svc, err := engine.StartPodmanService(ctx, engine.DefaultOwnedSocket(os.Getenv, os.Getuid()), log)
				if err != nil {
					return "podman is installed but its service could not be started: " + err.Error()
				}
				b.ownedPod = svc
				ep, ok = engine.Endpoint{Kind: engine.Podman, Socket: "unix://" + svc.Socket()}, true
				break
			}
		}
	}
	if !ok {
		msg := "no container engine found: install Podman (sudo apt-get install podman) or Docker and start it"
		for _, e := range eps {
			if e.Fix != "" {
				return msg + "; e.g. " + e.Fix
			}
		}
		return msg
	}
	switch ep.Kind {
	case engine.Docker:
		c, err := docker.Connect(ctx, ep.Socket, docker.Options{Logger: log})
		if err != nil {
			return err.Error()
		}
		b.engine, b.engClose = c, c.Close
	default:
		c, err := podman.Connect(ctx, ep.Socket, podman.Options{Logger: log})
		if err != nil {
			return err.Error()
		}
		b.engine, b.engClose = c, c.Close
	}
	log.Info("container engine connected", "kind", ep.Kind, "socket", ep.Socket, "version", ep.Version)
	return ""
}

// Start starts the long-lived services. It returns once they run; ctx bounds start-up only.
func (b *Backend) Start(ctx context.Context) error {
	if err := b.VMs.Start(ctx); err != nil {
		return err
	}
	return ctx.Err()
}

// Serve runs the HTTP API on ln until ctx ends.
func (b *Backend) Serve(ctx context.Context, ln net.Listener) error {
	return b.API.Run(ctx, ln)
}

// LocalSession returns a session for the local admin (the desktop app's user).
func (b *Backend) LocalSession() (auth.Principal, error) {
	admin, err := b.Auth.Admin()
	if err != nil {
		return auth.Principal{}, err
	}
	return b.Auth.Issue(admin)
}

// Close stops the services and closes the store. It is idempotent.
func (b *Backend) Close() error {
	b.closeOnce.Do(func() {
		var errs []error
		if b.VMs != nil {
			errs = append(errs, b.VMs.Close())
		}
		if b.engClose != nil {
			errs = append(errs, b.engClose())
		}
		if b.ownedPod != nil {
			errs = append(errs, b.ownedPod.Close())
		}
		errs = append(errs, b.Store.Close())
		b.closeErr = errors.Join(errs...)
	})
	return b.closeErr
}
