package x11

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/jezek/xgb/xfixes"
	"github.com/jezek/xgb/xproto"
)

// The clipboard: the Display owns the CLIPBOARD and PRIMARY selections with content set by
// the host (answering other clients' requests, INCR for large content), reads the selections
// other clients own (INCR included), and counts ownership changes it learns from XFIXES
// selection events — no polling.

// MaxClipboard caps clipboard content in either direction.
const MaxClipboard = 10 << 20

// Clipboard MIME types the driver speaks.
const (
	MimeText = "text/plain;charset=utf-8"
	MimePNG  = "image/png"
)

// incrChunk is the size of one INCR chunk when serving, and the threshold above which
// content is served incrementally (well below the core protocol's 256 KiB request limit).
const incrChunk = 64 << 10

// ErrNoClipboard: nobody owns the selection, or its owner offers nothing readable.
var ErrNoClipboard = errors.New("x11: the selection is empty")

// ErrClipboardTooLarge: the content is over MaxClipboard.
var ErrClipboardTooLarge = fmt.Errorf("x11: clipboard content is over the %d MiB limit", MaxClipboard>>20)

// Clip is the content of a selection.
type Clip struct {
	Mime string // MimeText or MimePNG
	Data []byte
}

// ClipChange is one observed change of a selection's owner.
type ClipChange struct {
	Gen       uint64 // grows with every change of either selection
	Selection string // "clipboard" or "primary"
	Own       bool   // the driver itself took the selection (content set by the host)
}

type clipboard struct {
	win xproto.Window // our unmapped window: selection owner and conversion target

	atoms map[string]xproto.Atom

	mu     sync.Mutex
	owned  map[xproto.Atom]Clip // content of the selections we own
	gen    uint64
	last   ClipChange
	wake   chan struct{}                    // closed and replaced on every change
	reply  chan xproto.SelectionNotifyEvent // conversions in flight deliver here
	props  chan xproto.PropertyNotifyEvent  // INCR reads: new values on our window
	sends  map[incrKey]*incrSend            // INCR transfers we serve
	readMu sync.Mutex                       // one read at a time (one property, one reply slot)
}

type incrKey struct {
	win  xproto.Window
	prop xproto.Atom
}

type incrSend struct {
	typ  xproto.Atom
	data []byte
	done bool // the zero-length end was written
}

var clipAtomNames = []string{"CLIPBOARD", "PRIMARY", "TARGETS", "TIMESTAMP", "MULTIPLE", "UTF8_STRING", "STRING", "TEXT",
	"text/plain", MimeText, MimePNG, "INCR", "ATOM", "CUBICLE_CLIP"}

// initClipboard creates the selection window and asks XFIXES for selection events.
func (d *Display) initClipboard(scr *xproto.ScreenInfo, xfixesOK bool) error {
	c := &d.clip
	c.atoms = map[string]xproto.Atom{}
	c.owned = map[xproto.Atom]Clip{}
	c.sends = map[incrKey]*incrSend{}
	c.wake = make(chan struct{})
	c.reply = make(chan xproto.SelectionNotifyEvent, 1)
	c.props = make(chan xproto.PropertyNotifyEvent, 64)
	for _, n := range clipAtomNames {
		r, err := xproto.InternAtom(d.conn, false, uint16(len(n)), n).Reply()
		if err != nil {
			return fmt.Errorf("intern atom %s: %w", n, err)
		}
		c.atoms[n] = r.Atom
	}
	id, err := xproto.NewWindowId(d.conn)
	if err != nil {
		return err
	}
	if err := xproto.CreateWindowChecked(d.conn, 0, id, scr.Root, -10, -10, 1, 1, 0,
		xproto.WindowClassInputOutput, scr.RootVisual, xproto.CwEventMask,
		[]uint32{xproto.EventMaskPropertyChange}).Check(); err != nil {
		return fmt.Errorf("create selection window: %w", err)
	}
	c.win = id
	d.clipWatch = xfixesOK
	if xfixesOK {
		mask := uint32(xfixes.SelectionEventMaskSetSelectionOwner | xfixes.SelectionEventMaskSelectionWindowDestroy |
			xfixes.SelectionEventMaskSelectionClientClose)
		for _, s := range []string{"CLIPBOARD", "PRIMARY"} {
			if err := xfixes.SelectSelectionInputChecked(d.conn, id, c.atoms[s], mask).Check(); err != nil {
				d.clipWatch = false
			}
		}
	}
	return nil
}

