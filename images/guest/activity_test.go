//go:build linux

package main

import (
	"os/exec"
	"testing"
	"time"
)

// TestActivity: a child that burns CPU is seen (its CPU time grows) and a program started
// since is seen as started; nothing started is not.
func TestActivity(t *testing.T) {
	t0, p0 := activity()
	if _, p := activity(); started(p0, p) {
		t.Fatalf("nothing started, yet %v is new next to %v", p, p0)
	}
	cmd := exec.Command("sh", "-c", "while :; do :; done")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { cmd.Process.Kill(); cmd.Wait() }()
	if _, p := activity(); !p[cmd.Process.Pid] || !started(p0, p) {
		t.Fatalf("the child %d is not among the descendants %v", cmd.Process.Pid, p)
	}
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		if t1, _ := activity(); int64(t1-t0) >= 2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("a child burning CPU for 10 s used no time")
		}
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
