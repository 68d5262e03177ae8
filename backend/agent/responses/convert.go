package responses

import (
	"encoding/json"
	"fmt"
	"strings"

	"cubicle/backend/agent"
	"cubicle/backend/agent/native"
)

// conv is one request's mapping between the runtime's tools and the Responses API's.
type conv struct {
	computer native.Computer
	scale    native.Scale
}

// request builds the Responses API body: with previous_response_id and only what followed
// that response when the conversation has one, otherwise the whole conversation as input.
func (c *Client) request(req agent.ModelRequest) (map[string]any, conv) {
	var cv conv
	if c.computerModel() {
		cv.computer = native.ComputerOf(req.Tools)
		cv.computer.Shell, cv.computer.Files = false, false // function tools, as offered
	}
	screen := native.ScreenOf(req.Messages, c.cfg.Screen)
	// OpenAI's computer-use examples work at XGA (1024x768); larger screens are scaled down
	// to that area (aspect kept), which is also what the model would see after the API's own
	// downscaling.
	cv.scale = native.Scale{Screen: screen, Model: native.Fit(screen, nil, 0, 1024*768)}
	body := map[string]any{"model": c.cfg.Model, "stream": true, "truncation": "auto"}
	if req.System != "" {
		body["instructions"] = req.System
	}
	if req.Temperature != nil && !c.reasons() {
		body["temperature"] = *req.Temperature
	}
	if c.reasons() {
		body["reasoning"] = map[string]any{"summary": "concise"}
	}
	var tools []any
	if cv.computer.Offered {
		tools = append(tools, map[string]any{"type": "computer_use_preview", "display_width": cv.scale.Model.W,
			"display_height": cv.scale.Model.H, "environment": "linux"})
	}
	for _, t := range req.Tools {
		if cv.computer.Replaced(t.Name) {
			continue
		}
		params := t.Parameters
		if len(params) == 0 {
			params = json.RawMessage(`{"type":"object","properties":{}}`)
		}
		tools = append(tools, map[string]any{"type": "function", "name": t.Name, "description": t.Description,
			"parameters": params, "strict": false})
	}
	if len(tools) > 0 {
		body["tools"] = tools
	}
	msgs := req.Messages
	prev := -1
	for i := len(msgs) - 1; i >= 0; i-- {
		if id, _ := msgs[i].Metadata["responseId"].(string); msgs[i].Role == "assistant" && id != "" {
			body["previous_response_id"] = id
			prev = i
			break
		}
	}
	var input []any
	if prev >= 0 {
		input = c.items(msgs[prev+1:], cv, msgs[:prev+1])
	} else {
		input = c.transcript(msgs, cv)
	}
	if len(input) == 0 {
		input = append(input, map[string]any{"role": "user", "content": "Continue."})
	}
	body["input"] = input
	return body, cv
}

// calls finds the tool_use blocks of a conversation by call id.
func calls(msgs []agent.Msg) map[string]agent.ContentBlock {
	out := map[string]agent.ContentBlock{}
	for _, m := range msgs {
		for _, b := range m.Content {
			if b.Type == "tool_use" {
				out[b.ToolCallID] = b
			}
		}
	}
	return out
}

