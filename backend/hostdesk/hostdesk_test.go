//go:build linux

package hostdesk_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"image"
	"image/jpeg"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"cubicle/backend/agent"
	"cubicle/backend/agent/tools"
	"cubicle/backend/computer"
	"cubicle/backend/fault"
	"cubicle/backend/guest"
	"cubicle/backend/hostdesk"
	"cubicle/images/guest/x11/xvfbtest"
)

// Display :77 belongs to this package's tests.
const testDisplay = 77

type hostEnv struct{ plan computer.Plan }

func (e hostEnv) Environment(ctx context.Context, t agent.TurnInfo) (tools.Environment, error) {
	return tools.Environment{Plan: e.plan}, nil
}

type noDesktops struct{}

func (noDesktops) Acquire(ctx context.Context, t agent.TurnInfo) (tools.Computer, error) {
	return nil, fault.Unavailable("no desktop in this test")
}

type result struct {
	state, text string
	images      [][]byte
}

func call(t *testing.T, box *tools.Box, name string, args map[string]any) result {
	t.Helper()
	out := agent.NewToolOutput("c1", func(agent.Event) {})
	st := box.Call(context.Background(), agent.TurnInfo{SessionID: "s", UserID: "u", AgentID: "a", TurnID: "t"},
		agent.ToolCall{ID: "c1", Name: name, Input: args}, out)
	r := result{state: st}
	for _, b := range out.Blocks() {
		switch b.Type {
		case "text":
			r.text += b.Text
		case "image":
			data, err := base64.StdEncoding.DecodeString(b.Data)
			if err != nil {
				t.Fatal(err)
			}
			r.images = append(r.images, data)
		}
	}
	return r
}

// dark counts the pixels of a JPEG screenshot darker than mid-grey inside r.
func dark(t *testing.T, jpg []byte, r image.Rectangle) int {
	t.Helper()
	img, err := jpeg.Decode(bytes.NewReader(jpg))
	if err != nil {
		t.Fatalf("decode screenshot: %v", err)
	}
	n := 0
	for y := r.Min.Y; y < r.Max.Y; y++ {
		for x := r.Min.X; x < r.Max.X; x++ {
			cr, cg, cb, _ := img.At(x, y).RGBA()
			if (cr+cg+cb)/3 < 0x8000 {
				n++
			}
		}
	}
	return n
}

