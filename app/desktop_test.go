package app

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"image"
	"image/color"
	"image/png"
	"io"
	"log"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jezek/xgb"
	"github.com/jezek/xgb/xproto"
	"github.com/jezek/xgb/xtest"

	"cubicle/images/guest/x11/xvfbtest"
	"cubicle/internal/testenv"
)

// desktopTags are the build tags of the real desktop binary. An explicit -tags replaces the
// tags in GOFLAGS, so the Podman bindings' tags are listed again.
const desktopTags = "desktop,production,webkit2_41,remote,exclude_graphdriver_btrfs,btrfs_noversion," +
	"exclude_graphdriver_devicemapper,containers_image_openpgp,libsqlite3"

// firstDisplay is where this package's tests start looking for a free X display number
// (xvfbtest.Reserve: other packages' tests and other runs on the machine take numbers too).
const firstDisplay = 51

// TestDesktopApp builds the real desktop binary, runs it under Xvfb and proves that the
// window rendered the UI (the page calls Ready; the screenshot is not blank), that the
// menu's CmdOrCtrl+, opens Settings → Local VM in the page (route reported, screen changed),
// that SIGTERM closes the app within 10 s, and that without an X server it fails with a
// message instead of a panic. Screenshots go to test-artifacts/desktop-app*.png.
func TestDesktopApp(t *testing.T) {
	needDesktopBuild(t)
	root := repoRoot(t)
	if _, err := os.Stat(filepath.Join(root, "frontend", "dist", "index.html")); err != nil {
		testenv.Missing(t, "the web UI is not built (frontend/dist/index.html): run `make build` first")
	}
	_ = os.Remove(filepath.Join(root, "test-artifacts", "desktop-app-blank.png")) // from an earlier failure
	bin := buildDesktop(t, root)
	display := startXvfb(t)
	x := dialX(t, display)

	dataDir := t.TempDir()
	app := startApp(t, bin, display, "--data-dir", dataDir)
	app.waitFor(t, 0, 60*time.Second, "desktop ui ready")

	win := appWindow(t, x)
	t.Logf("window %d at %d,%d size %dx%d", win.id, win.x, win.y, win.w, win.h)
	waitRendered(t, x, win, 15*time.Second)
	shot := waitStable(t, x, win, 15*time.Second) // e.g. the agent list finished loading
	saveArtifact(t, root, "desktop-app.png", shot)

	// The accelerator of "Local VM settings…": the menu emits "navigate", the page routes, the
	// shell's route watcher reports the new hash through Navigated, and the screen changes.
	from := app.mark()
	pressKeys(t, x, win, xkControlL, xkComma)
	app.waitFor(t, from, 15*time.Second, "desktop navigated", routeLocalVMSettings)
	settings := waitChanged(t, x, win, shot, 10*time.Second)
	saveArtifact(t, root, "desktop-app-local-vm.png", settings)

	stopStart := time.Now()
	if err := app.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatalf("SIGTERM: %v", err)
	}
	select {
	case <-app.exited:
		t.Logf("app exited %v after SIGTERM: %v", time.Since(stopStart).Round(time.Millisecond), app.cmd.ProcessState)
	case <-time.After(10 * time.Second):
		t.Fatal("app still running 10 s after SIGTERM")
	}

	t.Run("no X server", func(t *testing.T) {
		// A display nobody serves: the app must fail with a message, not a Go panic.
		noServer := freeDisplay(t)
		app := startApp(t, bin, noServer, "--data-dir", t.TempDir())
		select {
		case <-app.exited:
		case <-time.After(30 * time.Second):
			t.Fatal("app still running 30 s after starting without an X server")
		}
		// Its last lines may still be in the pipe when the process has exited (CI read the
		// output before the error naming DISPLAY arrived): read to the pipe's end.
		select {
		case <-app.drained:
		case <-time.After(10 * time.Second):
			t.Log("the app's output pipe was still open 10 s after it exited (a helper holds it?)")
		}
		out := app.output()
		if app.cmd.ProcessState.Success() || strings.Contains(out, "panic:") || !strings.Contains(out, "DISPLAY") {
			t.Errorf("without an X server: %v, want a failure naming DISPLAY and no panic; output:\n%s", app.cmd.ProcessState, out)
		}
		t.Logf("without an X server: %v:\n%s", app.cmd.ProcessState, out)
	})
}

