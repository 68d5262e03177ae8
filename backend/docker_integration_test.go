package backend

import (
	"bytes"
	"context"
	"errors"
	"image"
	"image/jpeg"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"cubicle/backend/agent"
	"cubicle/backend/engine"
	"cubicle/backend/engineconn"
	"cubicle/backend/fault"
	"cubicle/backend/screen/screentest"
	"cubicle/backend/vm"
	"cubicle/internal/testenv"
)

// dockerForTests is the Docker Engine the tests use: CUBICLE_DOCKER_SOCKET (scripts/lib.sh
// ensure_docker_engine starts one next to Podman). Without it the test is skipped, or fails
// when CUBICLE_REQUIRE_ALL=1 or CUBICLE_REQUIRE_DOCKER=1.
func dockerForTests(t *testing.T) string {
	t.Helper()
	required := testenv.Required() || os.Getenv("CUBICLE_REQUIRE_DOCKER") == "1"
	sock := os.Getenv("CUBICLE_DOCKER_SOCKET")
	if sock == "" {
		if required {
			t.Fatal("CUBICLE_DOCKER_SOCKET is not set: run the tests through scripts/test.sh (ensure_docker_engine)")
		}
		t.Skip("no Docker Engine for tests (CUBICLE_DOCKER_SOCKET)")
	}
	// (a daemon busy with other packages' containers may take seconds to answer its ping)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	kind, _, _, err := engine.Ping(ctx, sock, 20*time.Second)
	if err != nil || kind != engine.Docker {
		if required {
			t.Fatalf("no Docker Engine answers at %s (kind %q): %v", sock, kind, err)
		}
		t.Skipf("no Docker Engine answers at %s: %v", sock, err)
	}
	if os.Getuid() != 0 {
		t.Skip("needs root (the desktop's run directory is bind-mounted by the daemon)")
	}
	return sock
}

