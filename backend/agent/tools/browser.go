package tools

import (
	"context"
	"fmt"
	"strings"

	"cubicle/backend/agent"
	"cubicle/backend/browser"
	"cubicle/backend/fault"
	"cubicle/backend/guest"
)

// Browsers binds a chat thread to its agent's own browser (computer "Browser only"): the first
// browser tool call of a turn starts the browser's container when needed and holds it as the
// turn's task. It is safe for concurrent use; a person controlling the browser is
// fault.ErrConflict.
type Browsers interface {
	Browser(ctx context.Context, t agent.TurnInfo) (Browser, error)
}

// Browser drives one browser (*browser.Session implements it).
type Browser interface {
	Do(ctx context.Context, a browser.Action) (browser.Result, error)
}

const (
	selParam = `"selector":{"type":"string","description":"CSS selector of the element"}`
	xyOpt    = `"x":{"type":"integer","description":"page x in CSS pixels (instead of a selector)"},"y":{"type":"integer"}`
)

var browserSpecs = []agent.ToolSpec{
	spec("browser_navigate", "Open a URL (http or https) in the current tab of the agent's own browser; returns the page's title and URL.",
		`{"type":"object","properties":{"url":{"type":"string"}},"required":["url"]}`),
	spec("browser_click", "Click an element (by CSS selector) or a point (x,y in CSS pixels of browser_screenshot) in the current tab.",
		`{"type":"object","properties":{`+selParam+`,`+xyOpt+`}}`),
	spec("browser_type", "Type text into an element (by CSS selector), at a point (x,y), or into the focused element; clear empties the field first, submit presses Enter afterwards.",
		`{"type":"object","properties":{"text":{"type":"string"},`+selParam+`,`+xyOpt+`,"clear":{"type":"boolean"},"submit":{"type":"boolean"}},"required":["text"]}`),
	spec("browser_press", "Press a key in the current tab: Enter, Tab, Escape, Backspace, ArrowDown, PageDown, … or one character.",
		`{"type":"object","properties":{"key":{"type":"string"}},"required":["key"]}`),
	spec("browser_scroll", "Scroll the current tab by dx,dy CSS pixels (positive dy = down).",
		`{"type":"object","properties":{"dx":{"type":"integer"},"dy":{"type":"integer"}}}`),
	spec("browser_read", "Read the visible text of the current page, or of one element (CSS selector); also returns the URL and title.",
		`{"type":"object","properties":{`+selParam+`}}`),
	spec("browser_screenshot", "Take a screenshot of the current tab's viewport.", noParams),
	spec("browser_tabs", "List, open, switch to or close tabs: action list (default), new (with url), switch or close (with tab, an id from the list).",
		`{"type":"object","properties":{"action":{"type":"string","enum":["list","new","switch","close"]},"url":{"type":"string"},"tab":{"type":"string"}}}`),
}

// browserTool runs a browser tool on the agent's own browser.
func (b *Box) browserTool(ctx context.Context, t agent.TurnInfo, name string, a args, out *agent.ToolOutput) error {
	if b.cfg.Browsers == nil {
		return fault.Unavailable("this execution node has no browsers")
	}
	act := browser.Action{Selector: a.str("selector")}
	if x, okx := a.int("x"); okx {
		y, oky := a.int("y")
		if !oky || x < 0 || y < 0 {
			return fault.Invalid("arguments x and y (CSS pixels, ≥ 0) go together")
		}
		act.X, act.Y, act.AtXY = x, y, true
	}
	switch name {
	case "browser_navigate":
		u, err := a.need("url")
		if err != nil {
			return err
		}
		act.Op, act.URL = browser.OpNavigate, u
	case "browser_click":
		if act.Selector == "" && !act.AtXY {
			return fault.Invalid("browser_click needs a selector, or x and y")
		}
		act.Op = browser.OpClick
	case "browser_type":
		text, ok := a["text"].(string)
		if !ok {
			return fault.Invalid(`argument "text" (a string) is required`)
		}
		act.Op, act.Text = browser.OpType, text
		act.Clear, _ = a["clear"].(bool)
		act.Submit, _ = a["submit"].(bool)
	case "browser_press":
		k, err := a.need("key")
		if err != nil {
			return err
		}
		act.Op, act.Key = browser.OpPress, k
	case "browser_scroll":
		act.Op = browser.OpScroll
		act.DX, _ = a.int("dx")
		act.DY, _ = a.int("dy")
	case "browser_read":
		act.Op = browser.OpRead
	case "browser_screenshot":
		act.Op = browser.OpScreenshot
	case "browser_tabs":
		switch a.str("action") {
		case "", "list":
			act.Op = browser.OpTabs
		case "new":
			act.Op, act.URL = browser.OpNewTab, a.str("url")
		case "switch", "close":
			tab, err := a.need("tab")
			if err != nil {
				return err
			}
			act.Op, act.Tab = browser.OpSwitchTab, tab
			if a.str("action") == "close" {
				act.Op = browser.OpCloseTab
			}
		default:
			return fault.Invalid(`argument "action" must be list, new, switch or close`)
		}
	default:
		return fault.Invalid("unknown tool %q", name)
	}
	br, err := b.cfg.Browsers.Browser(ctx, t)
	if err != nil {
		return fmt.Errorf("the agent's browser: %w", err)
	}
	res, err := br.Do(ctx, act)
	if err != nil {
		return err
	}
	var sb strings.Builder
	switch act.Op {
	case browser.OpTabs, browser.OpNewTab, browser.OpSwitchTab, browser.OpCloseTab:
		fmt.Fprintf(&sb, "%d tab(s):\n", len(res.Tabs))
		for _, tab := range res.Tabs {
			cur := ""
			if tab.Current {
				cur = " (current)"
			}
			fmt.Fprintf(&sb, "- %s%s: %s — %s\n", tab.ID, cur, tab.Title, tab.URL)
		}
	default:
		fmt.Fprintf(&sb, "Page: %s — %s\n", res.Title, res.URL)
		if act.Op == browser.OpRead {
			sb.WriteString(res.Text)
			if res.Truncated {
				fmt.Fprintf(&sb, "\n(text cut at %d bytes)", browser.MaxText)
			}
		}
	}
	out.Text(sb.String())
	if len(res.Image) > 0 {
		image(out, guest.Frame{Width: res.Width, Height: res.Height, Format: "jpeg", Data: res.Image})
	}
	return nil
}