// selectionAtom maps "clipboard" / "primary" to the atom.
func (c *clipboard) selectionAtom(name string) (xproto.Atom, error) {
	switch name {
	case "", "clipboard":
		return c.atoms["CLIPBOARD"], nil
	case "primary":
		return c.atoms["PRIMARY"], nil
	}
	return 0, fmt.Errorf("x11: unknown selection %q (use clipboard or primary)", name)
}

func (c *clipboard) selectionName(a xproto.Atom) string {
	if a == c.atoms["PRIMARY"] {
		return "primary"
	}
	return "clipboard"
}

// UsesClipboardEvents reports whether selection changes come from XFIXES.
func (d *Display) UsesClipboardEvents() bool { return d.clipWatch }

// ClipboardState returns the newest change and a channel closed at the next one.
func (d *Display) ClipboardState() (ClipChange, <-chan struct{}) {
	d.clip.mu.Lock()
	defer d.clip.mu.Unlock()
	return d.clip.last, d.clip.wake
}

// WaitClipboard waits for a change with Gen above after.
func (d *Display) WaitClipboard(ctx context.Context, after uint64) (ClipChange, error) {
	for {
		ch, wake := d.ClipboardState()
		if ch.Gen > after {
			return ch, nil
		}
		select {
		case <-ctx.Done():
			return ClipChange{}, ctx.Err()
		case <-d.done:
			return ClipChange{}, ErrClosed
		case <-wake:
		}
	}
}

func (c *clipboard) changed(sel xproto.Atom, own bool) {
	c.mu.Lock()
	c.gen++
	c.last = ClipChange{Gen: c.gen, Selection: c.selectionName(sel), Own: own}
	close(c.wake)
	c.wake = make(chan struct{})
	c.mu.Unlock()
}

// SetClipboard makes the driver the owner of the named selections ("clipboard", "primary")
// with content data of mime (MimeText or MimePNG).
func (d *Display) SetClipboard(selections []string, mime string, data []byte) error {
	if err := d.alive(); err != nil {
		return err
	}
	if len(data) > MaxClipboard {
		return ErrClipboardTooLarge
	}
	switch mime {
	case MimeText, "text/plain", "":
		if !utf8.Valid(data) {
			return fmt.Errorf("x11: clipboard text is not valid UTF-8")
		}
		mime = MimeText
	case MimePNG:
	default:
		return fmt.Errorf("x11: clipboard type %q is not supported (use %s or %s)", mime, MimeText, MimePNG)
	}
	if len(selections) == 0 {
		selections = []string{"clipboard", "primary"}
	}
	c := &d.clip
	var atoms []xproto.Atom
	for _, s := range selections {
		a, err := c.selectionAtom(s)
		if err != nil {
			return err
		}
		atoms = append(atoms, a)
	}
	c.mu.Lock()
	for _, a := range atoms {
		c.owned[a] = Clip{Mime: mime, Data: slices.Clone(data)}
	}
	c.mu.Unlock()
	for _, a := range atoms {
		xproto.SetSelectionOwner(d.conn, c.win, a, xproto.TimeCurrentTime)
		r, err := xproto.GetSelectionOwner(d.conn, a).Reply()
		if err != nil {
			return fmt.Errorf("x11: set clipboard: %w", err)
		}
		if r.Owner != c.win {
			return fmt.Errorf("x11: could not take the %s selection", c.selectionName(a))
		}
		if !d.clipWatch {
			c.changed(a, true)
		}
	}
	return nil
}

