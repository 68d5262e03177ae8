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

// TestActivityKeepsReapedTime: the CPU time of a child that ended and was reaped stays in
// the sum, so a program that worked and exited still counts as activity.
func TestActivityKeepsReapedTime(t *testing.T) {
	t0, _ := activity()
	if err := exec.Command("sh", "-c", "i=0; while [ $i -lt 200000 ]; do i=$((i+1)); done").Run(); err != nil {
		t.Fatal(err)
	}
	if t1, _ := activity(); int64(t1-t0) < 2 {
		t.Fatalf("a child that burnt CPU and ended: the sum went from %d to %d ticks", t0, t1)
	}
}
