// Package backend wires Cubicle's services together: backend.New(Config) opens the store and
// builds the services, Start(ctx) starts the long-lived owners, Serve runs the HTTP API on a
// listener, Close stops everything and waits for it. The shells (cli's serve mode, the desktop
// app) only talk to this package and to the HTTP API.
package backend

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"sync"
	"time"

	"cubicle/backend/api"
	"cubicle/backend/auth"
	"cubicle/backend/doctor"
	"cubicle/backend/fault"
	"cubicle/backend/profile"
	"cubicle/backend/store"
	"cubicle/frontend"
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
}

// Backend is the running set of services.
type Backend struct {
	cfg      Config
	log      *slog.Logger
	Store    *store.Store
	Auth     *auth.Service
	Profiles *profile.Service
	API      *api.Server
	// Bootstrap says whether the first start created the admin (and its generated password).
	Bootstrap auth.BootstrapResult

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
		st.Close()
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
	assets, built := frontend.Assets()
	b.API, err = api.New(api.Config{
		Auth: b.Auth, Profiles: b.Profiles, Doctor: b.cfg.Doctor, Logger: b.log.With("svc", "api"),
		Version: b.cfg.Version, AllowedHosts: b.cfg.AllowedHosts, TrustedOrigins: b.cfg.TrustedOrigins,
		Assets: assets, AssetsBuilt: built,
	})
	return err
}

// Start starts the long-lived services. It returns once they run; ctx bounds start-up only.
func (b *Backend) Start(ctx context.Context) error {
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
		b.closeErr = b.Store.Close()
	})
	return b.closeErr
}
