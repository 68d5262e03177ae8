// Package native holds what the vendor-native model adapters (agent/anthropic,
// agent/responses) share: the screen size a vendor's computer tool is told and the mapping of
// its coordinates onto the real screen, screenshots scaled to that size, which of the
// runtime's computer tools a turn offers, and retries of rate-limited or overloaded calls.
//
// The runtime's computer tools (computer_click {x, y}, computer_screenshot, …) take and return
// pixels of the desktop's screenshots. An adapter offers the vendor's own computer tool in
// their place, scales every screenshot it sends to the size it declared, and maps each action
// the model asks for back to a runtime tool call in screen pixels, so the guard, the computer
// gate, HITL and the history see exactly the calls the OpenAI-compatible path makes.
package native

import (
	"bytes"
	"context"
	"encoding/base64"
	"fmt"
	"image"
	"image/jpeg"
	"image/png"
	"math"
	"strings"
	"sync"
	"time"

	"golang.org/x/image/draw"

	"cubicle/backend/agent"
)

// Size is a screen or image size in pixels.
type Size struct{ W, H int }

// DefaultScreen is the desktop size assumed before the first screenshot of a conversation
// (the standard desktop's).
var DefaultScreen = Size{1280, 800}

// Presets are the sizes Anthropic recommends scaling screenshots down to (XGA, WXGA, FWXGA):
// a screen of one of their aspect ratios is scaled to it.
var Presets = []Size{{1024, 768}, {1280, 800}, {1366, 768}}

// Fit returns the size a screenshot of screen s is sent at: the preset of s's aspect ratio
// when s is larger; otherwise s itself when it is within maxLong pixels on its long edge and
// maxPixels in all, else s scaled down (aspect kept) to fit both.
func Fit(s Size, presets []Size, maxLong, maxPixels int) Size {
	if s.W <= 0 || s.H <= 0 {
		return s
	}
	ratio := float64(s.W) / float64(s.H)
	for _, p := range presets {
		if math.Abs(float64(p.W)/float64(p.H)-ratio) < 0.02 {
			if p.W < s.W {
				return p
			}
			return s
		}
	}
	f := 1.0
	if long := max(s.W, s.H); maxLong > 0 && long > maxLong {
		f = float64(maxLong) / float64(long)
	}
	if px := s.W * s.H; maxPixels > 0 && float64(px)*f*f > float64(maxPixels) {
		f = math.Sqrt(float64(maxPixels) / float64(px))
	}
	if f >= 1 {
		return s
	}
	return Size{max(1, int(float64(s.W)*f)), max(1, int(float64(s.H)*f))}
}

// Scale maps between the screen and the image the model sees.
type Scale struct {
	Screen, Model Size
}

// ToScreen maps a point of the model's image onto the screen (clamped to it).
func (s Scale) ToScreen(x, y int) (int, int) {
	if s.Model.W <= 0 || s.Model.H <= 0 || s.Model == s.Screen {
		return clamp(x, s.Screen.W), clamp(y, s.Screen.H)
	}
	sx := int(math.Round(float64(x) * float64(s.Screen.W) / float64(s.Model.W)))
	sy := int(math.Round(float64(y) * float64(s.Screen.H) / float64(s.Model.H)))
	return clamp(sx, s.Screen.W), clamp(sy, s.Screen.H)
}

// ToModel maps a screen point into the model's image.
func (s Scale) ToModel(x, y int) (int, int) {
	if s.Screen.W <= 0 || s.Screen.H <= 0 || s.Model == s.Screen {
		return x, y
	}
	return int(math.Round(float64(x) * float64(s.Model.W) / float64(s.Screen.W))),
		int(math.Round(float64(y) * float64(s.Model.H) / float64(s.Screen.H)))
}

func clamp(v, n int) int {
	if n <= 0 {
		return max(v, 0)
	}
	return min(max(v, 0), n-1)
}

