package x11

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"testing"
	"time"

	"cubicle/images/guest/x11/xvfbtest"

	"github.com/jezek/xgb"
	"github.com/jezek/xgb/xproto"
)

// peer is another X client (as an editor would be): it owns selections and reads them with
// the core protocol only, INCR included, so the Display is tested against the protocol and
// not against itself.
type peer struct {
	t     *testing.T
	conn  *xgb.Conn
	win   xproto.Window
	atoms map[string]xproto.Atom
	evs   chan xgb.Event
	owned map[xproto.Atom][]byte // target → data
}

func newPeer(t *testing.T, display string) *peer {
	t.Helper()
	conn, err := xgb.NewConnDisplay(display)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(conn.Close)
	scr := xproto.Setup(conn).DefaultScreen(conn)
	win, _ := xproto.NewWindowId(conn)
	if err := xproto.CreateWindowChecked(conn, 0, win, scr.Root, 0, 0, 1, 1, 0, xproto.WindowClassInputOutput,
		scr.RootVisual, xproto.CwEventMask, []uint32{xproto.EventMaskPropertyChange}).Check(); err != nil {
		t.Fatal(err)
	}
	p := &peer{t: t, conn: conn, win: win, atoms: map[string]xproto.Atom{}, evs: make(chan xgb.Event, 1024)}
	for _, n := range []string{"CLIPBOARD", "PRIMARY", "TARGETS", "UTF8_STRING", "image/png", "INCR", "ATOM", "PEER_PROP"} {
		r, err := xproto.InternAtom(conn, false, uint16(len(n)), n).Reply()
		if err != nil {
			t.Fatal(err)
		}
		p.atoms[n] = r.Atom
	}
	go func() {
		for {
			ev, err := conn.WaitForEvent()
			if ev == nil && err == nil {
				close(p.evs)
				return
			}
			if ev != nil {
				p.evs <- ev
			}
		}
	}()
	return p
}

func (p *peer) next(timeout time.Duration) xgb.Event {
	select {
	case ev := <-p.evs:
		return ev
	case <-time.After(timeout):
		return nil
	}
}

// read converts selection sel to target and returns the data (following INCR).
func (p *peer) read(sel, target string) []byte {
	p.t.Helper()
	prop := p.atoms["PEER_PROP"]
	xproto.ConvertSelection(p.conn, p.win, p.atoms[sel], p.atoms[target], prop, xproto.TimeCurrentTime)
	deadline := time.Now().Add(5 * time.Second)
	for {
		ev := p.next(time.Until(deadline))
		if ev == nil {
			p.t.Fatalf("peer: no SelectionNotify for %s/%s", sel, target)
		}
		if e, ok := ev.(xproto.SelectionNotifyEvent); ok {
			if e.Property == xproto.AtomNone {
				return nil
			}
			break
		}
	}
	r, err := xproto.GetProperty(p.conn, true, p.win, prop, xproto.GetPropertyTypeAny, 0, 1<<24).Reply()
	if err != nil {
		p.t.Fatal(err)
	}
	if r.Type != p.atoms["INCR"] {
		return r.Value
	}
	var out []byte
	for {
		ev := p.next(time.Until(deadline))
		if ev == nil {
			p.t.Fatalf("peer: INCR transfer stalled after %d bytes", len(out))
		}
		e, ok := ev.(xproto.PropertyNotifyEvent)
		if !ok || e.Atom != prop || e.State != xproto.PropertyNewValue {
			continue
		}
		r, err := xproto.GetProperty(p.conn, true, p.win, prop, xproto.GetPropertyTypeAny, 0, 1<<24).Reply()
		if err != nil {
			p.t.Fatal(err)
		}
		if len(r.Value) == 0 {
			return out
		}
		out = append(out, r.Value...)
	}
}

