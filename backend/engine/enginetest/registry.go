package enginetest

import (
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"cubicle/backend/engine"
)

// RegistryBinary is Debian's docker-registry (the CNCF distribution registry).
const RegistryBinary = "docker-registry"

// StartRegistry runs a loopback registry (Debian's docker-registry) storing in a temporary
// directory until the test ends and returns its host:port. Without the binary the test is
// skipped, or fails when CUBICLE_REQUIRE_ALL=1.
func StartRegistry(t *testing.T) string {
	t.Helper()
	bin, err := exec.LookPath(RegistryBinary)
	if err != nil {
		Require(t, "no "+RegistryBinary+" (apt-get install docker-registry)")
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	dir := t.TempDir()
	cfg := fmt.Sprintf("version: 0.1\nlog:\n  level: warn\nstorage:\n  filesystem:\n    rootdirectory: %s\n  delete:\n    enabled: true\nhttp:\n  addr: %s\n", filepath.Join(dir, "data"), addr)
	cfgPath := filepath.Join(dir, "config.yml")
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "serve", cfgPath)
	var out strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatalf("start registry: %v", err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-done
	})
	deadline := time.Now().Add(10 * time.Second)
	for {
		resp, err := http.Get("http://" + addr + "/v2/")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return addr
			}
		}
		select {
		case <-done:
			t.Fatalf("registry exited: %s", out.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("registry did not answer on %s: %v", addr, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// testRegistry pushes the test image to a loopback registry and pulls it back by digest.
func (s *suite) testRegistry(t *testing.T) {
	addr := StartRegistry(t)
	ctx := testContext(t, 3*time.Minute)
	base, err := s.images.InspectImage(ctx, s.image)
	if err != nil {
		t.Fatal(err)
	}
	repo := addr + "/cubicle-enginetest/busybox"
	ref := repo + ":" + s.run
	if err := s.images.TagImage(ctx, base.ID, ref); err != nil {
		t.Fatalf("TagImage: %v", err)
	}
	progress := &lineWriter{}
	digest, err := s.images.PushImage(ctx, ref, engine.PullOptions{Insecure: true, Progress: progress})
	if err != nil {
		t.Fatalf("PushImage: %v\n%s", err, strings.Join(progress.lines(), "\n"))
	}
	if !strings.HasPrefix(digest, "sha256:") || len(digest) != len("sha256:")+64 {
		t.Fatalf("PushImage digest = %q", digest)
	}
	t.Logf("pushed %s as %s (%d progress lines)", ref, digest, len(progress.lines()))
	if err := s.images.RemoveImage(ctx, ref); err != nil {
		t.Fatalf("RemoveImage(pushed tag): %v", err)
	}

	pinned := repo + "@" + digest
	progress = &lineWriter{}
	img, err := s.images.PullImage(ctx, pinned, "linux/"+runtime.GOARCH, engine.PullOptions{Insecure: true, Progress: progress})
	if err != nil {
		t.Fatalf("PullImage(%s): %v\n%s", pinned, err, strings.Join(progress.lines(), "\n"))
	}
	if img.ID != base.ID {
		t.Errorf("pulled image id %s, want %s", short(img.ID), short(base.ID))
	}
	if !slices.Contains(img.Digests, pinned) {
		t.Errorf("pulled image digests %v lack %s", img.Digests, pinned)
	}
	if byDigest, err := s.images.InspectImage(ctx, pinned); err != nil || byDigest.ID != base.ID {
		t.Errorf("InspectImage(%s) = %s, %v", pinned, short(byDigest.ID), err)
	}

	wrong := repo + "@sha256:" + strings.Repeat("0", 64)
	if _, err := s.images.PullImage(ctx, wrong, "", engine.PullOptions{Insecure: true}); err == nil {
		t.Fatalf("PullImage(%s) succeeded, want a refusal", wrong)
	} else {
		t.Logf("wrong digest refused: %v", err)
	}
}
