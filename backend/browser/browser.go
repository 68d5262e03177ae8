// Package browser drives the agent's own Chromium (computer "Browser only", SPEC §7) through
// the DevTools protocol with chromedp. The Chromium runs in a container of the standard image
// (see vm.EnsureBrowser) and is reached through a byte-stream tunnel of the desktop driver
// (guest.OpTunnel) to its DevTools port on the container's loopback: no port is published on
// the host, no forwarder listens on it, and the same code works over any transport to the
// driver. chromedp gets the tunnel through a custom Allocator and a websocket transport over
// it (transport.go).
//
// A Session is one connection to one browser. Its actions are serialised (one tab is driven
// at a time) and honour the caller's context; Close ends the connection, leaving the browser
// and its tabs running. Errors carry fault classes: bad arguments fault.ErrInvalid, an element
// that does not appear fault.ErrNotFound, a browser that does not answer fault.ErrUnavailable.
package browser

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/input"
	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/cdproto/target"
	"github.com/chromedp/chromedp"
	"github.com/chromedp/chromedp/kb"

	"cubicle/backend/fault"
)

// Ops of an Action.
const (
	OpNavigate   = "navigate"
	OpClick      = "click"
	OpType       = "type"
	OpPress      = "press"
	OpRead       = "read"
	OpScreenshot = "screenshot"
	OpScroll     = "scroll"
	OpTabs       = "tabs"
	OpNewTab     = "new_tab"
	OpSwitchTab  = "switch_tab"
	OpCloseTab   = "close_tab"
)

// Action is one browser operation.
type Action struct {
	Op       string
	URL      string // navigate, new_tab
	Selector string // click, type, read: a CSS selector
	X, Y     int    // click, type: page coordinates (CSS pixels) when AtXY
	AtXY     bool
	Text     string // type
	Clear    bool   // type: empty the field first
	Submit   bool   // type: press Enter afterwards
	Key      string // press: Enter, Tab, Escape, Backspace, ArrowDown, … or a character
	DX, DY   int    // scroll, in pixels
	Tab      string // switch_tab, close_tab: a tab id from tabs
}

// Tab is one open tab.
type Tab struct {
	ID      string `json:"id"`
	URL     string `json:"url"`
	Title   string `json:"title"`
	Current bool   `json:"current"`
}

// Result is what an action produced.
type Result struct {
	URL, Title string
	Text       string // read: the page's (or element's) visible text
	Truncated  bool   // Text was cut at MaxText
	Image      []byte // screenshot: JPEG
	Width      int
	Height     int
	Tabs       []Tab
}

// MaxText caps the text read returns.
const MaxText = 64 << 10

// actionTimeout bounds one action (a page that never loads, an element that never appears).
const actionTimeout = 30 * time.Second

// Session is a connection to one browser.
type Session struct {
	allocCancel context.CancelFunc
	bctx        context.Context // the browser's chromedp context
	bcancel     context.CancelFunc

	mu        sync.Mutex // serialises actions; guards the fields below
	tab       target.ID
	tabCtx    context.Context
	tabCancel context.CancelFunc
	closed    bool
}

