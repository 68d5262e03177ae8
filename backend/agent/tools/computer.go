package tools

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"

	"cubicle/backend/agent"
	"cubicle/backend/fault"
	"cubicle/backend/guest"
)

func spec(name, desc, params string) agent.ToolSpec {
	return agent.ToolSpec{Name: name, Description: desc, Parameters: json.RawMessage(params)}
}

const (
	xyParams   = `{"type":"object","properties":{"x":{"type":"integer","description":"screen x in pixels"},"y":{"type":"integer","description":"screen y in pixels"}},"required":["x","y"]}`
	noParams   = `{"type":"object","properties":{}}`
	pathParams = `{"type":"object","properties":{"path":{"type":"string","description":"file path; relative paths start in the working directory"}},"required":["path"]}`
	writeParam = `{"type":"object","properties":{"path":{"type":"string"},"content":{"type":"string","description":"text to write"},"base64":{"type":"string","description":"binary content, base64 (instead of content)"},` +
		`"old_str":{"type":"string","description":"edit in place instead of writing content: the exact text to replace (must occur once)"},"new_str":{"type":"string","description":"the text old_str becomes"},` +
		`"insert_line":{"type":"integer","description":"edit in place: insert text after this line (0 = at the top)"},"text":{"type":"string","description":"the lines to insert with insert_line"}},"required":["path"]}`
	shellParam = `{"type":"object","properties":{"command":{"type":"string","description":"shell command (sh -c)"},"cwd":{"type":"string"},"timeout":{"type":"integer","description":"seconds, at most 600"}},"required":["command"]}`
)

var computerSpecs = []agent.ToolSpec{
	spec("computer_screenshot", "Take a screenshot of the agent's desktop.", noParams),
	spec("computer_click", "Left-click at x,y on the desktop; returns a screenshot once the screen settled.", xyParams),
	spec("computer_double_click", "Double-click at x,y; returns a settled screenshot.", xyParams),
	spec("computer_right_click", "Right-click at x,y; returns a settled screenshot.", xyParams),
	spec("computer_move", "Move the mouse to x,y; returns a settled screenshot.", xyParams),
	spec("computer_drag", "Drag from x,y to to_x,to_y with the left button.", `{"type":"object","properties":{"x":{"type":"integer"},"y":{"type":"integer"},"to_x":{"type":"integer"},"to_y":{"type":"integer"}},"required":["x","y","to_x","to_y"]}`),
	spec("computer_scroll", "Scroll at x,y by dy clicks (positive = down) and dx (positive = right).", `{"type":"object","properties":{"x":{"type":"integer"},"y":{"type":"integer"},"dx":{"type":"integer"},"dy":{"type":"integer"}},"required":["x","y"]}`),
	spec("computer_key", "Press a key or combination, e.g. \"Return\", \"ctrl+l\", \"ctrl+alt+t\".", `{"type":"object","properties":{"keys":{"type":"string"}},"required":["keys"]}`),
	spec("computer_type", "Type text (any language) into the focused window.", `{"type":"object","properties":{"text":{"type":"string"}},"required":["text"]}`),
	spec("computer_wait", "Wait until the screen stops changing, then return a screenshot.", noParams),
	spec("computer_clipboard_get", "Read the desktop's clipboard (what a program copied): text, or a PNG image shown to you.", noParams),
	spec("computer_clipboard_set", "Put text on the desktop's clipboard (CLIPBOARD and PRIMARY), ready to paste with ctrl+v or a middle click.", `{"type":"object","properties":{"text":{"type":"string"}},"required":["text"]}`),
	spec("computer_shell", "Run a shell command inside the agent's isolated Linux desktop (user cua; default directory /home/cua/workspace).", shellParam),
	spec("computer_read_file", "Read a file inside the agent's desktop.", pathParams),
	spec("computer_write_file", "Write a file inside the agent's desktop (replaced atomically).", writeParam),
	spec("computer_share_file", shareLead+" inside the agent's desktop.", shareParams),
}

