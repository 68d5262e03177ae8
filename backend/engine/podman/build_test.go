//go:build linux

package podman_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/blang/semver/v4"

	"cubicle/backend/engine"
	"cubicle/backend/engine/enginetest"
)

// TestBuildAfterTheEngineKilledAStep does to a real build what Podman before 4.6 does now and
// then on a busy service (containers/podman#17918): it SIGKILLs the service's runtime process
// of a RUN step ("buildah-oci-runtime", the step's parent), once. The build must go on (the
// step runs again) and say so in its progress; on Podman 4.6 and newer, which lack the bug, the
// same kill must fail the build (nothing there hides a killed step).
func TestBuildAfterTheEngineKilledAStep(t *testing.T) {
	c := connect(t)
	if engine.SocketPath(socket()) == "" {
		enginetest.Require(t, "the test finds the build step's processes in /proc: it needs a local Podman service")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	info, err := c.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	buggy := true
	if v, err := semver.ParseTolerant(info.APIVersion); err == nil && v.GE(semver.Version{Major: 4, Minor: 6}) {
		buggy = false
	}

	rootfs, err := enginetest.BusyboxRootfs()
	if err != nil {
		enginetest.Require(t, "no static busybox: "+err.Error())
	}
	run := randomHex(t)
	labels := map[string]string{enginetest.LabelRun: run}
	base := "localhost/cubicle-enginetest/busybox:" + run
	if _, err := c.ImportImage(ctx, bytes.NewReader(rootfs), base, labels); err != nil {
		t.Fatalf("ImportImage: %v", err)
	}
	tag := "localhost/cubicle-enginetest/killed-step:" + run
	t.Cleanup(func() {
		cctx, ccancel := context.WithTimeout(context.Background(), time.Minute)
		defer ccancel()
		c.RemoveImage(cctx, tag)
		c.RemoveImage(cctx, base)
	})

	// The step's command line carries the marker; the kill goes to its parent, and only when
	// that parent is the service's runtime process (a parallel build of another test is never
	// touched: its steps lack the marker).
	marker := "killed-step-" + run
	dir := t.TempDir()
	file := "FROM " + base + "\nRUN echo first > /first.txt\nRUN sleep 4; echo " + marker + " > /m.txt\n"
	if err := os.WriteFile(filepath.Join(dir, "Containerfile"), []byte(file), 0o644); err != nil {
		t.Fatal(err)
	}
	killed := make(chan int, 1)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-stop:
				return
			case <-time.After(50 * time.Millisecond):
			}
			step := findProc(marker)
			if step == 0 {
				continue
			}
			parent := parentOf(step)
			if !strings.HasPrefix(cmdline(parent), "buildah-oci-runtime") {
				continue
			}
			if err := syscall.Kill(parent, syscall.SIGKILL); err != nil {
				t.Errorf("kill the runtime process %d: %v", parent, err)
				return
			}
			syscall.Kill(step, syscall.SIGKILL) // the orphaned step of the killed run
			killed <- parent
			return
		}
	}()
	var progress bytes.Buffer
	var mu sync.Mutex
	_, err = c.BuildImage(ctx, engine.BuildSpec{ContextDir: dir, Tag: tag, Labels: labels,
		Progress: writerFunc(func(p []byte) (int, error) { mu.Lock(); defer mu.Unlock(); return progress.Write(p) })})
	close(stop)
	wg.Wait()
	mu.Lock()
	out := progress.String()
	mu.Unlock()
	select {
	case pid := <-killed:
		t.Logf("killed the runtime process %d of the step (Podman %s)", pid, info.APIVersion)
	default:
		t.Fatalf("the build step (%q) never ran under a runtime process (build: %v)\n%s", marker, err, out)
	}
	if !buggy {
		if err == nil || !strings.Contains(err.Error(), "signal: killed") {
			t.Fatalf("Podman %s: the killed step gave %v, want the build to fail with it", info.APIVersion, err)
		}
		return
	}
	if err != nil {
		t.Fatalf("Podman %s: the build did not survive the killed step: %v\n%s", info.APIVersion, err, out)
	}
	if !strings.Contains(out, "containers/podman#17918); building again (attempt 2 of 3)") {
		t.Errorf("the progress does not say the step was built again:\n%s", out)
	}
	if n := strings.Count(out, marker); n < 2 {
		t.Errorf("the killed step ran %d time(s) in the progress, want it again after the kill:\n%s", n, out)
	}
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }

func randomHex(t *testing.T) string {
	b := make([]byte, 6)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(b)
}

// findProc returns the pid of a process whose command line contains s and is not a shell
// of this test's search (0 if none).
func findProc(s string) int {
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == os.Getpid() {
			continue
		}
		if strings.Contains(cmdline(pid), s) {
			return pid
		}
	}
	return 0
}

func cmdline(pid int) string {
	b, _ := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cmdline")
	return strings.ReplaceAll(string(b), "\x00", " ")
}

func parentOf(pid int) int {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0
	}
	// The command name (field 2) may hold spaces; the fields after its ")" are fixed.
	s := string(b)
	fields := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	if len(fields) < 2 {
		return 0
	}
	ppid, _ := strconv.Atoi(fields[1])
	return ppid
}
