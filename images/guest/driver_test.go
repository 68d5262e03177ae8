//go:build linux

package main

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"image"
	"image/color"
	"image/jpeg"
	"image/png"
	"io"
	"log"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"cubicle/backend/fault"
	"cubicle/backend/guest"
	"cubicle/images/guest/wire"
	"cubicle/images/guest/x11"
	"cubicle/images/guest/x11/xvfbtest"
	"cubicle/internal/testenv"

	"github.com/jezek/xgb"
)

// Displays :65–:69 belong to this package's tests.

func TestMain(m *testing.M) {
	if dir := os.Getenv(muteXEnv); dir != "" {
		muteX(dir, os.Args[1:]) // this binary started as an X server (TestStartXBoundsAMuteServer)
		return
	}
	xgb.Logger = log.New(io.Discard, "", 0)
	code := m.Run()
	if built.bin != "" {
		os.RemoveAll(filepath.Dir(built.bin))
	}
	os.Exit(code)
}

func testLogger(t testing.TB) *slog.Logger {
	return testenv.Logger(t, slog.LevelDebug)
}

// harness is a driver running in-process against a private Xvfb, and a client connected
// to it.
type harness struct {
	display   string
	socket    string
	workspace string
	client    *guest.Client
}

func startDriver(t testing.TB, display, width, height int) *harness {
	t.Helper()
	return startDriverWith(t, display, width, height, nil)
}