// Connect attaches to the browser behind dial and to its current tab (opening one when it has
// none).
func Connect(ctx context.Context, dial Dial) (*Session, error) {
	allocCtx, allocCancel := chromedp.NewAllocatorContext(context.Background(), &allocator{dial: dial})
	bctx, bcancel := chromedp.NewContext(allocCtx)
	s := &Session{allocCancel: allocCancel, bctx: bctx, bcancel: bcancel}
	stop := context.AfterFunc(ctx, bcancel)
	defer stop()
	// The first call allocates the browser connection, which lives as long as that call's
	// context: it must be the session's own, never one with a timeout.
	if _, err := chromedp.Targets(bctx); err != nil {
		s.Close()
		if ctx.Err() != nil {
			return nil, fmt.Errorf("browser: connect: %w", ctx.Err())
		}
		return nil, unavailable(err)
	}
	tabs, err := s.pages()
	if err != nil {
		s.Close()
		if ctx.Err() != nil {
			return nil, fmt.Errorf("browser: connect: %w", ctx.Err())
		}
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(tabs) > 0 {
		err = s.attachLocked(target.ID(tabs[0].ID))
	} else {
		err = s.newTabLocked(ctx, "about:blank")
	}
	if err != nil {
		s.mu.Unlock()
		s.Close()
		s.mu.Lock()
		return nil, err
	}
	return s, nil
}

// Alive reports whether the connection to the browser still stands.
func (s *Session) Alive() bool { return s.bctx.Err() == nil }

// Close ends the connection; the browser and its tabs keep running. Idempotent.
func (s *Session) Close() error {
	s.mu.Lock()
	s.closed = true
	if s.tabCancel != nil {
		s.tabCancel()
		s.tabCancel = nil
	}
	s.mu.Unlock()
	s.bcancel()
	s.allocCancel()
	return nil
}

// pages lists the browser's page targets.
func (s *Session) pages() ([]Tab, error) {
	ctx, cancel := context.WithTimeout(s.bctx, actionTimeout)
	defer cancel()
	infos, err := chromedp.Targets(ctx)
	if err != nil {
		return nil, unavailable(err)
	}
	var out []Tab
	for _, t := range infos {
		if t.Type == "page" {
			out = append(out, Tab{ID: string(t.TargetID), URL: t.URL, Title: t.Title})
		}
	}
	return out, nil
}

// attachLocked makes id the current tab and brings it to the front (so the live screen shows
// it). s.mu is held.
func (s *Session) attachLocked(id target.ID) error {
	tctx, tcancel := chromedp.NewContext(s.bctx, chromedp.WithTargetID(id), chromedp.WithDetachOnCancel())
	// The first Run attaches the tab, whose event stream lives as long as that call's context:
	// it must be the tab's own context (a timeout would end the events and every later
	// navigation would wait for a load it never hears of). A timer bounds it instead.
	timer := time.AfterFunc(actionTimeout, tcancel)
	err := chromedp.Do(tctx, call0(page.BringToFront))
	if !timer.Stop() || err != nil {
		tcancel()
		if err == nil {
			err = fault.Unavailable("browser: attaching to the tab took longer than %s", actionTimeout)
		}
		return unavailable(err)
	}
	if s.tabCancel != nil {
		s.tabCancel()
	}
	s.tab, s.tabCtx, s.tabCancel = id, tctx, tcancel
	return nil
}

// newTabLocked opens a tab at u and makes it current. s.mu is held.
func (s *Session) newTabLocked(ctx context.Context, u string) error {
	c := chromedp.FromContext(s.bctx)
	if c == nil || c.Browser == nil {
		return fault.Unavailable("browser: not connected")
	}
	cctx, cancel := context.WithTimeout(s.bctx, actionTimeout)
	defer cancel()
	stop := context.AfterFunc(ctx, cancel)
	defer stop()
	r, err := cdp.Call(cctx, c.Browser, target.CreateTarget, target.CreateTargetParams{URL: u})
	if err != nil {
		return unavailable(err)
	}
	return s.attachLocked(r.TargetID)
}

// Do runs one action on the current tab.
func (s *Session) Do(ctx context.Context, a Action) (Result, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed || !s.Alive() {
		return Result{}, fault.Unavailable("browser: the connection to the agent's browser is closed")
	}
	switch a.Op {
	case OpTabs:
		return s.tabsLocked()
	case OpNewTab:
		u, err := checkURL(a.URL, true)
		if err != nil {
			return Result{}, err
		}
		if err := s.newTabLocked(ctx, u); err != nil {
			return Result{}, err
		}
		if u != "about:blank" {
			if err := s.run(ctx, chromedp.WaitReady(chromedp.CSS("body"))); err != nil {
				return Result{}, err
			}
		}
		return s.tabsLocked()
	case OpSwitchTab, OpCloseTab:
		tabs, err := s.pages()
		if err != nil {
			return Result{}, err
		}
		found := false
		for _, t := range tabs {
			found = found || t.ID == a.Tab
		}
		if !found {
			return Result{}, fault.NotFound("browser: no tab %q; list the tabs first", a.Tab)
		}
		if a.Op == OpSwitchTab {
			if err := s.attachLocked(target.ID(a.Tab)); err != nil {
				return Result{}, err
			}
			return s.tabsLocked()
		}
		c := chromedp.FromContext(s.bctx)
		cctx, cancel := context.WithTimeout(s.bctx, actionTimeout)
		_, err = cdp.Call(cctx, c.Browser, target.CloseTarget, target.CloseTargetParams{TargetID: target.ID(a.Tab)})
		cancel()
		if err != nil {
			return Result{}, unavailable(err)
		}
		if target.ID(a.Tab) == s.tab {
			rest, err := s.pages()
			if err != nil {
				return Result{}, err
			}
			var rerr error
			if len(rest) == 0 {
				rerr = s.newTabLocked(ctx, "about:blank")
			} else {
				rerr = s.attachLocked(target.ID(rest[0].ID))
			}
			if rerr != nil {
				return Result{}, rerr
			}
		}
		return s.tabsLocked()
	}
	return s.doTab(ctx, a)
}

// doTab runs an action of the current tab.
func (s *Session) doTab(ctx context.Context, a Action) (Result, error) {
	var res Result
	switch a.Op {
	case OpNavigate:
		u, err := checkURL(a.URL, false)
		if err != nil {
			return res, err
		}
		if err := s.run(ctx, chromedp.Navigate(u)); err != nil {
			return res, err
		}
	case OpClick:
		switch {
		case a.Selector != "":
			if err := s.run(ctx, chromedp.Click(chromedp.CSS(a.Selector), chromedp.NodeVisible)); err != nil {
				return res, err
			}
		case a.AtXY:
			if err := s.run(ctx, chromedp.MouseClickXY(float64(a.X), float64(a.Y))); err != nil {
				return res, err
			}
		default:
			return res, fault.Invalid("browser: click needs a selector or x and y")
		}
		s.settle(ctx)
	case OpType:
		var acts []chromedp.Action[chromedp.Void]
		switch {
		case a.Selector != "":
			acts = append(acts, chromedp.Focus(chromedp.CSS(a.Selector), chromedp.NodeVisible))
			if a.Clear {
				acts = append(acts, chromedp.SetValue(chromedp.CSS(a.Selector), ""))
			}
		case a.AtXY:
			acts = append(acts, chromedp.MouseClickXY(float64(a.X), float64(a.Y)))
		}
		acts = append(acts, call(input.InsertText, input.InsertTextParams{Text: a.Text}))
		if a.Submit {
			acts = append(acts, chromedp.KeyEvent(kb.Enter))
		}
		if err := s.run(ctx, acts...); err != nil {
			return res, err
		}
		if a.Submit {
			s.settle(ctx)
		}
	case OpPress:
		k, err := keyOf(a.Key)
		if err != nil {
			return res, err
		}
		if err := s.run(ctx, chromedp.KeyEvent(k)); err != nil {
			return res, err
		}
		s.settle(ctx)
	case OpScroll:
		if a.DX == 0 && a.DY == 0 {
			return res, fault.Invalid("browser: scroll needs dx or dy (pixels)")
		}
		if _, err := runT(s, ctx, chromedp.Evaluate[any](fmt.Sprintf("window.scrollBy(%d,%d)", a.DX, a.DY))); err != nil {
			return res, err
		}
	case OpRead:
		expr := `document.body ? document.body.innerText : ""`
		if a.Selector != "" {
			sel, _ := json.Marshal(a.Selector)
			expr = fmt.Sprintf(`(() => { const e = document.querySelector(%s); return e ? (e.innerText ?? e.value ?? e.textContent ?? "") : null })()`, sel)
		}
		text, err := runT(s, ctx, chromedp.Evaluate[*string](expr))
		if err != nil {
			return res, err
		}
		if text == nil {
			return res, fault.NotFound("browser: no element matches %q", a.Selector)
		}
		res.Text = *text
		if len(res.Text) > MaxText {
			res.Text, res.Truncated = res.Text[:MaxText], true
		}
	case OpScreenshot:
		q := int64(75)
		shot, err := runT(s, ctx, func(ctx context.Context, t *chromedp.Target) (page.CaptureScreenshotResult, error) {
			return cdp.Call(ctx, t, page.CaptureScreenshot, page.CaptureScreenshotParams{Format: page.CaptureScreenshotFormatJpeg, Quality: &q})
		})
		if err != nil {
			return res, err
		}
		res.Image = shot.Data
		if m, err := runT(s, ctx, func(ctx context.Context, t *chromedp.Target) (page.GetLayoutMetricsResult, error) {
			return cdp.Call(ctx, t, page.GetLayoutMetrics, cdp.Empty{})
		}); err == nil && m.CSSVisualViewport != nil {
			res.Width, res.Height = int(m.CSSVisualViewport.ClientWidth), int(m.CSSVisualViewport.ClientHeight)
		}
	default:
		return res, fault.Invalid("browser: unknown action %q", a.Op)
	}
	if loc, err := runT(s, ctx, chromedp.Location()); err == nil {
		res.URL = loc
	}
	if title, err := runT(s, ctx, chromedp.Title()); err == nil {
		res.Title = title
	}
	return res, nil
}

// settle gives a click or key a moment to start a navigation, then waits for the document.
func (s *Session) settle(ctx context.Context) {
	select {
	case <-ctx.Done():
		return
	case <-time.After(150 * time.Millisecond):
	}
	s.run(ctx, chromedp.WaitReady(chromedp.CSS("body")))
}

func (s *Session) tabsLocked() (Result, error) {
	tabs, err := s.pages()
	if err != nil {
		return Result{}, err
	}
	for i := range tabs {
		tabs[i].Current = target.ID(tabs[i].ID) == s.tab
	}
	return Result{Tabs: tabs}, nil
}

// run runs actions on the current tab, bounded by actionTimeout and the caller's ctx.
func (s *Session) run(ctx context.Context, acts ...chromedp.Action[chromedp.Void]) error {
	_, err := runT(s, ctx, chromedp.Steps(acts...))
	return err
}

// runT runs one action with a value on the current tab, bounded by actionTimeout and the
// caller's ctx.
func runT[T any](s *Session, ctx context.Context, act chromedp.Action[T]) (T, error) {
	rctx, cancel := context.WithTimeout(s.tabCtx, actionTimeout)
	defer cancel()
	stop := context.AfterFunc(ctx, cancel)
	defer stop()
	v, err := chromedp.Run(rctx, act)
	return v, classify(ctx, rctx, err)
}

// call0 and call make actions of protocol commands.
func call0[R any](c cdp.Command[cdp.Empty, R]) chromedp.Action[chromedp.Void] {
	return call(c, cdp.Empty{})
}

func call[P, R any](c cdp.Command[P, R], p P) chromedp.Action[chromedp.Void] {
	return chromedp.Func(func(ctx context.Context, t *chromedp.Target) error {
		_, err := cdp.Call(ctx, t, c, p)
		return err
	})
}

func classify(ctx, rctx context.Context, err error) error {
	switch {
	case err == nil:
		return nil
	case ctx.Err() != nil:
		return fmt.Errorf("browser: %w", ctx.Err())
	case errors.Is(rctx.Err(), context.DeadlineExceeded):
		return fault.NotFound("browser: gave up after %s (the page did not load, or no element matched)", actionTimeout)
	}
	return unavailable(err)
}

func unavailable(err error) error {
	if fault.Class(err) != nil {
		return err
	}
	return fault.Unavailable("browser: %v", err)
}

// checkURL accepts http and https URLs (and about:blank for a new tab); a bare host gets https.
func checkURL(raw string, blankOK bool) (string, error) {
	raw = strings.TrimSpace(raw)
	if raw == "" || raw == "about:blank" {
		if blankOK || raw == "about:blank" {
			return "about:blank", nil
		}
		return "", fault.Invalid("browser: a URL is required")
	}
	if !strings.Contains(raw, "://") {
		raw = "https://" + raw
	}
	u, err := url.Parse(raw)
	if err != nil || u.Host == "" || (u.Scheme != "http" && u.Scheme != "https") {
		return "", fault.Invalid("browser: %q is not an http or https URL", raw)
	}
	return u.String(), nil
}

// keyOf maps key names to chromedp's key strings.
func keyOf(name string) (string, error) {
	switch strings.ToLower(strings.TrimSpace(name)) {
	case "enter", "return":
		return kb.Enter, nil
	case "tab":
		return kb.Tab, nil
	case "escape", "esc":
		return kb.Escape, nil
	case "backspace":
		return kb.Backspace, nil
	case "delete", "del":
		return kb.Delete, nil
	case "arrowdown", "down":
		return kb.ArrowDown, nil
	case "arrowup", "up":
		return kb.ArrowUp, nil
	case "arrowleft", "left":
		return kb.ArrowLeft, nil
	case "arrowright", "right":
		return kb.ArrowRight, nil
	case "pagedown", "page_down":
		return kb.PageDown, nil
	case "pageup", "page_up":
		return kb.PageUp, nil
	case "home":
		return kb.Home, nil
	case "end":
		return kb.End, nil
	case "space":
		return " ", nil
	}
	if r := []rune(name); len(r) == 1 {
		return name, nil
	}
	return "", fault.Invalid("browser: unknown key %q (use Enter, Tab, Escape, Backspace, Delete, ArrowUp/Down/Left/Right, PageUp, PageDown, Home, End, space or one character)", name)
}
