//go:build !windows

package vmtest

import (
	"testing"

	"cubicle/backend/engine/enginetest"
)

// TestFakePassesConformance holds the fake engine to the suite the real engines pass, so
// that unit tests built on it see what Podman, Docker and a cluster do. (Not on Windows:
// the fake's containers take paths as Linux does.)
func TestFakePassesConformance(t *testing.T) {
	enginetest.RunContainers(t, func(t *testing.T) enginetest.Containers {
		e := NewEngine()
		t.Cleanup(func() {
			if err := e.Close(); err != nil {
				t.Errorf("Close: %v", err)
			}
		})
		return e
	}, "localhost/cubicle-enginetest/fake:latest")
}
