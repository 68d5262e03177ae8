package tools_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"cubicle/backend/agent"
	"cubicle/backend/agent/tools"
	"cubicle/backend/computer"
	"cubicle/backend/fault"
	"cubicle/backend/guest"
	"cubicle/backend/guest/guesttest"
)

type fixedDesktops struct {
	c   tools.Computer
	err error
}

func (d fixedDesktops) Acquire(ctx context.Context, t agent.TurnInfo) (tools.Computer, error) {
	return d.c, d.err
}

type env struct{ e tools.Environment }

// vmPlan is the gate's plan of a Local VM agent with or without "Allow host environment", on a
// node that runs host tools (caps) or not.
func vmPlan(allowHost, caps bool) computer.Plan {
	n := computer.Node{}
	if caps {
		n.Caps = []string{computer.CapHostTools}
	}
	return computer.Decide(computer.Input{Selected: "vm", AllowHost: allowHost, Node: n})
}

func (e *env) Environment(ctx context.Context, t agent.TurnInfo) (tools.Environment, error) {
	return e.e, nil
}

type homeHost struct {
	tools.LocalHost
	home string
}

func (h homeHost) Home(context.Context) (string, error) { return h.home, nil }

type protect struct{ dir string }

func (p protect) CheckPath(path string, write bool, _ string) error {
	if strings.HasPrefix(filepath.Clean(path)+"/", p.dir+"/") {
		return fault.Forbidden("%s is protected", path)
	}
	return nil
}

type result struct {
	state string
	text  string
	imgs  int
}

func call(t *testing.T, box *tools.Box, name string, in map[string]any) result {
	t.Helper()
	var r result
	out := agent.NewToolOutput("c1", func(e agent.Event) {
		switch e.Type {
		case agent.ToolResultTextDelta:
			r.text += e.Delta
		case agent.ToolResultDataDelta:
			r.imgs++
		}
	})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	r.state = box.Call(ctx, agent.TurnInfo{SessionID: "s", AgentID: "a"}, agent.ToolCall{ID: "c1", Name: name, Input: in}, out)
	return r
}

