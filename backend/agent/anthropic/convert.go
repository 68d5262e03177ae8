package anthropic

import (
	"cmp"
	"encoding/json"
	"fmt"
	"regexp"
	"strings"

	"cubicle/backend/agent"
	"cubicle/backend/agent/native"
)

// Native tool names.
const (
	computerTool = "computer"
	bashTool     = "bash"
)

// conv is one request's mapping between the runtime's tools and Anthropic's.
type conv struct {
	computer native.Computer
	scale    native.Scale
	edit     string // the editor tool's name
}

// displayName is what the runtime shows while a call streams: the native tool's name.
func (cv conv) displayName(name string) string { return name }

type cacheControl struct {
	Type string `json:"type"`
}

var ephemeral = &cacheControl{Type: "ephemeral"}

type block struct {
	Type         string         `json:"type"`
	Text         string         `json:"text,omitempty"`
	Source       *imageSource   `json:"source,omitempty"`
	ID           string         `json:"id,omitempty"`
	Name         string         `json:"name,omitempty"`
	Input        map[string]any `json:"input,omitempty"`
	ToolUseID    string         `json:"tool_use_id,omitempty"`
	IsError      bool           `json:"is_error,omitempty"`
	Content      []block        `json:"content,omitempty"`
	Thinking     string         `json:"thinking,omitempty"`
	Signature    string         `json:"signature,omitempty"`
	Data         string         `json:"data,omitempty"`
	CacheControl *cacheControl  `json:"cache_control,omitempty"`
}

type imageSource struct {
	Type      string `json:"type"`
	MediaType string `json:"media_type"`
	Data      string `json:"data"`
}

type message struct {
	Role    string  `json:"role"`
	Content []block `json:"content"`
}

type tool struct {
	Type         string          `json:"type,omitempty"`
	Name         string          `json:"name"`
	Description  string          `json:"description,omitempty"`
	InputSchema  json.RawMessage `json:"input_schema,omitempty"`
	DisplayW     int             `json:"display_width_px,omitempty"`
	DisplayH     int             `json:"display_height_px,omitempty"`
	CacheControl *cacheControl   `json:"cache_control,omitempty"`
}

type thinking struct {
	Type   string `json:"type"`
	Budget int    `json:"budget_tokens"`
}

type request struct {
	Model       string    `json:"model"`
	MaxTokens   int       `json:"max_tokens"`
	System      []block   `json:"system,omitempty"`
	Messages    []message `json:"messages"`
	Tools       []tool    `json:"tools,omitempty"`
	Thinking    *thinking `json:"thinking,omitempty"`
	Temperature *float64  `json:"temperature,omitempty"`
	Stream      bool      `json:"stream,omitempty"`
}

// request builds the Messages API body for req, sending the newest keep screenshots.
func (c *Client) request(req agent.ModelRequest, keep int) (request, conv) {
	cv := conv{computer: native.ComputerOf(req.Tools), edit: c.tools.EditName}
	screen := native.ScreenOf(req.Messages, c.cfg.Screen)
	cv.scale = native.Scale{Screen: screen, Model: native.Fit(screen, native.Presets, 1568, 1_150_000)}
	body := request{Model: c.cfg.Model, MaxTokens: c.cfg.MaxTokens, Temperature: req.Temperature}
	if c.tools.Thinks && c.cfg.Thinking > 0 {
		body.Thinking = &thinking{Type: "enabled", Budget: c.cfg.Thinking}
		body.Temperature = nil // thinking runs at temperature 1
		if body.MaxTokens <= c.cfg.Thinking {
			body.MaxTokens = c.cfg.Thinking + 4096
		}
	}
	if req.System != "" {
		body.System = []block{{Type: "text", Text: req.System, CacheControl: ephemeral}}
	}
	if cv.computer.Offered {
		body.Tools = append(body.Tools, tool{Type: c.tools.Computer, Name: computerTool, DisplayW: cv.scale.Model.W, DisplayH: cv.scale.Model.H})
		if cv.computer.Shell {
			body.Tools = append(body.Tools, tool{Type: c.tools.Bash, Name: bashTool})
		}
		if cv.computer.Files {
			body.Tools = append(body.Tools, tool{Type: c.tools.Editor, Name: cv.edit})
		}
	}
	for _, t := range req.Tools {
		if cv.computer.Replaced(t.Name) {
			continue
		}
		schema := t.Parameters
		if len(schema) == 0 {
			schema = json.RawMessage(`{"type":"object","properties":{}}`)
		}
		body.Tools = append(body.Tools, tool{Name: t.Name, Description: t.Description, InputSchema: schema})
	}
	if n := len(body.Tools); n > 0 {
		body.Tools[n-1].CacheControl = ephemeral
	}
	body.Messages = c.messages(req.Messages, cv, keep)
	// Cache breakpoints on the two newest user turns (with tools and system: four, the most
	// the API takes): each call reads the prefix the previous one wrote.
	marked := 0
	for i := len(body.Messages) - 1; i >= 0 && marked < 2; i-- {
		m := &body.Messages[i]
		if m.Role != "user" || len(m.Content) == 0 {
			continue
		}
		m.Content[len(m.Content)-1].CacheControl = ephemeral
		marked++
	}
	return body, cv
}