// items maps what followed the previous response: tool results and the person's messages.
func (c *Client) items(msgs []agent.Msg, cv conv, before []agent.Msg) []any {
	uses := calls(before)
	var out []any
	lastShot := latestImage(before)
	for _, m := range msgs {
		if m.Role == "assistant" {
			for _, b := range m.Content {
				if b.Type == "text" && b.Text != "" {
					out = append(out, map[string]any{"role": "assistant", "content": b.Text})
				}
			}
			continue
		}
		var extra []any
		for _, b := range m.Content {
			switch b.Type {
			case "text":
				if b.Text != "" {
					out = append(out, map[string]any{"role": "user", "content": b.Text})
				}
			case "tool_result":
				use := uses[b.ToolCallID]
				text, img := resultParts(b)
				if img != nil {
					lastShot = img
				}
				if _, native := use.Meta["computer"]; native {
					item := map[string]any{"type": "computer_call_output", "call_id": b.ToolCallID}
					shot := img
					if shot == nil {
						shot = lastShot
					}
					if shot != nil {
						im := c.shrink.Shrink(shot.MediaType, shot.Data, cv.scale.Model)
						item["output"] = map[string]any{"type": "computer_screenshot", "image_url": "data:" + im.MediaType + ";base64," + im.Data}
					}
					// Safety checks are acknowledged only when a person confirmed the call:
					// the runtime ran it (a declined call's result is "denied").
					if checks, ok := use.Meta["safetyChecks"]; ok && b.State != agent.StateDenied {
						item["acknowledged_safety_checks"] = checks
					}
					out = append(out, item)
					if b.State != agent.StateSuccess {
						extra = append(extra, map[string]any{"role": "user", "content": fmt.Sprintf("The computer action did not run (%s): %s", b.State, text)})
					}
					continue
				}
				if text == "" {
					text = "(" + b.State + ")"
				}
				out = append(out, map[string]any{"type": "function_call_output", "call_id": b.ToolCallID, "output": text})
				if img != nil {
					im := c.shrink.Shrink(img.MediaType, img.Data, cv.scale.Model)
					extra = append(extra, map[string]any{"role": "user", "content": []any{
						map[string]any{"type": "input_text", "text": "Screenshot returned by " + b.Name + ":"},
						map[string]any{"type": "input_image", "image_url": "data:" + im.MediaType + ";base64," + im.Data}}})
				}
			case "image":
				im := c.shrink.Shrink(b.MediaType, b.Data, cv.scale.Model)
				out = append(out, map[string]any{"role": "user", "content": []any{
					map[string]any{"type": "input_image", "image_url": "data:" + im.MediaType + ";base64," + im.Data}}})
			}
		}
		out = append(out, extra...)
	}
	return out
}

// transcript is a conversation without a previous response (the first call, or a
// conversation another provider began): text, with earlier tool calls told as text.
func (c *Client) transcript(msgs []agent.Msg, cv conv) []any {
	var out []any
	for _, m := range msgs {
		var sb strings.Builder
		for _, b := range m.Content {
			switch b.Type {
			case "text":
				sb.WriteString(b.Text)
			case "tool_use":
				args, _ := json.Marshal(b.Input)
				fmt.Fprintf(&sb, "\n[called %s %s]", b.Name, args)
			case "tool_result":
				text, _ := resultParts(b)
				fmt.Fprintf(&sb, "\n[%s %s: %s]", b.Name, b.State, truncate(text, 2000))
			}
		}
		if s := strings.TrimSpace(sb.String()); s != "" {
			role := "user"
			if m.Role == "assistant" {
				role = "assistant"
			}
			out = append(out, map[string]any{"role": role, "content": s})
		}
	}
	return out
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}

func resultParts(b agent.ContentBlock) (string, *agent.ContentBlock) {
	var sb strings.Builder
	var img *agent.ContentBlock
	for i, x := range b.Content {
		switch x.Type {
		case "text":
			sb.WriteString(x.Text)
		case "image":
			img = &b.Content[i]
		}
	}
	return sb.String(), img
}

func latestImage(msgs []agent.Msg) *agent.ContentBlock {
	for i := len(msgs) - 1; i >= 0; i-- {
		for j := len(msgs[i].Content) - 1; j >= 0; j-- {
			if _, img := resultParts(msgs[i].Content[j]); img != nil {
				return img
			}
		}
	}
	return nil
}

// keyNames maps the key names computer_use_preview sends onto the desktop's (X keysyms).
var keyNames = map[string]string{
	"CTRL": "ctrl", "CONTROL": "ctrl", "ALT": "alt", "SHIFT": "shift", "CMD": "super", "META": "super", "SUPER": "super", "WIN": "super",
	"ENTER": "Return", "RETURN": "Return", "ESC": "Escape", "ESCAPE": "Escape", "TAB": "Tab", "BACKSPACE": "BackSpace",
	"DELETE": "Delete", "DEL": "Delete", "SPACE": "space", "UP": "Up", "DOWN": "Down", "LEFT": "Left", "RIGHT": "Right",
	"ARROWUP": "Up", "ARROWDOWN": "Down", "ARROWLEFT": "Left", "ARROWRIGHT": "Right", "PAGEUP": "Page_Up", "PAGEDOWN": "Page_Down",
	"HOME": "Home", "END": "End", "INSERT": "Insert",
}

