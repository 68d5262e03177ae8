package images_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"cubicle/backend/fault"
	"cubicle/backend/guest"
)

// TestStandardDesktopViewer checks, on the real standard image run hardened in Podman, what a
// person working in the desktop needs: the locale and CJK fonts, typing any script exactly
// (the driver's Unicode path into a GTK terminal, read back from what the shell received),
// the host's clipboard pasted into a desktop program, and resizing the screen with RandR.
func TestStandardDesktopViewer(t *testing.T) {
	eng := connect(t)
	ctx, cancel := context.WithTimeout(context.Background(), 25*time.Minute)
	defer cancel()
	res := ensureStandard(t, ctx, eng)
	d := startDesktop(t, ctx, eng, res.Ref)
	c := d.client
	if !c.Has(guest.FeatureClipboard) || !c.Has(guest.FeatureResize) {
		t.Fatalf("driver features %v lack clipboard/resize", c.Hello().Features)
	}
	if m := c.Hello().MaxScreen; m == nil || m.Width < 1920 || m.Height < 1080 {
		t.Fatalf("hello max_screen %+v, want at least 1920x1080", m)
	}
	sh := func(cmd string) string {
		t.Helper()
		r, err := c.Exec(ctx, guest.ExecRequest{Shell: cmd, Timeout: 30 * time.Second})
		if err != nil || r.ExitCode != 0 {
			t.Fatalf("exec %q: %v, exit %d, stderr %s", cmd, err, r.ExitCode, r.Stderr)
		}
		return string(r.Stdout)
	}

	t.Run("UTF-8 locale and CJK fonts", func(t *testing.T) {
		if got := strings.TrimSpace(sh("locale charmap")); got != "UTF-8" {
			t.Errorf("locale charmap %q, want UTF-8", got)
		}
		for _, lang := range []string{"zh-cn", "ja", "ko"} {
			if out := sh("fc-list :lang=" + lang + " family"); strings.TrimSpace(out) == "" {
				t.Errorf("no font for %s", lang)
			}
		}
	})

	// screenshot takes a PNG once the session has drawn the screen: the driver answers "still
	// starting" for 20 s at a time until it has (CI, load 11 on two cores: an XFCE session
	// that had not drawn 20 s after a resize), so it asks again, for at most 90 s.
	screenshot := func(t *testing.T) (guest.Frame, error) {
		t.Helper()
		deadline := time.Now().Add(90 * time.Second)
		for {
			f, err := c.Screenshot(ctx, guest.ScreenshotOptions{Format: "png"})
			if err == nil || !errors.Is(err, fault.ErrUnavailable) || !strings.Contains(err.Error(), "still starting") || time.Now().After(deadline) {
				return f, err
			}
			t.Logf("screenshot: %v; asking again", err)
		}
	}
	// The desktop must have drawn (a window manager runs) before a terminal can take the focus.
	if _, err := screenshot(t); err != nil {
		t.Fatal(err)
	}
	if _, err := c.WaitSettled(ctx, guest.SettleOptions{Quiet: 500 * time.Millisecond, Max: 30 * time.Second}); err != nil {
		t.Fatal(err)
	}
	// reader opens a terminal whose shell writes the first line typed that is not empty to file.
	reader := func(t *testing.T, file string) {
		t.Helper()
		sh("rm -f " + file + "; setsid xfce4-terminal --disable-server -x sh -c 'while IFS= read -r line && [ -z \"$line\" ]; do :; done; printf %s \"$line\" > " + file + "' >/dev/null 2>&1 &")
		deadline := time.Now().Add(20 * time.Second)
		for !strings.Contains(sh("cat /proc/[0-9]*/cmdline 2>/dev/null | tr '\\0' ' '"), "read -r line") {
			if time.Now().After(deadline) {
				t.Fatal("the terminal's shell did not start within 20 s")
			}
			time.Sleep(200 * time.Millisecond)
		}
		// The window maps and takes the focus.
		c.WaitSettled(ctx, guest.SettleOptions{Quiet: 700 * time.Millisecond, Max: 10 * time.Second})
	}
	wait := func(t *testing.T, file string) string {
		t.Helper()
		deadline := time.Now().Add(15 * time.Second)
		for {
			b, err := c.ReadFile(ctx, file, 0)
			if err == nil {
				return string(b)
			}
			if !errors.Is(err, fault.ErrNotFound) || time.Now().After(deadline) {
				t.Fatalf("read %s: %v", file, err)
			}
			time.Sleep(200 * time.Millisecond)
		}
	}
	// appeared reports whether file exists within 3 s (the reader wrote its line).
	appeared := func(file string) bool {
		r, err := c.Exec(ctx, guest.ExecRequest{Shell: "for i in $(seq 30); do [ -e " + file + " ] && exit 0; sleep 0.1; done; exit 1"})
		return err == nil && r.ExitCode == 0
	}
	mixed := "héllo 你好 日本語 한국어 😀 Ωß ñ"

	t.Run("typing any script arrives exactly", func(t *testing.T) {
		file := "/home/cua/workspace/typed.txt"
		reader(t, file)
		// On a loaded machine the terminal's window can take the focus after the typing began:
		// what went elsewhere or half into the line is typed again, after ctrl+u (the tty's
		// line kill) clears what the shell's read holds so far.
		for try := 0; try < 4; try++ {
			if try > 0 {
				t.Logf("nothing read after typing (try %d); typing again", try)
				if err := c.Input(ctx, guest.Input{Action: "key", Keys: "ctrl+u"}); err != nil {
					t.Fatal(err)
				}
			}
			if err := c.Input(ctx, guest.Input{Action: "type", Text: mixed + "\n"}); err != nil {
				t.Fatal(err)
			}
			if appeared(file) {
				break
			}
		}
		if got := wait(t, file); got != mixed {
			t.Fatalf("the shell received %q, want %q", got, mixed)
		}
	})

	t.Run("host clipboard pastes into a desktop program", func(t *testing.T) {
		text := "https://example.com/路径?q=日本語&x=한국어"
		if err := c.ClipboardSet(ctx, nil, guest.MimeText, []byte(text)); err != nil {
			t.Fatal(err)
		}
		got, err := c.ClipboardGet(ctx, "clipboard", "")
		if err != nil || got.Mime != guest.MimeText || string(got.Data) != text {
			t.Fatalf("ClipboardGet = %q (%s), %v", got.Data, got.Mime, err)
		}
		file := "/home/cua/workspace/pasted.txt"
		reader(t, file)
		// A terminal's paste is asynchronous (it asks the selection's owner and writes what comes
		// back), so Return goes once the pasted text is drawn. On a loaded machine the paste can
		// still come after the Return (the reader skips the empty line, and Return goes again),
		// or the terminal's window takes the focus after the keys went elsewhere: then the line
		// is cleared (ctrl+u, the tty's line kill) and the paste is made again.
	paste:
		for try := 0; try < 4; try++ {
			keys := "ctrl+shift+v"
			if try > 0 {
				t.Logf("nothing read after pasting (try %d); pasting again", try)
				keys = "ctrl+u ctrl+shift+v"
			}
			for _, k := range strings.Fields(keys) {
				if err := c.Input(ctx, guest.Input{Action: "key", Keys: k}); err != nil {
					t.Fatal(err)
				}
			}
			c.WaitSettled(ctx, guest.SettleOptions{Quiet: 500 * time.Millisecond, Max: 10 * time.Second})
			for range 2 {
				if err := c.Input(ctx, guest.Input{Action: "key", Keys: "Return"}); err != nil {
					t.Fatal(err)
				}
				if appeared(file) {
					break paste
				}
			}
		}
		if got := wait(t, file); got != text {
			t.Fatalf("the terminal pasted %q, want %q", got, text)
		}
	})

	t.Run("resize with RandR", func(t *testing.T) {
		for _, sz := range []guest.Size{{Width: 1440, Height: 900}, {Width: 390, Height: 844}, {Width: 1280, Height: 800}} {
			got, err := c.Resize(ctx, sz.Width, sz.Height)
			if err != nil || got != sz {
				t.Fatalf("Resize(%v) = %v, %v", sz, got, err)
			}
			f, err := screenshot(t)
			if err != nil || f.Width != sz.Width || f.Height != sz.Height {
				t.Fatalf("screenshot after Resize(%v): %dx%d, %v", sz, f.Width, f.Height, err)
			}
			if img := decodePNG(t, f); img.Bounds().Dx() != sz.Width || img.Bounds().Dy() != sz.Height {
				t.Fatalf("PNG after Resize(%v) is %v", sz, img.Bounds())
			}
			h, err := c.Health(ctx)
			if err != nil || h.Screen != sz {
				t.Fatalf("health after Resize(%v): %+v, %v", sz, h.Screen, err)
			}
		}
		// The clipboard the driver owned survives the new X connection.
		if got, err := c.ClipboardGet(ctx, "clipboard", ""); err != nil || !strings.HasPrefix(string(got.Data), "https://example.com/") {
			t.Errorf("clipboard after resizing: %q, %v", got.Data, err)
		}
		for _, bad := range []guest.Size{{Width: 100, Height: 100}, {Width: 9000, Height: 800}} {
			if _, err := c.Resize(ctx, bad.Width, bad.Height); !errors.Is(err, fault.ErrInvalid) {
				t.Errorf("Resize(%v) = %v, want invalid", bad, err)
			}
		}
	})
}