var shotText = regexp.MustCompile(`Screenshot \d+x\d+`)

// messages maps the conversation: consecutive messages of one role merge (the API wants them
// alternating), tool calls take their native form, images are scaled and only the newest keep
// are sent.
func (c *Client) messages(msgs []agent.Msg, cv conv, keep int) []message {
	images := 0
	for _, m := range msgs {
		for _, b := range m.Content {
			if b.Type == "image" {
				images++
			}
			for _, x := range b.Content {
				if x.Type == "image" {
					images++
				}
			}
		}
	}
	skip := images - keep // the oldest skip images become a note
	img := func(b agent.ContentBlock) block {
		if skip > 0 {
			skip--
			return block{Type: "text", Text: "(an older screenshot was left out)"}
		}
		im := c.shrink.Shrink(b.MediaType, b.Data, cv.scale.Model)
		return block{Type: "image", Source: &imageSource{Type: "base64", MediaType: im.MediaType, Data: im.Data}}
	}
	var out []message
	add := func(role string, bs []block) {
		if len(bs) == 0 {
			return
		}
		if n := len(out); n > 0 && out[n-1].Role == role {
			out[n-1].Content = append(out[n-1].Content, bs...)
			return
		}
		out = append(out, message{Role: role, Content: bs})
	}
	for _, m := range msgs {
		var bs []block
		switch m.Role {
		case "assistant":
			for _, b := range m.Content {
				switch b.Type {
				case "thinking":
					if r, ok := b.Meta["redacted"].(string); ok {
						bs = append(bs, block{Type: "redacted_thinking", Data: r})
					} else if sig, _ := b.Meta["signature"].(string); sig != "" {
						bs = append(bs, block{Type: "thinking", Thinking: b.Text, Signature: sig})
					}
				case "text":
					if b.Text != "" {
						bs = append(bs, block{Type: "text", Text: b.Text})
					}
				case "tool_use":
					name, in := cv.toNative(b)
					bs = append(bs, block{Type: "tool_use", ID: b.ToolCallID, Name: name, Input: in})
				}
			}
			if len(bs) == 0 {
				bs = []block{{Type: "text", Text: "(no reply)"}}
			}
			add("assistant", bs)
		default:
			for _, b := range m.Content {
				switch b.Type {
				case "text":
					if b.Text != "" {
						bs = append(bs, block{Type: "text", Text: b.Text})
					}
				case "image":
					bs = append(bs, img(b))
				case "tool_result":
					r := block{Type: "tool_result", ToolUseID: b.ToolCallID, IsError: b.State != agent.StateSuccess}
					for _, x := range b.Content {
						switch x.Type {
						case "text":
							t := x.Text
							if cv.scale.Model != cv.scale.Screen {
								t = shotText.ReplaceAllString(t, fmt.Sprintf("Screenshot %dx%d", cv.scale.Model.W, cv.scale.Model.H))
							}
							r.Content = append(r.Content, block{Type: "text", Text: t})
						case "image":
							r.Content = append(r.Content, img(x))
						}
					}
					if len(r.Content) == 0 {
						r.Content = []block{{Type: "text", Text: "(" + b.State + ")"}}
					}
					bs = append(bs, r)
				}
			}
			add("user", bs)
		}
	}
	// Tool results come first in a user message, as the API requires.
	for i := range out {
		if out[i].Role != "user" {
			continue
		}
		var results, rest []block
		for _, b := range out[i].Content {
			if b.Type == "tool_result" {
				results = append(results, b)
			} else {
				rest = append(rest, b)
			}
		}
		out[i].Content = append(results, rest...)
	}
	return out
}

