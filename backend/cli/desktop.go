package cli

import (
	"context"
	"log/slog"
	"net"
	"runtime"
	"strings"

	"cubicle/backend"
	"cubicle/backend/fault"
)

// Desktop is what the desktop shell gets from the backend for one launch.
type Desktop struct {
	URL     string // base URL of the backend on loopback, e.g. "http://127.0.0.1:43121"
	Token   string // bearer token of the local admin for this launch
	Version string
	Logger  *slog.Logger
}

// DesktopShell is the desktop app; main.go passes app.Shell(). Keeping the shell behind this
// value is what lets the backend stay free of Wails.
type DesktopShell struct {
	// Run shows the window and blocks until it closes or ctx ends.
	Run func(ctx context.Context, d Desktop) error
	// Origins are the page origins of the window that the backend trusts for CORS and
	// Origin checks (the window's page is served by the shell, not by the backend).
	Origins []string
	// Available is false in builds without the desktop shell (no GTK/WebKit at build time);
	// the app then serves the web UI instead.
	Available bool
}

func runDesktop(ctx context.Context, e *env, args []string) error {
	fs := newFlags(e, "cubicle", "cubicle [--data-dir DIR] [--log-level info]")
	dataDir := fs.String("data-dir", defaultDataDir(e.getenv), "where Cubicle keeps its data (env CUBICLE_DATA_DIR)")
	logLevel := fs.String("log-level", "info", "debug, info, warn or error")
	if err := parse(fs, args); err != nil {
		return err
	}
	if why := noDesktop(e); why != "" {
		return serve(ctx, e, serveOptions{listen: defaultListen(e.getenv), dataDir: *dataDir, logLevel: *logLevel,
			note: why + " — serving the web UI instead."})
	}
	log, err := newLogger(e.stderr, *logLevel)
	if err != nil {
		return err
	}
	b, err := backend.New(backend.Config{
		DataDir: *dataDir, Logger: log, Version: Version, Admin: adminFromEnv(e.getenv),
		AllowedHosts: []string{"127.0.0.1"}, TrustedOrigins: e.shell.Origins,
		Doctor:              doctorFunc(*dataDir, e.getenv),
		PrepareOnFirstStart: prepareOnFirstStart(e.getenv),
	})
	if err != nil {
		return err
	}
	defer b.Close()
	if err := b.Start(ctx); err != nil {
		return err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return fault.Unavailable("cannot listen on loopback: %v", err)
	}
	sess, err := b.LocalSession()
	if err != nil {
		ln.Close()
		return err
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	served := make(chan error, 1)
	go func() { served <- b.Serve(ctx, ln) }()
	if b.Bootstrap.Generated {
		log.Info("created the admin account for the web UI", "username", b.Bootstrap.Username, "password", b.Bootstrap.Password)
	}
	runErr := e.shell.Run(ctx, Desktop{URL: strings.TrimSuffix(urlOf(ln.Addr()), "/"), Token: sess.Token, Version: Version, Logger: log})
	cancel()
	if err := <-served; err != nil && runErr == nil {
		runErr = err
	}
	return runErr
}

// noDesktop says why the desktop window cannot open here, or "" when it can.
func noDesktop(e *env) string {
	if e.shell.Run == nil || !e.shell.Available {
		return "This build of Cubicle has no desktop shell"
	}
	if runtime.GOOS == "linux" && e.getenv("DISPLAY") == "" && e.getenv("WAYLAND_DISPLAY") == "" {
		return "No display found (DISPLAY and WAYLAND_DISPLAY are unset)"
	}
	return ""
}