func TestToolsAgainstRealDriver(t *testing.T) {
	drv := guesttest.Start(t, ":71", "")
	d := struct {
		client    *guest.Client
		workspace string
	}{drv.Dial(t), drv.Workspace}
	home := t.TempDir()
	secrets := filepath.Join(home, "secrets")
	os.MkdirAll(secrets, 0o700)
	e := &env{e: tools.Environment{Plan: vmPlan(false, true)}}
	box, err := tools.New(tools.Config{Desktops: fixedDesktops{c: d.client}, Environments: e,
		Host: homeHost{home: home}, Files: protect{dir: secrets}, Workspace: d.workspace})
	if err != nil {
		t.Fatal(err)
	}
	names := func() string {
		var n []string
		for _, s := range box.Tools(context.Background(), agent.TurnInfo{}) {
			n = append(n, s.Name)
		}
		return strings.Join(n, ",")
	}
	if strings.Contains(names(), "host_") || !strings.Contains(names(), "computer_shell") {
		t.Fatalf("tools without host environment: %s", names())
	}

	t.Run("desktop files and shell", func(t *testing.T) {
		if r := call(t, box, "computer_write_file", map[string]any{"path": "notes/a.txt", "content": "héllo 你好"}); r.state != agent.StateSuccess {
			t.Fatalf("write: %+v", r)
		}
		r := call(t, box, "computer_shell", map[string]any{"command": "cat notes/a.txt; pwd"})
		if r.state != agent.StateSuccess || !strings.Contains(r.text, "héllo 你好") || !strings.Contains(r.text, d.workspace) {
			t.Fatalf("shell: %+v", r)
		}
		if r := call(t, box, "computer_read_file", map[string]any{"path": d.workspace + "/notes/a.txt"}); !strings.Contains(r.text, "你好") {
			t.Fatalf("read: %+v", r)
		}
		if r := call(t, box, "computer_shell", map[string]any{"command": "exit 3"}); r.state != agent.StateError || !strings.Contains(r.text, "exit code 3") {
			t.Fatalf("failing command: %+v", r)
		}
		// edits in place (the native editors' str_replace and insert), on the real driver
		if r := call(t, box, "computer_write_file", map[string]any{"path": "notes/a.txt", "old_str": "héllo", "new_str": "hello"}); r.state != agent.StateSuccess {
			t.Fatalf("str_replace: %+v", r)
		}
		if r := call(t, box, "computer_write_file", map[string]any{"path": "notes/a.txt", "insert_line": 0, "text": "first"}); r.state != agent.StateSuccess {
			t.Fatalf("insert: %+v", r)
		}
		if r := call(t, box, "computer_read_file", map[string]any{"path": "notes/a.txt"}); !strings.Contains(r.text, "first\nhello 你好") {
			t.Fatalf("after the edits: %+v", r)
		}
		if r := call(t, box, "computer_write_file", map[string]any{"path": "notes/a.txt", "old_str": "absent", "new_str": "x"}); r.state != agent.StateError || !strings.Contains(r.text, "not found") {
			t.Fatalf("str_replace of absent text: %+v", r)
		}
		if r := call(t, box, "computer_write_file", map[string]any{"path": "notes/none.txt", "old_str": "a", "new_str": "x"}); r.state != agent.StateError {
			t.Fatalf("str_replace in a missing file: %+v", r)
		}
		if r := call(t, box, "computer_read_file", map[string]any{"path": "missing.txt"}); r.state != agent.StateError {
			t.Fatalf("missing file: %+v", r)
		}
		if r := call(t, box, "computer_shell", map[string]any{}); r.state != agent.StateError || !strings.Contains(r.text, "command") {
			t.Fatalf("missing argument: %+v", r)
		}
	})

	t.Run("desktop actions return settled screenshots", func(t *testing.T) {
		for _, c := range []struct {
			name string
			in   map[string]any
		}{
			{"computer_screenshot", nil},
			{"computer_click", map[string]any{"x": 10.0, "y": 10.0}},
			{"computer_key", map[string]any{"keys": "ctrl+l"}},
			{"computer_type", map[string]any{"text": "hi 你好"}},
			{"computer_wait", nil},
		} {
			if r := call(t, box, c.name, c.in); r.state != agent.StateSuccess || r.imgs != 1 {
				t.Fatalf("%s: %+v", c.name, r)
			}
		}
		if r := call(t, box, "computer_click", map[string]any{"x": -1.0}); r.state != agent.StateError {
			t.Fatalf("bad click: %+v", r)
		}
	})

	t.Run("clipboard tools", func(t *testing.T) {
		if r := call(t, box, "computer_clipboard_get", nil); r.state != agent.StateSuccess || !strings.Contains(r.text, "empty") {
			t.Fatalf("get of an empty clipboard: %+v", r)
		}
		text := "héllo 你好 日本語 한국어 😀\nsecond line"
		if r := call(t, box, "computer_clipboard_set", map[string]any{"text": text}); r.state != agent.StateSuccess {
			t.Fatalf("set: %+v", r)
		}
		if r := call(t, box, "computer_clipboard_get", nil); r.state != agent.StateSuccess || r.text != text {
			t.Fatalf("get = %+v, want %q", r, text)
		}
		if got, err := d.client.ClipboardGet(context.Background(), "primary", ""); err != nil || string(got.Data) != text {
			t.Fatalf("PRIMARY = %q, %v", got.Data, err)
		}
		if r := call(t, box, "computer_clipboard_set", map[string]any{}); r.state != agent.StateError {
			t.Fatalf("set without text: %+v", r)
		}
	})

	t.Run("host tools need the host environment", func(t *testing.T) {
		e.e = tools.Environment{Plan: vmPlan(false, true)}
		for _, n := range []string{"host_shell", "host_read_file", "host_write_file", "computer_copy_file"} {
			if r := call(t, box, n, map[string]any{"command": "touch x", "path": "x", "from": "host", "source": "x", "target": "y"}); r.state != agent.StateDenied || !strings.Contains(r.text, "Allow host environment") {
				t.Fatalf("%s without permission: %+v", n, r)
			}
		}
		if _, err := os.Stat(filepath.Join(home, "x")); err == nil {
			t.Fatal("a refused host tool ran")
		}
		e.e = tools.Environment{Plan: vmPlan(true, true), WorkDir: "."}
		if !strings.Contains(names(), "host_shell") {
			t.Fatalf("host tools not offered: %s", names())
		}
		r := call(t, box, "host_shell", map[string]any{"command": "pwd"})
		if r.state != agent.StateSuccess || !strings.Contains(r.text, home) {
			t.Fatalf("host shell in home: %+v", r)
		}
		proj := filepath.Join(home, "proj")
		os.MkdirAll(proj, 0o755)
		e.e.WorkDir = proj
		if r := call(t, box, "host_shell", map[string]any{"command": "pwd"}); !strings.Contains(r.text, proj) {
			t.Fatalf("host shell in profile dir: %+v", r)
		}
		if r := call(t, box, "host_write_file", map[string]any{"path": "out.txt", "content": "x"}); r.state != agent.StateSuccess {
			t.Fatalf("host write: %+v", r)
		}
		if b, _ := os.ReadFile(filepath.Join(proj, "out.txt")); string(b) != "x" {
			t.Fatalf("host file = %q", b)
		}
		if r := call(t, box, "host_read_file", map[string]any{"path": filepath.Join(secrets, "k")}); r.state != agent.StateDenied {
			t.Fatalf("protected path read: %+v", r)
		}
		if r := call(t, box, "host_write_file", map[string]any{"path": filepath.Join(secrets, "k"), "content": "x"}); r.state != agent.StateDenied {
			t.Fatalf("protected path written: %+v", r)
		}
		// Without the node capability there are no host tools even when allowed.
		bare, _ := tools.New(tools.Config{Desktops: fixedDesktops{c: d.client}, Environments: &env{e: tools.Environment{Plan: vmPlan(true, false)}}, Host: homeHost{home: home}, Workspace: d.workspace})
		if r := call(t, bare, "host_shell", map[string]any{"command": "true"}); r.state != agent.StateDenied || !strings.Contains(r.text, tools.CapHostTools) {
			t.Fatalf("host tool on a node without the capability: %+v", r)
		}
	})

	t.Run("copy between host and desktop", func(t *testing.T) {
		e.e = tools.Environment{Plan: vmPlan(true, true)}
		data := make([]byte, tools.MaxCopy)
		rand.Read(data)
		src := filepath.Join(home, "big.bin")
		os.WriteFile(src, data, 0o644)
		os.WriteFile(filepath.Join(d.workspace, "big.bin"), []byte("old content to overwrite"), 0o644)
		if r := call(t, box, "computer_copy_file", map[string]any{"from": "host", "source": "big.bin", "target": "big.bin"}); r.state != agent.StateSuccess {
			t.Fatalf("copy to desktop: %+v", r)
		}
		got, _ := os.ReadFile(filepath.Join(d.workspace, "big.bin"))
		if sha256.Sum256(got) != sha256.Sum256(data) {
			t.Fatal("copied file differs")
		}
		if r := call(t, box, "computer_copy_file", map[string]any{"from": "vm", "source": "big.bin", "target": "back.bin"}); r.state != agent.StateSuccess {
			t.Fatalf("copy to host: %+v", r)
		}
		back, _ := os.ReadFile(filepath.Join(home, "back.bin"))
		if !bytes.Equal(back, data) {
			t.Fatal("copied back file differs")
		}
		os.WriteFile(src, append(data, 0), 0o644)
		r := call(t, box, "computer_copy_file", map[string]any{"from": "host", "source": "big.bin", "target": "big2.bin"})
		if r.state != agent.StateError || !strings.Contains(r.text, fmt.Sprint(tools.MaxCopy)) {
			t.Fatalf("oversized copy: %+v", r)
		}
		if _, err := os.Stat(filepath.Join(d.workspace, "big2.bin")); err == nil {
			t.Fatal("oversized copy left a file")
		}
		bin := []byte{0, 1, 2, 255, 254}
		if r := call(t, box, "computer_write_file", map[string]any{"path": "b.bin", "base64": base64.StdEncoding.EncodeToString(bin)}); r.state != agent.StateSuccess {
			t.Fatalf("binary write: %+v", r)
		}
		if got, _ := os.ReadFile(filepath.Join(d.workspace, "b.bin")); !bytes.Equal(got, bin) {
			t.Fatalf("binary content = %v", got)
		}
	})
}