// startDriverWith is startDriver with a hook that may change the driver's configuration.
func startDriverWith(t testing.TB, display, width, height int, configure func(*Config)) *harness {
	t.Helper()
	name := xvfbtest.Start(t, display, width, height)
	dir := t.TempDir()
	ws := filepath.Join(dir, "workspace")
	if err := os.Mkdir(ws, 0o755); err != nil {
		t.Fatal(err)
	}
	pr := newProcs(false)
	cfg := Config{
		RunDir: filepath.Join(dir, "run"), Display: name, Width: width, Height: height,
		Workspace: ws, NoXServer: true, Version: "test", Log: testLogger(t),
	}
	if _, ok := t.(*testing.B); ok {
		cfg.Log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	if configure != nil {
		configure(&cfg)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- newSupervisor(cfg, pr).Run(ctx) }()
	h := &harness{display: name, socket: filepath.Join(cfg.RunDir, "guest.sock"), workspace: ws}
	wctx, wcancel := context.WithTimeout(ctx, 10*time.Second)
	defer wcancel()
	c, err := guest.WaitReady(wctx, h.socket)
	if err != nil {
		cancel()
		t.Fatalf("driver not ready: %v", err)
	}
	h.client = c
	t.Cleanup(func() {
		c.Close()
		cancel()
		if err := <-done; err != nil {
			t.Errorf("driver Run: %v", err)
		}
		pr.Close()
	})
	// Wait until the driver's display is up (health says so).
	for i := 0; ; i++ {
		hl, err := c.Health(context.Background())
		if err == nil && hl.XServer {
			break
		}
		if i > 200 {
			t.Fatalf("X server never healthy: %+v %v", hl, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
	return h
}

func decodeFrame(t *testing.T, f guest.Frame) image.Image {
	t.Helper()
	var img image.Image
	var err error
	switch f.Format {
	case "png":
		img, err = png.Decode(bytes.NewReader(f.Data))
	case "jpeg":
		img, err = jpeg.Decode(bytes.NewReader(f.Data))
	default:
		t.Fatalf("format %q", f.Format)
	}
	if err != nil {
		t.Fatalf("decode %s: %v", f.Format, err)
	}
	if img.Bounds().Dx() != f.Width || img.Bounds().Dy() != f.Height {
		t.Fatalf("image is %v, frame says %dx%d", img.Bounds(), f.Width, f.Height)
	}
	return img
}

func closeTo(c color.Color, rgb uint32, tol int) bool {
	r, g, b, _ := c.RGBA()
	d := func(a uint32, want uint32) bool {
		x := int(a>>8) - int(want&0xff)
		return x >= -tol && x <= tol
	}
	return d(r, rgb>>16) && d(g, rgb>>8) && d(b, rgb)
}

func TestScreenshotPattern(t *testing.T) {
	h := startDriver(t, 65, 640, 480)
	ctx := context.Background()
	if hl := h.client.Hello(); hl.Protocol != guest.ProtocolVersion || hl.Screen != (guest.Size{Width: 640, Height: 480}) {
		t.Fatalf("hello = %+v", hl)
	}
	win := xvfbtest.NewWindow(t, h.display, 0, 0, 640, 480, 0x000000)
	type rect struct {
		x, y, w, hgt int
		rgb          uint32
	}
	rects := []rect{{20, 20, 120, 80, 0xff0000}, {300, 200, 100, 100, 0x00ff00}, {500, 350, 100, 100, 0x0000ff}, {200, 40, 60, 60, 0xffffff}}
	for _, r := range rects {
		win.Fill(t, r.x, r.y, r.w, r.hgt, r.rgb)
	}
	tests := []struct {
		name  string
		opts  guest.ScreenshotOptions
		scale float64
		tol   int
	}{
		{"png native", guest.ScreenshotOptions{Format: "png"}, 1, 0},
		{"jpeg default", guest.ScreenshotOptions{}, 1, 24},
		{"jpeg q95", guest.ScreenshotOptions{Format: "jpeg", Quality: 95}, 1, 12},
		{"png half", guest.ScreenshotOptions{Format: "png", MaxWidth: 320}, 0.5, 0},
		{"jpeg max above native", guest.ScreenshotOptions{MaxWidth: 4000}, 1, 24},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f, err := h.client.Screenshot(ctx, tt.opts)
			if err != nil {
				t.Fatal(err)
			}
			wantW := int(640 * tt.scale)
			if f.Width != wantW || f.Height != int(480*tt.scale) {
				t.Fatalf("size %dx%d, want %dx%d", f.Width, f.Height, wantW, int(480*tt.scale))
			}
			if f.ID == 0 || f.Captured.IsZero() {
				t.Errorf("frame id %d captured %v", f.ID, f.Captured)
			}
			img := decodeFrame(t, f)
			for _, r := range rects {
				cx, cy := int(float64(r.x+r.w/2)*tt.scale), int(float64(r.y+r.hgt/2)*tt.scale)
				if c := img.At(cx, cy); !closeTo(c, r.rgb, tt.tol) {
					t.Errorf("pixel %d,%d = %v, want %06x", cx, cy, c, r.rgb)
				}
			}
			if c := img.At(int(10*tt.scale), int(470*tt.scale)); !closeTo(c, 0, tt.tol) {
				t.Errorf("background = %v, want black", c)
			}
		})
	}
	t.Run("reuse while unchanged, never stale", func(t *testing.T) {
		o := guest.ScreenshotOptions{Format: "png"}
		a, err := h.client.Screenshot(ctx, o)
		if err != nil {
			t.Fatal(err)
		}
		b, err := h.client.Screenshot(ctx, o)
		if err != nil {
			t.Fatal(err)
		}
		if a.ID != b.ID || !bytes.Equal(a.Data, b.Data) {
			t.Errorf("unchanged screen: ids %d/%d, equal data %v", a.ID, b.ID, bytes.Equal(a.Data, b.Data))
		}
		for i := 1; i <= 20; i++ {
			rgb := uint32(i*12)<<16 | uint32(255-i*12)
			win.Fill(t, 600, 0, 40, 40, rgb) // returns once drawn; the screenshot must show it
			f, err := h.client.Screenshot(ctx, o)
			if err != nil {
				t.Fatal(err)
			}
			if c := decodeFrame(t, f).At(620, 20); !closeTo(c, rgb, 0) {
				t.Fatalf("round %d: pixel %v, want %06x (stale frame %d)", i, c, rgb, f.ID)
			}
		}
	})
	for _, bad := range []guest.ScreenshotOptions{{Format: "gif"}, {Quality: 101}, {MaxWidth: -1}} {
		if _, err := h.client.Screenshot(ctx, bad); !errors.Is(err, fault.ErrInvalid) {
			t.Errorf("Screenshot(%+v) = %v, want invalid", bad, err)
		}
	}
}

func TestStreamAndSettle(t *testing.T) {
	h := startDriver(t, 66, 320, 240)
	ctx := context.Background()
	win := xvfbtest.NewWindow(t, h.display, 0, 0, 320, 240, 0x000000)
	st, err := h.client.Stream(ctx, guest.StreamOptions{ScreenshotOptions: guest.ScreenshotOptions{Format: "png"}, MaxFPS: 30})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	first, err := st.Next(ctx)
	if err != nil {
		t.Fatalf("first frame: %v", err)
	}
	// Let the window's own map/expose damage pass, then expect silence.
	if _, err := h.client.WaitSettled(ctx, guest.SettleOptions{Quiet: 150 * time.Millisecond}); err != nil {
		t.Fatal(err)
	}
	for {
		qctx, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
		_, err := st.Next(qctx)
		cancel()
		if err != nil {
			break // drained: nothing newer
		}
	}
	t.Run("quiet screen sends nothing", func(t *testing.T) {
		qctx, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
		defer cancel()
		if f, err := st.Next(qctx); err == nil {
			t.Fatalf("frame %d arrived with nothing drawn", f.ID)
		} else if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("Next = %v, want deadline exceeded", err)
		}
	})
	t.Run("drawing sends a frame", func(t *testing.T) {
		win.Fill(t, 100, 100, 50, 50, 0x00ff00)
		dctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		f, err := st.Next(dctx)
		if err != nil {
			t.Fatalf("no frame after drawing: %v", err)
		}
		if f.ID <= first.ID {
			t.Errorf("frame id %d not above first %d", f.ID, first.ID)
		}
		if c := decodeFrame(t, f).At(125, 125); !closeTo(c, 0x00ff00, 0) {
			t.Errorf("new frame pixel = %v, want green", c)
		}
	})
	t.Run("slow reader gets the newest", func(t *testing.T) {
		for i := 0; i < 5; i++ {
			win.Fill(t, 0, 0, 20, 20, uint32(0x100000*(i+1)))
			time.Sleep(20 * time.Millisecond)
		}
		win.Fill(t, 0, 0, 20, 20, 0x0000ff)
		time.Sleep(100 * time.Millisecond)
		f, err := st.Next(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if c := decodeFrame(t, f).At(10, 10); !closeTo(c, 0x0000ff, 0) {
			t.Errorf("frame shows %v, want the newest (blue)", c)
		}
	})
	t.Run("close ends a pending next", func(t *testing.T) {
		errc := make(chan error, 1)
		go func() { _, err := st.Next(ctx); errc <- err }()
		time.Sleep(50 * time.Millisecond)
		st.Close()
		select {
		case err := <-errc:
			if err == nil {
				t.Fatal("Next returned a frame after Close")
			}
		case <-time.After(2 * time.Second):
			t.Fatal("Next did not return after Close")
		}
	})
	t.Run("settle waits for quiet", func(t *testing.T) {
		stop := make(chan struct{})
		go func() {
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				case <-time.After(30 * time.Millisecond):
				}
				win.Fill(t, 200, 0, 20, 20, uint32(i*0x030303))
			}
		}()
		// The quiet period is 20 of the animation's steps: a loaded machine that holds the
		// drawing goroutine for a few steps must not read as quiet. The upper bound only
		// tells a settle that waited for its Max (then nothing ever counted as quiet).
		time.AfterFunc(1200*time.Millisecond, func() { close(stop) })
		start := time.Now()
		f, err := h.client.WaitSettled(ctx, guest.SettleOptions{Quiet: 600 * time.Millisecond, Max: 30 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		if el := time.Since(start); el < 1700*time.Millisecond || el > 15*time.Second {
			t.Errorf("settled after %v, want ≈1.2 s animation + 600 ms quiet", el)
		}
		if f.Format != "jpeg" || len(f.Data) == 0 {
			t.Errorf("frame %+v", f.Format)
		}
	})
	t.Run("settle is capped", func(t *testing.T) {
		stop, drawn := make(chan struct{}), make(chan struct{})
		defer func() {
			// The drawing ends before the subtest does: its window's connection closes with
			// the test, and a Fill on it then would fail a finished test.
			close(stop)
			<-drawn
		}()
		go func() {
			defer close(drawn)
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				case <-time.After(20 * time.Millisecond):
				}
				win.Fill(t, 250, 0, 20, 20, uint32(i*0x050505))
			}
		}()
		// (Quiet is 30 of the animation's steps, as above; without the cap the wait would last
		// as long as the animation: until the context ends.)
		cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		start := time.Now()
		if _, err := h.client.WaitSettled(cctx, guest.SettleOptions{Quiet: 600 * time.Millisecond, Max: time.Second}); err != nil {
			t.Fatal(err)
		}
		if el := time.Since(start); el < 950*time.Millisecond || el > 15*time.Second {
			t.Errorf("capped settle took %v, want ≈1 s", el)
		}
	})
}