// ScreenOf returns the size of the newest screenshot in a conversation (the screen the
// computer tools' coordinates refer to), or def when there is none.
func ScreenOf(msgs []agent.Msg, def Size) Size {
	for i := len(msgs) - 1; i >= 0; i-- {
		for j := len(msgs[i].Content) - 1; j >= 0; j-- {
			b := msgs[i].Content[j]
			if b.Type != "tool_result" {
				continue
			}
			for k := len(b.Content) - 1; k >= 0; k-- {
				if c := b.Content[k]; c.Type == "image" {
					if s, ok := imageSize(c.Data); ok {
						return s
					}
				}
			}
		}
	}
	return def
}

func imageSize(b64 string) (Size, bool) {
	// The header is in the first bytes: decode a prefix only.
	n := min(len(b64), 64<<10)
	n -= n % 4
	raw, err := base64.StdEncoding.DecodeString(b64[:n])
	if err != nil {
		return Size{}, false
	}
	cfg, _, err := image.DecodeConfig(bytes.NewReader(raw))
	if err != nil {
		return Size{}, false
	}
	return Size{cfg.Width, cfg.Height}, true
}

// Shrinker scales screenshots to a size, remembering the last few it made (a conversation's
// screenshots are sent again with every call).
type Shrinker struct {
	mu    sync.Mutex
	cache map[string]Image
	order []string
}

// Image is an encoded image.
type Image struct {
	MediaType string
	Data      string // base64
}

const shrinkCache = 16

// Shrink returns the image (base64 data of mediaType) scaled to exactly to; an image already
// that size, or one that cannot be decoded, is returned unchanged.
func (s *Shrinker) Shrink(mediaType, data string, to Size) Image {
	in := Image{MediaType: mediaType, Data: data}
	if to.W <= 0 || to.H <= 0 {
		return in
	}
	if sz, ok := imageSize(data); !ok || sz == to {
		return in
	}
	key := fmt.Sprintf("%dx%d:%d:%s", to.W, to.H, len(data), tail(data))
	s.mu.Lock()
	if img, ok := s.cache[key]; ok {
		s.mu.Unlock()
		return img
	}
	s.mu.Unlock()
	raw, err := base64.StdEncoding.DecodeString(data)
	if err != nil {
		return in
	}
	src, format, err := image.Decode(bytes.NewReader(raw))
	if err != nil {
		return in
	}
	dst := image.NewRGBA(image.Rect(0, 0, to.W, to.H))
	draw.ApproxBiLinear.Scale(dst, dst.Bounds(), src, src.Bounds(), draw.Src, nil)
	var buf bytes.Buffer
	out := Image{MediaType: "image/jpeg"}
	if format == "png" {
		out.MediaType = "image/png"
		err = png.Encode(&buf, dst)
	} else {
		err = jpeg.Encode(&buf, dst, &jpeg.Options{Quality: 80})
	}
	if err != nil {
		return in
	}
	out.Data = base64.StdEncoding.EncodeToString(buf.Bytes())
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cache == nil {
		s.cache = map[string]Image{}
	}
	if _, ok := s.cache[key]; !ok {
		s.order = append(s.order, key)
		if len(s.order) > shrinkCache {
			delete(s.cache, s.order[0])
			s.order = s.order[1:]
		}
	}
	s.cache[key] = out
	return out
}

// tail is a cheap fingerprint of base64 data: its middle and end (with the length, enough to
// tell a conversation's screenshots apart).
func tail(d string) string {
	n := len(d)
	if n <= 128 {
		return d
	}
	return d[n/2:n/2+64] + d[n-64:]
}

// Computer tells which of the runtime's computer tools a turn offers: the desktop's
// (Prefix "") or a cloud computer's twins ("cloud_"). Zero when the turn has no desktop.
type Computer struct {
	Prefix          string
	Shell, Files    bool // computer_shell; computer_read_file and computer_write_file
	Offered         bool
	screen, pointer bool
}

// ComputerOf finds the computer tools among tools.
func ComputerOf(tools []agent.ToolSpec) Computer {
	names := map[string]bool{}
	for _, t := range tools {
		names[t.Name] = true
	}
	for _, p := range []string{"", "cloud_"} {
		if names[p+"computer_screenshot"] && names[p+"computer_click"] {
			return Computer{Prefix: p, Offered: true, Shell: names[p+"computer_shell"],
				Files: names[p+"computer_read_file"] && names[p+"computer_write_file"]}
		}
	}
	return Computer{}
}

