//go:build linux

package main

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"cubicle/backend/fault"
)

// TestWaitDir: wait_dir answers when a file appears, is written, renamed into place or
// removed in the folder — not before — and false when its time runs out; a missing folder is
// not found, and a cancelled wait ends.
func TestWaitDir(t *testing.T) {
	h := startDriver(t, 155, 320, 240)
	ctx := context.Background()
	dir := filepath.Join(h.workspace, "Downloads")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "old.txt"), []byte("old"), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Run("nothing changes", func(t *testing.T) {
		start := time.Now()
		changed, err := h.client.WaitDir(ctx, dir, 300*time.Millisecond)
		if err != nil || changed || time.Since(start) < 250*time.Millisecond {
			t.Fatalf("WaitDir on a quiet folder = %v, %v after %v; want false after its 300 ms", changed, err, time.Since(start))
		}
	})
	for _, c := range []struct {
		name string
		do   func() error
	}{
		{"a file is saved", func() error { return os.WriteFile(filepath.Join(dir, "report.pdf"), []byte("%PDF"), 0o644) }},
		{"a download is renamed into place", func() error {
			return os.Rename(filepath.Join(dir, "report.pdf"), filepath.Join(dir, "report-final.pdf"))
		}},
		{"a file is removed", func() error { return os.Remove(filepath.Join(dir, "old.txt")) }},
	} {
		t.Run(c.name, func(t *testing.T) {
			res := make(chan error, 1)
			go func() {
				changed, err := h.client.WaitDir(ctx, "Downloads", 20*time.Second) // relative to the workspace
				if err == nil && !changed {
					err = errors.New("not changed")
				}
				res <- err
			}()
			time.Sleep(300 * time.Millisecond) // the watch is set
			select {
			case err := <-res:
				t.Fatalf("the wait ended before the change: %v", err)
			default:
			}
			if err := c.do(); err != nil {
				t.Fatal(err)
			}
			select {
			case err := <-res:
				if err != nil {
					t.Fatal(err)
				}
			case <-time.After(10 * time.Second):
				t.Fatal("no answer within 10 s of the change")
			}
		})
	}
	t.Run("a missing folder", func(t *testing.T) {
		if _, err := h.client.WaitDir(ctx, filepath.Join(h.workspace, "nope"), time.Second); !errors.Is(err, fault.ErrNotFound) {
			t.Fatalf("WaitDir on a missing folder: %v, want not found", err)
		}
	})
	t.Run("cancelled", func(t *testing.T) {
		cctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
		defer cancel()
		start := time.Now()
		if _, err := h.client.WaitDir(cctx, dir, time.Minute); err == nil || time.Since(start) > 5*time.Second {
			t.Fatalf("a cancelled wait: %v after %v", err, time.Since(start))
		}
	})
}