func TestInput(t *testing.T) {
	h := startDriver(t, 67, 640, 480)
	ctx := context.Background()
	win := xvfbtest.NewWindow(t, h.display, 0, 0, 640, 480, 0)
	typed := func(t *testing.T, before int) string {
		var sb strings.Builder
		for _, k := range win.WaitKeys(before+64, 300*time.Millisecond)[before:] {
			if r := x11.KeysymRune(k.Keysym); r != 0 {
				sb.WriteRune(r)
			}
		}
		return sb.String()
	}
	tests := []struct {
		name string
		in   guest.Input
		want string
	}{
		{"type ascii", guest.Input{Action: "type", Text: "Hello, World!"}, "Hello, World!"},
		{"type chinese", guest.Input{Action: "type", Text: "hello 你好"}, "hello 你好"},
		{"key", guest.Input{Action: "key", Keys: "a"}, "a"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before := len(win.Keys())
			if err := h.client.Input(ctx, tt.in); err != nil {
				t.Fatal(err)
			}
			if got := typed(t, before); got != tt.want {
				t.Fatalf("window received %q, want %q", got, tt.want)
			}
		})
	}
	t.Run("combo carries modifiers", func(t *testing.T) {
		before := len(win.Keys())
		if err := h.client.Input(ctx, guest.Input{Action: "key", Keys: "ctrl+alt+t"}); err != nil {
			t.Fatal(err)
		}
		keys := win.WaitKeys(before+3, time.Second)[before:]
		last := keys[len(keys)-1]
		if x11.KeysymRune(last.Keysym) != 't' || last.State&(4|8) != 4|8 {
			t.Fatalf("last key %+v, want t with Control and Mod1", last)
		}
	})
	pointer := []guest.Input{
		{Action: "move", X: 10, Y: 10}, {Action: "click", X: 20, Y: 20}, {Action: "double_click", X: 20, Y: 20},
		{Action: "right_click", X: 5, Y: 5}, {Action: "middle_click", X: 5, Y: 5},
		{Action: "mouse_down", X: 5, Y: 5}, {Action: "mouse_up", X: 50, Y: 50},
		{Action: "drag", X: 5, Y: 5, ToX: 100, ToY: 100}, {Action: "scroll", X: 5, Y: 5, DeltaY: 3},
	}
	for _, in := range pointer {
		if err := h.client.Input(ctx, in); err != nil {
			t.Errorf("Input(%+v): %v", in, err)
		}
	}
	invalid := []guest.Input{
		{Action: "fly"}, {Action: "click", X: 5000, Y: 1}, {Action: "key"}, {Action: "key", Keys: "ctrl+bogus"},
		{Action: "scroll", X: 1, Y: 1}, {Action: "drag", X: 1, Y: 1, ToX: -5, ToY: 0}, {Action: "click", Button: 12},
	}
	for _, in := range invalid {
		if err := h.client.Input(ctx, in); !errors.Is(err, fault.ErrInvalid) {
			t.Errorf("Input(%+v) = %v, want invalid", in, err)
		}
	}
}