// Keys maps a keypress's keys onto the desktop's combination ("ctrl+l").
func Keys(keys []string) string {
	var out []string
	for _, k := range keys {
		u := strings.ToUpper(strings.TrimSpace(k))
		switch {
		case keyNames[u] != "":
			out = append(out, keyNames[u])
		case len(u) >= 2 && u[0] == 'F' && strings.Trim(u[1:], "0123456789") == "":
			out = append(out, u)
		case len(k) == 1:
			out = append(out, strings.ToLower(k))
		default:
			out = append(out, k)
		}
	}
	return strings.Join(out, "+")
}

func num(v any) (int, bool) {
	f, ok := v.(float64)
	return int(f), ok
}

// computerCall maps a computer_call onto the runtime's computer tool (screen pixels).
func (cv conv) computerCall(it item) agent.ToolCall {
	call := agent.ToolCall{ID: it.CallID, Name: "computer", Input: it.Action,
		Meta: map[string]any{"computer": map[string]any{"id": it.ID, "action": it.Action}}}
	if call.ID == "" {
		call.ID = it.ID
	}
	if len(it.Checks) > 0 {
		var why []string
		for _, c := range it.Checks {
			why = append(why, c.Message+" ("+c.Code+")")
		}
		call.Confirm = strings.Join(why, "; ")
		call.Meta["safetyChecks"] = it.Checks
	}
	a := it.Action
	typ, _ := a["type"].(string)
	set := func(tool string, args map[string]any) { call.Name, call.Input = cv.computer.Tool(tool), args }
	at := func() (map[string]any, bool) {
		x, ok1 := num(a["x"])
		y, ok2 := num(a["y"])
		if !ok1 || !ok2 || x < 0 || y < 0 {
			call.Unsupported = typ + " needs x and y (non-negative pixels of the screenshot)"
			return nil, false
		}
		sx, sy := cv.scale.ToScreen(x, y)
		return map[string]any{"x": sx, "y": sy}, true
	}
	switch typ {
	case "screenshot":
		set("screenshot", map[string]any{})
	case "click":
		p, ok := at()
		if !ok {
			return call
		}
		switch b, _ := a["button"].(string); b {
		case "", "left":
			set("click", p)
		case "right":
			set("right_click", p)
		default:
			call.Unsupported = fmt.Sprintf("the %s button is not available on this computer: use left or right", b)
		}
	case "double_click":
		if p, ok := at(); ok {
			set("double_click", p)
		}
	case "move":
		if p, ok := at(); ok {
			set("move", p)
		}
	case "scroll":
		p, ok := at()
		if !ok {
			return call
		}
		sx, _ := num(a["scroll_x"])
		sy, _ := num(a["scroll_y"])
		// scroll_x/scroll_y are pixels; the desktop scrolls in wheel clicks (~100 px each).
		p["dx"], p["dy"] = clicks(sx), clicks(sy)
		set("scroll", p)
	case "drag":
		path, _ := a["path"].([]any)
		if len(path) < 2 {
			call.Unsupported = "drag needs a path of at least two points"
			return call
		}
		pt := func(v any) (int, int) {
			m, _ := v.(map[string]any)
			x, _ := num(m["x"])
			y, _ := num(m["y"])
			return cv.scale.ToScreen(x, y)
		}
		x, y := pt(path[0])
		tx, ty := pt(path[len(path)-1])
		set("drag", map[string]any{"x": x, "y": y, "to_x": tx, "to_y": ty})
	case "keypress":
		raw, _ := a["keys"].([]any)
		var keys []string
		for _, k := range raw {
			if s, ok := k.(string); ok {
				keys = append(keys, s)
			}
		}
		if len(keys) == 0 {
			call.Unsupported = "keypress needs keys"
			return call
		}
		set("key", map[string]any{"keys": Keys(keys)})
	case "type":
		t, _ := a["text"].(string)
		set("type", map[string]any{"text": t})
	case "wait":
		set("wait", map[string]any{})
	default:
		call.Unsupported = fmt.Sprintf("the computer action %q is not available on this computer", typ)
	}
	return call
}

func clicks(px int) int {
	if px == 0 {
		return 0
	}
	n := px / 100
	if n == 0 {
		if px > 0 {
			return 1
		}
		return -1
	}
	return n
}