// freeDisplay returns a display no X server serves, held for this test so that no other
// test on the machine starts one there meanwhile.
func freeDisplay(t *testing.T) string {
	t.Helper()
	return fmt.Sprintf(":%d", xvfbtest.Reserve(t, firstDisplay))
}

// needDesktopBuild checks for what building and running the desktop binary needs.
func needDesktopBuild(t *testing.T) {
	t.Helper()
	if err := exec.Command("pkg-config", "--exists", "webkit2gtk-4.1").Run(); err != nil {
		testenv.Missing(t, "webkit2gtk-4.1 development files not found (pkg-config: %v): apt-get install libwebkit2gtk-4.1-dev", err)
	}
	if _, err := exec.LookPath("Xvfb"); err != nil {
		testenv.Missing(t, "Xvfb not found: apt-get install xvfb")
	}
}

// repoRoot returns the module's root directory.
func repoRoot(t *testing.T) string {
	t.Helper()
	out, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil || len(bytes.TrimSpace(out)) == 0 {
		t.Fatalf("go env GOMOD: %v %s", err, out)
	}
	return filepath.Dir(string(bytes.TrimSpace(out)))
}

// buildDesktop builds the real desktop binary of the module at root into a temporary dir.
func buildDesktop(t *testing.T, root string) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "cubicle")
	start := time.Now()
	cmd := exec.Command("go", "build", "-tags", desktopTags, "-o", bin, ".")
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "CGO_ENABLED=1")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("building the desktop binary: %v\n%s", err, out)
	}
	t.Logf("built the desktop binary in %v", time.Since(start).Round(time.Millisecond))
	return bin
}

// startXvfb starts Xvfb on a display number it holds (xvfbtest.Reserve: a number checked
// free by its lock file alone could be taken by a parallel test in between) and returns its
// name once it accepts connections; it stops when the test ends.
func startXvfb(t *testing.T) string {
	t.Helper()
	return xvfbtest.Start(t, firstDisplay, 1280, 900)
}

// dialX connects to display and closes the connection when the test ends.
func dialX(t *testing.T, display string) *xgb.Conn {
	t.Helper()
	// xgb logs through the standard logger, e.g. that ~/.Xauthority is missing, which Xvfb
	// started without -auth does not need.
	xgb.Logger = log.New(io.Discard, "", 0)
	x, err := xgb.NewConnDisplay(display)
	if err != nil {
		t.Fatalf("connect to X %s: %v", display, err)
	}
	t.Cleanup(x.Close)
	if err := xtest.Init(x); err != nil {
		t.Fatalf("XTEST on %s: %v", display, err)
	}
	return x
}

// runningApp is the desktop binary running under test, its output collected line by line.
type runningApp struct {
	cmd     *exec.Cmd
	exited  chan struct{} // closed when the process has exited
	drained chan struct{} // closed when its output pipe reached its end (every holder exited)

	mu    sync.Mutex
	lines []string // output so far; guarded by mu
	added chan struct{}
}

