// Package nativetest is a test toolbox for the model adapters' unit tests: a screen of a
// given size with a drawn target, answering the runtime's computer_* tools (screenshots as
// PNG, clicks recorded with the colour under the pointer). The real desktop is exercised by
// the backend's integration tests; this stands in for it where only the adapter's mapping is
// under test.
package nativetest

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"image"
	"image/color"
	_ "image/jpeg" // FindTarget reads JPEG screenshots too
	"image/png"
	"strings"
	"sync"

	"cubicle/backend/agent"
)

// Colours of the screen.
var (
	Background = color.RGBA{0x33, 0x66, 0x99, 0xff}
	Target     = color.RGBA{0xee, 0x22, 0x11, 0xff}
)

// Click is a pointer action the toolbox saw.
type Click struct {
	Tool   string
	X, Y   int
	OnTarg bool // the pixel under the pointer is the target's colour
}

// Desktop is a Toolbox with one screen.
type Desktop struct {
	W, H    int
	Target  image.Rectangle // drawn in Target colour
	Shell   bool            // offer computer_shell and the file tools
	Extra   []agent.ToolSpec
	mu      sync.Mutex
	Clicks  []Click
	Typed   string
	Keys    []string
	Calls   []agent.ToolCall
	Shells  []string
	Files   map[string]string
	Edits   []map[string]any // computer_write_file calls that edit in place (old_str, insert_line)
	started chan struct{}
	// Block, when set, makes every call wait for it (or the turn's end).
	Block chan struct{}
}

func spec(name, params string) agent.ToolSpec {
	return agent.ToolSpec{Name: name, Description: name, Parameters: json.RawMessage(params)}
}

const xy = `{"type":"object","properties":{"x":{"type":"integer"},"y":{"type":"integer"}},"required":["x","y"]}`

// Tools implements agent.Toolbox.
func (d *Desktop) Tools(context.Context, agent.TurnInfo) []agent.ToolSpec {
	out := []agent.ToolSpec{
		spec("computer_screenshot", `{"type":"object","properties":{}}`),
		spec("computer_click", xy), spec("computer_double_click", xy), spec("computer_right_click", xy), spec("computer_move", xy),
		spec("computer_drag", `{"type":"object","properties":{"x":{"type":"integer"},"y":{"type":"integer"},"to_x":{"type":"integer"},"to_y":{"type":"integer"}}}`),
		spec("computer_scroll", `{"type":"object","properties":{"x":{"type":"integer"},"y":{"type":"integer"},"dx":{"type":"integer"},"dy":{"type":"integer"}}}`),
		spec("computer_key", `{"type":"object","properties":{"keys":{"type":"string"}}}`),
		spec("computer_type", `{"type":"object","properties":{"text":{"type":"string"}}}`),
		spec("computer_wait", `{"type":"object","properties":{}}`),
	}
	if d.Shell {
		out = append(out, spec("computer_shell", `{"type":"object","properties":{"command":{"type":"string"}}}`),
			spec("computer_read_file", `{"type":"object","properties":{"path":{"type":"string"}}}`),
			spec("computer_write_file", `{"type":"object","properties":{"path":{"type":"string"},"content":{"type":"string"}}}`))
	}
	return append(out, d.Extra...)
}

// Screen renders the screen as PNG (base64).
func (d *Desktop) Screen() string {
	img := image.NewRGBA(image.Rect(0, 0, d.W, d.H))
	for y := 0; y < d.H; y++ {
		for x := 0; x < d.W; x++ {
			c := Background
			if (image.Point{x, y}).In(d.Target) {
				c = Target
			}
			img.SetRGBA(x, y, c)
		}
	}
	var buf bytes.Buffer
	png.Encode(&buf, img)
	return base64.StdEncoding.EncodeToString(buf.Bytes())
}

func num(v any) int {
	f, _ := v.(float64)
	if i, ok := v.(int); ok {
		return i
	}
	return int(f)
}

