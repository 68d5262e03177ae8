package vm_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"image"
	"image/color"
	"image/png"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"cubicle/backend/api"
	"cubicle/backend/auth"
	"cubicle/backend/engine"
	"cubicle/backend/engine/podman"
	"cubicle/backend/fault"
	"cubicle/backend/guest"
	"cubicle/backend/guest/guesttest"
	"cubicle/backend/link"
	"cubicle/backend/nodeapi"
	"cubicle/backend/profile"
	"cubicle/backend/store"
	"cubicle/backend/vm"
	"cubicle/images"
	"cubicle/images/guest/wire"
	"cubicle/internal/testenv"
)

// The real adapters satisfy the manager's interfaces.
var (
	_ vm.Engine       = (*podman.Client)(nil)
	_ vm.ImageBuilder = (*images.Builder)(nil)
)

// testLabel marks every container and volume these tests create (value "vm"), so cleanup
// removes only ours.
const testLabel = "cubicle.test"

func podmanSocket() string {
	if s := os.Getenv("CUBICLE_PODMAN_SOCKET"); s != "" {
		return s
	}
	return "unix:///run/podman/podman.sock"
}

func connectPodman(t *testing.T) *podman.Client {
	t.Helper()
	if testing.Short() {
		testenv.Missing(t, "real-engine test skipped in -short mode")
	}
	sock := podmanSocket()
	if _, err := os.Stat(strings.TrimPrefix(sock, "unix://")); err != nil {
		testenv.Missing(t, "no Podman service at %s: %v", sock, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := podman.Connect(ctx, sock, podman.Options{})
	if err != nil {
		testenv.Missing(t, "Podman at %s does not answer: %v", sock, err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func testLogger(t testing.TB) *slog.Logger {
	return testenv.Logger(t, slog.LevelInfo)
}

// driver is the real cubicle-guest, built once per test binary the way scripts/build.sh does.
func driver(t *testing.T) []byte {
	t.Helper()
	bin, err := os.ReadFile(guesttest.Binary(t))
	if err != nil {
		t.Fatal(err)
	}
	return bin
}

// realEnv is a store + real Podman + real image builder, for managers over one data dir.
type realEnv struct {
	t       *testing.T
	eng     *podman.Client
	builder *images.Builder
	dataDir string
	store   *store.Store
	labels  map[string]string
	node    string // unique per environment, so instance ids, container and volume names are too
}

func newRealEnv(t *testing.T) *realEnv {
	t.Helper()
	eng := connectPodman(t)
	b, err := images.New(images.Config{Engine: eng, Logger: testLogger(t), WorkDir: t.TempDir(), Driver: driver(t)})
	if err != nil {
		t.Fatal(err)
	}
	// A short data dir keeps the driver socket path well under the 108-byte limit.
	dataDir, err := os.MkdirTemp("", "cvm-")
	if err != nil {
		t.Fatal(err)
	}
	env := &realEnv{t: t, eng: eng, builder: b, dataDir: dataDir,
		labels: map[string]string{testLabel: "vm-" + filepath.Base(dataDir)}, node: "t" + filepath.Base(dataDir)}
	env.openStore()
	t.Cleanup(func() {
		env.store.Close()
		env.cleanup()
		os.RemoveAll(dataDir)
	})
	return env
}

func (e *realEnv) openStore() {
	st, err := store.Open(filepath.Join(e.dataDir, "cubicle.db"), store.Options{LockTimeout: 5 * time.Second})
	if err != nil {
		e.t.Fatal(err)
	}
	e.store = st
}

// cleanup removes this test's containers and volumes (found by the test label).
func (e *realEnv) cleanup() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	ctrs, _ := e.eng.ListContainers(ctx, e.labels)
	for _, c := range ctrs {
		if err := e.eng.RemoveContainer(ctx, c.ID, true); err != nil && !errors.Is(err, fault.ErrNotFound) {
			e.t.Logf("cleanup: remove %s: %v", c.Name, err)
		}
	}
	vols, _ := e.eng.ListVolumes(ctx, e.labels)
	for _, v := range vols {
		if err := e.eng.RemoveVolume(ctx, v); err != nil && !errors.Is(err, fault.ErrNotFound) {
			e.t.Logf("cleanup: remove volume %s: %v", v, err)
		}
	}
}

// linkConfig is the guest link of CUBICLE_GUEST_LINK (auto when unset), as the app chooses it:
// the real-engine tests run with each transport.
func linkConfig(t testing.TB) link.Config {
	mode, err := link.ParseMode(os.Getenv(link.EnvVar))
	if err != nil {
		t.Fatal(err)
	}
	c := link.Config{Choice: link.Choose(mode, link.Engine{GOOS: runtime.GOOS, Socket: podmanSocket()})}
	t.Logf("guest link: %s (%s)", c.Choice.Primary, c.Choice.Reason)
	return c
}

func (e *realEnv) config(mod func(*vm.Config)) vm.Config {
	cfg := vm.Config{Store: e.store, Engine: e.eng, Images: e.builder, DataDir: e.dataDir, NodeID: e.node,
		Logger: testLogger(e.t), ExtraLabels: e.labels, KeepRunningOnClose: true, Link: linkConfig(e.t)}
	if mod != nil {
		mod(&cfg)
	}
	return cfg
}

func (e *realEnv) manager(mod func(*vm.Config)) *vm.Manager {
	e.t.Helper()
	m, err := vm.New(e.config(mod))
	if err != nil {
		e.t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := m.Start(ctx); err != nil {
		e.t.Fatal(err)
	}
	return m
}

// prepared prepares the standard image once per environment (a first build takes minutes;
// later runs reuse the image by its content-hash tag).
func (e *realEnv) prepare(m *vm.Manager) nodeapi.Image {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
	defer cancel()
	start := time.Now()
	img, err := m.Prepare(ctx, "standard")
	if err != nil {
		e.t.Fatalf("Prepare(standard): %v", err)
	}
	e.t.Logf("prepared %s (driver %s) in %s", img.Ref, img.DriverVersion, time.Since(start).Round(time.Millisecond))
	return img
}

// TestRealPrepare prepares the real standard image: image reused or built, a probe desktop
// answers the handshake and gives a real screenshot, the record is stored, and the probe is gone.
func TestRealPrepare(t *testing.T) {
	env := newRealEnv(t)
	m := env.manager(nil)
	defer m.Close()
	img := env.prepare(m)
	if img.Ref == "" || img.ImageID == "" || img.RecipeHash == "" || img.DriverVersion == "" || img.PreparedAt.IsZero() {
		t.Errorf("image record incomplete: %+v", img)
	}
	got, err := env.store.VMImage(env.node, "standard")
	if err != nil || got.Ref != img.Ref {
		t.Errorf("stored image %+v, %v; want ref %s", got, err, img.Ref)
	}
	ctrs, err := env.eng.ListContainers(context.Background(), map[string]string{testLabel: env.labels[testLabel]})
	if err != nil {
		t.Fatal(err)
	}
	if len(ctrs) != 0 {
		t.Errorf("probe containers left behind: %+v", ctrs)
	}
	st, err := m.Status(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if !st.Engine.Found || st.Engine.Kind != string(engine.Podman) {
		t.Errorf("engine view %+v", st.Engine)
	}
	if len(st.Images) == 0 || !st.Images[0].Prepared || st.Images[0].Prepare == nil || st.Images[0].Prepare.Phase != "done" {
		t.Errorf("image view %+v", st.Images)
	}
	t.Run("a driver that never answers is explained", func(t *testing.T) { silentDriverExplained(t, env, img.Ref) })
}

// silentDriverExplained starts the real image with an X server that fails at once, so its
// driver never serves: what the host says of such a desktop (its error when it does not
// answer) names the container's state and quotes the driver's own log of what it waits for.
func silentDriverExplained(t *testing.T, env *realEnv, ref string) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	ctr, err := env.eng.CreateContainer(ctx, engine.ContainerSpec{Name: "cubicle-silent-" + env.node, Image: ref,
		Labels: env.labels, Env: map[string]string{wire.EnvXvfb: "/bin/false"}, NetworkMode: "none", StopTimeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer env.eng.RemoveContainer(context.WithoutCancel(ctx), ctr.ID, true)
	if err := env.eng.StartContainer(ctx, ctr.ID); err != nil {
		t.Fatal(err)
	}
	var why string
	for why = vm.SilentDriver(ctx, env.eng, ctr.ID); !strings.Contains(why, "X server failed to start"); why = vm.SilentDriver(ctx, env.eng, ctr.ID) {
		if ctx.Err() != nil {
			t.Fatalf("the explanation never quoted the driver's log: %q", why)
		}
		time.Sleep(200 * time.Millisecond)
	}
	if !strings.Contains(why, "its container is running") {
		t.Errorf("explanation %q does not say the container runs", why)
	}
	if err := env.eng.StopContainer(ctx, ctr.ID, time.Second); err != nil {
		t.Fatal(err)
	}
	if why = vm.SilentDriver(ctx, env.eng, ctr.ID); !strings.Contains(why, "its container is exited") {
		t.Errorf("explanation after the stop %q does not say the container ended", why)
	}
	t.Logf("explained: %s", why)
}

// seedAgents stores account a1 with agents g1..g3 (named Bot1..Bot3).
func seedAgents(t *testing.T, st *store.Store) {
	t.Helper()
	if err := st.CreateAccount(store.Account{ID: "a1", Username: "alice"}); err != nil && !errors.Is(err, fault.ErrExists) {
		t.Fatal(err)
	}
	for i := 1; i <= 3; i++ {
		err := st.CreateAgent(store.Agent{ID: fmt.Sprintf("g%d", i), AccountID: "a1", Name: fmt.Sprintf("Bot%d", i),
			CreatedAt: time.Unix(int64(i), 0)})
		if err != nil && !errors.Is(err, fault.ErrExists) {
			t.Fatal(err)
		}
	}
}

// countColours counts the distinct colours of img, up to limit.
func countColours(img image.Image, limit int) int {
	seen := map[color.RGBA]bool{}
	b := img.Bounds()
	for y := b.Min.Y; y < b.Max.Y; y += 4 {
		for x := b.Min.X; x < b.Max.X; x += 4 {
			seen[color.RGBAModel.Convert(img.At(x, y)).(color.RGBA)] = true
			if len(seen) >= limit {
				return len(seen)
			}
		}
	}
	return len(seen)
}

// dialDesktop returns the shared link to a running desktop's driver (the manager owns it).
func dialDesktop(t *testing.T, m *vm.Manager, id string) *guest.Client {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c, err := m.Link(ctx, id)
	if err != nil {
		t.Fatalf("link to desktop %s: %v", id, err)
	}
	return c
}

func act(t *testing.T, m *vm.Manager, agent, action string) vm.AgentView {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	v, err := m.Act(ctx, "a1", agent, action)
	if err != nil {
		t.Fatalf("%s %s: %v", action, agent, err)
	}
	return v
}

const (
	workspaceFile = "/home/cua/workspace/notes/kept.txt"
	profileFile   = "/home/cua/.config/chromium/cubicle-marker"
)

// TestRealLifecycle runs the instance lifecycle against real Podman with the real standard
// image and driver: cold start to the first real screenshot, stop time, a workspace file and a
// browser-profile file that survive stop, remove + create and a manager restart, capacity
// refusal, and an instance actually stopped by the idle timer.
func TestRealLifecycle(t *testing.T) {
	env := newRealEnv(t)
	seedAgents(t, env.store)
	m := env.manager(nil)
	env.prepare(m)
	ctx := context.Background()

	start := time.Now()
	v := act(t, m, "g1", vm.ActionCreate)
	created := time.Since(start)
	id := v.Desktop.ID
	c := dialDesktop(t, m, id)
	f, err := c.Screenshot(ctx, guest.ScreenshotOptions{Format: "png"})
	if err != nil {
		t.Fatal(err)
	}
	cold := time.Since(start)
	// And until the desktop is drawn (the screen is no longer blank).
	colours := 0
	for colours < 16 && time.Since(start) < time.Minute {
		fr, err := c.Screenshot(ctx, guest.ScreenshotOptions{Format: "png"})
		if err != nil {
			t.Fatal(err)
		}
		img, err := png.Decode(bytes.NewReader(fr.Data))
		if err != nil {
			t.Fatal(err)
		}
		colours = countColours(img, 16)
	}
	drawn := time.Since(start)
	t.Logf("COLD START: create returned in %s, first real screenshot (%dx%d, %d bytes) after %s, desktop drawn (%d+ colours) after %s",
		created.Round(time.Millisecond), f.Width, f.Height, len(f.Data), cold.Round(time.Millisecond), colours, drawn.Round(time.Millisecond))
	if colours < 16 {
		t.Errorf("the desktop never rendered (%d colours)", colours)
	}
	if v.Desktop.State != "running" || f.Width == 0 {
		t.Fatalf("after create: %+v, frame %dx%d", v.Desktop, f.Width, f.Height)
	}
	// The container is hardened as configured.
	ctr, err := env.eng.InspectContainer(ctx, v.Desktop.Container)
	if err != nil || !ctr.Running || ctr.Labels[engine.LabelInstance] != id {
		t.Fatalf("inspect %s: %+v, %v", v.Desktop.Container, ctr, err)
	}
	if err := c.Mkdir(ctx, "/home/cua/workspace/notes", true); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{workspaceFile, profileFile} {
		if err := c.WriteFile(ctx, p, []byte("kept "+p), 0o644); err != nil {
			t.Fatalf("write %s: %v", p, err)
		}
	}
	c.Close()

	checkFiles := func(when string) {
		t.Helper()
		c := dialDesktop(t, m, id)
		defer c.Close()
		for _, p := range []string{workspaceFile, profileFile} {
			got, err := c.ReadFile(ctx, p, 1<<10)
			if err != nil || string(got) != "kept "+p {
				t.Errorf("%s: %s = %q, %v", when, p, got, err)
			}
		}
	}

	// Capacity: with room for one desktop, a second is refused naming the running one.
	if _, err := m.SetPolicy(ctx, vm.IsolationPerAgent, 1); err != nil {
		t.Fatal(err)
	}
	_, err = m.Act(ctx, "a1", "g2", vm.ActionCreate)
	if !errors.Is(err, fault.ErrConflict) || !strings.Contains(err.Error(), "Bot1") {
		t.Errorf("second desktop beyond capacity: %v; want a conflict naming Bot1", err)
	}
	if _, err := m.SetPolicy(ctx, vm.IsolationPerAgent, 2); err != nil {
		t.Fatal(err)
	}

	start = time.Now()
	v = act(t, m, "g1", vm.ActionStop)
	stop := time.Since(start)
	t.Logf("STOP: %s", stop.Round(time.Millisecond))
	if v.Desktop.State != "stopped" {
		t.Errorf("after stop: %s", v.Desktop.State)
	}
	// The time is reported above; what must hold is that the driver exited by itself on
	// SIGTERM (exit 0) instead of being killed by the engine (exit 137).
	if ctr, err := env.eng.InspectContainer(ctx, v.Desktop.Container); err != nil || ctr.ExitCode != 0 {
		t.Errorf("container after stop: exit code %d, %v: the driver did not shut down cleanly on SIGTERM", ctr.ExitCode, err)
	}

	act(t, m, "g1", vm.ActionStart)
	checkFiles("after stop + start")
	act(t, m, "g1", vm.ActionRemove)
	if _, err := env.eng.InspectContainer(ctx, v.Desktop.Container); !errors.Is(err, fault.ErrNotFound) {
		t.Errorf("container still there after remove: %v", err)
	}
	act(t, m, "g1", vm.ActionCreate)
	checkFiles("after remove + create")
	act(t, m, "g1", vm.ActionRecreate)
	checkFiles("after recreate")

	// A manager restart adopts the running desktop; its files are there.
	if err := m.Close(); err != nil {
		t.Fatal(err)
	}
	m = env.manager(func(c *vm.Config) { c.IdleUnit = time.Second })
	defer m.Close()
	av, err := m.Agent(ctx, "a1", "g1")
	if err != nil || av.Desktop.State != "running" {
		t.Fatalf("after restart: %+v, %v", av.Desktop, err)
	}
	checkFiles("after a manager restart")

	// Idle stop, with one "minute" shortened to a second.
	if _, err := m.SetIdlePolicy(ctx, "idle-test", 2, nil); err != nil {
		t.Fatal(err)
	}
	m.MarkIdle(id)
	idleStart := time.Now()
	deadline := time.Now().Add(60 * time.Second)
	for {
		av, err = m.Agent(ctx, "a1", "g1")
		if err != nil {
			t.Fatal(err)
		}
		if av.Desktop.State == "stopped" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("not stopped by the idle timer: %+v", av.Desktop)
		}
		time.Sleep(200 * time.Millisecond)
	}
	ctr, err = env.eng.InspectContainer(ctx, av.Desktop.Container)
	if err != nil || ctr.Running {
		t.Errorf("container after idle stop: running=%v, %v", ctr.Running, err)
	}
	t.Logf("idle stop after %s (policy 2 units of 1 s)", time.Since(idleStart).Round(time.Millisecond))
	if el := time.Since(idleStart); el < 2*time.Second {
		t.Errorf("idle stop after %s, before the 2 s idle period", el)
	}
}

// The crash helper: when CUBICLE_VM_CRASH_DIR is set, the test binary (see TestMain) runs a
// manager on that data dir and performs CUBICLE_VM_CRASH_OP on agent g1, printing "BEGIN <op>"
// just before; the parent test SIGKILLs it mid-operation.
const (
	envCrashDir   = "CUBICLE_VM_CRASH_DIR"
	envCrashOp    = "CUBICLE_VM_CRASH_OP"
	envCrashLabel = "CUBICLE_VM_CRASH_LABEL"
	envCrashNode  = "CUBICLE_VM_CRASH_NODE"
)

func TestMain(m *testing.M) {
	if dir := os.Getenv(envCrashDir); dir != "" {
		if err := crashHelper(dir); err != nil {
			fmt.Println("HELPER ERROR", err)
			os.Exit(2)
		}
		os.Exit(0)
	}
	code := m.Run()
	guesttest.Cleanup()
	os.Exit(code)
}

func crashHelper(dir string) error {
	ctx := context.Background()
	eng, err := podman.Connect(ctx, podmanSocket(), podman.Options{})
	if err != nil {
		return err
	}
	st, err := store.Open(filepath.Join(dir, "cubicle.db"), store.Options{LockTimeout: 10 * time.Second})
	if err != nil {
		return err
	}
	m, err := vm.New(vm.Config{Store: st, Engine: eng, DataDir: dir, NodeID: os.Getenv(envCrashNode),
		Logger:      slog.New(slog.NewTextHandler(os.Stdout, nil)),
		ExtraLabels: map[string]string{testLabel: os.Getenv(envCrashLabel)}, KeepRunningOnClose: true})
	if err != nil {
		return err
	}
	if err := m.Start(ctx); err != nil {
		return err
	}
	op := os.Getenv(envCrashOp)
	fmt.Printf("BEGIN %s\n", op)
	_, err = m.Act(ctx, "a1", "g1", op)
	fmt.Printf("END %s %v\n", op, err)
	select {} // wait for the kill
}

// TestRealCrashRecovery kills (SIGKILL) a process running the manager in the middle of a
// create and in the middle of a stop, then starts a new manager on the same data dir: the
// desktop is in a consistent state, works again, and its workspace file is intact.
func TestRealCrashRecovery(t *testing.T) {
	env := newRealEnv(t)
	seedAgents(t, env.store)
	m := env.manager(nil)
	env.prepare(m)
	m.Close()
	env.store.Close()
	ctx := context.Background()

	// runHelper starts the helper for op and kills it once kill() says so.
	runHelper := func(op string, kill func(begun time.Time) bool) {
		t.Helper()
		cmd := exec.Command(os.Args[0], "-test.timeout=5m")
		cmd.Env = append(os.Environ(), envCrashDir+"="+env.dataDir, envCrashOp+"="+op, envCrashLabel+"="+env.labels[testLabel],
			envCrashNode+"="+env.node)
		out, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		cmd.Stderr = cmd.Stdout
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		lines := make(chan string, 100)
		go func() {
			buf := make([]byte, 4096)
			var acc string
			for {
				n, err := out.Read(buf)
				acc += string(buf[:n])
				for {
					i := strings.IndexByte(acc, '\n')
					if i < 0 {
						break
					}
					lines <- acc[:i]
					acc = acc[i+1:]
				}
				if err != nil {
					close(lines)
					return
				}
			}
		}()
		var begun time.Time
		timeout := time.After(3 * time.Minute)
	wait:
		for {
			select {
			case l, ok := <-lines:
				if !ok {
					break wait
				}
				t.Logf("helper: %s", l)
				if strings.HasPrefix(l, "BEGIN ") {
					begun = time.Now()
				}
				if strings.HasPrefix(l, "END ") {
					t.Logf("helper finished %s before it could be killed", op)
				}
			case <-time.After(20 * time.Millisecond):
			case <-timeout:
				t.Error("helper timed out")
				break wait
			}
			if !begun.IsZero() && kill(begun) {
				break
			}
		}
		cmd.Process.Signal(syscall.SIGKILL)
		cmd.Wait()
		t.Logf("helper for %s killed %s after BEGIN", op, time.Since(begun).Round(time.Millisecond))
	}
	desktopCtrs := func() []engine.ContainerState {
		cs, err := env.eng.ListContainers(ctx, map[string]string{testLabel: env.labels[testLabel], vm.LabelRole: "desktop"})
		if err != nil {
			t.Fatal(err)
		}
		return cs
	}

	// Mid-create: killed as soon as the container exists (before the driver is ready).
	runHelper(vm.ActionCreate, func(time.Time) bool { return len(desktopCtrs()) > 0 })
	env.openStore()
	m = env.manager(nil)
	av, err := m.Agent(ctx, "a1", "g1")
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("after a crash mid-create: state %s", av.Desktop.State)
	if s := av.Desktop.State; s != "running" && s != "stopped" && s != "absent" {
		t.Errorf("state after a crash mid-create: %s", s)
	}
	v := act(t, m, "g1", vm.ActionStart)
	if n := len(desktopCtrs()); n != 1 || v.Desktop.State != "running" {
		t.Fatalf("after start: %d containers, state %s", n, v.Desktop.State)
	}
	c := dialDesktop(t, m, v.Desktop.ID)
	if err := c.WriteFile(ctx, "/home/cua/workspace/crash.txt", []byte("survives"), 0o644); err != nil {
		t.Fatal(err)
	}
	c.Close()
	m.Close()
	env.store.Close()

	// Mid-stop: killed 150 ms after the stop began.
	runHelper(vm.ActionStop, func(begun time.Time) bool { return time.Since(begun) > 150*time.Millisecond })
	env.openStore()
	m = env.manager(nil)
	defer m.Close()
	av, err = m.Agent(ctx, "a1", "g1")
	if err != nil {
		t.Fatal(err)
	}
	if av.Desktop.State != "stopped" {
		t.Errorf("state after a crash mid-stop: %s, want stopped (the stop completed)", av.Desktop.State)
	}
	for _, ctr := range desktopCtrs() {
		if ctr.Running {
			t.Errorf("container %s still runs after the interrupted stop", ctr.Name)
		}
	}
	v = act(t, m, "g1", vm.ActionStart)
	c = dialDesktop(t, m, v.Desktop.ID)
	got, err := c.ReadFile(ctx, "/home/cua/workspace/crash.txt", 100)
	if err != nil || string(got) != "survives" {
		t.Errorf("workspace file after the crashes: %q, %v", got, err)
	}
}

// TestRealCompose adopts a desktop container created outside Cubicle (as Compose does, by
// label and with the run dir under <data>/run/compose-<name>) and reaches its real driver; the
// manager refuses to create, remove or prepare for it.
func TestRealCompose(t *testing.T) {
	env := newRealEnv(t)
	seedAgents(t, env.store)
	m := env.manager(nil)
	img := env.prepare(m)
	m.Close()
	ctx := context.Background()

	runDir := filepath.Join(env.dataDir, "run", "compose-desk-t")
	if err := os.MkdirAll(runDir, 0o777); err != nil {
		t.Fatal(err)
	}
	os.Chmod(runDir, 0o777)
	labels := map[string]string{vm.LabelCompose: "desk-t", testLabel: env.labels[testLabel]}
	ctr, err := env.eng.CreateContainer(ctx, engine.ContainerSpec{
		Name: "cubicle-test-compose-" + filepath.Base(env.dataDir), Image: img.Ref, Labels: labels,
		Mounts: []engine.Mount{{Source: runDir, Target: vm.RunDirTarget}},
		Limits: engine.Limits{MemoryBytes: 2 << 30, PIDs: 2048, NoFile: 20000, NProc: 32768, ShmBytes: 256 << 20},
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := env.eng.StartContainer(ctx, ctr.ID); err != nil {
		t.Fatal(err)
	}
	m = env.manager(func(c *vm.Config) { c.Compose = []vm.ComposeDesktop{{Name: "desk-t"}} })
	defer m.Close()
	av, err := m.Agent(ctx, "a1", "g1")
	if err != nil {
		t.Fatal(err)
	}
	if av.Desktop.State != "running" || !av.Desktop.Fixed || av.Desktop.Name != "desk-t" {
		t.Fatalf("compose desktop view %+v", av.Desktop)
	}
	c := dialDesktop(t, m, av.Desktop.ID)
	if f, err := c.Screenshot(ctx, guest.ScreenshotOptions{Format: "png"}); err != nil || f.Width == 0 {
		t.Errorf("screenshot of the compose desktop: %v", err)
	}
	for _, a := range []string{vm.ActionCreate, vm.ActionRemove} {
		if _, err := m.Act(ctx, "a1", "g1", a); !errors.Is(err, fault.ErrConflict) {
			t.Errorf("%s on a compose desktop: %v, want conflict", a, err)
		}
	}
	if _, err := m.StartPrepare("standard"); !errors.Is(err, fault.ErrConflict) {
		t.Errorf("prepare in compose mode: %v", err)
	}
}

// TestRealAPI drives the Local VM routes of the real HTTP handler over the real manager,
// Podman, image and driver: status, create, view, stop.
func TestRealAPI(t *testing.T) {
	env := newRealEnv(t)
	m := env.manager(nil)
	defer m.Close()
	env.prepare(m)
	as, err := auth.New(auth.Config{Accounts: env.store, Key: []byte(strings.Repeat("k", 32)), Logger: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := as.EnsureAdmin(auth.Bootstrap{Username: "admin", Password: "correct horse battery"}); err != nil {
		t.Fatal(err)
	}
	admin, err := as.Admin()
	if err != nil {
		t.Fatal(err)
	}
	p, err := as.Issue(admin)
	if err != nil {
		t.Fatal(err)
	}
	if err := env.store.CreateAgent(store.Agent{ID: "web1", AccountID: admin.ID, Name: "WebBot"}); err != nil {
		t.Fatal(err)
	}
	srv, err := api.New(api.Config{Auth: as, Accounts: env.store, Profiles: profile.New(env.store, testLogger(t)), VMs: m,
		Logger: testLogger(t), AllowedHosts: []string{"127.0.0.1"}})
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(srv.Handler())
	defer ts.Close()
	call := func(method, path string) (int, string) {
		req, _ := http.NewRequest(method, ts.URL+path, nil)
		req.Header.Set("Authorization", "Bearer "+p.Token)
		res, err := ts.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		b, _ := io.ReadAll(res.Body)
		return res.StatusCode, string(b)
	}
	for _, tc := range []struct {
		method, path string
		status       int
		has          string
	}{
		{"GET", "/api/app/admin/local-vm", 200, `"kind":"podman"`},
		{"GET", "/api/app/admin/local-vm", 200, `"prepared":true`},
		{"POST", "/api/app/agents/web1/local-vm/create", 200, `"state":"running"`},
		{"GET", "/api/app/agents/web1/local-vm", 200, `"idleStopInSeconds"`},
		{"POST", "/api/app/agents/web1/local-vm/shutdown", 400, "unknown local VM action"},
		{"POST", "/api/app/agents/web1/local-vm/stop", 200, `"state":"stopped"`},
		{"GET", "/api/app/admin/local-vm", 200, `"running":0`},
	} {
		code, body := call(tc.method, tc.path)
		if code != tc.status || !strings.Contains(body, tc.has) {
			t.Errorf("%s %s: %d %s; want %d with %q", tc.method, tc.path, code, body, tc.status, tc.has)
		}
	}
}