// startApp starts bin on display with args. Its process group is killed when the test ends,
// so WebKit's helper processes never outlive the test.
func startApp(t *testing.T, bin, display string, args ...string) *runningApp {
	t.Helper()
	pr, pw, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, args...)
	cmd.Env = append(os.Environ(), "DISPLAY="+display)
	cmd.Stdout, cmd.Stderr = pw, pw
	cmd.SysProcAttr = ownProcessGroup()
	if err := cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", bin, err)
	}
	pw.Close()
	a := &runningApp{cmd: cmd, exited: make(chan struct{}), drained: make(chan struct{}), added: make(chan struct{}, 1)}

	var wg sync.WaitGroup
	wg.Add(2)
	go func() {
		defer wg.Done()
		defer close(a.drained)
		sc := bufio.NewScanner(pr)
		sc.Buffer(make([]byte, 64*1024), 1024*1024)
		for sc.Scan() {
			a.mu.Lock()
			a.lines = append(a.lines, sc.Text())
			a.mu.Unlock()
			select {
			case a.added <- struct{}{}:
			default:
			}
		}
	}()
	go func() {
		defer wg.Done()
		_ = cmd.Wait()
		close(a.exited)
	}()
	t.Cleanup(func() {
		killProcessGroup(cmd.Process) // the group: app and WebKit helpers
		<-a.exited
		pr.Close() // ends the reader even if a helper still held the pipe
		wg.Wait()
		if t.Failed() {
			t.Logf("app output (the test's failure is above):\n%s", a.output())
		}
	})
	return a
}

// output returns everything the app printed so far.
func (a *runningApp) output() string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return strings.Join(a.lines, "\n")
}

// mark returns the position after the output so far, for waitFor to start from.
func (a *runningApp) mark() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return len(a.lines)
}

// waitFor waits until a line of the app's output from line from on contains all of parts.
func (a *runningApp) waitFor(t *testing.T, from int, timeout time.Duration, parts ...string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	start := time.Now()
	for seen := from; ; {
		a.mu.Lock()
		lines := a.lines[seen:]
		seen = len(a.lines)
		a.mu.Unlock()
		for _, l := range lines {
			if containsAll(l, parts) {
				t.Logf("after %v: %s", time.Since(start).Round(time.Millisecond), l)
				return
			}
		}
		select {
		case <-a.added:
		case <-a.exited:
			t.Fatalf("app exited (%v) before logging %q", a.cmd.ProcessState, parts)
		case <-ctx.Done():
			t.Fatalf("no log line with %q within %v", parts, timeout)
		}
	}
}

func containsAll(s string, parts []string) bool {
	for _, p := range parts {
		if !strings.Contains(s, p) {
			return false
		}
	}
	return true
}

// xWindow is a top-level window and its geometry on the screen.
type xWindow struct {
	id         xproto.Window
	x, y, w, h int
}

// appWindow returns the largest viewable top-level window: with no window manager running,
// that is the app's GTK window.
func appWindow(t *testing.T, x *xgb.Conn) xWindow {
	t.Helper()
	root := xproto.Setup(x).DefaultScreen(x).Root
	tree, err := xproto.QueryTree(x, root).Reply()
	if err != nil {
		t.Fatalf("QueryTree: %v", err)
	}
	var best xWindow
	for _, w := range tree.Children {
		attr, err := xproto.GetWindowAttributes(x, w).Reply()
		if err != nil || attr.MapState != xproto.MapStateViewable {
			continue
		}
		g, err := xproto.GetGeometry(x, xproto.Drawable(w)).Reply()
		if err != nil {
			continue
		}
		if int(g.Width)*int(g.Height) > best.w*best.h {
			best = xWindow{id: w, x: int(g.X), y: int(g.Y), w: int(g.Width), h: int(g.Height)}
		}
	}
	if best.id == 0 {
		t.Fatal("no viewable top-level window on the display")
	}
	return best
}

// screenshot captures the whole screen.
func screenshot(t *testing.T, x *xgb.Conn) *image.RGBA {
	t.Helper()
	scr := xproto.Setup(x).DefaultScreen(x)
	w, h := int(scr.WidthInPixels), int(scr.HeightInPixels)
	rep, err := xproto.GetImage(x, xproto.ImageFormatZPixmap, xproto.Drawable(scr.Root),
		0, 0, uint16(w), uint16(h), 0xffffffff).Reply()
	if err != nil {
		t.Fatalf("GetImage: %v", err)
	}
	if len(rep.Data) < w*h*4 {
		t.Fatalf("GetImage: %d bytes for %dx%d at depth %d", len(rep.Data), w, h, rep.Depth)
	}
	img := image.NewRGBA(image.Rect(0, 0, w, h))
	for i := 0; i < w*h; i++ { // 24-bit depth, 32 bits per pixel, little-endian BGRX
		img.Pix[4*i+0] = rep.Data[4*i+2]
		img.Pix[4*i+1] = rep.Data[4*i+1]
		img.Pix[4*i+2] = rep.Data[4*i+0]
		img.Pix[4*i+3] = 0xff
	}
	return img
}

