package liveview

import (
	"bytes"
	"encoding/base64"
	"image"
	"image/color"
	"image/png"
	"strings"
	"testing"
	"time"

	"cubicle/backend/control"
	"cubicle/backend/screen/screentest"
)

// TestComputerClipboardAndResize drives the clipboard and resize messages of the computer
// channel against the real driver on Xvfb, with another X client as the desktop program that
// copies and pastes: the person's text and image reach the desktop's CLIPBOARD, what the
// desktop copies reaches the person who controls it (and nobody else), limits and the lease
// hold, and the screen takes the size asked for.
func TestComputerClipboardAndResize(t *testing.T) {
	d := screentest.Start(t, 88, 800, 600)
	sel := screentest.NewSelections(t, d)
	f := newComputerServer(t)
	e := newComputerEnv(t, f, Config{})
	agent := e.agent(t, e.adminID, "clip")
	e.desktops.set(agent, Desktop{ID: "desk-clip", State: "running", Client: d.Client})
	c := screentest.DialV2(t, e.url(agent), authHeader(f.admin))
	viewer := screentest.DialV2(t, e.url(agent), authHeader(f.admin)) // watches only
	c.Status(5*time.Second, func(st map[string]any) bool { return st["streaming"] == true })
	if _, ok := c.UpdateAfter(0, 10*time.Second); !ok {
		t.Fatal("no first update")
	}
	mixed := "héllo 你好 日本語 한국어 😀 https://example.com/?q=1"

	t.Run("refused without control", func(t *testing.T) {
		r := c.Call(map[string]any{"type": "clipboard_set", "token": "x", "version": 1, "frameId": c.Frame(), "text": "nope"})
		wantReply(t, r, "error", string(control.ReasonNotHolder))
		if got := sel.Paste(); got == "nope" {
			t.Fatal("a refused clipboard_set reached the desktop")
		}
	})
	lease := c.Call(map[string]any{"type": "take_over"})
	wantReply(t, lease, "lease", "")
	auth := func(m map[string]any) map[string]any {
		m["token"], m["version"], m["frameId"] = lease["token"], lease["version"], c.Frame()
		return m
	}

	t.Run("browser text to the desktop", func(t *testing.T) {
		r := c.Call(auth(map[string]any{"type": "clipboard_set", "text": mixed}))
		wantReply(t, r, "ok", "")
		if got := sel.Paste(); got != mixed {
			t.Fatalf("the desktop program pasted %q, want %q", got, mixed)
		}
		r = c.Call(auth(map[string]any{"type": "clipboard_get"}))
		if r["type"] != "clipboard" || r["text"] != mixed || r["mime"] != "text/plain;charset=utf-8" {
			t.Fatalf("clipboard_get = %v", r)
		}
	})

	t.Run("desktop copy reaches the person in control only", func(t *testing.T) {
		sel.Copy("copied on the desktop: 中文 ✓")
		m := c.Expect("clipboard", "", 5*time.Second)
		if m["text"] != "copied on the desktop: 中文 ✓" || m["id"] != nil {
			t.Fatalf("pushed clipboard %v", m)
		}
		deadline := time.Now().Add(time.Second)
		for time.Now().Before(deadline) {
			if msg, ok := viewer.Next(time.Until(deadline)); ok && msg.JSON != nil && msg.JSON["type"] == "clipboard" {
				t.Fatalf("a viewer without control got the clipboard: %v", msg.JSON)
			}
		}
	})

	t.Run("an image both ways", func(t *testing.T) {
		img := image.NewRGBA(image.Rect(0, 0, 40, 30))
		for i := range img.Pix {
			img.Pix[i] = byte(i * 7)
		}
		img.Set(3, 4, color.RGBA{255, 0, 0, 255})
		var buf bytes.Buffer
		png.Encode(&buf, img)
		r := c.Call(auth(map[string]any{"type": "clipboard_set", "mime": "image/png", "data": base64.StdEncoding.EncodeToString(buf.Bytes())}))
		wantReply(t, r, "ok", "")
		r = c.Call(auth(map[string]any{"type": "clipboard_get"}))
		got, _ := base64.StdEncoding.DecodeString(r["data"].(string))
		if r["mime"] != "image/png" || !bytes.Equal(got, buf.Bytes()) {
			t.Fatalf("clipboard_get after an image: mime %v, %d bytes, want %d", r["mime"], len(got), buf.Len())
		}
	})

	t.Run("limits and bad input change nothing", func(t *testing.T) {
		wantReply(t, c.Call(map[string]any{"type": "renew", "token": lease["token"]}), "lease", "")
		c.Call(auth(map[string]any{"type": "clipboard_set", "text": "keep"}))
		// 10 MiB over a websocket can take a while on a loaded machine: a longer wait.
		c.Send(auth(map[string]any{"type": "clipboard_set", "id": "big", "text": strings.Repeat("x", 10<<20+1)}))
		r := c.Expect("error", "big", time.Minute)
		wantReply(t, r, "error", "invalid")
		wantReply(t, c.Call(map[string]any{"type": "renew", "token": lease["token"]}), "lease", "")
		if !strings.Contains(r["message"].(string), "10 MiB") {
			t.Errorf("message %q does not name the limit", r["message"])
		}
		r = c.Call(auth(map[string]any{"type": "clipboard_set", "mime": "application/x-foo", "data": "AAAA"}))
		wantReply(t, r, "error", "invalid")
		if got := sel.Paste(); got != "keep" {
			t.Fatalf("after refused sets the desktop has %q", got)
		}
	})

	t.Run("resize to fit", func(t *testing.T) {
		wantReply(t, c.Call(map[string]any{"type": "renew", "token": lease["token"]}), "lease", "")
		r := c.Call(auth(map[string]any{"type": "resize", "width": 640, "height": 400}))
		if r["type"] != "resized" || r["width"] != 640.0 || r["height"] != 400.0 {
			t.Fatalf("resize = %v", r)
		}
		deadline := time.Now().Add(10 * time.Second)
		for {
			m, ok := c.Next(time.Until(deadline))
			if !ok {
				t.Fatal("no 640x400 keyframe after the resize")
			}
			if m.Update != nil && m.Update.Key && m.Update.Width == 640 && m.Update.Height == 400 {
				break
			}
		}
		if got := sel.Paste(); got != "keep" {
			t.Errorf("the clipboard after resizing is %q", got)
		}
		r = c.Call(auth(map[string]any{"type": "resize", "width": 4000, "height": 400}))
		wantReply(t, r, "error", "invalid")
		r = c.Call(auth(map[string]any{"type": "resize", "width": 100, "height": 100}))
		wantReply(t, r, "error", "invalid")
	})

	t.Run("after hand back nothing is pushed", func(t *testing.T) {
		wantReply(t, c.Call(map[string]any{"type": "hand_back", "token": lease["token"]}), "ok", "")
		sel.Copy("after hand back")
		deadline := time.Now().Add(time.Second)
		for time.Now().Before(deadline) {
			if msg, ok := c.Next(time.Until(deadline)); ok && msg.JSON != nil && msg.JSON["type"] == "clipboard" {
				t.Fatalf("clipboard pushed after hand back: %v", msg.JSON)
			}
		}
	})
}