// TestDesktopOnDockerEngine runs the real-desktop lifecycle on a real Docker Engine, the
// engine most macOS and Windows users have: prepare the standard image (built on Docker the
// first time, reused by its content-hash tag afterwards) with its probe screenshot, a chat turn
// in operator mode whose /shell runs in the agent's new desktop, and a live frame of that
// desktop over the computer websocket.
func TestDesktopOnDockerEngine(t *testing.T) {
	sock := dockerForTests(t)
	if testing.Short() {
		t.Skip("real desktop test; run without -short")
	}
	t.Setenv("DOCKER_HOST", sock)
	dir := t.TempDir()
	log := testenv.Logger(t, slog.LevelInfo)
	b, err := New(Config{DataDir: filepath.Join(dir, "data"), Engine: "docker", AllowedHosts: []string{"127.0.0.1"}, Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var inst vm.InstanceView
	defer func() {
		b.Close()
		if inst.Container == "" || b.engine == nil {
			return
		}
		cctx, ccancel := context.WithTimeout(context.Background(), time.Minute)
		defer ccancel()
		eng, err := engineconn.ConnectEngine(cctx, "docker", log)
		if err != nil {
			t.Logf("cleanup: %v", err)
			return
		}
		defer eng.Close()
		if err := eng.Client.RemoveContainer(cctx, inst.Container, true); err != nil && !errors.Is(err, fault.ErrNotFound) {
			t.Errorf("cleanup: remove %s: %v", inst.Container, err)
		}
		if v, ok := eng.Client.(interface {
			RemoveVolume(ctx context.Context, name string) error
		}); ok {
			for _, name := range []string{inst.Workspace, inst.BrowserVolume} {
				if err := v.RemoveVolume(cctx, name); err != nil && !errors.Is(err, fault.ErrNotFound) {
					t.Errorf("cleanup: remove volume %s: %v", name, err)
				}
			}
		}
	}()
	if err := b.Start(ctx); err != nil {
		t.Fatal(err)
	}
	if err := b.WaitEngine(ctx); err != nil {
		t.Fatal(err)
	}
	if b.engine == nil || b.engine.Endpoint.Kind != engine.Docker || b.engine.Endpoint.Socket != sock {
		t.Fatalf("connected engine %+v, want Docker at %s", b.engine, sock)
	}
	st, err := b.VMs.Status(ctx)
	if err != nil || st.Engine.Kind != string(engine.Docker) || st.Engine.Version == "" {
		t.Fatalf("status engine %+v, %v", st.Engine, err)
	}
	t.Logf("engine: Docker %s at %s", st.Engine.Version, sock)

	pctx, pcancel := context.WithTimeout(ctx, 30*time.Minute)
	defer pcancel()
	start := time.Now()
	img, err := b.VMs.Prepare(pctx, "standard")
	if err != nil {
		t.Fatalf("prepare on Docker: %v", err)
	}
	t.Logf("prepared %s on Docker in %s (driver %s)", img.Ref, time.Since(start).Round(time.Second), img.DriverVersion)
	dimg, err := b.engine.Client.InspectImage(ctx, img.Ref)
	if err != nil || dimg.ID != img.ImageID || dimg.Labels[engine.LabelRecipe] != img.RecipeHash {
		t.Fatalf("the prepared image in Docker: %+v, %v", dimg, err)
	}

	admin, err := b.Auth.Admin()
	if err != nil {
		t.Fatal(err)
	}
	ag, err := b.Profiles.Create(admin.ID, "Dock")
	if err != nil {
		t.Fatal(err)
	}
	// No model is configured: operator mode. The shell runs in the agent's desktop, created on
	// Docker by this turn.
	turnStart := time.Now()
	evs := turn(t, b, admin.ID, ag.ID, "s1", "/shell echo \"on $(cat /etc/hostname) as $(id -un) in $(pwd)\"; ls -ld /home/cua/workspace | cut -d' ' -f3")
	var out strings.Builder
	state := ""
	for _, e := range evs {
		switch e.Type {
		case agent.ToolResultTextDelta:
			out.WriteString(e.Delta)
		case agent.ToolResultEnd:
			state = e.State
		}
	}
	t.Logf("/shell (creating the desktop on Docker): %s in %s: %q", state, time.Since(turnStart).Round(time.Millisecond), out.String())
	if state != agent.StateSuccess || !strings.Contains(out.String(), "as cua in /home/cua/workspace") || !strings.Contains(out.String(), "\ncua") {
		t.Fatalf("/shell in the Docker desktop: %s %q", state, out.String())
	}
	view, err := b.VMs.Agent(ctx, admin.ID, ag.ID)
	if err != nil || view.Desktop.State != "running" || view.Desktop.Container == "" {
		t.Fatalf("agent desktop %+v, %v", view.Desktop, err)
	}
	inst = view.Desktop
	ctr, err := b.engine.Client.InspectContainer(ctx, inst.Container)
	if err != nil || !ctr.Running || ctr.Labels[engine.LabelInstance] != inst.ID || ctr.ImageID != img.ImageID {
		t.Fatalf("the desktop's container in Docker: %+v, %v", ctr, err)
	}
	// Walled off from this machine's services on Docker too (issue 15, item 12).
	wantHostWalled(t, b, inst)

	// A live frame over the computer websocket of the real HTTP API.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	sctx, scancel := context.WithCancel(ctx)
	served := make(chan error, 1)
	go func() { served <- b.Serve(sctx, ln) }()
	defer func() { scancel(); <-served }()
	sess, err := b.LocalSession()
	if err != nil {
		t.Fatal(err)
	}
	u := "ws://" + ln.Addr().String() + "/api/app/agents/" + ag.ID + "/computer"
	c, resp, err := screentest.Dial(t, u, http.Header{"Authorization": {"Bearer " + sess.Token}}, true)
	if err != nil {
		code := 0
		if resp != nil {
			code = resp.StatusCode
		}
		t.Fatalf("computer channel: %v (HTTP %d)", err, code)
	}
	c.Status(20*time.Second, func(st map[string]any) bool { return st["streaming"] == true })
	// The desktop was created by the turn above and may still be drawing: frames come as the
	// screen changes, until one shows the drawn desktop.
	var last uint64
	deadline := time.Now().Add(90 * time.Second)
	for n := 0; ; n++ {
		m, ok := c.FrameAfter(last, time.Until(deadline))
		if !ok {
			t.Fatalf("no live frame with a drawn desktop from the Docker desktop within 90 s (%d frames)", n)
		}
		last = m.Frame.ID
		pic, err := jpeg.Decode(bytes.NewReader(m.Data))
		if err != nil {
			t.Fatalf("frame %d: %v", m.Frame.ID, err)
		}
		if b := pic.Bounds(); b.Dx() != int(m.Frame.Width) || b.Dx() != 1280 || b.Dy() != 800 {
			t.Fatalf("frame %v, header %+v", b, m.Frame)
		}
		if k := colours(pic, 64); k >= 64 {
			t.Logf("live frame %d (after %d others): %dx%d, %d bytes of JPEG", m.Frame.ID, n, m.Frame.Width, m.Frame.Height, len(m.Data))
			break
		}
	}

	// Stop: the driver ends the desktop on SIGTERM by itself (exit 0), not Docker's SIGKILL.
	if _, err := b.VMs.Act(ctx, admin.ID, ag.ID, "stop"); err != nil {
		t.Fatalf("stop: %v", err)
	}
	ctr, err = b.engine.Client.InspectContainer(ctx, inst.Container)
	if err != nil || ctr.Running || ctr.ExitCode != 0 {
		t.Fatalf("the stopped desktop in Docker: %+v, %v; want exit code 0", ctr, err)
	}
}

// colours counts the distinct colours of img, up to limit.
func colours(img image.Image, limit int) int {
	seen := map[uint32]bool{}
	b := img.Bounds()
	for y := b.Min.Y; y < b.Max.Y; y += 3 {
		for x := b.Min.X; x < b.Max.X; x += 3 {
			r, g, bl, _ := img.At(x, y).RGBA()
			seen[(r>>8)<<16|(g>>8)<<8|bl>>8] = true
			if len(seen) >= limit {
				return len(seen)
			}
		}
	}
	return len(seen)
}
