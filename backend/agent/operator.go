package agent

import (
	"fmt"
	"strconv"
	"strings"
)

// OperatorHelp lists the operator-mode commands.
const OperatorHelp = "No model is configured, so this chat runs in operator mode: commands run the agent's tools directly.\n" +
	"  /screenshot                 take a screenshot of the desktop\n" +
	"  /shell COMMAND              run a shell command in the desktop (as cua, in the workspace)\n" +
	"  /type TEXT                  type text (any language)\n" +
	"  /key COMBO                  press keys, e.g. /key ctrl+l or /key Return\n" +
	"  /click X Y                  left-click at X,Y (also /double_click, /right_click, /move)\n" +
	"  /scroll X Y DY              scroll DY clicks at X,Y (negative = up)\n" +
	"  /wait                       wait until the screen settles, then screenshot\n" +
	"  /read PATH                  read a file in the desktop\n" +
	"  /write PATH TEXT            write a file in the desktop\n" +
	"  /help                       this list\n" +
	"Configure a model in Settings to chat in plain language."

// ParseCommand turns an operator-mode command into a tool call (without an id). help reports
// a request for the command list.
func ParseCommand(in string) (call ToolCall, help bool, err error) {
	in = strings.TrimSpace(in)
	if !strings.HasPrefix(in, "/") {
		return ToolCall{}, false, fmt.Errorf("no model is configured: start the message with a command such as /screenshot")
	}
	name, rest, _ := strings.Cut(in[1:], " ")
	rest = strings.TrimSpace(rest)
	need := func(what string) error {
		if rest == "" {
			return fmt.Errorf("/%s needs %s", name, what)
		}
		return nil
	}
	ints := func(n int) ([]int, error) {
		f := strings.Fields(rest)
		if len(f) != n {
			return nil, fmt.Errorf("/%s needs %d numbers", name, n)
		}
		out := make([]int, n)
		for i, s := range f {
			v, err := strconv.Atoi(s)
			if err != nil {
				return nil, fmt.Errorf("/%s: %q is not a whole number", name, s)
			}
			out[i] = v
		}
		return out, nil
	}
	switch strings.ToLower(name) {
	case "help", "?":
		return ToolCall{}, true, nil
	case "screenshot":
		return ToolCall{Name: "computer_screenshot", Input: map[string]any{}}, false, nil
	case "wait":
		return ToolCall{Name: "computer_wait", Input: map[string]any{}}, false, nil
	case "shell", "sh":
		if err := need("a command"); err != nil {
			return ToolCall{}, false, err
		}
		return ToolCall{Name: "computer_shell", Input: map[string]any{"command": rest}}, false, nil
	case "type":
		if err := need("text"); err != nil {
			return ToolCall{}, false, err
		}
		return ToolCall{Name: "computer_type", Input: map[string]any{"text": rest}}, false, nil
	case "key":
		if err := need("keys such as ctrl+l"); err != nil {
			return ToolCall{}, false, err
		}
		return ToolCall{Name: "computer_key", Input: map[string]any{"keys": rest}}, false, nil
	case "click", "double_click", "right_click", "move":
		xy, err := ints(2)
		if err != nil {
			return ToolCall{}, false, err
		}
		return ToolCall{Name: "computer_" + strings.ToLower(name), Input: map[string]any{"x": xy[0], "y": xy[1]}}, false, nil
	case "scroll":
		v, err := ints(3)
		if err != nil {
			return ToolCall{}, false, err
		}
		return ToolCall{Name: "computer_scroll", Input: map[string]any{"x": v[0], "y": v[1], "dy": v[2]}}, false, nil
	case "read":
		if err := need("a path"); err != nil {
			return ToolCall{}, false, err
		}
		return ToolCall{Name: "computer_read_file", Input: map[string]any{"path": rest}}, false, nil
	case "write":
		path, text, ok := strings.Cut(rest, " ")
		if !ok || path == "" {
			return ToolCall{}, false, fmt.Errorf("/write needs a path and text")
		}
		return ToolCall{Name: "computer_write_file", Input: map[string]any{"path": path, "content": text}}, false, nil
	}
	return ToolCall{}, false, fmt.Errorf("unknown command /%s", name)
}