// own takes selection sel offering data as target, and serves requests until the test
// ends; data over 64 KiB goes by INCR.
func (p *peer) own(sel, target string, data []byte) {
	p.t.Helper()
	xproto.SetSelectionOwner(p.conn, p.win, p.atoms[sel], xproto.TimeCurrentTime)
	done := make(chan struct{})
	p.t.Cleanup(func() { close(done) })
	go func() {
		type pending struct {
			win  xproto.Window
			prop xproto.Atom
			rest []byte
		}
		var incr []*pending
		for {
			var ev xgb.Event
			select {
			case <-done:
				return
			case ev = <-p.evs:
			}
			switch e := ev.(type) {
			case xproto.SelectionRequestEvent:
				prop := e.Property
				switch e.Target {
				case p.atoms["TARGETS"]:
					buf := make([]byte, 8)
					xgbPut32(buf, uint32(p.atoms["TARGETS"]))
					xgbPut32(buf[4:], uint32(p.atoms[target]))
					xproto.ChangeProperty(p.conn, xproto.PropModeReplace, e.Requestor, prop, p.atoms["ATOM"], 32, 2, buf)
				case p.atoms[target]:
					if len(data) <= 64<<10 {
						xproto.ChangeProperty(p.conn, xproto.PropModeReplace, e.Requestor, prop, e.Target, 8, uint32(len(data)), data)
					} else {
						xproto.ChangeWindowAttributes(p.conn, e.Requestor, xproto.CwEventMask, []uint32{xproto.EventMaskPropertyChange})
						buf := make([]byte, 4)
						xgbPut32(buf, uint32(len(data)))
						xproto.ChangeProperty(p.conn, xproto.PropModeReplace, e.Requestor, prop, p.atoms["INCR"], 32, 1, buf)
						incr = append(incr, &pending{e.Requestor, prop, data})
					}
				default:
					prop = xproto.AtomNone
				}
				n := xproto.SelectionNotifyEvent{Time: e.Time, Requestor: e.Requestor, Selection: e.Selection, Target: e.Target, Property: prop}
				xproto.SendEvent(p.conn, false, e.Requestor, 0, string(n.Bytes()))
			case xproto.PropertyNotifyEvent:
				if e.State != xproto.PropertyDelete {
					continue
				}
				for i, s := range incr {
					if s.win != e.Window || s.prop != e.Atom {
						continue
					}
					n := min(32<<10, len(s.rest))
					xproto.ChangeProperty(p.conn, xproto.PropModeReplace, s.win, s.prop, p.atoms[target], 8, uint32(n), s.rest[:n])
					s.rest = s.rest[n:]
					if n == 0 {
						incr = append(incr[:i], incr[i+1:]...)
					}
					break
				}
			}
		}
	}()
	xproto.GetInputFocus(p.conn).Reply()
}

