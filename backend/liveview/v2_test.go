package liveview

import (
	"bytes"
	"context"
	"image/png"
	"testing"
	"time"

	"cubicle/backend/fault"
	"cubicle/backend/guest"
	"cubicle/backend/screen/screentest"
)

// Displays :86–:88 belong to the version 2 tests.

// exactScreen waits until c's rebuilt screen is lossless and equals a lossless screenshot of
// the desktop (without the pointer: version 2 clients draw it themselves).
func exactScreen(t *testing.T, c *screentest.Client, d *screentest.Desktop, what string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		img, lossless, err := c.Screen()
		if err != nil {
			t.Fatalf("%s: applying updates: %v", what, err)
		}
		if img != nil && lossless {
			f, err := d.Client.Screenshot(context.Background(), guest.ScreenshotOptions{Format: "png", NoPointer: true})
			if err != nil {
				t.Fatal(err)
			}
			want, err := png.Decode(bytes.NewReader(f.Data))
			if err != nil {
				t.Fatal(err)
			}
			cv := screentest.Canvas{Img: img}
			n := cv.Differ(want)
			if n == 0 {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: the rebuilt screen differs from the desktop in %d pixels", what, n)
			}
		} else if time.Now().After(deadline) {
			t.Fatalf("%s: no lossless screen within 10 s (have a screen: %v)", what, img != nil)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestComputerV2 runs version 2 next to version 1 on one desktop: the version 2 client gets
// the pointer as its own messages and the screen as region updates it rebuilds exactly; the
// version 1 client on the same desktop still gets whole JPEG frames; a refresh brings a
// keyframe; a viewer joining later rebuilds the same screen.
func TestComputerV2(t *testing.T) {
	d := screentest.Start(t, 86, 640, 400)
	painter := screentest.NewPainter(t, d)
	f := newComputerServer(t)
	e := newComputerEnv(t, f, Config{})
	agent := e.agent(t, e.adminID, "v2")
	e.desktops.set(agent, Desktop{ID: "desk-v2", State: "running", Client: d.Client})

	c := screentest.DialV2(t, e.url(agent), authHeader(f.admin))
	v1 := e.connect(t, f.admin, agent)

	st := c.Status(5*time.Second, func(st map[string]any) bool { return st["streaming"] == true })
	if st["desktopId"] != "desk-v2" {
		t.Fatalf("status %v", st)
	}
	// The first update (a keyframe), the cursor image and the pointer, in any order.
	var key *screentest.Update
	var cur, ptr map[string]any
	for key == nil || cur == nil || ptr == nil {
		m, ok := c.Next(5 * time.Second)
		if !ok {
			t.Fatalf("after 5 s: keyframe %v, cursor %v, pointer %v", key != nil, cur != nil, ptr != nil)
		}
		switch {
		case m.Update != nil && key == nil:
			key = m.Update
		case m.JSON != nil && m.JSON["type"] == "cursor":
			cur = m.JSON
		case m.JSON != nil && m.JSON["type"] == "pointer":
			ptr = m.JSON
		}
	}
	if !key.Key || key.Width != 640 || key.Height != 400 {
		t.Fatalf("first update %+v, want a 640x400 keyframe", key)
	}
	if cur["width"].(float64) <= 0 || cur["png"] == "" {
		t.Fatalf("cursor message %v", cur)
	}
	exactScreen(t, c, d, "after the keyframe")

	t.Run("version 1 next to it still gets whole JPEG frames", func(t *testing.T) {
		m, ok := v1.FrameAfter(0, 5*time.Second)
		if !ok || m.Frame.Encoding != frameJPEG || m.Frame.Width != 640 {
			t.Fatalf("v1 frame %+v ok %v", m.Frame, ok)
		}
		after := v1.Frame()
		painter.Fill(500, 300, 50, 50)
		if _, ok := v1.FrameAfter(after, 5*time.Second); !ok {
			t.Fatal("v1 client got no frame after a change")
		}
		exactScreen(t, c, d, "after a fill")
	})

	t.Run("changes arrive as small updates and end exact", func(t *testing.T) {
		c.Quiet(300 * time.Millisecond)
		after := c.Frame()
		painter.Fill(100, 100, 30, 30)
		m, ok := c.UpdateAfter(after, 5*time.Second)
		if !ok {
			t.Fatal("no update after a fill")
		}
		if m.Update.Key || m.Update.Size > 2000 {
			t.Errorf("a 30x30 fill cost a %d-byte update (key %v)", m.Update.Size, m.Update.Key)
		}
		painter.Noise(200, 50, 300, 200)
		exactScreen(t, c, d, "after noise (JPEG, then the lossless refresh)")
	})

	t.Run("the pointer moves as its own message", func(t *testing.T) {
		lease := c.Call(map[string]any{"type": "take_over"})
		wantReply(t, lease, "lease", "")
		c.Quiet(300 * time.Millisecond)
		c.Send(map[string]any{"type": "input", "token": lease["token"], "version": lease["version"], "frameId": c.Frame(),
			"action": "move", "x": 321, "y": 123})
		for {
			p := c.Expect("pointer", "", 5*time.Second)
			if p["x"] == 321.0 && p["y"] == 123.0 {
				break
			}
		}
		if m, ok := c.UpdateAfter(c.Frame(), 300*time.Millisecond); ok {
			t.Errorf("moving the pointer sent a screen update (%d bytes)", m.Update.Size)
		}
		c.Call(map[string]any{"type": "hand_back", "token": lease["token"]})
	})

	t.Run("refresh sends a keyframe", func(t *testing.T) {
		c.Quiet(300 * time.Millisecond)
		r := c.Call(map[string]any{"type": "refresh"})
		wantReply(t, r, "ok", "")
		for {
			m, ok := c.Next(5 * time.Second)
			if !ok {
				t.Fatal("no keyframe after refresh")
			}
			if m.Update != nil && m.Update.Key {
				break
			}
		}
		exactScreen(t, c, d, "after refresh")
	})

	t.Run("a viewer joining rebuilds the same screen", func(t *testing.T) {
		painter.Noise(0, 0, 200, 150)
		late := screentest.DialV2(t, e.url(agent), authHeader(f.admin))
		if m, ok := late.UpdateAfter(0, 5*time.Second); !ok || !m.Update.Key {
			t.Fatalf("joining viewer's first update %+v ok %v, want a keyframe", m.Update, ok)
		}
		exactScreen(t, late, d, "joined viewer")
		exactScreen(t, c, d, "first viewer after the join")
		if n := e.hubs.RegionViewers("desk-v2"); n != 2 {
			t.Errorf("%d region viewers, want 2 on one stream", n)
		}
	})
}

// noRegionsDriver is a driver as an older image's: no region streams, no pointer reports.
type noRegionsDriver struct{ *guest.Client }

func (noRegionsDriver) NextUpdate(context.Context, guest.UpdateArgs) (guest.Update, error) {
	return guest.Update{}, fault.Invalid(`desktop driver: next_update: unknown operation "next_update" (this driver speaks protocol 1)`)
}

func (noRegionsDriver) NextPointer(context.Context, guest.PointerArgs) (guest.PointerState, []byte, error) {
	return guest.PointerState{}, nil, fault.Invalid(`desktop driver: next_pointer: unknown operation`)
}

// TestComputerV2OlderDriver: a version 2 client on a desktop whose driver has no region
// streams gets version 1 frames instead (and keeps working).
func TestComputerV2OlderDriver(t *testing.T) {
	d := screentest.Start(t, 87, 320, 200)
	painter := screentest.NewPainter(t, d)
	f := newComputerServer(t)
	e := newComputerEnv(t, f, Config{})
	agent := e.agent(t, e.adminID, "old")
	e.desktops.set(agent, Desktop{ID: "desk-old", State: "running", Client: noRegionsDriver{d.Client}})
	c := screentest.DialV2(t, e.url(agent), authHeader(f.admin))
	m, ok := c.FrameAfter(0, 5*time.Second)
	if !ok || m.Frame.Encoding != frameJPEG {
		t.Fatalf("frame %+v ok %v: want version 1 frames from an older driver", m.Frame, ok)
	}
	after := c.Frame()
	painter.Fill(10, 10, 20, 20)
	if _, ok := c.FrameAfter(after, 5*time.Second); !ok {
		t.Fatal("no frame after a change")
	}
}
