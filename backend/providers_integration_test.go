package backend

import (
	"bytes"
	"encoding/base64"
	"fmt"
	"image"
	"image/color"
	"image/png"
	"log/slog"
	"strings"
	"testing"
	"time"

	"cubicle/backend/agent"
	"cubicle/backend/agent/anthropic/anthropictest"
	"cubicle/backend/agent/native/nativetest"
	"cubicle/backend/agent/responses/responsestest"
	"cubicle/backend/guest"
	"cubicle/backend/models"
	"cubicle/backend/store"
)

// TestNativeProvidersOnRealDesktop drives the real runtime on a real desktop (the standard
// image in Podman, the real driver) through each vendor-native adapter, with a scripted server
// speaking the vendor's wire format: screenshot → click → key (a terminal opens) → type → key
// → screenshot, then the shell reads back what was typed. The guard, gate and history are the
// app's own.
// terminalOpen waits (through the shell tool) until the terminal that Ctrl+Alt+T started has
// a process, and a moment more for its window, so that the click and the typing reach it.
const terminalOpen = "for i in $(seq 40); do pgrep -x xfce4-terminal >/dev/null && break; sleep 0.25; done; sleep 2; pgrep -x xfce4-terminal"

// readTyped reads the file the typed command writes, once the terminal ran it.
func readTyped(path string) string {
	return "for i in $(seq 20); do [ -s " + path + " ] && break; sleep 0.5; done; cat " + path
}