// Clipboard reads the named selection. mime "" takes text when offered, else a PNG image;
// MimeText or MimePNG ask for that type only.
func (d *Display) Clipboard(ctx context.Context, selection, mime string) (Clip, error) {
	if err := d.alive(); err != nil {
		return Clip{}, err
	}
	c := &d.clip
	sel, err := c.selectionAtom(selection)
	if err != nil {
		return Clip{}, err
	}
	owner, err := xproto.GetSelectionOwner(d.conn, sel).Reply()
	if err != nil {
		return Clip{}, fmt.Errorf("x11: clipboard: %w", err)
	}
	if owner.Owner == xproto.WindowNone {
		return Clip{}, ErrNoClipboard
	}
	if owner.Owner == c.win {
		c.mu.Lock()
		cl, ok := c.owned[sel]
		c.mu.Unlock()
		if !ok || (mime != "" && mime != cl.Mime) {
			return Clip{}, ErrNoClipboard
		}
		return Clip{Mime: cl.Mime, Data: slices.Clone(cl.Data)}, nil
	}
	c.readMu.Lock()
	defer c.readMu.Unlock()
	tdata, ttype, err := d.convert(ctx, sel, c.atoms["TARGETS"])
	var targets []xproto.Atom
	if err == nil && ttype == c.atoms["ATOM"] {
		for i := 0; i+4 <= len(tdata); i += 4 {
			targets = append(targets, xproto.Atom(xgbGet32(tdata[i:])))
		}
	}
	has := func(a xproto.Atom) bool { return err != nil || slices.Contains(targets, a) }
	var tries []xproto.Atom
	if mime == "" || mime == MimeText || mime == "text/plain" {
		for _, n := range []string{"UTF8_STRING", MimeText, "STRING"} {
			if has(c.atoms[n]) {
				tries = append(tries, c.atoms[n])
			}
		}
	}
	if mime == "" || mime == MimePNG {
		if has(c.atoms[MimePNG]) {
			tries = append(tries, c.atoms[MimePNG])
		}
	}
	for _, t := range tries {
		data, _, err := d.convert(ctx, sel, t)
		if errors.Is(err, ErrNoClipboard) {
			continue
		}
		if err != nil {
			return Clip{}, err
		}
		if t == c.atoms[MimePNG] {
			return Clip{Mime: MimePNG, Data: data}, nil
		}
		if t == c.atoms["STRING"] {
			data = latin1ToUTF8(data)
		}
		return Clip{Mime: MimeText, Data: data}, nil
	}
	return Clip{}, ErrNoClipboard
}

// convert asks the owner of sel for target into our property and reads it (INCR included).
// readMu held.
func (d *Display) convert(ctx context.Context, sel, target xproto.Atom) ([]byte, xproto.Atom, error) {
	c := &d.clip
	prop := c.atoms["CUBICLE_CLIP"]
	xproto.DeleteProperty(d.conn, c.win, prop)
	drain(c.reply)
	drainProps(c.props)
	xproto.ConvertSelection(d.conn, c.win, sel, target, prop, xproto.TimeCurrentTime)
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	var ev xproto.SelectionNotifyEvent
	for {
		select {
		case <-ctx.Done():
			return nil, 0, fmt.Errorf("x11: the clipboard's owner did not answer: %w", ctx.Err())
		case <-d.done:
			return nil, 0, ErrClosed
		case ev = <-c.reply:
		}
		if ev.Selection == sel && ev.Target == target {
			break
		}
	}
	if ev.Property == xproto.AtomNone {
		return nil, 0, ErrNoClipboard
	}
	// The owner wrote the property before it sent the notification, and events arrive in
	// order: the notice of that write is queued already and is not a chunk.
	drainProps(c.props)
	r, err := xproto.GetProperty(d.conn, true, c.win, prop, xproto.GetPropertyTypeAny, 0, (MaxClipboard+4)/4).Reply()
	if err != nil {
		return nil, 0, fmt.Errorf("x11: read clipboard: %w", err)
	}
	if r.Type != c.atoms["INCR"] {
		if r.BytesAfter > 0 {
			return nil, 0, ErrClipboardTooLarge
		}
		return r.Value, r.Type, nil
	}
	// INCR: the owner writes chunks, each after we delete the previous; a zero-length
	// chunk ends the transfer.
	var out []byte
	var typ xproto.Atom
	for {
		select {
		case <-ctx.Done():
			return nil, 0, fmt.Errorf("x11: the clipboard's owner stopped sending: %w", ctx.Err())
		case <-d.done:
			return nil, 0, ErrClosed
		case pe := <-c.props:
			if pe.Atom != prop || pe.State != xproto.PropertyNewValue {
				continue
			}
		}
		r, err := xproto.GetProperty(d.conn, true, c.win, prop, xproto.GetPropertyTypeAny, 0, (MaxClipboard+4)/4).Reply()
		if err != nil {
			return nil, 0, fmt.Errorf("x11: read clipboard: %w", err)
		}
		if len(r.Value) == 0 {
			return out, typ, nil
		}
		typ = r.Type
		out = append(out, r.Value...)
		if len(out) > MaxClipboard {
			return nil, 0, ErrClipboardTooLarge
		}
	}
}

