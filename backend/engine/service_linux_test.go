package engine

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"time"

	"cubicle/backend/fault"
	"cubicle/internal/testenv"
)

// TestStartPodmanService starts an app-owned Podman service on a private socket, talks to it
// and stops it.
func TestStartPodmanService(t *testing.T) {
	testenv.Program(t, "podman")
	// Keep the socket path short: unix socket paths are limited to 108 bytes.
	dir, err := os.MkdirTemp("", "cub-svc-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	sock := filepath.Join(dir, "run", "podman.sock")
	logger := testenv.Logger(t, slog.LevelDebug)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	start := time.Now()
	svc, err := StartPodmanService(ctx, sock, logger)
	if err != nil {
		t.Fatalf("StartPodmanService: %v", err)
	}
	t.Logf("service answered after %v", time.Since(start).Round(time.Millisecond))
	kind, version, _, err := Ping(ctx, svc.Socket(), 5*time.Second)
	if err != nil || kind != Podman || version == "" {
		t.Fatalf("Ping(owned service) = %s %s, %v", kind, version, err)
	}
	if _, err := StartPodmanService(ctx, sock, logger); !errors.Is(err, fault.ErrExists) {
		t.Fatalf("second StartPodmanService on the same socket = %v, want ErrExists", err)
	}
	pid := svc.cmd.Process.Pid
	if err := svc.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	svc.Close() // idempotent
	select {
	case <-svc.Done():
	default:
		t.Fatal("Close returned before the process exited")
	}
	if _, err := os.Stat(fmt.Sprintf("/proc/%d", pid)); err == nil {
		t.Fatalf("service process %d still exists after Close", pid)
	}
	if _, _, _, err := Ping(ctx, svc.Socket(), time.Second); err == nil {
		t.Fatal("socket still answers after Close")
	}
}