func TestClipboardBothWays(t *testing.T) {
	d, name := openTest(t, 63)
	if !d.UsesClipboardEvents() {
		t.Fatal("XFIXES selection events are not in use")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	mixed := "héllo 你好 日本語 한국어 😀\nline two"

	t.Run("host sets, another client reads CLIPBOARD and PRIMARY", func(t *testing.T) {
		before, _ := d.ClipboardState()
		if err := d.SetClipboard(nil, MimeText, []byte(mixed)); err != nil {
			t.Fatal(err)
		}
		ch, err := d.WaitClipboard(ctx, before.Gen)
		if err != nil || !ch.Own {
			t.Fatalf("change after our own set = %+v, %v; want Own", ch, err)
		}
		p := newPeer(t, name)
		if got := string(p.read("CLIPBOARD", "UTF8_STRING")); got != mixed {
			t.Fatalf("peer read CLIPBOARD %q, want %q", got, mixed)
		}
		if got := string(p.read("PRIMARY", "UTF8_STRING")); got != mixed {
			t.Fatalf("peer read PRIMARY %q, want %q", got, mixed)
		}
		if got := p.read("CLIPBOARD", "image/png"); got != nil {
			t.Fatalf("text clipboard offered image/png: %d bytes", len(got))
		}
		// Our own content reads back without a round trip through the server.
		c, err := d.Clipboard(ctx, "clipboard", "")
		if err != nil || c.Mime != MimeText || string(c.Data) != mixed {
			t.Fatalf("Clipboard = %+v, %v", c, err)
		}
	})

	t.Run("a large image goes by INCR to another client", func(t *testing.T) {
		img := make([]byte, 3<<20)
		rand.Read(img)
		if err := d.SetClipboard([]string{"clipboard"}, MimePNG, img); err != nil {
			t.Fatal(err)
		}
		p := newPeer(t, name)
		if got := p.read("CLIPBOARD", "image/png"); !bytes.Equal(got, img) {
			t.Fatalf("peer read %d bytes, want the %d-byte image", len(got), len(img))
		}
	})

	t.Run("another client sets, the host is told and reads", func(t *testing.T) {
		before, _ := d.ClipboardState()
		p := newPeer(t, name)
		p.own("CLIPBOARD", "UTF8_STRING", []byte("from the desktop: 中文 ✓"))
		ch, err := d.WaitClipboard(ctx, before.Gen)
		if err != nil || ch.Own || ch.Selection != "clipboard" {
			t.Fatalf("change = %+v, %v; want a foreign clipboard change", ch, err)
		}
		c, err := d.Clipboard(ctx, "clipboard", "")
		if err != nil || c.Mime != MimeText || string(c.Data) != "from the desktop: 中文 ✓" {
			t.Fatalf("Clipboard = %q (%s), %v", c.Data, c.Mime, err)
		}
	})

	t.Run("another client's large image by INCR", func(t *testing.T) {
		img := make([]byte, 1<<20)
		rand.Read(img)
		p := newPeer(t, name)
		p.own("CLIPBOARD", "image/png", img)
		c, err := d.Clipboard(ctx, "clipboard", "")
		if err != nil || c.Mime != MimePNG || !bytes.Equal(c.Data, img) {
			t.Fatalf("Clipboard = %s %d bytes, %v; want the %d-byte PNG", c.Mime, len(c.Data), err, len(img))
		}
	})

	t.Run("limits and bad input", func(t *testing.T) {
		if err := d.SetClipboard(nil, MimeText, make([]byte, MaxClipboard+1)); !errors.Is(err, ErrClipboardTooLarge) {
			t.Errorf("oversized set: %v", err)
		}
		if err := d.SetClipboard(nil, MimeText, []byte{0xff, 0xfe}); err == nil {
			t.Error("invalid UTF-8 accepted")
		}
		if err := d.SetClipboard(nil, "application/x-foo", []byte("x")); err == nil {
			t.Error("unknown type accepted")
		}
		if err := d.SetClipboard([]string{"secondary"}, MimeText, []byte("x")); err == nil {
			t.Error("unknown selection accepted")
		}
	})
}

func TestResize(t *testing.T) {
	name := xvfbtest.Start(t, 64, 1024, 768)
	d, err := Open(name)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	maxW, maxH, err := d.SizeRange()
	if err != nil || maxW < 1024 || maxH < 768 {
		t.Fatalf("SizeRange = %dx%d, %v", maxW, maxH, err)
	}
	for _, sz := range [][2]int{{800, 600}, {390, 844 * 768 / 1000}, {1024, 768}} {
		if err := d.Resize(sz[0], sz[1]); err != nil {
			t.Fatalf("Resize(%v): %v", sz, err)
		}
		d2, err := Open(name)
		if err != nil {
			t.Fatal(err)
		}
		w, h := d2.Size()
		img, _, err := d2.Capture(nil)
		// The pointer (Xvfb starts it in the middle) keeps its relative place: X alone would
		// clamp it to a shrunken screen's corner.
		if p, perr := xproto.QueryPointer(d2.conn, d2.root).Reply(); perr != nil {
			t.Errorf("query the pointer: %v", perr)
		} else if absInt(int(p.RootX)-sz[0]/2) > 1 || absInt(int(p.RootY)-sz[1]/2) > 1 {
			t.Errorf("after Resize(%v) the pointer is at %d,%d, want the middle %d,%d", sz, p.RootX, p.RootY, sz[0]/2, sz[1]/2)
		}
		d2.Close()
		if err != nil || w != sz[0] || h != sz[1] || img.Bounds().Dx() != sz[0] || img.Bounds().Dy() != sz[1] {
			t.Fatalf("after Resize(%v): size %dx%d, capture %v, %v", sz, w, h, img.Bounds(), err)
		}
	}
	if err := d.Resize(maxW+8, maxH); err == nil {
		t.Error("a size over the maximum was accepted")
	}
	if err := d.Resize(100, 100); err == nil {
		t.Error("a size under the minimum was accepted")
	}
}

func absInt(v int) int {
	if v < 0 {
		return -v
	}
	return v
}