func TestDesktopRefusal(t *testing.T) {
	box, _ := tools.New(tools.Config{Desktops: fixedDesktops{err: fault.Conflict("a person is controlling this computer")}, Environments: &env{e: tools.Environment{Plan: vmPlan(false, true)}}})
	if r := call(t, box, "computer_screenshot", nil); r.state != agent.StateError || !strings.Contains(r.text, "a person is controlling this computer") {
		t.Fatalf("refusal: %+v", r)
	}
}

// TestHelpersGetNoHostTools: a task helper's turn (TaskID set) is offered no host tools and
// cannot call them, even when the agent allows the host environment (SPEC §1.6).
func TestHelpersGetNoHostTools(t *testing.T) {
	host := t.TempDir()
	box, _ := tools.New(tools.Config{Desktops: fixedDesktops{err: fault.Unavailable("no desktop in this test")},
		Environments: &env{e: tools.Environment{Plan: vmPlan(true, true), WorkDir: host}}})
	names := func(ti agent.TurnInfo) string {
		var n []string
		for _, s := range box.Tools(context.Background(), ti) {
			n = append(n, s.Name)
		}
		return strings.Join(n, ",")
	}
	main := agent.TurnInfo{SessionID: "s", UserID: "u", AgentID: "a", TurnID: "t"}
	helper := main
	helper.Helper, helper.TaskID = "researcher", "task1"
	if got := names(main); !strings.Contains(got, "host_shell") || !strings.Contains(got, "computer_copy_file") {
		t.Fatalf("main agent tools: %s", got)
	}
	if got := names(helper); strings.Contains(got, "host_") || strings.Contains(got, "copy_file") || !strings.Contains(got, "computer_shell") {
		t.Fatalf("helper tools: %s", got)
	}
	for _, name := range []string{"host_shell", "host_write_file", "computer_copy_file"} {
		var text string
		out := agent.NewToolOutput("c1", func(e agent.Event) { text += e.Delta })
		in := map[string]any{"command": "touch " + host + "/x", "path": host + "/x", "content": "x", "from": "vm", "source": "a", "target": host + "/x"}
		if st := box.Call(context.Background(), helper, agent.ToolCall{ID: "c1", Name: name, Input: in}, out); st != agent.StateDenied ||
			!strings.Contains(text, "not available to a task helper") {
			t.Fatalf("%s from a helper: %s %q", name, st, text)
		}
	}
	if _, err := os.Stat(filepath.Join(host, "x")); err == nil {
		t.Fatal("a helper's host tool ran")
	}
}

