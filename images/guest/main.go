//go:build linux

// Command cubicle-guest is the in-guest driver of Cubicle's desktops. It runs as the
// container's PID 1 (as the unprivileged desktop user): it starts Xvfb and the desktop
// session, reaps every child, restarts a crashed X server, and serves the bridge protocol
// (images/guest/wire, docs/guest-protocol.md) on $CUBICLE_RUN_DIR/guest.sock — screenshots, a
// change-driven frame stream, input through XTEST, exec and files. SIGTERM or SIGINT stop
// everything within 2 s and exit 0.
//
// Build it static, per architecture (scripts/build.sh does both):
// CGO_ENABLED=0 GOOS=linux GOARCH=arm64 go build -trimpath -ldflags='-s -w' -o images/bin/cubicle-guest-arm64 ./images/guest
//
// It is a Linux program (an init for Linux containers): every file of this package carries
// the linux build constraint, so that `go build ./...` on macOS and Windows skips it; the
// app cross-builds it with GOOS=linux. Its x11 and jpegenc packages build everywhere.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"runtime/debug"
	"strconv"
	"strings"
	"syscall"
	"time"

	"cubicle/images/guest/wire"

	"github.com/jezek/xgb"
	"golang.org/x/sys/unix"
)

func main() {
	cfg, err := configure(os.Args[1:])
	if err != nil {
		if err == flag.ErrHelp {
			os.Exit(0)
		}
		fmt.Fprintln(os.Stderr, "cubicle-guest:", err)
		os.Exit(2)
	}
	if cfg.Relay {
		ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
		err := relay(ctx, filepath.Join(cfg.RunDir, wire.SocketName), cfg.RelayWait, os.Stdin, os.Stdout)
		stop()
		if err != nil {
			fmt.Fprintln(os.Stderr, "cubicle-guest:", err)
			os.Exit(1)
		}
		return
	}
	if err := run(cfg); err != nil {
		cfg.Log.Error("driver failed", "err", err)
		os.Exit(1)
	}
}

// run owns the process: signals become cancellation, children are reaped globally.
func run(cfg Config) error {
	xgb.Logger = log.New(io.Discard, "", 0) // xgb chatters about missing Xauthority
	if os.Getpid() != 1 {
		// Orphans of exec'd commands come to us instead of the host's init, so we reap them
		// exactly as PID 1 would in the container.
		unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
	}
	pr := newProcs(true)
	defer pr.Close()
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	return newSupervisor(cfg, pr).Run(ctx)
}

func env(key, def string) string {
	if v := os.Getenv(key); v != "" {
		return v
	}
	return def
}

// configure reads the environment, then the flags.
func configure(args []string) (Config, error) {
	fs := flag.NewFlagSet("cubicle-guest", flag.ContinueOnError)
	runDir := fs.String("run-dir", env(wire.EnvRunDir, wire.RunDir), "directory of the bridge socket "+wire.SocketName+" ("+wire.EnvRunDir+")")
	screen := fs.String("screen", env(wire.EnvScreen, "1280x800"), "screen size WxH ("+wire.EnvScreen+")")
	screenMax := fs.String("screen-max", env(wire.EnvScreenMax, "2560x1600"), "largest screen size a resize may ask for, WxH ("+wire.EnvScreenMax+")")
	display := fs.String("display", env(wire.EnvDisplay, ":0"), "X display ("+wire.EnvDisplay+")")
	session := fs.String("session", env(wire.EnvSession, "/usr/local/bin/cubicle-session"), "desktop session command line; \"none\" for none ("+wire.EnvSession+")")
	workspace := fs.String("workspace", env(wire.EnvWorkspace, wire.WorkspaceDir), "default directory of exec and relative paths ("+wire.EnvWorkspace+")")
	noX := fs.Bool("no-xserver", os.Getenv(wire.EnvNoXServer) == "1", "attach to an existing display instead of starting Xvfb ("+wire.EnvNoXServer+"=1)")
	xvfb := fs.String("xvfb", env(wire.EnvXvfb, "Xvfb"), "X server program ("+wire.EnvXvfb+")")
	level := fs.String("log-level", env(wire.EnvLogLevel, "info"), "debug, info, warn or error ("+wire.EnvLogLevel+")")
	version := fs.Bool("version", false, "print the driver and protocol version and exit")
	relayMode := fs.Bool(strings.TrimPrefix(wire.RelayFlag, "--"), false, "relay stdin/stdout to the running driver's socket (the exec link; the host starts it)")
	relayWait := fs.Duration("relay-wait", 2*time.Minute, "how long the relay waits for the driver's socket")
	if err := fs.Parse(args); err != nil {
		return Config{}, err
	}
	if *relayMode {
		return Config{RunDir: *runDir, Relay: true, RelayWait: *relayWait}, nil
	}
	if *version {
		fmt.Printf("cubicle-guest %s (bridge protocol %d)\n", buildVersion(), protocolVersion())
		return Config{}, flag.ErrHelp
	}
	w, h, ok := parseSize(*screen)
	if !ok {
		return Config{}, fmt.Errorf("screen %q: want WxH, e.g. 1280x800 (each 64–8192)", *screen)
	}
	mw, mh, ok := parseSize(*screenMax)
	if !ok {
		return Config{}, fmt.Errorf("screen-max %q: want WxH, e.g. 2560x1600 (each 64–8192)", *screenMax)
	}
	mw, mh = max(mw, w), max(mh, h)
	var lv slog.Level
	if err := lv.UnmarshalText([]byte(*level)); err != nil {
		return Config{}, fmt.Errorf("log level %q: %w", *level, err)
	}
	if *session == "none" {
		*session = ""
	}
	if !strings.HasPrefix(*display, ":") {
		return Config{}, fmt.Errorf("display %q: want a local display like :0", *display)
	}
	return Config{
		RunDir: *runDir, Display: *display, Width: w, Height: h, MaxWidth: mw, MaxHeight: mh, Session: *session,
		Workspace: *workspace, NoXServer: *noX, Xvfb: *xvfb, Version: buildVersion(),
		Log: slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: lv})).With("component", "cubicle-guest"),
	}, nil
}

func parseSize(s string) (int, int, bool) {
	a, b, ok := strings.Cut(s, "x")
	if !ok {
		return 0, 0, false
	}
	w, err1 := strconv.Atoi(a)
	h, err2 := strconv.Atoi(b)
	if err1 != nil || err2 != nil || w < 64 || h < 64 || w > 8192 || h > 8192 {
		return 0, 0, false
	}
	return w, h, true
}

// driverVersion is set by scripts/lib.sh (-X): the last commit that changed a package the
// driver is built from. Builds are made without Go's VCS stamp (-buildvcs=false), so the same
// sources give the same binary in every commit, and the same desktop image.
var driverVersion string

// buildVersion is the driver's version: driverVersion, else the module version or VCS
// revision the binary was built from.
func buildVersion() string {
	if driverVersion != "" {
		return driverVersion
	}
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return "dev"
	}
	for _, s := range bi.Settings {
		if s.Key == "vcs.revision" && len(s.Value) >= 12 {
			return s.Value[:12]
		}
	}
	if bi.Main.Version != "" && bi.Main.Version != "(devel)" {
		return bi.Main.Version
	}
	return "dev"
}

func protocolVersion() int { return wire.ProtocolVersion }
