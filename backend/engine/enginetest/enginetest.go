// Package enginetest is the conformance suite every container engine adapter must pass. It
// runs against real engines (Podman always in CI; Docker where a daemon answers; a cluster
// through RunCluster) and against the fake engine of unit tests (vmtest.Engine, through
// RunContainers), and needs no registry: it imports a tiny root file system built on the fly
// from the host's static busybox (Debian package busybox-static).
//
// Every object the suite creates carries the labels cubicle.test=engine and
// cubicle.test.run=<run id>, and the suite removes only objects with its own run id, so it
// can run beside other users of the same engine.
package enginetest

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"io"
	"os"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"cubicle/backend/engine"
	"cubicle/backend/fault"
	"cubicle/internal/testenv"
)

// Engine is the method set the suite exercises: exactly the adapters' public surface.
type Engine interface {
	Containers
	BuildImage(ctx context.Context, spec engine.BuildSpec) (engine.Image, error)
	ImportImage(ctx context.Context, rootfsTar io.Reader, ref string, labels map[string]string) (engine.Image, error)
	PullImage(ctx context.Context, ref, platform string, opts engine.PullOptions) (engine.Image, error)
	InspectImage(ctx context.Context, ref string) (engine.Image, error)
	ListImages(ctx context.Context, labels map[string]string) ([]engine.Image, error)
	TagImage(ctx context.Context, id, ref string) error
	RemoveImage(ctx context.Context, ref string) error
	PushImage(ctx context.Context, ref string, opts engine.PullOptions) (digest string, err error)
}

// Containers is the part of Engine every engine has, a cluster's too (see RunCluster).
type Containers interface {
	Info(ctx context.Context) (engine.Info, error)
	CreateContainer(ctx context.Context, spec engine.ContainerSpec) (engine.ContainerState, error)
	StartContainer(ctx context.Context, id string) error
	StopContainer(ctx context.Context, id string, timeout time.Duration) error
	PauseContainer(ctx context.Context, id string) error
	UnpauseContainer(ctx context.Context, id string) error
	Events(ctx context.Context, labels map[string]string) (*engine.EventStream, error)
	RemoveContainer(ctx context.Context, id string, force bool) error
	InspectContainer(ctx context.Context, id string) (engine.ContainerState, error)
	// LastOutput is the end of what the container's main process wrote (best effort).
	LastOutput(ctx context.Context, id string) string
	ListContainers(ctx context.Context, labels map[string]string) ([]engine.ContainerState, error)
	EnsureVolume(ctx context.Context, name string, labels map[string]string) error
	ExecAttach(ctx context.Context, id string, spec engine.ExecSpec) (*engine.ExecStream, error)
	RemoveVolume(ctx context.Context, name string) error
	ListVolumes(ctx context.Context, labels map[string]string) ([]string, error)
	Volumes(ctx context.Context, labels map[string]string) ([]engine.Volume, error)
	VolumeSizes(ctx context.Context, names []string) (map[string]int64, error)
	ContainerStats(ctx context.Context, id string) (engine.Stats, error)
	Close() error
}

// Labels on every object the suite creates.
const (
	LabelTest = "cubicle.test"     // always "engine"
	LabelRun  = "cubicle.test.run" // the run id, unique per Run
)

// BusyboxPath is the static busybox the test image is made of.
const BusyboxPath = "/bin/busybox"

// Require skips the test with msg, or fails it when CUBICLE_REQUIRE_ALL=1 (CI), so that a
// missing engine or tool can never pass as a skip there.
func Require(t testing.TB, msg string) {
	t.Helper()
	testenv.Missing(t, "%s", msg)
}

// suite is one run's shared state.
type suite struct {
	e      Containers
	images Engine // e with its image store; nil without one (RunCluster, RunContainers)
	info   engine.Info
	run    string            // run id
	labels map[string]string // the labels of every object this run creates
	image  string            // the imported busybox image reference
	// cluster is set for an engine without an image store or host mounts (RunCluster).
	cluster *Cluster
}

// Cluster describes an engine that has no image store of its own and cannot bind-mount host
// directories (Kubernetes), for RunCluster.
type Cluster struct {
	// Image is a busybox image (BusyboxRootfs) the engine can pull, by digest.
	Image string
	// UID is the user the engine's containers run as (it never runs them as root).
	UID int
}

