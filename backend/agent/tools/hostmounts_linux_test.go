//go:build linux

package tools

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"cubicle/backend/sandbox"
	"cubicle/internal/testenv"
)

// TestHostToolsWhileHostMountsChange: bubblewrap binds the host's root with its submounts
// and remounts each one read-only; a mount removed on the host in between (Podman removes a
// network namespace's for every container it stops) made it fail at random —
// "bwrap: Can't bind mount /oldroot/ on /newroot/: … remount …: No such file or directory" —
// and host_shell answered that as the command's own failure (seen in CI's bench run beside a
// test that makes and removes network namespaces). Here a mount under the test's directory
// comes and goes without pause while host_shell and the host file tools run: every run must
// run. Without the retry it failed within its first five runs in each of six tries here.
func TestHostToolsWhileHostMountsChange(t *testing.T) {
	testenv.Root(t, "mounting a tmpfs on the host")
	sb, err := sandbox.New(sandbox.Bwrap)
	if err != nil {
		testenv.Missing(t, "bubblewrap: %v", err)
	}
	dir := testenv.TempDir(t)
	work, churn := filepath.Join(dir, "work"), filepath.Join(dir, "churn")
	for _, d := range []string{work, churn} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(work, "notes.txt"), []byte("plain notes"), 0o644); err != nil {
		t.Fatal(err)
	}

	// Like /run/netns, the parent is a shared mount, so that the unmounts reach the mount
	// namespace bubblewrap made.
	if err := unix.Mount(dir, dir, "", unix.MS_BIND, ""); err != nil {
		t.Fatalf("bind %s: %v", dir, err)
	}
	defer unix.Unmount(dir, unix.MNT_DETACH)
	if err := unix.Mount("", dir, "", unix.MS_SHARED, ""); err != nil {
		t.Fatalf("make %s shared: %v", dir, err)
	}

	stop := make(chan struct{})
	var wg sync.WaitGroup
	var cycles int
	wg.Add(1)
	go func() { // owned here: ends when stop closes
		defer wg.Done()
		for {
			select {
			case <-stop:
				return
			default:
			}
			if err := unix.Mount("tmpfs", churn, "tmpfs", 0, "size=64k"); err != nil {
				t.Errorf("mount: %v", err)
				return
			}
			unix.Unmount(churn, unix.MNT_DETACH)
			cycles++
		}
	}()
	defer func() {
		close(stop)
		wg.Wait()
		unix.Unmount(churn, unix.MNT_DETACH)
	}()

	h := LocalHost{Sandbox: sb, Policy: func(context.Context) (sandbox.Policy, error) {
		return sandbox.Policy{WorkDir: work}, nil
	}}
	ctx := context.Background()
	const runs = 80
	for i := range runs {
		res, err := h.Shell(ctx, "cat notes.txt", work, 20*time.Second, 4096)
		if err != nil || res.ExitCode != 0 || string(res.Stdout) != "plain notes" {
			t.Fatalf("run %d of host_shell while a host mount comes and goes: exit %d, %v, stdout %q, stderr %q",
				i+1, res.ExitCode, err, res.Stdout, res.Stderr)
		}
		if i%3 == 0 {
			b, err := h.ReadFile(ctx, filepath.Join(work, "notes.txt"), 1024)
			if err != nil || string(b) != "plain notes" {
				t.Fatalf("run %d of the host file tool: %q, %v", i+1, b, err)
			}
		}
	}
	// A command's own failure is not run again, even when it looks like bubblewrap's.
	marker := filepath.Join(work, "ran")
	res, err := h.Shell(ctx, `echo x >> ran; echo "bwrap: Can't mount tmpfs on /newroot/x: No such file or directory" >&2; exit 2`, work, 20*time.Second, 4096)
	if err != nil || res.ExitCode != 2 {
		t.Fatalf("a failing command: exit %d, %v", res.ExitCode, err)
	}
	if b, _ := os.ReadFile(marker); strings.Count(string(b), "x") != 1 {
		t.Fatalf("a command that failed by itself ran %d times, want 1", strings.Count(string(b), "x"))
	}
	close(stop)
	wg.Wait()
	stop = make(chan struct{}) // for the deferred close
	t.Logf("%d runs of host_shell, %d of the file tool, while the mount came and went %d times", runs, runs/3, cycles)
}