// num reads a JSON number.
func num(v any) (int, bool) {
	switch n := v.(type) {
	case float64:
		return int(n), true
	case int:
		return n, true
	case json.Number:
		i, err := n.Int64()
		return int(i), err == nil
	}
	return 0, false
}

func point(v any) (int, int, bool) {
	a, ok := v.([]any)
	if !ok || len(a) != 2 {
		return 0, 0, false
	}
	x, ok1 := num(a[0])
	y, ok2 := num(a[1])
	return x, y, ok1 && ok2 && x >= 0 && y >= 0
}

// toRuntime maps a native tool call onto the runtime's tool (coordinates onto the screen).
// The native form is kept in Meta for the next request.
func (cv conv) toRuntime(id, name string, in map[string]any) agent.ToolCall {
	call := agent.ToolCall{ID: id, Name: name, Input: in}
	keepNative := func() {
		call.Meta = map[string]any{"native": map[string]any{"name": name, "input": in}}
	}
	switch {
	case name == computerTool && cv.computer.Offered:
		keepNative()
		cv.computerCall(&call, in)
	case name == bashTool && cv.computer.Shell:
		keepNative()
		call.Name = cv.computer.Tool("shell")
		cmd, _ := in["command"].(string)
		if r, _ := in["restart"].(bool); r && cmd == "" {
			cmd = "echo 'Each command runs in a fresh shell: nothing to restart.'"
		}
		if cmd == "" {
			call.Unsupported = "bash needs a command"
		}
		call.Input = map[string]any{"command": cmd}
	case name == cv.edit && cv.computer.Files:
		keepNative()
		path, _ := in["path"].(string)
		switch cmd, _ := in["command"].(string); cmd {
		case "view":
			call.Name, call.Input = cv.computer.Tool("read_file"), map[string]any{"path": path}
		case "create":
			text, _ := in["file_text"].(string)
			call.Name, call.Input = cv.computer.Tool("write_file"), map[string]any{"path": path, "content": text}
		case "str_replace":
			call.Name, call.Input = cv.computer.Tool("write_file"), map[string]any{"path": path, "old_str": in["old_str"], "new_str": in["new_str"]}
			if _, ok := in["new_str"]; !ok {
				call.Input["new_str"] = "" // the vendor's default: old_str is deleted
			}
		case "insert":
			call.Name, call.Input = cv.computer.Tool("write_file"), map[string]any{"path": path, "insert_line": in["insert_line"], "text": cmp.Or(in["insert_text"], in["new_str"])}
		default:
			call.Unsupported = fmt.Sprintf("the editor's %q command is not available on this computer (use view, create, str_replace or insert; "+
				"to undo an edit, str_replace it back)", cmd)
		}
	}
	return call
}

// computerCall maps an action of Anthropic's computer tool.
func (cv conv) computerCall(call *agent.ToolCall, in map[string]any) {
	action, _ := in["action"].(string)
	at := func() (map[string]any, bool) {
		x, y, ok := point(in["coordinate"])
		if !ok {
			call.Unsupported = fmt.Sprintf("%s needs coordinate [x, y] (non-negative pixels of the screenshot)", action)
			return nil, false
		}
		sx, sy := cv.scale.ToScreen(x, y)
		return map[string]any{"x": sx, "y": sy}, true
	}
	set := func(tool string, args map[string]any) {
		call.Name, call.Input = cv.computer.Tool(tool), args
	}
	if mod, _ := in["text"].(string); mod != "" && strings.HasSuffix(action, "click") {
		call.Unsupported = "clicking while holding keys is not available on this computer: press the keys with key instead"
		return
	}
	switch action {
	case "screenshot":
		set("screenshot", map[string]any{})
	case "left_click", "right_click", "double_click", "mouse_move":
		tool := map[string]string{"left_click": "click", "right_click": "right_click", "double_click": "double_click", "mouse_move": "move"}[action]
		if in["coordinate"] == nil && action != "mouse_move" {
			call.Unsupported = action + " needs coordinate [x, y] here (the pointer's position is not tracked)"
			return
		}
		if a, ok := at(); ok {
			set(tool, a)
		}
	case "left_click_drag":
		fx, fy, ok := point(in["start_coordinate"])
		if !ok {
			call.Unsupported = "left_click_drag needs start_coordinate and coordinate"
			return
		}
		a, ok := at()
		if !ok {
			return
		}
		sx, sy := cv.scale.ToScreen(fx, fy)
		set("drag", map[string]any{"x": sx, "y": sy, "to_x": a["x"], "to_y": a["y"]})
	case "scroll":
		a := map[string]any{"x": cv.scale.Screen.W / 2, "y": cv.scale.Screen.H / 2}
		if in["coordinate"] != nil {
			var ok bool
			if a, ok = at(); !ok {
				return
			}
		}
		n, _ := num(in["scroll_amount"])
		if n <= 0 {
			n = 3
		}
		switch dir, _ := in["scroll_direction"].(string); dir {
		case "down":
			a["dy"] = n
		case "up":
			a["dy"] = -n
		case "right":
			a["dx"] = n
		case "left":
			a["dx"] = -n
		default:
			call.Unsupported = "scroll needs scroll_direction up, down, left or right"
			return
		}
		set("scroll", a)
	case "key":
		k, _ := in["text"].(string)
		if k == "" {
			call.Unsupported = "key needs text (e.g. \"ctrl+l\", \"Return\")"
			return
		}
		set("key", map[string]any{"keys": k})
	case "type":
		t, _ := in["text"].(string)
		set("type", map[string]any{"text": t})
	case "wait":
		set("wait", map[string]any{})
	default:
		call.Unsupported = fmt.Sprintf("the computer action %q is not available on this computer; use screenshot, left_click, right_click, double_click, mouse_move, left_click_drag, scroll, key, type or wait", action)
	}
}

