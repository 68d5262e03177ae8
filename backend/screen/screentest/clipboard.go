package screentest

import (
	"encoding/binary"
	"testing"
	"time"

	"github.com/jezek/xgb"
	"github.com/jezek/xgb/xproto"
)

// Selections is another X client of a test desktop (as an editor would be): it reads and
// owns the CLIPBOARD selection with the core protocol only, so tests check the driver's
// clipboard against the protocol rather than against itself. Content is small (no INCR).
type Selections struct {
	t     testing.TB
	conn  *xgb.Conn
	win   xproto.Window
	atoms map[string]xproto.Atom
	evs   chan xgb.Event
	own   chan []byte
}

// NewSelections connects to d's display; it is closed when the test ends.
func NewSelections(t testing.TB, d *Desktop) *Selections {
	t.Helper()
	conn, err := xgb.NewConnDisplay(d.Display)
	if err != nil {
		t.Fatal(err)
	}
	scr := xproto.Setup(conn).DefaultScreen(conn)
	win, _ := xproto.NewWindowId(conn)
	if err := xproto.CreateWindowChecked(conn, 0, win, scr.Root, 0, 0, 1, 1, 0, xproto.WindowClassInputOutput,
		scr.RootVisual, 0, nil).Check(); err != nil {
		t.Fatal(err)
	}
	s := &Selections{t: t, conn: conn, win: win, atoms: map[string]xproto.Atom{}, evs: make(chan xgb.Event, 64), own: make(chan []byte, 1)}
	for _, n := range []string{"CLIPBOARD", "TARGETS", "UTF8_STRING", "ATOM", "SCREENTEST_SEL"} {
		r, err := xproto.InternAtom(conn, false, uint16(len(n)), n).Reply()
		if err != nil {
			t.Fatal(err)
		}
		s.atoms[n] = r.Atom
	}
	done := make(chan struct{})
	go s.loop(done)
	t.Cleanup(func() { conn.Close(); <-done })
	return s
}

// loop serves requests for what it owns and hands other events to Read.
func (s *Selections) loop(done chan struct{}) {
	defer close(done)
	var owned []byte
	for {
		ev, err := s.conn.WaitForEvent()
		if ev == nil && err == nil {
			return
		}
		select {
		case owned = <-s.own:
		default:
		}
		switch e := ev.(type) {
		case xproto.SelectionRequestEvent:
			prop := e.Property
			switch e.Target {
			case s.atoms["TARGETS"]:
				buf := make([]byte, 8)
				binary.LittleEndian.PutUint32(buf, uint32(s.atoms["TARGETS"]))
				binary.LittleEndian.PutUint32(buf[4:], uint32(s.atoms["UTF8_STRING"]))
				xproto.ChangeProperty(s.conn, xproto.PropModeReplace, e.Requestor, prop, s.atoms["ATOM"], 32, 2, buf)
			case s.atoms["UTF8_STRING"]:
				xproto.ChangeProperty(s.conn, xproto.PropModeReplace, e.Requestor, prop, e.Target, 8, uint32(len(owned)), owned)
			default:
				prop = xproto.AtomNone
			}
			n := xproto.SelectionNotifyEvent{Time: e.Time, Requestor: e.Requestor, Selection: e.Selection, Target: e.Target, Property: prop}
			xproto.SendEvent(s.conn, false, e.Requestor, 0, string(n.Bytes()))
		case xproto.SelectionNotifyEvent:
			select {
			case s.evs <- e:
			default:
			}
		}
	}
}

// Copy makes this client the CLIPBOARD owner with text (as ctrl+c in an editor does).
func (s *Selections) Copy(text string) {
	s.t.Helper()
	s.own <- []byte(text)
	xproto.SetSelectionOwner(s.conn, s.win, s.atoms["CLIPBOARD"], xproto.TimeCurrentTime)
	if r, err := xproto.GetSelectionOwner(s.conn, s.atoms["CLIPBOARD"]).Reply(); err != nil || r.Owner != s.win {
		s.t.Fatalf("could not own CLIPBOARD: %v", err)
	}
}

// Paste reads CLIPBOARD as UTF-8 text (as ctrl+v in an editor does); "" when nobody offers it.
func (s *Selections) Paste() string {
	s.t.Helper()
	xproto.ConvertSelection(s.conn, s.win, s.atoms["CLIPBOARD"], s.atoms["UTF8_STRING"], s.atoms["SCREENTEST_SEL"], xproto.TimeCurrentTime)
	select {
	case ev := <-s.evs:
		if ev.(xproto.SelectionNotifyEvent).Property == xproto.AtomNone {
			return ""
		}
	case <-time.After(5 * time.Second):
		s.t.Fatal("no answer to a CLIPBOARD request within 5 s")
	}
	r, err := xproto.GetProperty(s.conn, true, s.win, s.atoms["SCREENTEST_SEL"], xproto.GetPropertyTypeAny, 0, 1<<20).Reply()
	if err != nil {
		s.t.Fatal(err)
	}
	return string(r.Value)
}