// Call implements agent.Toolbox.
func (d *Desktop) Call(ctx context.Context, _ agent.TurnInfo, c agent.ToolCall, out *agent.ToolOutput) string {
	d.mu.Lock()
	d.Calls = append(d.Calls, c)
	block := d.Block
	d.mu.Unlock()
	if block != nil {
		select {
		case <-block:
		case <-ctx.Done():
			out.Text("Interrupted.")
			return agent.StateInterrupted
		}
	}
	shot := func() {
		out.Text(fmt.Sprintf("Screenshot %dx%d (frame 1).", d.W, d.H))
		out.Image("image/png", d.Screen())
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	switch c.Name {
	case "computer_screenshot", "computer_wait":
		shot()
	case "computer_click", "computer_double_click", "computer_right_click", "computer_move", "computer_scroll", "computer_drag":
		x, y := num(c.Input["x"]), num(c.Input["y"])
		if c.Name == "computer_drag" {
			x, y = num(c.Input["to_x"]), num(c.Input["to_y"])
		}
		if x < 0 || y < 0 || x >= d.W || y >= d.H {
			out.Text(fmt.Sprintf("Error: %d,%d is outside the %dx%d screen", x, y, d.W, d.H))
			return agent.StateError
		}
		d.Clicks = append(d.Clicks, Click{Tool: c.Name, X: x, Y: y, OnTarg: (image.Point{x, y}).In(d.Target)})
		shot()
	case "computer_type":
		s, _ := c.Input["text"].(string)
		d.Typed += s
		shot()
	case "computer_key":
		s, _ := c.Input["keys"].(string)
		d.Keys = append(d.Keys, s)
		shot()
	case "computer_shell":
		s, _ := c.Input["command"].(string)
		d.Shells = append(d.Shells, s)
		out.Text("exit 0\n" + s)
	case "computer_write_file":
		p, _ := c.Input["path"].(string)
		if _, ok := c.Input["old_str"]; ok {
			d.Edits = append(d.Edits, c.Input) // an edit in place (backend/agent/tools applies it)
			out.Text("Replaced the text in " + p + ".")
			break
		}
		if _, ok := c.Input["insert_line"]; ok {
			d.Edits = append(d.Edits, c.Input)
			out.Text("Inserted into " + p + ".")
			break
		}
		s, _ := c.Input["content"].(string)
		if d.Files == nil {
			d.Files = map[string]string{}
		}
		d.Files[p] = s
		out.Text(fmt.Sprintf("Wrote %d bytes to %s.", len(s), p))
	case "computer_read_file":
		p, _ := c.Input["path"].(string)
		s, ok := d.Files[p]
		if !ok {
			out.Text("Error: no such file " + p)
			return agent.StateError
		}
		out.Text(s)
	default:
		out.Text(fmt.Sprintf("Error: unknown tool %q", c.Name))
		return agent.StateError
	}
	return agent.StateSuccess
}

// FindTarget returns the centre of the Target-coloured area of a PNG or JPEG image (base64), as
// a model looking at the screenshot would find it; ok is false when there is none.
func FindTarget(b64 string) (x, y, w, h int, ok bool) {
	raw, err := base64.StdEncoding.DecodeString(b64)
	if err != nil {
		return 0, 0, 0, 0, false
	}
	img, _, err := image.Decode(bytes.NewReader(raw))
	if err != nil {
		return 0, 0, 0, 0, false
	}
	b := img.Bounds()
	minX, minY, maxX, maxY := b.Max.X, b.Max.Y, -1, -1
	for py := b.Min.Y; py < b.Max.Y; py++ {
		for px := b.Min.X; px < b.Max.X; px++ {
			r, g, bl, _ := img.At(px, py).RGBA()
			if r>>8 > 0xc0 && g>>8 < 0x60 && bl>>8 < 0x60 {
				minX, minY, maxX, maxY = min(minX, px), min(minY, py), max(maxX, px), max(maxY, py)
			}
		}
	}
	if maxX < 0 {
		return 0, 0, b.Dx(), b.Dy(), false
	}
	return (minX + maxX) / 2, (minY + maxY) / 2, b.Dx(), b.Dy(), true
}

// DataURIBytes counts the base64 of the data: URIs in a request body (the screenshot data a
// model request carries).
func DataURIBytes(body string) int {
	n := 0
	for {
		i := strings.Index(body, ";base64,")
		if i < 0 {
			return n
		}
		body = body[i+8:]
		j := strings.IndexByte(body, '"')
		if j < 0 {
			return n
		}
		n += j
		body = body[j:]
	}
}