func TestMain(m *testing.M) {
	code := m.Run()
	guesttest.Cleanup()
	os.Exit(code)
}

// screenPC is a Computer with a screen of a given size that records the input it gets.
type screenPC struct {
	tools.Computer
	w, h int
	in   []guest.Input
}

func (p *screenPC) Health(context.Context) (guest.Health, error) {
	return guest.Health{Screen: guest.Size{Width: p.w, Height: p.h}}, nil
}
func (p *screenPC) Input(_ context.Context, in guest.Input) error {
	p.in = append(p.in, in)
	return nil
}
func (p *screenPC) WaitSettled(context.Context, guest.SettleOptions) (guest.Frame, error) {
	return guest.Frame{Width: min(p.w, 1280), Format: "jpeg"}, nil
}

// TestPointerMapsScreenshotToScreen: screenshots of a screen wider than the tools' 1280 px are
// downscaled, so the points a model names in them are mapped to the screen (the centre of
// the area a screenshot pixel shows, clamped); a screen that fits is not touched.
func TestPointerMapsScreenshotToScreen(t *testing.T) {
	for _, c := range []struct {
		w, h       int
		x, y       float64
		wantX, wnY int
	}{{1920, 1080, 967, 485, 1451, 728}, {1920, 1080, 1279, 719, 1919, 1079}, {2560, 1600, 0, 0, 1, 1}, {1280, 800, 971, 541, 971, 541}, {1024, 768, 779, 520, 779, 520}} {
		pc := &screenPC{w: c.w, h: c.h}
		box, _ := tools.New(tools.Config{Desktops: fixedDesktops{c: pc}, Environments: &env{e: tools.Environment{Plan: vmPlan(false, true)}}})
		for _, name := range []string{"computer_click", "computer_move", "computer_scroll", "computer_drag"} {
			if r := call(t, box, name, map[string]any{"x": c.x, "y": c.y, "to_x": c.x, "to_y": c.y}); r.state != agent.StateSuccess {
				t.Fatalf("%dx%d %s: %+v", c.w, c.h, name, r)
			}
			in := pc.in[len(pc.in)-1]
			if in.X != c.wantX || in.Y != c.wnY || (name == "computer_drag" && (in.ToX != c.wantX || in.ToY != c.wnY)) {
				t.Fatalf("%dx%d %s at %v,%v: the pointer went to %+v, want %d,%d", c.w, c.h, name, c.x, c.y, in, c.wantX, c.wnY)
			}
		}
	}
}
