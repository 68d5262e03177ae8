package vm_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"cubicle/backend/engine"
	"cubicle/backend/engine/enginetest"
	"cubicle/backend/fault"
	"cubicle/backend/vm"
	"cubicle/images"
)

// TestPrepareStandardFromRegistry prepares the standard image the way a Mac or Windows machine
// does: the host debootstrap path is turned off (CUBICLE_BASE_SOURCE=pull), and the Debian base
// is pulled by digest from a registry an admin configured in Settings → Local VM (Debian's
// docker-registry on loopback, serving a bare Debian base pushed by the test). The desktop is
// built on the pulled base and verified by the real probe: the driver's handshake and a real,
// non-blank screenshot.
func TestPrepareStandardFromRegistry(t *testing.T) {
	env := newRealEnv(t)
	ctx, cancel := context.WithTimeout(context.Background(), 40*time.Minute)
	defer cancel()
	registry := enginetest.StartRegistry(t)

	// The bare base under the machine's standard image: the offline base on a machine without
	// a registry, the pinned Debian image on one with.
	m0 := env.manager(nil)
	env.prepare(m0)
	m0.Close()
	list, err := env.builder.List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	sys, err := env.eng.InspectImage(ctx, list[0].SystemRef)
	if err != nil {
		t.Fatal(err)
	}
	bareRef := sys.Labels[images.LabelBase]
	if hash, ok := strings.CutPrefix(bareRef, "debootstrap "); ok {
		bareRef = "localhost/cubicle-base:bookworm-" + hash[:12]
	}
	bare, err := env.eng.InspectImage(ctx, bareRef)
	if err != nil {
		t.Fatalf("the standard image's base %q: %v", sys.Labels[images.LabelBase], err)
	}
	if out, err := runIn(ctx, env, bare.ID, "test -x /usr/bin/apt-get && ! command -v Xvfb && echo bare"); err != nil || out != "bare" {
		t.Fatalf("%s is not a bare Debian base: %q, %v", bareRef, out, err)
	}

	// Push it (with a label unique to this run, so the digest is new and the engine cannot
	// resolve it locally) and remove it from the engine: the preparation must pull it.
	repo := registry + "/cubicle-test/debian"
	pushRef := repo + ":bookworm-slim"
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "Containerfile"), []byte("FROM "+bare.ID+"\nLABEL io.cubicle.test-run="+filepath.Base(dir)+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := env.eng.BuildImage(ctx, engine.BuildSpec{ContextDir: dir, Tag: pushRef, Labels: env.labels}); err != nil {
		t.Fatal(err)
	}
	digest, err := env.eng.PushImage(ctx, pushRef, engine.PullOptions{Insecure: true})
	if rerr := env.eng.RemoveImage(ctx, pushRef); rerr != nil {
		t.Errorf("remove %s: %v", pushRef, rerr)
	}
	if err != nil {
		t.Fatal(err)
	}
	pinned := repo + "@" + digest
	if _, err := env.eng.InspectImage(ctx, pinned); !errors.Is(err, fault.ErrNotFound) {
		t.Fatalf("%s is still in the engine (%v): the pull would not be exercised", pinned, err)
	}
	t.Logf("pushed the bare base %s as %s", bareRef, pinned)

	// A builder configured like the app's: the pins come from the node's settings.
	t.Setenv(images.EnvBaseSource, string(images.BasePull))
	builder, err := images.New(images.Config{Engine: env.eng, Logger: testLogger(t), WorkDir: t.TempDir(), Driver: driver(t),
		Pins: vm.PinSource(env.store, env.node, os.Getenv)})
	if err != nil {
		t.Fatal(err)
	}
	m := env.manager(func(c *vm.Config) { c.Images = builder })
	defer m.Close()
	src, err := m.SetImageSources(ctx, vm.ImageSourcesUpdate{Standard: &vm.SourceUpdate{Image: pushRef, Digest: digest}})
	if err != nil {
		t.Fatal(err)
	}
	if src.Standard.ImageFrom != vm.FromSettings || src.Standard.Digest != digest || src.BaseSource != "pull" {
		t.Fatalf("sources %+v", src)
	}
	after, err := builder.List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cctx, ccancel := context.WithTimeout(context.Background(), time.Minute)
		defer ccancel()
		for _, ref := range []string{after[0].Ref, after[0].SystemRef, pinned} {
			if err := env.eng.RemoveImage(cctx, ref); err != nil && !errors.Is(err, fault.ErrNotFound) {
				t.Errorf("cleanup: remove %s: %v", ref, err)
			}
		}
	})
	if after[0].Ref == list[0].Ref || after[0].SystemRef == list[0].SystemRef {
		t.Fatalf("the configured base did not change the standard image's tags: %s, %s", after[0].Ref, after[0].SystemRef)
	}

	img := env.prepare(m) // the real probe: handshake and a real screenshot
	if img.Ref != after[0].Ref {
		t.Fatalf("prepared %s, want %s", img.Ref, after[0].Ref)
	}
	got, err := env.eng.InspectImage(ctx, after[0].SystemRef)
	if err != nil || got.Labels[images.LabelBase] != pinned {
		t.Fatalf("system layer %s: base label %q, %v; want %s", after[0].SystemRef, got.Labels[images.LabelBase], err, pinned)
	}
	if _, err := env.eng.InspectImage(ctx, pinned); err != nil {
		t.Fatalf("the base was not pulled by digest: %v", err)
	}
	st, err := m.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if p := st.Images[0].Prepare; p == nil || p.Phase != "done" || !st.Images[0].Prepared || st.Images[0].Ref != img.Ref {
		t.Fatalf("image view %+v", st.Images[0])
	}
	t.Logf("prepared %s from %s with the host debootstrap path off (driver %s)", img.Ref, pinned, img.DriverVersion)
}

// runIn runs sh -c script in a throw-away container of image and returns its trimmed output.
func runIn(ctx context.Context, env *realEnv, image, script string) (string, error) {
	run := t0dir(env.t)
	c, err := env.eng.CreateContainer(ctx, engine.ContainerSpec{
		Image: image, Labels: env.labels, User: "0", NetworkMode: "none",
		Command: []string{"/bin/sh", "-c", "(" + script + ") > /run/out/o.tmp 2>&1; mv /run/out/o.tmp /run/out/o"},
		Mounts:  []engine.Mount{{Source: run, Target: "/run/out"}},
		Limits:  engine.Limits{NoFile: 4096, NProc: 4096},
	})
	if err != nil {
		return "", err
	}
	defer env.eng.RemoveContainer(context.Background(), c.ID, true)
	if err := env.eng.StartContainer(ctx, c.ID); err != nil {
		return "", err
	}
	deadline := time.Now().Add(time.Minute)
	for time.Now().Before(deadline) {
		if b, err := os.ReadFile(filepath.Join(run, "o")); err == nil {
			return strings.TrimSpace(string(b)), nil
		}
		time.Sleep(100 * time.Millisecond)
	}
	return "", errors.New("no output within a minute")
}

func t0dir(t *testing.T) string {
	d := t.TempDir()
	if err := os.Chmod(d, 0o777); err != nil {
		t.Fatal(err)
	}
	return d
}