func TestExec(t *testing.T) {
	h := startDriver(t, 68, 320, 240)
	ctx := context.Background()
	if err := os.Mkdir(filepath.Join(h.workspace, "sub"), 0o755); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name  string
		req   guest.ExecRequest
		check func(t *testing.T, r guest.ExecResult)
	}{
		{"exit code and streams", guest.ExecRequest{Shell: "echo out; echo err >&2; exit 3"}, func(t *testing.T, r guest.ExecResult) {
			if r.ExitCode != 3 || string(r.Stdout) != "out\n" || string(r.Stderr) != "err\n" {
				t.Errorf("got %d %q %q", r.ExitCode, r.Stdout, r.Stderr)
			}
		}},
		{"argv", guest.ExecRequest{Command: []string{"printf", "%s|", "a b", "c"}}, func(t *testing.T, r guest.ExecResult) {
			if string(r.Stdout) != "a b|c|" {
				t.Errorf("stdout %q", r.Stdout)
			}
		}},
		{"cwd defaults to workspace", guest.ExecRequest{Command: []string{"pwd"}}, func(t *testing.T, r guest.ExecResult) {
			if strings.TrimSpace(string(r.Stdout)) != h.workspace {
				t.Errorf("pwd %q, want %q", r.Stdout, h.workspace)
			}
		}},
		{"relative cwd", guest.ExecRequest{Command: []string{"pwd"}, Cwd: "sub"}, func(t *testing.T, r guest.ExecResult) {
			if strings.TrimSpace(string(r.Stdout)) != filepath.Join(h.workspace, "sub") {
				t.Errorf("pwd %q", r.Stdout)
			}
		}},
		{"env and display", guest.ExecRequest{Shell: `echo "$FOO:$DISPLAY"`, Env: map[string]string{"FOO": "bar"}}, func(t *testing.T, r guest.ExecResult) {
			if string(r.Stdout) != "bar:"+h.display+"\n" {
				t.Errorf("stdout %q", r.Stdout)
			}
		}},
		{"stdin", guest.ExecRequest{Command: []string{"cat"}, Stdin: []byte("in\x00put")}, func(t *testing.T, r guest.ExecResult) {
			if string(r.Stdout) != "in\x00put" {
				t.Errorf("stdout %q", r.Stdout)
			}
		}},
		{"output cap", guest.ExecRequest{Shell: "head -c 100000 /dev/zero; head -c 10 /dev/zero >&2", MaxOutput: 1000}, func(t *testing.T, r guest.ExecResult) {
			if len(r.Stdout) != 1000 || !r.StdoutTruncated || len(r.Stderr) != 10 || r.StderrTruncated {
				t.Errorf("stdout %d truncated %v, stderr %d truncated %v", len(r.Stdout), r.StdoutTruncated, len(r.Stderr), r.StderrTruncated)
			}
		}},
		{"timeout kills the group", guest.ExecRequest{Shell: "sleep 30 & sleep 30; echo never", Timeout: 300 * time.Millisecond}, func(t *testing.T, r guest.ExecResult) {
			if !r.TimedOut || r.ExitCode != 128+9 || len(r.Stdout) != 0 {
				t.Errorf("timed out %v exit %d stdout %q", r.TimedOut, r.ExitCode, r.Stdout)
			}
			if r.Duration > 20*time.Second { // not the 30 s of its sleeps (a bound a loaded machine meets)
				t.Errorf("took %v", r.Duration)
			}
		}},
		{"what the command cost: its own peak memory and CPU", guest.ExecRequest{
			// awk builds a string of 128 MiB, then prints its own high-water mark.
			Shell: `awk 'BEGIN { s = "0123456789abcdef"; while (length(s) < 100000000) s = s s; while ((getline l < "/proc/self/status") > 0) if (l ~ /^VmHWM/) print l }'`}, func(t *testing.T, r guest.ExecResult) {
			var kib int64
			if _, err := fmt.Sscanf(strings.TrimSpace(string(r.Stdout)), "VmHWM: %d kB", &kib); err != nil {
				t.Fatalf("stdout %q: %v", r.Stdout, err)
			}
			if hwm := kib << 10; hwm < 100e6 || r.MaxRSS < hwm || r.MaxRSS > hwm+hwm/10 {
				t.Errorf("reported peak %d bytes; the shell's own high-water mark %d bytes (want within 10%%)", r.MaxRSS, hwm)
			}
			if r.CPUTime <= 0 || r.CPUTime > r.Duration*4 {
				t.Errorf("CPU time %v for a %v command", r.CPUTime, r.Duration)
			}
		}},
		{"background child does not hold the call", guest.ExecRequest{Shell: "sleep 5 & echo started"}, func(t *testing.T, r guest.ExecResult) {
			if r.Duration > 4*time.Second || string(r.Stdout) != "started\n" { // not the child's 5 s
				t.Errorf("took %v, stdout %q", r.Duration, r.Stdout)
			}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r, err := h.client.Exec(ctx, tt.req)
			if err != nil {
				t.Fatal(err)
			}
			tt.check(t, r)
		})
	}
	errs := []struct {
		name  string
		req   guest.ExecRequest
		class error
	}{
		{"missing program", guest.ExecRequest{Command: []string{"no-such-program-xyz"}}, fault.ErrNotFound},
		{"missing cwd", guest.ExecRequest{Command: []string{"true"}, Cwd: "nope"}, fault.ErrNotFound},
		{"nothing to run", guest.ExecRequest{}, fault.ErrInvalid},
		{"both", guest.ExecRequest{Command: []string{"true"}, Shell: "true"}, fault.ErrInvalid},
		{"cap too big", guest.ExecRequest{Command: []string{"true"}, MaxOutput: 1 << 30}, fault.ErrInvalid},
	}
	for _, tt := range errs {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := h.client.Exec(ctx, tt.req); !errors.Is(err, tt.class) {
				t.Fatalf("err = %v, want %v", err, tt.class)
			}
		})
	}
	t.Run("cancel kills", func(t *testing.T) {
		cctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
		defer cancel()
		start := time.Now()
		if _, err := h.client.Exec(cctx, guest.ExecRequest{Shell: "sleep 30"}); !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("err = %v", err)
		}
		if time.Since(start) > 20*time.Second { // not the sleep's 30 s
			t.Errorf("cancel took %v", time.Since(start))
		}
		// The connection still works.
		if r, err := h.client.Exec(ctx, guest.ExecRequest{Command: []string{"true"}}); err != nil || r.ExitCode != 0 {
			t.Fatalf("after cancel: %+v %v", r, err)
		}
	})
}

