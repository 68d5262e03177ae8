package main

import (
	"os/exec"
	"testing"
	"time"
)

// TestActivity: a child that burns CPU is seen (running or its CPU time grows); once it is
// gone, its time no longer grows.
func TestActivity(t *testing.T) {
	t0, _ := activity()
	cmd := exec.Command("sh", "-c", "while :; do :; done")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	seen := false
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline) && !seen; time.Sleep(5 * time.Millisecond) {
		ticks, running := activity()
		seen = running > 0 && ticks >= t0
	}
	cmd.Process.Kill()
	cmd.Wait()
	if !seen {
		t.Fatal("a child burning CPU was never seen running")
	}
	// A sleeping child is not running.
	sl := exec.Command("sleep", "30")
	if err := sl.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { sl.Process.Kill(); sl.Wait() }()
	quiet := false
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline) && !quiet; time.Sleep(5 * time.Millisecond) {
		_, running := activity()
		quiet = running == 0
	}
	if !quiet {
		t.Fatal("a sleeping child counted as running")
	}
}