// TestHostDesktopOnRealX drives a real X display (Xvfb with Xinerama) and a real application
// (xterm) through the host desktop tools: kbinani/screenshot captures the display, XTEST types
// a command into xterm — whose effect is checked by another route (the file it writes) — and
// the screenshot after the command shows its output.
func TestHostDesktopOnRealX(t *testing.T) {
	xterm := xvfbtest.Require(t, "xterm")
	name := xvfbtest.StartWith(t, testDisplay, 1024, 768, "+xinerama")
	t.Setenv("DISPLAY", name)
	t.Setenv("XDG_SESSION_TYPE", "x11")
	hd := hostdesk.New(nil)
	defer hd.Close()

	if p := hd.Permission(); !p.Granted {
		t.Fatalf("permission on a real X display: %+v", p)
	}
	ds, err := hd.Displays()
	if err != nil || len(ds) != 1 || ds[0].Width != 1024 || ds[0].Height != 768 || !ds[0].Primary {
		t.Fatalf("displays = %+v, %v", ds, err)
	}

	dir := t.TempDir()
	cmd := exec.Command(xterm, "-geometry", "80x24+0+0", "-bg", "white", "-fg", "black", "-fa", "", "-e", "/bin/sh")
	cmd.Env = append(os.Environ(), "DISPLAY="+name, "PS1=$ ", "HOME="+dir)
	cmd.Dir = dir
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL); cmd.Wait() })

	plan := computer.Decide(computer.Input{Selected: "host", Node: computer.Node{Caps: []string{computer.CapHostTools, computer.CapHostDesktop},
		HostScreenControl: true, Screen: hd.Permission()}})
	box, err := tools.New(tools.Config{Desktops: noDesktops{}, Environments: hostEnv{plan}, HostDesktop: hd})
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, s := range box.Tools(context.Background(), agent.TurnInfo{AgentID: "a"}) {
		names = append(names, s.Name)
	}
	if got := strings.Join(names, ","); got != "host_shell,host_read_file,host_write_file,host_share_file,host_screenshot,host_click,host_type,host_key,host_scroll" {
		t.Fatalf("host computer offers %s", got)
	}

	// Wait for xterm's window: the screenshot shows a white area where the root was black.
	term := image.Rect(20, 20, 300, 200)
	var before result
	deadline := time.Now().Add(20 * time.Second)
	for {
		before = call(t, box, "host_screenshot", nil)
		if before.state != agent.StateSuccess || len(before.images) != 1 {
			t.Fatalf("host_screenshot: %+v", before)
		}
		if dark(t, before.images[0], term) < term.Dx()*term.Dy()/4 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("xterm did not appear on the host screen")
		}
		time.Sleep(200 * time.Millisecond)
	}
	if !strings.Contains(before.text, "0: 1024x768 at 0,0, primary") {
		t.Fatalf("display list: %q", before.text)
	}

	// Click into xterm (focus follows the pointer without a window manager) and type.
	if r := call(t, box, "host_click", map[string]any{"x": 100, "y": 100}); r.state != agent.StateSuccess {
		t.Fatalf("host_click: %+v", r)
	}
	marker := filepath.Join(dir, "typed.txt")
	if r := call(t, box, "host_type", map[string]any{"text": "echo cubicle-host-ok > typed.txt; yes XXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXX | head -n 40"}); r.state != agent.StateSuccess {
		t.Fatalf("host_type: %+v", r)
	}
	after := call(t, box, "host_key", map[string]any{"keys": "Return"})
	if after.state != agent.StateSuccess {
		t.Fatalf("host_key: %+v", after)
	}
	deadline = time.Now().Add(20 * time.Second)
	for {
		if b, err := os.ReadFile(marker); err == nil && strings.TrimSpace(string(b)) == "cubicle-host-ok" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the command typed through XTEST did not run in xterm")
		}
		time.Sleep(100 * time.Millisecond)
	}
	// The screen now shows the command's output: far more dark (text) pixels in xterm.
	deadline = time.Now().Add(20 * time.Second)
	for {
		shot := call(t, box, "host_screenshot", map[string]any{"display": 0})
		b, a := dark(t, before.images[0], term), dark(t, shot.images[0], term)
		if a > b+term.Dx()*term.Dy()/20 {
			t.Logf("dark pixels in xterm: %d before, %d after", b, a)
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the screenshot does not show the typed command's output (dark pixels %d → %d)", b, a)
		}
		time.Sleep(200 * time.Millisecond)
	}
	if r := call(t, box, "host_scroll", map[string]any{"x": 100, "y": 100, "dy": 2}); r.state != agent.StateSuccess {
		t.Fatalf("host_scroll: %+v", r)
	}

	// Bad input changes nothing and says what is wrong.
	for _, c := range []struct {
		tool string
		args map[string]any
		want string
	}{
		{"host_click", map[string]any{"x": 5000, "y": 10}, "outside"},
		{"host_screenshot", map[string]any{"display": 3}, "display 3 does not exist"},
		{"host_key", map[string]any{"keys": "hyper+nonsense"}, "unknown key"},
		{"host_click", map[string]any{"x": 10, "y": 10, "button": "fourth"}, "left, right or middle"},
	} {
		if r := call(t, box, c.tool, c.args); r.state != agent.StateError || !strings.Contains(r.text, c.want) {
			t.Errorf("%s %v = %+v, want an error saying %q", c.tool, c.args, r, c.want)
		}
	}

	// The live stream of the host screen: a first frame at once, the next only after a change.
	st, err := hd.Frames(context.Background(), guest.StreamOptions{ScreenshotOptions: guest.ScreenshotOptions{Format: "jpeg", Quality: 60}})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	f1, err := st.Next(ctx)
	if err != nil || f1.Width != 1024 || len(f1.Data) == 0 {
		t.Fatalf("first frame: %+v %v", f1.Width, err)
	}
	quiet, qcancel := context.WithTimeout(context.Background(), 1500*time.Millisecond)
	if f, err := st.Next(quiet); err == nil {
		t.Fatalf("a frame (%d) came while the screen was unchanged", f.ID)
	}
	qcancel()
	if err := hd.Input(context.Background(), 0, guest.Input{Action: "type", Text: "clear\n"}); err != nil {
		t.Fatal(err)
	}
	f2, err := st.Next(ctx)
	if err != nil || f2.ID <= f1.ID {
		t.Fatalf("frame after a change: %d after %d, %v", f2.ID, f1.ID, err)
	}
}

// TestNoDisplay: without a graphical session the host desktop says what is missing and how
// to fix it, and its tools refuse to run.
func TestNoDisplay(t *testing.T) {
	t.Setenv("DISPLAY", "")
	t.Setenv("XDG_SESSION_TYPE", "")
	hd := hostdesk.New(nil)
	p := hd.Permission()
	if p.Granted || !strings.Contains(p.Missing, "DISPLAY") || p.HowToGrant == "" {
		t.Fatalf("permission without a display: %+v", p)
	}
	if _, err := hd.Displays(); err == nil {
		t.Fatal("displays without a display")
	}
	if err := hd.Input(context.Background(), 0, guest.Input{Action: "click", X: 1, Y: 1}); err == nil {
		t.Fatal("input without a display")
	}
	t.Setenv("XDG_SESSION_TYPE", "wayland")
	if p := hd.Permission(); p.Granted || !strings.Contains(p.Missing, "Wayland") {
		t.Fatalf("permission in a Wayland session: %+v", p)
	}
}