func TestFiles(t *testing.T) {
	h := startDriver(t, 69, 320, 240)
	ctx := context.Background()
	c := h.client
	data := make([]byte, 3<<20+17)
	rand.Read(data)
	t.Run("binary round trip", func(t *testing.T) {
		if err := c.WriteFile(ctx, "blob.bin", data, 0o600); err != nil {
			t.Fatal(err)
		}
		got, err := c.ReadFile(ctx, filepath.Join(h.workspace, "blob.bin"), 0)
		if err != nil {
			t.Fatal(err)
		}
		if sha256.Sum256(got) != sha256.Sum256(data) {
			t.Fatalf("sha256 differs (%d bytes back, %d sent)", len(got), len(data))
		}
		fi, err := c.Stat(ctx, "blob.bin")
		if err != nil || fi.Size != int64(len(data)) || fi.Mode.Perm() != 0o600 || fi.IsDir {
			t.Fatalf("stat %+v %v", fi, err)
		}
	})
	t.Run("empty file", func(t *testing.T) {
		if err := c.WriteFile(ctx, "empty", nil, 0); err != nil {
			t.Fatal(err)
		}
		got, err := c.ReadFile(ctx, "empty", 0)
		if err != nil || got == nil || len(got) != 0 {
			t.Fatalf("got %v %v", got, err)
		}
	})
	t.Run("atomic replace leaves no temp files", func(t *testing.T) {
		for i := 0; i < 3; i++ {
			if err := c.WriteFile(ctx, "doc.txt", bytes.Repeat([]byte{byte('a' + i)}, 1000), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		list, err := c.ListDir(ctx, "")
		if err != nil {
			t.Fatal(err)
		}
		var names []string
		for _, fi := range list {
			names = append(names, fi.Name)
		}
		if strings.Join(names, ",") != "blob.bin,doc.txt,empty" {
			t.Fatalf("workspace holds %v", names)
		}
		got, _ := c.ReadFile(ctx, "doc.txt", 0)
		if string(got) != strings.Repeat("c", 1000) {
			t.Fatalf("content %q…", got[:10])
		}
	})
	t.Run("concurrent readers never see a partial file", func(t *testing.T) {
		a, b := bytes.Repeat([]byte("A"), 1<<20), bytes.Repeat([]byte("B"), 1<<20)
		c.WriteFile(ctx, "race", a, 0)
		done := make(chan struct{})
		go func() {
			defer close(done)
			for i := 0; i < 20; i++ {
				c.WriteFile(ctx, "race", [][]byte{a, b}[i%2], 0)
			}
		}()
		for i := 0; i < 20; i++ {
			got, err := c.ReadFile(ctx, "race", 0)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got, a) && !bytes.Equal(got, b) {
				t.Fatalf("read a mixed file of %d bytes", len(got))
			}
		}
		<-done
	})
	t.Run("mkdir", func(t *testing.T) {
		if err := c.Mkdir(ctx, "x/y/z", true); err != nil {
			t.Fatal(err)
		}
		if err := c.Mkdir(ctx, "x/y/z", true); err != nil {
			t.Fatalf("mkdir -p of an existing dir: %v", err)
		}
		if err := c.Mkdir(ctx, "x", false); !errors.Is(err, fault.ErrExists) {
			t.Fatalf("mkdir existing = %v, want exists", err)
		}
		if err := c.Mkdir(ctx, "p/q", false); !errors.Is(err, fault.ErrNotFound) {
			t.Fatalf("mkdir without parent = %v, want not found", err)
		}
		fi, err := c.Stat(ctx, "x/y/z")
		if err != nil || !fi.IsDir || fi.Path != filepath.Join(h.workspace, "x/y/z") {
			t.Fatalf("stat %+v %v", fi, err)
		}
	})
	locked := filepath.Join(h.workspace, "locked")
	os.Mkdir(locked, 0o000)
	defer os.Chmod(locked, 0o755)
	secret := filepath.Join(h.workspace, "secret")
	os.WriteFile(secret, []byte("x"), 0o000)
	type errCase struct {
		name  string
		do    func() error
		class error
	}
	errs := []errCase{
		{"read missing", func() error { _, err := c.ReadFile(ctx, "missing", 0); return err }, fault.ErrNotFound},
		{"stat missing", func() error { _, err := c.Stat(ctx, "/nonexistent/x"); return err }, fault.ErrNotFound},
		{"list missing", func() error { _, err := c.ListDir(ctx, "missing"); return err }, fault.ErrNotFound},
		{"write into missing dir", func() error { return c.WriteFile(ctx, "nodir/f", []byte("x"), 0) }, fault.ErrNotFound},
		{"read too large", func() error { _, err := c.ReadFile(ctx, "blob.bin", 1000); return err }, fault.ErrInvalid},
		{"read a directory", func() error { _, err := c.ReadFile(ctx, "x", 0); return err }, fault.ErrInvalid},
		{"write over a directory", func() error { return c.WriteFile(ctx, "x", []byte("x"), 0) }, fault.ErrInvalid},
		{"write too large", func() error { return c.WriteFile(ctx, "big", make([]byte, guest.MaxFileSize+1), 0) }, fault.ErrInvalid},
		{"write into /proc", func() error { return c.WriteFile(ctx, "/proc/cubicle-test", []byte("x"), 0) }, fault.ErrNotFound},
	}
	if os.Geteuid() != 0 {
		// Root ignores permission bits; then TestSupervisor covers these, running the real
		// binary as uid 1000.
		errs = append(errs,
			errCase{"read forbidden", func() error { _, err := c.ReadFile(ctx, "secret", 0); return err }, fault.ErrForbidden},
			errCase{"list forbidden", func() error { _, err := c.ListDir(ctx, "locked"); return err }, fault.ErrForbidden},
			errCase{"write forbidden", func() error { return c.WriteFile(ctx, "locked/f", []byte("x"), 0) }, fault.ErrForbidden})
	}
	for _, tt := range errs {
		t.Run(tt.name, func(t *testing.T) {
			if err := tt.do(); !errors.Is(err, tt.class) {
				t.Fatalf("err = %v, want class %v", err, tt.class)
			}
		})
	}
}

func TestHandshakeRefusesOtherProtocol(t *testing.T) {
	h := startDriver(t, 65, 320, 240)
	tests := []struct {
		name string
		env  wire.Envelope
		code string
		want string
	}{
		{"newer client", wire.Envelope{Op: wire.OpHello, Args: []byte(`{"protocol":99}`)}, wire.CodeConflict, "client speaks bridge protocol 99, this driver (test) speaks 1"},
		{"no hello", wire.Envelope{Op: wire.OpHealth}, wire.CodeInvalid, "the first message must be hello"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			conn, err := net.Dial("unix", h.socket)
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			if err := wire.WriteMessage(conn, &tt.env, nil); err != nil {
				t.Fatal(err)
			}
			conn.SetDeadline(time.Now().Add(5 * time.Second))
			br := bufio.NewReader(conn)
			var env wire.Envelope
			if _, err := wire.ReadMessage(br, &env); err != nil {
				t.Fatal(err)
			}
			var hello guest.Hello
			json.Unmarshal(env.Result, &hello)
			if env.Error == nil || env.Error.Code != tt.code || !strings.Contains(env.Error.Message, tt.want) || hello.Protocol != guest.ProtocolVersion {
				t.Fatalf("reply %+v %+v, want %s %q", env.Error, hello, tt.code, tt.want)
			}
			if _, err := wire.ReadMessage(br, &env); err == nil {
				t.Fatalf("connection still open after a refused handshake")
			}
		})
	}
}
