//go:build linux

package bench

import (
	"context"
	"image"
	"image/color"
	"math/rand"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"cubicle/images/guest/x11/xvfbtest"
)

// Display :161 belongs to this test.

// TestRFBClientFollowsX11VNC runs the real x11vnc on a private Xvfb and checks that the
// peer's viewer negotiates Tight, follows every kind of rectangle x11vnc sends for flat,
// photographic and text-like changes without losing the stream, and counts the bytes.
func TestRFBClientFollowsX11VNC(t *testing.T) {
	display := xvfbtest.Start(t, 161, 640, 400)
	bin := xvfbtest.Require(t, "x11vnc")
	sock := filepath.Join(t.TempDir(), "vnc.sock")
	cmd := exec.Command(bin, "-display", display, "-unixsock", sock, "-rfbport", "0", "-nopw", "-forever", "-shared", "-quiet", "-noipv6")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL); cmd.Wait() })
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for {
		if _, err := os.Stat(sock); err == nil {
			break
		}
		if ctx.Err() != nil {
			t.Fatal("x11vnc did not create its socket")
		}
		time.Sleep(50 * time.Millisecond)
	}
	c, err := dialRFB(ctx, func(ctx context.Context) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, "unix", sock)
	})
	if err != nil {
		t.Fatal(err)
	}
	defer c.close()
	if c.w != 640 || c.h != 400 {
		t.Fatalf("screen %dx%d, want 640x400", c.w, c.h)
	}
	waitUpdates := func(what string, after int64) {
		t.Helper()
		for c.updates.Load() <= after {
			if err := c.alive(); err != nil {
				t.Fatalf("%s: the client lost the stream: %v", what, err)
			}
			if ctx.Err() != nil {
				t.Fatalf("%s: no update", what)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	waitUpdates("first update", 0)
	win := xvfbtest.NewWindow(t, display, 0, 0, 640, 400, 0x224466)
	r := rand.New(rand.NewSource(1))
	for i := 0; i < 12; i++ {
		n := c.updates.Load()
		img := image.NewRGBA(image.Rect(0, 0, 200, 120))
		for p := 0; p < len(img.Pix); p += 4 {
			switch i % 3 {
			case 0: // photographic
				img.Pix[p], img.Pix[p+1], img.Pix[p+2] = uint8(r.Intn(256)), uint8(r.Intn(256)), uint8(r.Intn(256))
			case 1: // two colours, text-like
				v := uint8(0)
				if r.Intn(4) == 0 {
					v = 255
				}
				img.Pix[p], img.Pix[p+1], img.Pix[p+2] = v, v, v
			default: // a few colours
				c := color.RGBA{uint8(r.Intn(4) * 60), 100, 200, 255}
				img.Pix[p], img.Pix[p+1], img.Pix[p+2] = c.R, c.G, c.B
			}
			img.Pix[p+3] = 255
		}
		win.Put(t, 30*i, 20*i, img)
		waitUpdates("after a change", n)
	}
	win.Fill(t, 0, 0, 640, 400, 0x000000)
	time.Sleep(500 * time.Millisecond)
	if err := c.alive(); err != nil {
		t.Fatalf("the client lost the stream: %v", err)
	}
	if c.read.Load() < 20000 {
		t.Errorf("only %d bytes read for a dozen changes", c.read.Load())
	}
	if c.tight.Load() == 0 || c.jpegs.Load() == 0 {
		t.Errorf("%d Tight rectangles, %d of them JPEG: x11vnc did not send what noVNC asks for", c.tight.Load(), c.jpegs.Load())
	}
	t.Logf("%d updates, %d bytes, %d Tight rectangles (%d JPEG)", c.updates.Load(), c.read.Load(), c.tight.Load(), c.jpegs.Load())
}