func (b *Box) computerTool(ctx context.Context, t agent.TurnInfo, env Environment, name string, a args, out *agent.ToolOutput) error {
	pc, err := b.acquire(ctx, t, out)
	if err != nil {
		return fmt.Errorf("desktop: %w", err)
	}
	out.Started() // queued until here: the desktop starting, its lease
	act := func(in guest.Input) error {
		if err := pc.Input(ctx, in); err != nil {
			return err
		}
		f, err := pc.WaitSettled(ctx, b.cfg.Settle)
		if err != nil {
			return err
		}
		image(out, f)
		return nil
	}
	switch name {
	case "computer_screenshot":
		f, err := pc.Screenshot(ctx, b.cfg.Settle.Screenshot)
		if err != nil {
			return err
		}
		image(out, f)
		return nil
	case "computer_wait":
		f, err := pc.WaitSettled(ctx, b.cfg.Settle)
		if err != nil {
			return err
		}
		image(out, f)
		return nil
	case "computer_click", "computer_double_click", "computer_right_click", "computer_move":
		x, y, err := a.xy()
		if err != nil {
			return err
		}
		toScreen := b.toScreen(ctx, pc)
		x, y = toScreen(x, y)
		action := map[string]string{"computer_click": "click", "computer_double_click": "double_click",
			"computer_right_click": "right_click", "computer_move": "move"}[name]
		return act(guest.Input{Action: action, X: x, Y: y})
	case "computer_drag":
		x, y, err := a.xy()
		if err != nil {
			return err
		}
		tx, ok1 := a.int("to_x")
		ty, ok2 := a.int("to_y")
		if !ok1 || !ok2 {
			return fault.Invalid("arguments to_x and to_y are required")
		}
		toScreen := b.toScreen(ctx, pc)
		x, y = toScreen(x, y)
		tx, ty = toScreen(tx, ty)
		return act(guest.Input{Action: "drag", X: x, Y: y, ToX: tx, ToY: ty})
	case "computer_scroll":
		x, y, err := a.xy()
		if err != nil {
			return err
		}
		x, y = b.toScreen(ctx, pc)(x, y)
		dx, _ := a.int("dx")
		dy, _ := a.int("dy")
		if dx == 0 && dy == 0 {
			dy = 3
		}
		return act(guest.Input{Action: "scroll", X: x, Y: y, DeltaX: dx, DeltaY: dy})
	case "computer_key":
		keys, err := a.need("keys")
		if err != nil {
			return err
		}
		return act(guest.Input{Action: "key", Keys: keys})
	case "computer_type":
		text, err := a.need("text")
		if err != nil {
			return err
		}
		return act(guest.Input{Action: "type", Text: text})
	case "computer_clipboard_get", "computer_clipboard_set":
		cb, ok := pc.(Clipboard)
		if !ok {
			return fault.Unavailable("this desktop has no clipboard tools; use computer_shell or type the text instead")
		}
		if name == "computer_clipboard_set" {
			text, err := a.need("text")
			if err != nil {
				return err
			}
			if err := cb.ClipboardSet(ctx, nil, guest.MimeText, []byte(text)); err != nil {
				return err
			}
			out.Text(fmt.Sprintf("The clipboard holds %d characters of text now.", utf8.RuneCountInString(text)))
			return nil
		}
		c, err := cb.ClipboardGet(ctx, "clipboard", "")
		if errors.Is(err, fault.ErrNotFound) {
			out.Text("The clipboard is empty (or holds neither text nor an image).")
			return nil
		}
		if err != nil {
			return err
		}
		if c.Mime == guest.MimePNG {
			out.Text(fmt.Sprintf("The clipboard holds a PNG image (%d bytes):", len(c.Data)))
			out.Image("image/png", base64.StdEncoding.EncodeToString(c.Data))
			return nil
		}
		out.Text(string(c.Data))
		return nil
	case "computer_shell":
		cmd, err := a.need("command")
		if err != nil {
			return err
		}
		cwd := b.vmPath(env, a.str("cwd"))
		if base := b.vmBase(env); cwd == base && base != b.cfg.Workspace && strings.HasPrefix(base, b.cfg.Workspace+"/") {
			// A working directory inside the workspace is made on first use.
			if err := pc.Mkdir(ctx, base, true); err != nil {
				return fmt.Errorf("working directory %s: %w", base, err)
			}
		}
		res, err := pc.Exec(ctx, guest.ExecRequest{Shell: cmd, Cwd: cwd, Timeout: b.timeout(a), MaxOutput: 256 << 10})
		if err != nil {
			return err
		}
		out.Measured(agent.ToolUsage{CPU: res.CPUTime, MemoryBytes: res.MaxRSS})
		if res.TimedOut {
			out.TimedOut()
		}
		return shellResult(out, res.ExitCode, res.Stdout, res.Stderr, res.StdoutTruncated || res.StderrTruncated, res.TimedOut)
	case "computer_share_file":
		p, err := a.need("path")
		if err != nil {
			return err
		}
		p = b.vmPath(env, p)
		if err := b.checkPath(p, false); err != nil {
			return err
		}
		data, err := pc.ReadFile(ctx, p, agent.MaxDataBlock)
		if err != nil {
			return err
		}
		return shareFile(out, p, a.str("name"), data)
	case "computer_read_file":
		p, err := a.need("path")
		if err != nil {
			return err
		}
		p = b.vmPath(env, p)
		if err := b.checkPath(p, false); err != nil {
			return err
		}
		data, err := pc.ReadFile(ctx, p, MaxFile)
		if err != nil {
			return err
		}
		fileResult(out, p, data)
		return nil
	case "computer_write_file":
		p, err := a.need("path")
		if err != nil {
			return err
		}
		p = b.vmPath(env, p)
		if err := b.checkPath(p, true); err != nil {
			return err
		}
		if isEdit(a) {
			cur, err := pc.ReadFile(ctx, p, MaxFile)
			if err != nil {
				return err
			}
			data, said, err := edit(p, cur, a)
			if err != nil {
				return err
			}
			if err := writeVM(ctx, pc, p, data); err != nil {
				return err
			}
			out.Text(said)
			return nil
		}
		data, err := content(a)
		if err != nil {
			return err
		}
		if err := writeVM(ctx, pc, p, data); err != nil {
			return err
		}
		out.Text(fmt.Sprintf("Wrote %d bytes to %s.", len(data), p))
		return nil
	}
	return fault.Invalid("unknown tool %q", name)
}

