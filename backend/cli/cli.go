// Package cli is the `cubicle` command line: it picks the mode (desktop app, serve, doctor,
// image, version), builds backend.Config from flags and environment, runs, and maps error
// classes to exit codes in one place. main.go only calls Main.
package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"

	"cubicle/backend/fault"
)

// Version is the program's version, set at build time with
// -ldflags "-X cubicle/backend/cli.Version=…".
var Version = "0.1.0-dev"

// env is what a command runs with; tests replace its parts.
type env struct {
	stdin          io.Reader
	stdout, stderr io.Writer
	getenv         func(string) string
	shell          DesktopShell
}

type command struct {
	name    string
	summary string
	run     func(ctx context.Context, e *env, args []string) error
}

func commands() []command {
	return []command{
		{"serve", "serve the UI and API over HTTP on 127.0.0.1 (web mode)", runServe},
		{"doctor", "check the container engine, display and data directory (--check-store: the data file)", runDoctor},
		{"restore-backup", "put a backup of the data file back (the newest sound one, or FILE; --list)", runRestoreBackup},
		{"runner", "run this machine as an execution node of a server (--server URL --token TOKEN)", runRunner},
		{"mcp", "a stdio MCP server for Claude Code, Codex, Cursor: Cubicle's computers (--server URL, $CUBICLE_TOKEN)", runMCP},
		{"image", "build or list the desktop images (build standard|cursor, list)", runImage},
		{"bench", "measure Cubicle against other agent-desktop tools' methods (--quick, --json FILE)", runBench},
		{"admin", "tasks on the server's machine: reset-password USER", runAdmin},
		{"version", "print the version", runVersion},
	}
}

// Main runs the command line args (without the program name) and returns the exit code.
func Main(args []string, shell DesktopShell) int {
	attachConsole()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	e := &env{stdin: os.Stdin, stdout: os.Stdout, stderr: os.Stderr, getenv: os.Getenv, shell: shell}
	return run(ctx, e, args)
}

func run(ctx context.Context, e *env, args []string) int {
	err := dispatch(ctx, e, args)
	if err == nil || errors.Is(err, flag.ErrHelp) {
		return 0
	}
	var ex exitError
	if errors.As(err, &ex) {
		return ex.code
	}
	fmt.Fprintln(e.stderr, "cubicle:", err)
	return exitCode(err)
}

func dispatch(ctx context.Context, e *env, args []string) error {
	if len(args) == 0 || strings.HasPrefix(args[0], "-") && args[0] != "-h" && args[0] != "--help" && args[0] != "-help" {
		return runDesktop(ctx, e, args)
	}
	name := args[0]
	if name == "help" || name == "-h" || name == "--help" || name == "-help" {
		if len(args) > 1 {
			return dispatch(ctx, e, []string{args[1], "--help"})
		}
		usage(e.stdout)
		return nil
	}
	for _, c := range commands() {
		if c.name == name {
			return c.run(ctx, e, args[1:])
		}
	}
	usage(e.stderr)
	return fault.Invalid("unknown command %q; run `cubicle help`", name)
}

func usage(w io.Writer) {
	fmt.Fprintf(w, `Cubicle %s — AI agents, each on its own desktop.

Usage:
  cubicle [--data-dir DIR]   start the desktop app (without a display: use serve)
  cubicle COMMAND [flags]

Commands:
`, Version)
	for _, c := range commands() {
		fmt.Fprintf(w, "  %-9s %s\n", c.name, c.summary)
	}
	fmt.Fprintf(w, "\nRun `cubicle COMMAND --help` for a command's flags.\n")
}

// exitError carries an exit code whose message was already printed.
type exitError struct{ code int }

func (e exitError) Error() string { return fmt.Sprintf("exit %d", e.code) }

// exitCode maps an error class to the process exit code.
func exitCode(err error) int {
	switch fault.Class(err) {
	case fault.ErrInvalid:
		return 2
	case fault.ErrUnavailable:
		return 3
	case fault.ErrConflict, fault.ErrExists:
		return 4
	case fault.ErrForbidden, fault.ErrUnauthenticated:
		return 5
	case fault.ErrNotFound:
		return 6
	}
	return 1
}

// newFlags returns a flag set that prints its usage to e.stdout on --help and reports
// misuse as fault.ErrInvalid.
func newFlags(e *env, name, synopsis string) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(e.stderr)
	fs.Usage = func() {
		fs.SetOutput(e.stdout)
		fmt.Fprintf(e.stdout, "Usage: %s\n\nFlags:\n", synopsis)
		fs.PrintDefaults()
	}
	return fs
}

func parse(fs *flag.FlagSet, args []string) error {
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return fault.Invalid("%v", err)
	}
	if fs.NArg() > 0 {
		return fault.Invalid("unexpected argument %q; run `cubicle %s --help`", fs.Arg(0), fs.Name())
	}
	return nil
}

// defaultDataDir is $CUBICLE_DATA_DIR, else the OS's per-user data directory
// ($XDG_DATA_HOME/cubicle or ~/.local/share/cubicle on Linux).
func defaultDataDir(getenv func(string) string) string {
	if d := getenv("CUBICLE_DATA_DIR"); d != "" {
		return d
	}
	if runtime.GOOS == "linux" {
		if d := getenv("XDG_DATA_HOME"); d != "" {
			return filepath.Join(d, "cubicle")
		}
		if home, err := os.UserHomeDir(); err == nil {
			return filepath.Join(home, ".local", "share", "cubicle")
		}
	}
	if d, err := os.UserConfigDir(); err == nil {
		return filepath.Join(d, "Cubicle")
	}
	return ".cubicle"
}

func newLogger(w io.Writer, level string) (*slog.Logger, error) {
	var l slog.Level
	if err := l.UnmarshalText([]byte(level)); err != nil {
		return nil, fault.Invalid("unknown log level %q: use debug, info, warn or error", level)
	}
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: l})), nil
}

func runVersion(ctx context.Context, e *env, args []string) error {
	fs := newFlags(e, "version", "cubicle version")
	if err := parse(fs, args); err != nil {
		return err
	}
	fmt.Fprintf(e.stdout, "cubicle %s (%s, %s/%s)\n", Version, runtime.Version(), runtime.GOOS, runtime.GOARCH)
	return nil
}