// RunCluster runs the suite's container part against an engine of the Cluster kind: Info,
// Lifecycle, VolumePersists, ExecAttach, Events and Errors, each with what such an engine
// can do. A report the container writes is read back through ExecAttach instead of a host
// mount; the rlimits, the per-container process limit, the host pid, pause, running as root
// and exec as another user are not checked (docs/kubernetes.md lists them); image tests do
// not run (the caller pushed c.Image).
func RunCluster(t *testing.T, newEngine func(t *testing.T) Containers, c Cluster) {
	if c.Image == "" || c.UID <= 0 {
		t.Fatalf("RunCluster needs an image and the containers' uid: %+v", c)
	}
	s := &suite{e: newEngine(t), run: randomID(), image: c.Image, cluster: &c}
	s.start(t)
	t.Run("Info", s.testInfo)
	s.containerTests(t)
}

// RunContainers runs the container part of the suite against an engine that has no image
// store of its own but otherwise promises what a local engine does — bind mounts of host
// directories, pause, containers running as root, limits applied: the fake engine of unit
// tests (vmtest.Engine), which holds itself to the real engines' behaviour this way. It runs
// RunCluster's tests with the local engines' checks (pause, root, bind-mounted reports, the
// process limits) and Resources; the image tests do not run, and image is any reference the
// engine creates containers from.
func RunContainers(t *testing.T, newEngine func(t *testing.T) Containers, image string) {
	if image == "" {
		t.Fatal("RunContainers needs the image its containers are created from")
	}
	s := &suite{e: newEngine(t), run: randomID(), image: image}
	s.start(t)
	t.Run("Info", s.testInfo)
	s.containerTests(t)
}

// containerTests runs the container part: every engine's, with Resources where host
// directories can be bind-mounted (not on a cluster).
func (s *suite) containerTests(t *testing.T) {
	t.Run("Lifecycle", s.testLifecycle)
	t.Run("ExitsAtOnce", s.testExitsAtOnce)
	t.Run("VolumePersists", s.testVolumePersists)
	if s.cluster == nil {
		t.Run("Resources", s.testResources)
	}
	t.Run("ExecAttach", s.testExecAttach)
	t.Run("Events", s.testEvents)
	t.Run("Errors", s.testErrors)
}

// start reads the engine's Info and registers the clean-up of the run's objects.
func (s *suite) start(t *testing.T) {
	s.labels = map[string]string{LabelTest: "engine", LabelRun: s.run}
	ctx := testContext(t, 2*time.Minute)
	info, err := s.e.Info(ctx)
	if err != nil {
		t.Fatalf("Info: %v", err)
	}
	s.info = info
	t.Logf("engine %s %s (API %s) at %s, rootless=%v", info.Kind, info.Version, info.APIVersion, info.Socket, info.Rootless)
	t.Cleanup(func() { s.cleanup(t) })
}

// Run runs the conformance suite against the engine newEngine returns (it is called once;
// register its Close with t.Cleanup).
func Run(t *testing.T, newEngine func(t *testing.T) Engine) {
	if _, err := os.Stat(BusyboxPath); err != nil {
		Require(t, "no static busybox at "+BusyboxPath+" (apt-get install busybox-static)")
	}
	e := newEngine(t)
	s := &suite{e: e, images: e, run: randomID()}
	s.start(t)
	ctx := testContext(t, 2*time.Minute)

	rootfs, err := BusyboxRootfs()
	if err != nil {
		t.Fatalf("busybox rootfs: %v", err)
	}
	s.image = "localhost/cubicle-enginetest/busybox:" + s.run
	start := time.Now()
	img, err := s.images.ImportImage(ctx, bytes.NewReader(rootfs), s.image, s.labels)
	if err != nil {
		t.Fatalf("ImportImage: %v", err)
	}
	t.Logf("imported %s (%d bytes of tar) as %s in %v", s.image, len(rootfs), short(img.ID), time.Since(start).Round(time.Millisecond))

	t.Run("Info", s.testInfo)
	t.Run("Images", s.testImages)
	t.Run("Build", s.testBuild)
	s.containerTests(t)
	t.Run("Registry", s.testRegistry)
	t.Run("RegistryIndex", s.testRegistryIndex)
}