func TestNativeProvidersOnRealDesktop(t *testing.T) {
	b, _, _ := startOnRealDesktop(t, slog.LevelWarn)
	admin, err := b.Auth.Admin()
	if err != nil {
		t.Fatal(err)
	}
	ag, err := b.Profiles.Create(admin.ID, "Ada")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.Store.UpdateAgent(ag.ID, func(a *store.Agent) error { a.Computer = "vm"; return nil }); err != nil {
		t.Fatal(err)
	}
	firstShot := func(evs []agent.Event) (first, last string) {
		for _, e := range evs {
			if e.Type == agent.ToolResultDataDelta && e.Data != nil && e.Data.Type == "image" {
				if first == "" {
					first = e.Data.Data
				}
				last = e.Data.Data
			}
		}
		return first, last
	}
	check := func(t *testing.T, evs []agent.Event, word, shellID string) {
		t.Helper()
		r := evs[len(evs)-2].Result
		if r == nil || r.Metadata["error"] != nil {
			t.Fatalf("turn failed: %+v", r)
		}
		res := results(evs)
		for id, st := range res {
			if st[0] != agent.StateSuccess {
				t.Fatalf("%s: %s %q", id, st[0], st[1])
			}
		}
		if !strings.Contains(res[shellID][1], word) {
			t.Fatalf("the typed text %q is not in the file the terminal wrote: %q", word, res[shellID][1])
		}
		first, last := firstShot(evs)
		if first == "" || first == last {
			t.Fatal("the screen did not change between the first and the last screenshot")
		}
	}

	t.Run("anthropic", func(t *testing.T) {
		srv := anthropictest.New("sk-ant-it")
		defer srv.Close()
		key := "sk-ant-it"
		if _, err := b.Models.Set(models.Update{BaseURL: srv.URL, Model: "claude-sonnet-4-5", Provider: models.ProviderAnthropic,
			APIKey: &key, AllowPrivate: &allowLoopback}); err != nil {
			t.Fatal(err)
		}
		word := "typed-by-anthropic"
		var display []float64
		srv.Push(
			anthropictest.Call("a1", "computer", anthropictest.Fixed(map[string]any{"action": "screenshot"})),
			anthropictest.Call("a2", "computer", anthropictest.Fixed(map[string]any{"action": "key", "text": "ctrl+alt+t"})),
			anthropictest.Call("a3", "bash", anthropictest.Fixed(map[string]any{"command": terminalOpen})),
			anthropictest.Call("a4", "computer", func(s anthropictest.Seen) any {
				tl := anthropictest.Tools(s.Body)[0]
				display = []float64{tl["display_width_px"].(float64), tl["display_height_px"].(float64)}
				// the terminal opens in the middle of the screen: the click focuses it
				return map[string]any{"action": "left_click", "coordinate": []int{int(display[0]) / 2, int(display[1]) / 2}}
			}),
			anthropictest.Call("a5", "computer", anthropictest.Fixed(map[string]any{"action": "type", "text": "echo " + word + " > /home/cua/workspace/typed.txt"})),
			anthropictest.Call("a6", "computer", anthropictest.Fixed(map[string]any{"action": "key", "text": "Return"})),
			anthropictest.Call("a7", "computer", anthropictest.Fixed(map[string]any{"action": "screenshot"})),
			anthropictest.Call("a8", "bash", anthropictest.Fixed(map[string]any{"command": readTyped("/home/cua/workspace/typed.txt")})),
			anthropictest.Say("The terminal shows it."),
		)
		evs := turn(t, b, admin.ID, ag.ID, "anthropic", "type in a terminal")
		check(t, evs, word, "a8")
		if len(display) != 2 || display[0] != 1280 || display[1] != 800 {
			t.Fatalf("declared display %v (the standard desktop is 1280x800, WXGA: not scaled)", display)
		}
		if srv.Left() != 0 {
			t.Fatalf("%d scripted steps unused", srv.Left())
		}
	})

	t.Run("openai-responses", func(t *testing.T) {
		srv := responsestest.New("sk-it")
		defer srv.Close()
		key := "sk-it"
		if _, err := b.Models.Set(models.Update{BaseURL: srv.URL + "/v1", Model: "computer-use-preview", Provider: models.ProviderResponses,
			APIKey: &key, AllowPrivate: &allowLoopback}); err != nil {
			t.Fatal(err)
		}
		word := "typed-by-responses"
		var display []float64
		act := func(a map[string]any) func(responsestest.Seen) map[string]any {
			return func(responsestest.Seen) map[string]any { return a }
		}
		srv.Push(
			responsestest.ComputerCall("r1", act(map[string]any{"type": "screenshot"})),
			responsestest.ComputerCall("r2", act(map[string]any{"type": "keypress", "keys": []any{"CTRL", "ALT", "T"}})),
			responsestest.FunctionCall("r3", "computer_shell", map[string]any{"command": terminalOpen}),
			responsestest.ComputerCall("r4", func(s responsestest.Seen) map[string]any {
				tl := s.Body["tools"].([]any)[0].(map[string]any)
				display = []float64{tl["display_width"].(float64), tl["display_height"].(float64)}
				return map[string]any{"type": "click", "button": "left", "x": int(display[0]) / 2, "y": int(display[1]) / 2}
			}),
			responsestest.ComputerCall("r5", act(map[string]any{"type": "type", "text": "echo " + word + " > /home/cua/workspace/typed2.txt"})),
			responsestest.ComputerCall("r6", act(map[string]any{"type": "keypress", "keys": []any{"ENTER"}})),
			responsestest.ComputerCall("r7", act(map[string]any{"type": "screenshot"})),
			responsestest.FunctionCall("r8", "computer_shell", map[string]any{"command": readTyped("/home/cua/workspace/typed2.txt")}),
			responsestest.Say("Done."),
		)
		evs := turn(t, b, admin.ID, ag.ID, "responses", "type in a terminal")
		check(t, evs, word, "r8")
		if len(display) != 2 || display[0] >= 1280 || display[0] < 1000 {
			t.Fatalf("declared display %v (1280x800 is scaled to the XGA area)", display)
		}
		if srv.Left() != 0 {
			t.Fatalf("%d scripted steps unused", srv.Left())
		}
	})
}