// colourStats returns the number of distinct colours in r of img and the share of the
// most frequent one.
func colourStats(img *image.RGBA, r image.Rectangle) (distinct int, top float64) {
	counts := map[color.RGBA]int{}
	r = r.Intersect(img.Bounds())
	for y := r.Min.Y; y < r.Max.Y; y++ {
		for x := r.Min.X; x < r.Max.X; x++ {
			counts[img.RGBAAt(x, y)]++
		}
	}
	most := 0
	for _, n := range counts {
		most = max(most, n)
	}
	if len(counts) == 0 {
		return 0, 1
	}
	return len(counts), float64(most) / float64(r.Dx()*r.Dy())
}

// Thresholds of a rendered page: anti-aliased text alone gives dozens of colours, while an
// unpainted web view is one colour. The top of the window (menu bar) is left out because GTK
// draws it whether or not the page rendered.
const (
	minDistinctColours = 32
	maxTopColourShare  = 0.995
	menuBarAllowance   = 40
)

// looksRendered reports whether area r of img holds a rendered page rather than a blank one.
func looksRendered(img *image.RGBA, r image.Rectangle) (ok bool, distinct int, top float64) {
	distinct, top = colourStats(img, r)
	return distinct >= minDistinctColours && top <= maxTopColourShare, distinct, top
}

// waitRendered waits until the page area of win is not blank and returns the screenshot.
func waitRendered(t *testing.T, x *xgb.Conn, win xWindow, timeout time.Duration) *image.RGBA {
	t.Helper()
	page := image.Rect(win.x, win.y+menuBarAllowance, win.x+win.w, win.y+win.h)
	deadline := time.Now().Add(timeout)
	for {
		img := screenshot(t, x)
		ok, distinct, top := looksRendered(img, page)
		if ok {
			t.Logf("page area %v: %d distinct colours, most frequent covers %.1f%%", page, distinct, 100*top)
			return img
		}
		if time.Now().After(deadline) {
			saveArtifact(t, repoRoot(t), "desktop-app-blank.png", img)
			t.Fatalf("page area %v looks blank after %v: %d distinct colours, most frequent covers %.1f%%",
				page, timeout, distinct, 100*top)
		}
		time.Sleep(250 * time.Millisecond)
	}
}

// Shares of changed pixels in the page area: below stillShare the page is at rest (a caret
// may blink), from navigatedShare on it shows another screen.
const (
	stillShare     = 0.001
	navigatedShare = 0.05
)

// waitStable waits until two screenshots 300 ms apart show the same page and returns the
// second, so that a later change is the test's doing and not the page still loading.
func waitStable(t *testing.T, x *xgb.Conn, win xWindow, timeout time.Duration) *image.RGBA {
	t.Helper()
	page := image.Rect(win.x, win.y+menuBarAllowance, win.x+win.w, win.y+win.h)
	deadline := time.Now().Add(timeout)
	prev := screenshot(t, x)
	for {
		time.Sleep(300 * time.Millisecond)
		img := screenshot(t, x)
		changed := changedShare(prev, img, page)
		if changed < stillShare {
			return img
		}
		if time.Now().After(deadline) {
			t.Fatalf("page area still changing after %v (%.2f%% of pixels in 300 ms)", timeout, 100*changed)
		}
		prev = img
	}
}