func (s *suite) testInfo(t *testing.T) {
	in := s.info
	if in.Kind == "" || in.Version == "" || in.APIVersion == "" || in.Socket == "" {
		t.Fatalf("Info is incomplete: %+v", in)
	}
	if in.Arch != runtime.GOARCH || in.OS != "linux" {
		t.Fatalf("Info arch/os = %s/%s, want linux/%s", in.OS, in.Arch, runtime.GOARCH)
	}
}

// cleanup removes the containers, volumes and images of this run, in that order.
func (s *suite) cleanup(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	sel := map[string]string{LabelRun: s.run}
	if cs, err := s.e.ListContainers(ctx, sel); err == nil {
		for _, c := range cs {
			if err := s.e.RemoveContainer(ctx, c.ID, true); err != nil && !errors.Is(err, fault.ErrNotFound) {
				t.Errorf("cleanup: %v", err)
			}
		}
	}
	if vs, err := s.e.ListVolumes(ctx, sel); err == nil {
		for _, v := range vs {
			if err := s.e.RemoveVolume(ctx, v); err != nil && !errors.Is(err, fault.ErrNotFound) {
				t.Errorf("cleanup: %v", err)
			}
		}
	}
	if s.images == nil {
		return
	}
	// Images built FROM the base go first; a few passes settle the order.
	for range 3 {
		imgs, err := s.images.ListImages(ctx, sel)
		if err != nil || len(imgs) == 0 {
			break
		}
		for _, img := range imgs {
			// Tags, then digest references (Docker refuses to delete by id an image that
			// registry pulls left referenced in several repositories), then the id.
			refs := append([]string{}, img.Names...)
			refs = append(refs, img.Digests...)
			refs = append(refs, img.ID)
			for _, r := range refs {
				_ = s.images.RemoveImage(ctx, r)
			}
		}
	}
	if imgs, err := s.images.ListImages(ctx, sel); err == nil && len(imgs) > 0 {
		t.Errorf("cleanup: %d images of run %s left", len(imgs), s.run)
	}
}

// BusyboxRootfs returns a tar of a minimal root file system: the host's static busybox with
// links for the applets the suite uses, and the directories a runtime expects.
func BusyboxRootfs() ([]byte, error) {
	bin, err := os.ReadFile(BusyboxPath)
	if err != nil {
		return nil, err
	}
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	now := time.Now()
	for _, d := range []string{"bin/", "dev/", "etc/", "proc/", "sys/", "tmp/", "run/", "data/"} {
		mode := int64(0o755)
		if d == "tmp/" {
			mode = 0o1777
		}
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: d, Mode: mode, ModTime: now}); err != nil {
			return nil, err
		}
	}
	if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: "bin/busybox", Mode: 0o755, Size: int64(len(bin)), ModTime: now}); err != nil {
		return nil, err
	}
	if _, err := tw.Write(bin); err != nil {
		return nil, err
	}
	for _, applet := range []string{"sh", "cat", "echo", "sleep", "grep", "df", "touch", "mkdir", "ls", "id", "true", "ps"} {
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeSymlink, Name: "bin/" + applet, Linkname: "busybox", Mode: 0o777, ModTime: now}); err != nil {
			return nil, err
		}
	}
	files := map[string]string{
		"etc/passwd": "root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/bin/sh\n",
		"etc/group":  "root:x:0:\nnogroup:x:65534:\n",
	}
	for name, body := range files {
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: name, Mode: 0o644, Size: int64(len(body)), ModTime: now}); err != nil {
			return nil, err
		}
		if _, err := io.WriteString(tw, body); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// testContext is a context cancelled after d or when the test ends.
func testContext(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

func randomID() string {
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// withLabels returns the run labels plus extra.
func (s *suite) withLabels(extra map[string]string) map[string]string {
	out := map[string]string{}
	for k, v := range s.labels {
		out[k] = v
	}
	for k, v := range extra {
		out[k] = v
	}
	return out
}

// name returns a unique object name for this run.
func (s *suite) name(what string) string { return "cubicle-enginetest-" + s.run + "-" + what }

func short(id string) string {
	id = strings.TrimPrefix(id, "sha256:")
	if len(id) > 12 {
		return id[:12]
	}
	return id
}

// lineWriter collects written text, for progress checks. Safe for concurrent writers.
type lineWriter struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (w *lineWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.buf.Write(p)
}

func (w *lineWriter) lines() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	var out []string
	for _, l := range strings.Split(w.buf.String(), "\n") {
		if strings.TrimSpace(l) != "" {
			out = append(out, l)
		}
	}
	return out
}
