//go:build linux

package hostwall

import (
	"errors"
	"os"
	"strings"
	"testing"

	"cubicle/backend/fault"
)

// A process of this machine is never proven to be a desktop: not by a container id its
// cgroup does not name, and not by a run directory its root does not show.
func TestProofRefusesAnotherProcess(t *testing.T) {
	pid := os.Getpid()
	id := strings.Repeat("ab", 32)
	err := Proof{ContainerID: id}.check(pid)
	if !errors.Is(err, fault.ErrUnavailable) {
		t.Fatalf("container id not in the cgroup: %v", err)
	}
	dir := t.TempDir()
	err = Proof{ContainerID: id, RunDir: dir, ContainerRunDir: "/nonexistent-cubicle-run"}.check(pid)
	if err == nil {
		t.Fatal("a run directory the process does not show proved it")
	}
	// The same directory seen through the process's own root is a proof (what the bind mount
	// gives a desktop).
	if err := (Proof{RunDir: dir, ContainerRunDir: dir}).check(pid); err != nil {
		t.Fatalf("the run directory seen through the process's root: %v", err)
	}
	if err := Apply(0, Proof{ContainerID: id}, Wall{}); !errors.Is(err, fault.ErrUnavailable) {
		t.Fatalf("pid 0: %v", err)
	}
}