// drawTarget is an X client (python3 and libX11 through ctypes: both are in the standard
// image) that maps an override-redirect window of the target's colour at x,y w×h, where no
// window manager moves or decorates it, and keeps it until it is killed.
const drawTarget = `import ctypes, sys, time
from ctypes import c_void_p, c_ulong, c_int, c_uint, c_long, POINTER, byref
x, y, w, h = map(int, sys.argv[1:5])
X = ctypes.CDLL("libX11.so.6")
X.XOpenDisplay.restype, X.XOpenDisplay.argtypes = c_void_p, [ctypes.c_char_p]
X.XDefaultRootWindow.restype, X.XDefaultRootWindow.argtypes = c_ulong, [c_void_p]
class Attrs(ctypes.Structure):
    _fields_ = [("background_pixmap", c_ulong), ("background_pixel", c_ulong), ("border_pixmap", c_ulong),
        ("border_pixel", c_ulong), ("bit_gravity", c_int), ("win_gravity", c_int), ("backing_store", c_int),
        ("backing_planes", c_ulong), ("backing_pixel", c_ulong), ("save_under", c_int), ("event_mask", c_long),
        ("do_not_propagate_mask", c_long), ("override_redirect", c_int), ("colormap", c_ulong), ("cursor", c_ulong)]
X.XCreateWindow.restype = c_ulong
X.XCreateWindow.argtypes = [c_void_p, c_ulong, c_int, c_int, c_uint, c_uint, c_uint, c_int, c_uint, c_void_p, c_ulong, POINTER(Attrs)]
X.XMapRaised.argtypes = [c_void_p, c_ulong]
X.XRaiseWindow.argtypes = [c_void_p, c_ulong]
X.XSync.argtypes = [c_void_p, c_int]
d = X.XOpenDisplay(None)
if not d:
    sys.exit("no display")
a = Attrs(background_pixel=0xee2211, override_redirect=1)
win = X.XCreateWindow(d, X.XDefaultRootWindow(d), x, y, w, h, 0, 0, 1, None, (1 << 1) | (1 << 9), byref(a))
X.XMapRaised(d, win)
X.XSync(d, 0)
print("drawn", flush=True)
while True:
    time.sleep(0.5)
    X.XRaiseWindow(d, win)
    X.XSync(d, 0)
`

// redArea is the bounding box of the target-coloured pixels of a PNG screenshot (the test
// that FindTarget applies to what the model sees).
func redArea(t *testing.T, data []byte) (image.Image, image.Rectangle) {
	t.Helper()
	img, err := png.Decode(bytes.NewReader(data))
	if err != nil {
		t.Fatalf("screenshot: %v", err)
	}
	area := image.Rectangle{}
	bd := img.Bounds()
	for y := bd.Min.Y; y < bd.Max.Y; y++ {
		for x := bd.Min.X; x < bd.Max.X; x++ {
			if isTarget(img.At(x, y)) {
				area = area.Union(image.Rect(x, y, x+1, y+1))
			}
		}
	}
	return img, area
}

func isTarget(c color.Color) bool {
	r, g, b, _ := c.RGBA()
	return r>>8 > 0xc0 && g>>8 < 0x60 && b>>8 < 0x60
}

// b64Size is the size of a base64 PNG or JPEG image.
func b64Size(b64 string) (int, int) {
	raw, err := base64.StdEncoding.DecodeString(b64)
	if err != nil {
		return 0, 0
	}
	cfg, _, err := image.DecodeConfig(bytes.NewReader(raw))
	if err != nil {
		return 0, 0
	}
	return cfg.Width, cfg.Height
}