func drain(ch chan xproto.SelectionNotifyEvent) {
	for {
		select {
		case <-ch:
		default:
			return
		}
	}
}

func drainProps(ch chan xproto.PropertyNotifyEvent) {
	for {
		select {
		case <-ch:
		default:
			return
		}
	}
}

func xgbGet32(b []byte) uint32 {
	return uint32(b[0]) | uint32(b[1])<<8 | uint32(b[2])<<16 | uint32(b[3])<<24
}

func latin1ToUTF8(b []byte) []byte {
	out := make([]byte, 0, len(b))
	for _, c := range b {
		out = utf8.AppendRune(out, rune(c))
	}
	return out
}

func utf8ToLatin1(b []byte) []byte {
	out := make([]byte, 0, len(b))
	for _, r := range string(b) {
		if r > 0xff {
			r = '?'
		}
		out = append(out, byte(r))
	}
	return out
}

// handleClipboardEvent handles the selection events of the event loop; it reports whether
// ev was one. It never waits for a reply (the event loop must keep reading).
func (d *Display) handleClipboardEvent(ev any) bool {
	c := &d.clip
	switch e := ev.(type) {
	case xfixes.SelectionNotifyEvent:
		c.changed(e.Selection, e.Owner == c.win)
	case xproto.SelectionClearEvent:
		if e.Owner == c.win {
			c.mu.Lock()
			delete(c.owned, e.Selection)
			c.mu.Unlock()
		}
	case xproto.SelectionNotifyEvent:
		if e.Requestor == c.win {
			select {
			case c.reply <- e:
			default:
			}
		}
	case xproto.SelectionRequestEvent:
		d.serveSelection(e)
	case xproto.PropertyNotifyEvent:
		if e.Window == c.win {
			select {
			case c.props <- e:
			default:
			}
			return true
		}
		if e.State == xproto.PropertyDelete {
			d.continueIncr(incrKey{e.Window, e.Atom})
		}
	default:
		return false
	}
	return true
}

// serveSelection answers another client's request for a selection we own.
func (d *Display) serveSelection(e xproto.SelectionRequestEvent) {
	c := &d.clip
	prop := e.Property
	if prop == xproto.AtomNone {
		prop = e.Target // obsolete clients
	}
	c.mu.Lock()
	cl, ok := c.owned[e.Selection]
	c.mu.Unlock()
	ok = ok && e.Owner == c.win && d.writeTarget(e.Requestor, prop, e.Target, cl)
	if !ok {
		prop = xproto.AtomNone
	}
	notify := xproto.SelectionNotifyEvent{Time: e.Time, Requestor: e.Requestor, Selection: e.Selection, Target: e.Target, Property: prop}
	xproto.SendEvent(d.conn, false, e.Requestor, 0, string(notify.Bytes()))
}