// waitChanged waits until the page area of win differs from before in at least
// navigatedShare of its pixels (the page shows another screen) and returns the screenshot.
func waitChanged(t *testing.T, x *xgb.Conn, win xWindow, before *image.RGBA, timeout time.Duration) *image.RGBA {
	t.Helper()
	page := image.Rect(win.x, win.y+menuBarAllowance, win.x+win.w, win.y+win.h)
	deadline := time.Now().Add(timeout)
	for {
		img := screenshot(t, x)
		changed := changedShare(before, img, page)
		if changed >= navigatedShare {
			t.Logf("page area changed in %.1f%% of its pixels", 100*changed)
			return img
		}
		if time.Now().After(deadline) {
			t.Fatalf("page area did not change within %v (%.2f%% of pixels differ)", timeout, 100*changed)
		}
		time.Sleep(250 * time.Millisecond)
	}
}

// changedShare returns the share of pixels in r that differ between a and b.
func changedShare(a, b *image.RGBA, r image.Rectangle) float64 {
	r = r.Intersect(a.Bounds()).Intersect(b.Bounds())
	if r.Empty() {
		return 0
	}
	n := 0
	for y := r.Min.Y; y < r.Max.Y; y++ {
		for x := r.Min.X; x < r.Max.X; x++ {
			if a.RGBAAt(x, y) != b.RGBAAt(x, y) {
				n++
			}
		}
	}
	return float64(n) / float64(r.Dx()*r.Dy())
}

// X keysyms used by the test.
const (
	xkControlL xproto.Keysym = 0xffe3
	xkComma    xproto.Keysym = 0x002c
)

// pressKeys focuses win and presses the keys in order (a chord), then releases them in
// reverse, through XTEST.
func pressKeys(t *testing.T, x *xgb.Conn, win xWindow, syms ...xproto.Keysym) {
	t.Helper()
	setup := xproto.Setup(x)
	root := setup.DefaultScreen(x).Root
	count := byte(setup.MaxKeycode - setup.MinKeycode + 1)
	km, err := xproto.GetKeyboardMapping(x, setup.MinKeycode, count).Reply()
	if err != nil {
		t.Fatalf("GetKeyboardMapping: %v", err)
	}
	keycode := func(sym xproto.Keysym) byte {
		per := int(km.KeysymsPerKeycode)
		for i, s := range km.Keysyms {
			if s == sym {
				return byte(int(setup.MinKeycode) + i/per)
			}
		}
		t.Fatalf("no keycode for keysym %#x", sym)
		return 0
	}

	// No window manager runs, so give the window the pointer and the focus ourselves.
	cx, cy := int16(win.x+win.w/2), int16(win.y+win.h/2)
	if err := xtest.FakeInputChecked(x, xproto.MotionNotify, 0, 0, root, cx, cy, 0).Check(); err != nil {
		t.Fatalf("XTEST motion: %v", err)
	}
	if err := xproto.SetInputFocusChecked(x, xproto.InputFocusPointerRoot, win.id, xproto.TimeCurrentTime).Check(); err != nil {
		t.Fatalf("SetInputFocus: %v", err)
	}
	var codes []byte
	for _, s := range syms {
		codes = append(codes, keycode(s))
	}
	for _, c := range codes {
		if err := xtest.FakeInputChecked(x, xproto.KeyPress, c, 0, root, 0, 0, 0).Check(); err != nil {
			t.Fatalf("XTEST key press: %v", err)
		}
	}
	for i := len(codes) - 1; i >= 0; i-- {
		if err := xtest.FakeInputChecked(x, xproto.KeyRelease, codes[i], 0, root, 0, 0, 0).Check(); err != nil {
			t.Fatalf("XTEST key release: %v", err)
		}
	}
}

// saveArtifact writes img as PNG to test-artifacts/name at the repository root.
func saveArtifact(t *testing.T, root, name string, img image.Image) {
	t.Helper()
	dir := filepath.Join(root, "test-artifacts")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	if err := png.Encode(&buf, img); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, name)
	if err := os.WriteFile(path, buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("saved %s", path)
}