// toNative is the native form of a tool call in the conversation: as the model sent it, or
// (a call from another provider) mapped from the runtime's tool.
func (cv conv) toNative(b agent.ContentBlock) (string, map[string]any) {
	if n, ok := b.Meta["native"].(map[string]any); ok {
		name, _ := n["name"].(string)
		in, _ := n["input"].(map[string]any)
		if name != "" {
			if in == nil {
				in = map[string]any{}
			}
			return name, in
		}
	}
	in := b.Input
	if in == nil {
		in = map[string]any{}
	}
	action, ok := cv.computer.Action(b.Name)
	if !ok || !cv.computer.Replaced(b.Name) {
		return b.Name, in
	}
	xy := func() []any {
		x, _ := num(in["x"])
		y, _ := num(in["y"])
		mx, my := cv.scale.ToModel(x, y)
		return []any{mx, my}
	}
	switch action {
	case "screenshot":
		return computerTool, map[string]any{"action": "screenshot"}
	case "click", "right_click", "double_click", "move":
		a := map[string]string{"click": "left_click", "right_click": "right_click", "double_click": "double_click", "move": "mouse_move"}[action]
		return computerTool, map[string]any{"action": a, "coordinate": xy()}
	case "drag":
		tx, _ := num(in["to_x"])
		ty, _ := num(in["to_y"])
		mx, my := cv.scale.ToModel(tx, ty)
		return computerTool, map[string]any{"action": "left_click_drag", "start_coordinate": xy(), "coordinate": []any{mx, my}}
	case "scroll":
		dx, _ := num(in["dx"])
		dy, _ := num(in["dy"])
		dir, n := "down", dy
		switch {
		case dy < 0:
			dir, n = "up", -dy
		case dx > 0:
			dir, n = "right", dx
		case dx < 0:
			dir, n = "left", -dx
		}
		return computerTool, map[string]any{"action": "scroll", "coordinate": xy(), "scroll_direction": dir, "scroll_amount": n}
	case "key":
		return computerTool, map[string]any{"action": "key", "text": in["keys"]}
	case "type":
		return computerTool, map[string]any{"action": "type", "text": in["text"]}
	case "wait":
		return computerTool, map[string]any{"action": "wait", "duration": 1}
	case "shell":
		return bashTool, map[string]any{"command": in["command"]}
	case "read_file":
		return cv.edit, map[string]any{"command": "view", "path": in["path"]}
	case "write_file":
		if _, ok := in["old_str"]; ok {
			return cv.edit, map[string]any{"command": "str_replace", "path": in["path"], "old_str": in["old_str"], "new_str": in["new_str"]}
		}
		if _, ok := in["insert_line"]; ok {
			return cv.edit, map[string]any{"command": "insert", "path": in["path"], "insert_line": in["insert_line"], "insert_text": in["text"]}
		}
		return cv.edit, map[string]any{"command": "create", "path": in["path"], "file_text": in["content"]}
	}
	return b.Name, in
}
