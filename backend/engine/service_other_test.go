//go:build !linux

package engine

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"cubicle/backend/fault"
	"cubicle/internal/testenv"
)

// TestStartPodmanServiceRefused: outside Linux there is no `podman system service`; the
// error says to start the Podman machine instead, and nothing is created.
func TestStartPodmanServiceRefused(t *testing.T) {
	sock := filepath.Join(testenv.TempDir(t), "run", "podman.sock")
	_, err := StartPodmanService(context.Background(), sock, nil)
	if !errors.Is(err, fault.ErrUnavailable) || !strings.Contains(err.Error(), "podman machine start") {
		t.Fatalf("StartPodmanService = %v, want unavailable with `podman machine start`", err)
	}
	if _, statErr := os.Stat(filepath.Dir(sock)); !os.IsNotExist(statErr) {
		t.Fatalf("StartPodmanService created %s (stat: %v)", filepath.Dir(sock), statErr)
	}
}
