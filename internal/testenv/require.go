package testenv

import (
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"strings"
	"testing"
)

// RequireAllEnv is the variable CI sets (scripts/test.sh): with it, a missing resource fails
// the test instead of skipping it, so a skip can never pass as a check there.
const RequireAllEnv = "CUBICLE_REQUIRE_ALL"

// PodmanSocket is the rootful Podman service's socket that the integration tests use
// (scripts/lib.sh ensure_podman_service starts it).
const PodmanSocket = "/run/podman/podman.sock"

// Required reports whether CI asked for every resource (CUBICLE_REQUIRE_ALL=1).
func Required() bool { return os.Getenv(RequireAllEnv) == "1" }

// Missing ends the test for a missing resource: a skip, or a failure when
// CUBICLE_REQUIRE_ALL=1. The one place where a test decides between the two.
func Missing(t testing.TB, format string, args ...any) {
	t.Helper()
	msg := fmt.Sprintf(format, args...)
	if Required() {
		t.Fatalf("required resource missing (%s=1): %s", RequireAllEnv, msg)
	}
	t.Skip(msg)
}

// Program returns the path of program on PATH, or ends the test through Missing.
func Program(t testing.TB, program string) string {
	t.Helper()
	p, err := exec.LookPath(program)
	if err != nil {
		Missing(t, "%s is not installed: %v", program, err)
	}
	return p
}

// Root ends the test through Missing unless it runs as root; why says what needs it.
func Root(t testing.TB, why string) {
	t.Helper()
	if os.Geteuid() != 0 {
		Missing(t, "%s needs root", why)
	}
}

// PodmanService ends the test through Missing unless the rootful Podman service's socket is
// there.
func PodmanService(t testing.TB) {
	t.Helper()
	if _, err := os.Stat(PodmanSocket); err != nil {
		Missing(t, "the rootful Podman service is not running (%v): start it with scripts/lib.sh ensure_podman_service", err)
	}
}

// RootPodman is Root and PodmanService: what a test that starts real desktops needs.
func RootPodman(t testing.TB) {
	t.Helper()
	Root(t, "a real desktop")
	PodmanService(t)
}

// Writer is the test's own output: each write is one log entry of t (no file:line), kept with
// the test that made it.
func Writer(t testing.TB) io.Writer { return lineWriter{t} }

// Logger is a text slog.Logger writing to the test's output at level.
func Logger(t testing.TB, level slog.Level) *slog.Logger {
	return slog.New(slog.NewTextHandler(Writer(t), &slog.HandlerOptions{Level: level}))
}

type lineWriter struct{ t testing.TB }

func (w lineWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}
