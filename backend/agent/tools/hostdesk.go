package tools

import (
	"context"
	"fmt"
	"strings"

	"cubicle/backend/agent"
	"cubicle/backend/fault"
	"cubicle/backend/guest"
	"cubicle/backend/hostdesk"
)

// HostDesktop is the execution node's own screen and input (*hostdesk.Desktop implements it).
// Coordinates are pixels of the display's full-size capture.
type HostDesktop interface {
	Displays() ([]hostdesk.Display, error)
	Screenshot(ctx context.Context, display int, o guest.ScreenshotOptions) (guest.Frame, error)
	Input(ctx context.Context, display int, in guest.Input) error
}

// hostShotWidth is the widest host screenshot the model gets; wider displays are scaled down
// and the model's coordinates scaled back up.
const hostShotWidth = 1280

const displayParam = `"display":{"type":"integer","description":"display number from host_screenshot's list; default 0 (the primary display)"}`

var hostDesktopSpecs = []agent.ToolSpec{
	spec("host_screenshot", "Take a screenshot of one display of the execution node's own screen (the person's real desktop, not a VM); also lists the displays. Coordinates of the host_* input tools are pixels of this image.",
		`{"type":"object","properties":{`+displayParam+`}}`),
	spec("host_click", "Click at x,y on the host's display (pixels of host_screenshot's image); returns a screenshot.",
		`{"type":"object","properties":{"x":{"type":"integer"},"y":{"type":"integer"},"button":{"type":"string","enum":["left","right","middle"]},"double":{"type":"boolean"},`+displayParam+`},"required":["x","y"]}`),
	spec("host_type", "Type text into the focused window of the host's screen; returns a screenshot.",
		`{"type":"object","properties":{"text":{"type":"string"},`+displayParam+`},"required":["text"]}`),
	spec("host_key", "Press a key or combination on the host, e.g. \"Return\", \"ctrl+l\"; returns a screenshot.",
		`{"type":"object","properties":{"keys":{"type":"string"},`+displayParam+`},"required":["keys"]}`),
	spec("host_scroll", "Scroll at x,y on the host's display by dy clicks (positive = down) and dx (positive = right); returns a screenshot.",
		`{"type":"object","properties":{"x":{"type":"integer"},"y":{"type":"integer"},"dx":{"type":"integer"},"dy":{"type":"integer"},`+displayParam+`},"required":["x","y"]}`),
}

// hostDesktopTool runs a host desktop tool: every call has passed the gate (a "host" computer
// with screen control enabled and allowed by the OS) and the guard (which asks a person at
// SMART and STRICT).
func (b *Box) hostDesktopTool(ctx context.Context, name string, a args, out *agent.ToolOutput) error {
	hd := b.cfg.HostDesktop
	if hd == nil {
		return fault.Unavailable("this execution node has no host desktop")
	}
	index := 0
	if n, ok := a.int("display"); ok {
		index = n
	}
	displays, err := hd.Displays()
	if err != nil {
		return err
	}
	if index < 0 || index >= len(displays) {
		return fault.Invalid("display %d does not exist: the host has %d display(s), numbered from 0", index, len(displays))
	}
	ds := displays[index]
	shotW := min(ds.Width, hostShotWidth)
	// scale maps a coordinate of the (possibly scaled) screenshot to the display.
	scale := func(v int) int { return v * ds.Width / shotW }
	shot := func() error {
		f, err := hd.Screenshot(ctx, index, guest.ScreenshotOptions{Format: "jpeg", Quality: 75, MaxWidth: shotW})
		if err != nil {
			return err
		}
		var list []string
		for _, d := range displays {
			p := ""
			if d.Primary {
				p = ", primary"
			}
			list = append(list, fmt.Sprintf("%d: %dx%d at %d,%d%s", d.Index, d.Width, d.Height, d.X, d.Y, p))
		}
		out.Text(fmt.Sprintf("Host display %d of %d (%s).\n", index, len(displays), strings.Join(list, "; ")))
		image(out, f)
		return nil
	}
	act := func(in guest.Input) error {
		if err := hd.Input(ctx, index, in); err != nil {
			return err
		}
		return shot()
	}
	xy := func() (int, int, error) {
		x, y, err := a.xy()
		if err != nil {
			return 0, 0, err
		}
		if x >= shotW || y >= ds.Height*shotW/ds.Width {
			return 0, 0, fault.Invalid("point %d,%d is outside host display %d's screenshot (%dx%d)", x, y, index, shotW, ds.Height*shotW/ds.Width)
		}
		return scale(x), scale(y), nil
	}
	switch name {
	case "host_screenshot":
		return shot()
	case "host_click":
		x, y, err := xy()
		if err != nil {
			return err
		}
		action := "click"
		switch a.str("button") {
		case "", "left":
		case "right":
			action = "right_click"
		case "middle":
			action = "middle_click"
		default:
			return fault.Invalid(`argument "button" must be left, right or middle`)
		}
		if d, _ := a["double"].(bool); d && action == "click" {
			action = "double_click"
		}
		return act(guest.Input{Action: action, X: x, Y: y})
	case "host_type":
		text, err := a.need("text")
		if err != nil {
			return err
		}
		return act(guest.Input{Action: "type", Text: text})
	case "host_key":
		keys, err := a.need("keys")
		if err != nil {
			return err
		}
		return act(guest.Input{Action: "key", Keys: keys})
	case "host_scroll":
		x, y, err := xy()
		if err != nil {
			return err
		}
		dx, _ := a.int("dx")
		dy, _ := a.int("dy")
		if dx == 0 && dy == 0 {
			dy = 3
		}
		return act(guest.Input{Action: "scroll", X: x, Y: y, DeltaX: dx, DeltaY: dy})
	}
	return fault.Invalid("unknown tool %q", name)
}