// StartingHint is how long a computer tool waits for its desktop before it tells the person
// the desktop is starting (HINT_BLOCK).
const StartingHint = 1500 * time.Millisecond

// acquire gets the turn's desktop; when that takes longer than StartingHint (the desktop is
// being created or started, or repaired), the person is told so while they wait.
// screenSizer tells the desktop's screen size now (*guest.Client does).
type screenSizer interface {
	Health(ctx context.Context) (guest.Health, error)
}

// toScreen maps a point of the screenshots these tools return (downscaled to
// Settle.Screenshot.MaxWidth when the screen is wider, which a resized desktop can be) to the
// desktop's screen: the centre of the screen area the screenshot's pixel shows, clamped to the
// screen. A desktop whose size cannot be asked is taken to be unscaled.
func (b *Box) toScreen(ctx context.Context, pc Computer) func(x, y int) (int, int) {
	same := func(x, y int) (int, int) { return x, y }
	mw := b.cfg.Settle.Screenshot.MaxWidth
	hs, ok := pc.(screenSizer)
	if mw <= 0 || !ok {
		return same
	}
	h, err := hs.Health(ctx)
	if err != nil || h.Screen.Width <= mw || h.Screen.Height <= 0 {
		return same
	}
	w := h.Screen.Width
	return func(x, y int) (int, int) {
		return min((2*x+1)*w/(2*mw), w-1), min((2*y+1)*w/(2*mw), h.Screen.Height-1)
	}
}

func (b *Box) acquire(ctx context.Context, t agent.TurnInfo, out *agent.ToolOutput) (Computer, error) {
	hinted := make(chan struct{})
	timer := time.AfterFunc(StartingHint, func() {
		defer close(hinted)
		out.Hint("Starting the agent's desktop; the first start takes a few seconds.")
	})
	pc, err := b.cfg.Desktops.Acquire(ctx, t)
	if !timer.Stop() {
		<-hinted // the hint is out before anything the tool says next
	}
	return pc, err
}

func (b *Box) checkPath(p string, write bool) error {
	if b.cfg.Files == nil {
		return nil
	}
	return b.cfg.Files.CheckPath(p, write, "")
}

// checkHostPath checks a path on the turn's host with that machine's home (a runner's host has
// its own).
func (b *Box) checkHostPath(ctx context.Context, env Environment, p string, write bool) error {
	if b.cfg.Files == nil {
		return nil
	}
	home, err := b.host(env).Home(ctx)
	if err != nil {
		if fault.Class(err) != nil {
			return err
		}
		return fault.Unavailable("the runner user has no home directory: %v", err)
	}
	return b.cfg.Files.CheckPath(p, write, home)
}

func (b *Box) timeout(a args) time.Duration {
	if s, ok := a.int("timeout"); ok && s > 0 {
		return min(time.Duration(s)*time.Second, 10*time.Minute)
	}
	return b.cfg.ShellTimeout
}