// TestScalingRoundTripOnRealDesktop is the scaling round trip on a real desktop, through both
// vendor-native adapters and the real runtime: the desktop's screen is resized (RandR, the
// driver's resize) to each of four sizes and a target drawn at a known spot; the scripted
// model finds the target in the (scaled) screenshot it received and clicks at the target's
// centre in its own coordinates; the real pointer then lies on the target in the screen's
// coordinates, and the pixel under it is the target's.
func TestScalingRoundTripOnRealDesktop(t *testing.T) {
	b, _, ctx := startOnRealDesktop(t, slog.LevelWarn)
	admin, err := b.Auth.Admin()
	if err != nil {
		t.Fatal(err)
	}
	ag, err := b.Profiles.Create(admin.ID, "Ada")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.Store.UpdateAgent(ag.ID, func(a *store.Agent) error { a.Computer = "vm"; return nil }); err != nil {
		t.Fatal(err)
	}
	if _, err := b.VMs.Act(ctx, admin.ID, ag.ID, "start"); err != nil {
		t.Fatalf("start the desktop: %v", err)
	}
	inst, err := instanceOf(b, admin.ID, ag.ID)
	if err != nil {
		t.Fatal(err)
	}
	link := func(t *testing.T) *guest.Client {
		t.Helper()
		g, err := b.VMs.Link(ctx, inst.ID)
		if err != nil {
			t.Fatalf("the driver link: %v", err)
		}
		return g
	}
	g := link(t)
	if !g.Has(guest.FeatureResize) {
		t.Fatal("the standard image's driver cannot resize the screen")
	}
	if err := g.WriteFile(ctx, "/tmp/cubicle-target.py", []byte(drawTarget), 0o644); err != nil {
		t.Fatal(err)
	}
	exec := func(t *testing.T, cmd string) string {
		t.Helper()
		r, err := link(t).Exec(ctx, guest.ExecRequest{Shell: cmd, Timeout: 30 * time.Second})
		if err != nil || r.ExitCode != 0 {
			t.Fatalf("%s: %v exit %d: %s %s", cmd, err, r.ExitCode, r.Stdout, r.Stderr)
		}
		return strings.TrimSpace(string(r.Stdout))
	}
	drawer := ""
	defer func() {
		if drawer != "" {
			exec(t, "kill "+drawer)
		}
	}()

	anth, resp := anthropictest.New("sk-ant-it"), responsestest.New("sk-it")
	defer anth.Close()
	defer resp.Close()
	akey, rkey := "sk-ant-it", "sk-it"
	// seen is what the model received when it clicked: the screenshot's size, the declared
	// display and the click in its coordinates.
	type seen struct{ imgW, imgH, dispW, dispH, x, y int }
	providers := []struct {
		name  string
		use   models.Update
		push  func(*seen)
		click string // the click's tool call id
	}{
		{"anthropic", models.Update{BaseURL: anth.URL, Model: "claude-sonnet-4-5", Provider: models.ProviderAnthropic, APIKey: &akey, AllowPrivate: &allowLoopback},
			func(sn *seen) {
				anth.Push(
					anthropictest.Call("a1", "computer", anthropictest.Fixed(map[string]any{"action": "screenshot"})),
					anthropictest.Call("a2", "computer", func(s anthropictest.Seen) any {
						tl := anthropictest.Tools(s.Body)[0]
						imgs := anthropictest.Images(s.Body)
						shot := imgs[len(imgs)-1]
						sn.dispW, sn.dispH = int(tl["display_width_px"].(float64)), int(tl["display_height_px"].(float64))
						sn.imgW, sn.imgH = b64Size(shot)
						sn.x, sn.y, _, _, _ = nativetest.FindTarget(shot)
						return map[string]any{"action": "left_click", "coordinate": []int{sn.x, sn.y}}
					}),
					anthropictest.Say("Clicked the red box."))
			}, "a2"},
		{"openai-responses", models.Update{BaseURL: resp.URL + "/v1", Model: "computer-use-preview", Provider: models.ProviderResponses, APIKey: &rkey, AllowPrivate: &allowLoopback},
			func(sn *seen) {
				resp.Push(
					responsestest.ComputerCall("r1", func(responsestest.Seen) map[string]any { return map[string]any{"type": "screenshot"} }),
					responsestest.ComputerCall("r2", func(s responsestest.Seen) map[string]any {
						tl := s.Body["tools"].([]any)[0].(map[string]any)
						shot := responsestest.LastScreenshot(s.Body)
						sn.dispW, sn.dispH = int(tl["display_width"].(float64)), int(tl["display_height"].(float64))
						sn.imgW, sn.imgH = b64Size(shot)
						sn.x, sn.y, _, _, _ = nativetest.FindTarget(shot)
						return map[string]any{"type": "click", "button": "left", "x": sn.x, "y": sn.y}
					}),
					responsestest.Say("Clicked the red box."))
			}, "r2"},
	}

	scaled := map[string]bool{}
	// 1024x768 is unscaled; 1280x800 is scaled by the Responses adapter (the XGA area), 1280x1024
	// by both adapters (over Anthropic's 1.15 MP), 1920x1080 first by the runtime's computer
	// tools (screenshots at most 1280 wide) and then by the Responses adapter.
	for _, sz := range []struct{ w, h int }{{1024, 768}, {1280, 800}, {1280, 1024}, {1920, 1080}} {
		name := fmt.Sprintf("%dx%d", sz.w, sz.h)
		got, err := link(t).Resize(ctx, sz.w, sz.h)
		if err != nil || got.Width != sz.w || got.Height != sz.h {
			t.Fatalf("resize to %s: %+v %v", name, got, err)
		}
		// a small target in the lower right, where a click in unmapped model coordinates
		// misses it by far
		target := image.Rect(sz.w*3/4, sz.h*2/3, sz.w*3/4+24, sz.h*2/3+18)
		if drawer != "" {
			exec(t, "kill "+drawer)
		}
		drawer = exec(t, fmt.Sprintf("setsid python3 /tmp/cubicle-target.py %d %d %d %d >/tmp/cubicle-target.log 2>&1 & echo $!",
			target.Min.X, target.Min.Y, target.Dx(), target.Dy()))
		// the screen at its full size shows the target, and nothing else of its colour
		for deadline := time.Now().Add(15 * time.Second); ; {
			f, err := link(t).Screenshot(ctx, guest.ScreenshotOptions{Format: "png", NoPointer: true})
			if err != nil {
				t.Fatalf("screenshot: %v", err)
			}
			_, area := redArea(t, f.Data)
			if f.Width == sz.w && f.Height == sz.h && area == target {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: the screen is %dx%d, its target-coloured area %v, not the target %v (drawer: %s)",
					name, f.Width, f.Height, area, target, exec(t, "cat /tmp/cubicle-target.log"))
			}
			time.Sleep(200 * time.Millisecond)
		}
		for _, p := range providers {
			t.Run(p.name+"/"+name, func(t *testing.T) {
				if _, err := b.Models.Set(p.use); err != nil {
					t.Fatal(err)
				}
				g := link(t)
				// the pointer starts away from the target (the previous click left it on it)
				if err := g.Input(ctx, guest.Input{Action: "move", X: 10, Y: sz.h / 3}); err != nil {
					t.Fatal(err)
				}
				var sn seen
				p.push(&sn)
				t0 := time.Now()
				evs := turn(t, b, admin.ID, ag.ID, p.name+"-"+name, "click the red box")
				if r := evs[len(evs)-2].Result; r == nil || r.Metadata["error"] != nil {
					t.Fatalf("turn failed: %+v", r)
				}
				for id, st := range results(evs) {
					if st[0] != agent.StateSuccess {
						t.Fatalf("%s: %s %q", id, st[0], st[1])
					}
				}
				if _, ok := results(evs)[p.click]; !ok {
					t.Fatal("the click did not run")
				}
				pt, _, err := g.NextPointer(ctx, guest.PointerArgs{})
				if err != nil {
					t.Fatal(err)
				}
				t.Logf("screen %s, model saw %dx%d (declared %dx%d), clicked %d,%d; pointer at %d,%d; target %v (%v)",
					name, sn.imgW, sn.imgH, sn.dispW, sn.dispH, sn.x, sn.y, pt.X, pt.Y, target, time.Since(t0).Round(time.Millisecond))
				if sn.imgW != sn.dispW || sn.imgH != sn.dispH || sn.imgW == 0 || sn.imgW > sz.w {
					t.Fatalf("the model got a %dx%d screenshot for a declared %dx%d display of the %s screen", sn.imgW, sn.imgH, sn.dispW, sn.dispH, name)
				}
				if sn.imgW < min(sz.w, 1280) { // smaller than the runtime's screenshot
					scaled[p.name] = true
				}
				// the pixel under the pointer, on the screen as it is now (without the pointer drawn)
				f, err := g.Screenshot(ctx, guest.ScreenshotOptions{Format: "png", NoPointer: true})
				if err != nil {
					t.Fatal(err)
				}
				screen, _ := redArea(t, f.Data)
				if !(image.Point{pt.X, pt.Y}).In(target) || !isTarget(screen.At(pt.X, pt.Y)) {
					t.Fatalf("the pointer is at %d,%d (pixel %v), off the target %v: the model's %d,%d in its %dx%d were not mapped to the %s screen",
						pt.X, pt.Y, screen.At(pt.X, pt.Y), target, sn.x, sn.y, sn.imgW, sn.imgH, name)
				}
				if anth.Left() != 0 || resp.Left() != 0 {
					t.Fatalf("scripted steps unused: %d %d", anth.Left(), resp.Left())
				}
			})
		}
	}
	for _, p := range providers {
		if !scaled[p.name] {
			t.Errorf("%s: the adapter scaled no screenshot for the model: the round trip did not test its mapping", p.name)
		}
	}
}