// Tool is the runtime's name of a computer tool ("click" → "computer_click").
func (c Computer) Tool(action string) string { return c.Prefix + "computer_" + action }

// Replaced reports whether a runtime tool is one the vendor's computer, shell or editor tool
// stands for (so it is not offered as a function too).
func (c Computer) Replaced(name string) bool {
	if !c.Offered || !strings.HasPrefix(name, c.Prefix+"computer_") {
		return false
	}
	switch strings.TrimPrefix(name, c.Prefix+"computer_") {
	case "screenshot", "click", "double_click", "right_click", "move", "drag", "scroll", "key", "type", "wait":
		return true
	case "shell":
		return c.Shell
	case "read_file", "write_file":
		return c.Files
	}
	return false
}

// Action is the runtime's name of a computer tool call without its prefix ("click"), and
// whether name is one.
func (c Computer) Action(name string) (string, bool) {
	if !c.Offered || !strings.HasPrefix(name, c.Prefix+"computer_") {
		return "", false
	}
	return strings.TrimPrefix(name, c.Prefix+"computer_"), true
}

// Retry says how a failed call may be retried.
type Retry struct {
	OK    bool          // worth retrying (rate limit, overload, a 5xx)
	After time.Duration // the server's retry-after; 0 = use the backoff
	Why   string        // for the hint: "rate limited (HTTP 429)"
}

// Backoff retries fn while classify says its error is worth it, at most attempts times in
// all, waiting the server's retry-after (at most maxWait) or an exponential backoff from
// base; before each wait it calls hint with what the person sees. It returns fn's last error
// (or ctx's when cancelled while waiting).
func Backoff(ctx context.Context, attempts int, base, maxWait time.Duration, classify func(error) Retry, hint func(string), fn func() error) error {
	var err error
	for i := 0; ; i++ {
		if err = fn(); err == nil || i+1 >= attempts {
			return err
		}
		r := classify(err)
		if !r.OK || ctx.Err() != nil {
			return err
		}
		wait := r.After
		if wait <= 0 {
			wait = base << i
		}
		wait = min(wait, maxWait)
		hint(fmt.Sprintf("The model is %s; trying again in %s (attempt %d of %d).", r.Why, wait.Round(100*time.Millisecond), i+2, attempts))
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-t.C:
		}
	}
}

// RetryAfter parses a retry-after header (seconds, possibly fractional, or an HTTP date);
// retry-after-ms wins when set.
func RetryAfter(h func(string) string) time.Duration {
	if ms := h("retry-after-ms"); ms != "" {
		var v float64
		if _, err := fmt.Sscanf(ms, "%g", &v); err == nil && v >= 0 {
			return time.Duration(v * float64(time.Millisecond))
		}
	}
	v := h("retry-after")
	if v == "" {
		return 0
	}
	var secs float64
	if _, err := fmt.Sscanf(v, "%g", &secs); err == nil && secs >= 0 {
		return time.Duration(secs * float64(time.Second))
	}
	if t, err := time.Parse(time.RFC1123, v); err == nil {
		return max(time.Until(t), 0)
	}
	return 0
}

// Idle cancels a call whose stream stays silent for d: Touch on every event; Stop when done.
// A silent stream is reported as agent.ErrStreamBroken by the adapter (Fired).
type Idle struct {
	t     *time.Timer
	d     time.Duration
	mu    sync.Mutex
	fired bool
}

// NewIdle returns a watchdog calling cancel after d of silence.
func NewIdle(d time.Duration, cancel func()) *Idle {
	i := &Idle{d: d}
	i.t = time.AfterFunc(d, func() {
		i.mu.Lock()
		i.fired = true
		i.mu.Unlock()
		cancel()
	})
	return i
}

// Touch restarts the silence clock.
func (i *Idle) Touch() { i.t.Reset(i.d) }

// Stop stops the watchdog.
func (i *Idle) Stop() { i.t.Stop() }

// Fired reports whether the stream went silent.
func (i *Idle) Fired() bool {
	i.mu.Lock()
	defer i.mu.Unlock()
	return i.fired
}