// writeTarget puts cl converted to target on the requestor's property; false when the target
// is not offered.
func (d *Display) writeTarget(win xproto.Window, prop, target xproto.Atom, cl Clip) bool {
	c := &d.clip
	a := c.atoms
	switch target {
	case a["TARGETS"]:
		ts := []xproto.Atom{a["TARGETS"], a["TIMESTAMP"]}
		if cl.Mime == MimePNG {
			ts = append(ts, a[MimePNG])
		} else {
			ts = append(ts, a["UTF8_STRING"], a[MimeText], a["text/plain"], a["STRING"], a["TEXT"])
		}
		buf := make([]byte, 4*len(ts))
		for i, t := range ts {
			xgbPut32(buf[4*i:], uint32(t))
		}
		xproto.ChangeProperty(d.conn, xproto.PropModeReplace, win, prop, a["ATOM"], 32, uint32(len(ts)), buf)
		return true
	case a["TIMESTAMP"]:
		buf := make([]byte, 4)
		xproto.ChangeProperty(d.conn, xproto.PropModeReplace, win, prop, xproto.AtomInteger, 32, 1, buf)
		return true
	}
	var data []byte
	typ := target
	switch {
	case cl.Mime == MimePNG && target == a[MimePNG]:
		data = cl.Data
	case cl.Mime == MimeText && (target == a["UTF8_STRING"] || target == a[MimeText] || target == a["text/plain"] || target == a["TEXT"]):
		data = cl.Data
		if target == a["TEXT"] {
			typ = a["UTF8_STRING"]
		}
	case cl.Mime == MimeText && target == a["STRING"]:
		data = utf8ToLatin1(cl.Data)
	default:
		return false
	}
	if len(data) <= incrChunk {
		xproto.ChangeProperty(d.conn, xproto.PropModeReplace, win, prop, typ, 8, uint32(len(data)), data)
		return true
	}
	// INCR: announce the size, then send a chunk each time the requestor deletes the
	// property (PropertyNotify on its window, which we select).
	c.mu.Lock()
	c.sends[incrKey{win, prop}] = &incrSend{typ: typ, data: data}
	c.mu.Unlock()
	xproto.ChangeWindowAttributes(d.conn, win, xproto.CwEventMask, []uint32{xproto.EventMaskPropertyChange})
	buf := make([]byte, 4)
	xgbPut32(buf, uint32(len(data)))
	xproto.ChangeProperty(d.conn, xproto.PropModeReplace, win, prop, a["INCR"], 32, 1, buf)
	return true
}

// continueIncr writes the next chunk of an INCR transfer after the requestor took the last.
func (d *Display) continueIncr(k incrKey) {
	c := &d.clip
	c.mu.Lock()
	s := c.sends[k]
	if s == nil {
		c.mu.Unlock()
		return
	}
	n := min(incrChunk, len(s.data))
	chunk := s.data[:n]
	s.data = s.data[n:]
	if n == 0 {
		delete(c.sends, k)
	}
	c.mu.Unlock()
	xproto.ChangeProperty(d.conn, xproto.PropModeReplace, k.win, k.prop, s.typ, 8, uint32(n), chunk)
	if n == 0 {
		xproto.ChangeWindowAttributes(d.conn, k.win, xproto.CwEventMask, []uint32{0})
	}
}

func xgbPut32(b []byte, v uint32) {
	b[0], b[1], b[2], b[3] = byte(v), byte(v>>8), byte(v>>16), byte(v>>24)
}

// AdoptClipboard takes over the selections old owns (a replaced connection: its ownership
// ends when it closes).
func (d *Display) AdoptClipboard(old *Display) {
	old.clip.mu.Lock()
	owned := map[xproto.Atom]Clip{}
	for a, c := range old.clip.owned {
		owned[a] = c
	}
	old.clip.mu.Unlock()
	for a, c := range owned {
		d.SetClipboard([]string{old.clip.selectionName(a)}, c.Mime, c.Data)
	}
}
