package x11

import (
	"fmt"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/jezek/xgb"
	"github.com/jezek/xgb/xproto"
	"github.com/jezek/xgb/xtest"
)

// remapHold is how long a spare keycode keeps a borrowed Unicode keysym after its last use.
// Clients translate a KeyPress with the keyboard map current when they read the event, so
// restoring immediately (as xdotool does after a sleep) races slow clients; holding the
// mapping briefly and restoring it in one go is both faster and safer.
const remapHold = time.Second

// keyboard mirrors the server's core keyboard map and lends spare keycodes to keysyms that
// no key produces (CJK text, symbols). Its mutex also serialises all input, so events of
// two actions never interleave.
type keyboard struct {
	mu       sync.Mutex
	conn     *xgb.Conn
	min, max xproto.Keycode
	perCode  int
	syms     []xproto.Keysym // (max-min+1)*perCode, refreshed when stale
	stale    bool
	borrowed map[xproto.Keysym]xproto.Keycode
	restore  *time.Timer
	closed   bool
}

func (k *keyboard) init(conn *xgb.Conn, setup *xproto.SetupInfo) {
	k.conn = conn
	k.min, k.max = setup.MinKeycode, setup.MaxKeycode
	k.stale = true
	k.borrowed = map[xproto.Keysym]xproto.Keycode{}
}

func (k *keyboard) markStale() {
	k.mu.Lock()
	k.stale = true
	k.mu.Unlock()
}

// refresh re-reads the keyboard map when it changed. k.mu held.
func (k *keyboard) refresh() error {
	if !k.stale {
		return nil
	}
	r, err := xproto.GetKeyboardMapping(k.conn, k.min, byte(int(k.max)-int(k.min)+1)).Reply()
	if err != nil {
		return fmt.Errorf("x11: read keyboard map: %w", err)
	}
	k.perCode, k.syms, k.stale = int(r.KeysymsPerKeycode), r.Keysyms, false
	return nil
}

// lookup finds a keycode producing ks, and whether Shift is needed. k.mu held.
func (k *keyboard) lookup(ks xproto.Keysym) (code xproto.Keycode, shift bool, err error) {
	if err := k.refresh(); err != nil {
		return 0, false, err
	}
	if c, ok := k.borrowed[ks]; ok {
		return c, false, nil
	}
	for level := 0; level < 2 && level < k.perCode; level++ {
		for i := 0; i+level < len(k.syms); i += k.perCode {
			if k.syms[i+level] == ks {
				return k.min + xproto.Keycode(i/k.perCode), level == 1, nil
			}
		}
	}
	return k.borrow(ks)
}

// borrow maps a spare keycode (one with no keysyms) to ks. k.mu held.
func (k *keyboard) borrow(ks xproto.Keysym) (xproto.Keycode, bool, error) {
	in := map[xproto.Keycode]bool{}
	for _, c := range k.borrowed {
		in[c] = true
	}
	spare := xproto.Keycode(0)
	for i := len(k.syms)/k.perCode - 1; i >= 0 && spare == 0; i-- {
		code := k.min + xproto.Keycode(i)
		if in[code] {
			continue
		}
		empty := true
		for _, s := range k.syms[i*k.perCode : (i+1)*k.perCode] {
			if s != 0 {
				empty = false
				break
			}
		}
		if empty {
			spare = code
		}
	}
	if spare == 0 {
		k.restoreLocked() // every spare keycode is lent out: take them all back and retry
		if err := k.refresh(); err != nil {
			return 0, false, err
		}
		if len(k.borrowed) == 0 && len(in) == 0 {
			return 0, false, fmt.Errorf("x11: no spare keycode to type keysym %#x", ks)
		}
		return k.borrow(ks)
	}
	syms := make([]xproto.Keysym, k.perCode)
	for i := range syms {
		syms[i] = ks
	}
	if err := xproto.ChangeKeyboardMappingChecked(k.conn, 1, spare, byte(k.perCode), syms).Check(); err != nil {
		return 0, false, fmt.Errorf("x11: remap keycode %d: %w", spare, err)
	}
	i := int(spare-k.min) * k.perCode
	copy(k.syms[i:i+k.perCode], syms)
	k.borrowed[ks] = spare
	return spare, false, nil
}

// scheduleRestore returns borrowed keycodes remapHold after the last use. k.mu held.
func (k *keyboard) scheduleRestore() {
	if len(k.borrowed) == 0 || k.closed {
		return
	}
	if k.restore != nil {
		k.restore.Stop()
	}
	k.restore = time.AfterFunc(remapHold, func() {
		k.mu.Lock()
		defer k.mu.Unlock()
		if !k.closed {
			k.restoreLocked()
		}
	})
}

// restoreLocked maps every borrowed keycode back to NoSymbol. k.mu held.
func (k *keyboard) restoreLocked() {
	if k.restore != nil {
		k.restore.Stop()
		k.restore = nil
	}
	for ks, code := range k.borrowed {
		xproto.ChangeKeyboardMapping(k.conn, 1, code, byte(k.perCode), make([]xproto.Keysym, k.perCode))
		delete(k.borrowed, ks)
	}
	k.stale = true
}

// restoreNow is called on Close: give borrowed keycodes back before the connection goes.
func (k *keyboard) restoreNow(conn *xgb.Conn) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.conn == nil {
		return
	}
	k.restoreLocked()
	xproto.GetInputFocus(conn).Reply() // flush
	k.closed = true
}

// fake sends one XTEST event.
func (d *Display) fake(typ byte, detail byte, x, y int) {
	xtest.FakeInput(d.conn, typ, detail, 0, d.root, int16(x), int16(y), 0)
}

// sync waits until the server has processed everything sent so far, so an action has taken
// effect when its method returns and errors surface.
func (d *Display) sync() error {
	if _, err := xproto.GetInputFocus(d.conn).Reply(); err != nil {
		return fmt.Errorf("x11: input: %w", err)
	}
	return nil
}

// Move moves the pointer to (x, y).
func (d *Display) Move(x, y int) error {
	if err := d.alive(); err != nil {
		return err
	}
	d.kb.mu.Lock()
	defer d.kb.mu.Unlock()
	d.fake(xproto.MotionNotify, 0, x, y)
	return d.sync()
}

// Click moves to (x, y) and clicks button (1 left, 2 middle, 3 right) count times.
func (d *Display) Click(x, y, button, count int) error {
	if err := d.alive(); err != nil {
		return err
	}
	d.kb.mu.Lock()
	defer d.kb.mu.Unlock()
	d.fake(xproto.MotionNotify, 0, x, y)
	for i := 0; i < count; i++ {
		d.fake(xproto.ButtonPress, byte(button), 0, 0)
		d.fake(xproto.ButtonRelease, byte(button), 0, 0)
	}
	return d.sync()
}

// Button presses (down) or releases a button at (x, y).
func (d *Display) Button(x, y, button int, down bool) error {
	if err := d.alive(); err != nil {
		return err
	}
	d.kb.mu.Lock()
	defer d.kb.mu.Unlock()
	d.fake(xproto.MotionNotify, 0, x, y)
	typ := byte(xproto.ButtonRelease)
	if down {
		typ = xproto.ButtonPress
	}
	d.fake(typ, byte(button), 0, 0)
	return d.sync()
}

// Drag presses button at (x, y), moves in steps to (toX, toY) and releases there.
func (d *Display) Drag(x, y, toX, toY, button int) error {
	if err := d.alive(); err != nil {
		return err
	}
	d.kb.mu.Lock()
	defer d.kb.mu.Unlock()
	d.fake(xproto.MotionNotify, 0, x, y)
	d.fake(xproto.ButtonPress, byte(button), 0, 0)
	const steps = 8 // intermediate motion so toolkits see a drag, not a jump
	for i := 1; i <= steps; i++ {
		d.fake(xproto.MotionNotify, 0, x+(toX-x)*i/steps, y+(toY-y)*i/steps)
	}
	d.fake(xproto.ButtonRelease, byte(button), 0, 0)
	return d.sync()
}

// Scroll moves to (x, y) and scrolls dy clicks down (negative: up) and dx clicks right
// (negative: left), as wheel buttons 4–7.
func (d *Display) Scroll(x, y, dx, dy int) error {
	if err := d.alive(); err != nil {
		return err
	}
	d.kb.mu.Lock()
	defer d.kb.mu.Unlock()
	d.fake(xproto.MotionNotify, 0, x, y)
	wheel := func(n int, neg, pos byte) {
		b := pos
		if n < 0 {
			b, n = neg, -n
		}
		for i := 0; i < n; i++ {
			d.fake(xproto.ButtonPress, b, 0, 0)
			d.fake(xproto.ButtonRelease, b, 0, 0)
		}
	}
	wheel(dy, 4, 5)
	wheel(dx, 6, 7)
	return d.sync()
}

// Keys presses key combinations: space-separated chords of '+'-joined names, e.g.
// "ctrl+alt+t", "Return", "ctrl+l ctrl+c". Keys of a chord go down in order and up in
// reverse.
func (d *Display) Keys(spec string) error {
	if err := d.alive(); err != nil {
		return err
	}
	chords := strings.Fields(spec)
	if len(chords) == 0 {
		return fmt.Errorf("x11: keys: %w", ErrBadKey{Name: spec})
	}
	var all [][]xproto.Keysym
	for _, chord := range chords {
		var syms []xproto.Keysym
		for _, name := range splitChord(chord) {
			ks, ok := KeysymByName(name)
			if !ok {
				return fmt.Errorf("x11: keys %q: %w", spec, ErrBadKey{Name: name})
			}
			syms = append(syms, ks)
		}
		all = append(all, syms)
	}
	d.kb.mu.Lock()
	defer d.kb.mu.Unlock()
	shiftCode, _, err := d.kb.lookup(ksShiftL)
	if err != nil {
		return err
	}
	for _, syms := range all {
		var down []xproto.Keycode
		for _, ks := range syms {
			code, shift, err := d.kb.lookup(ks)
			if err != nil {
				return err
			}
			if shift && !containsCode(down, shiftCode) {
				d.fake(xproto.KeyPress, byte(shiftCode), 0, 0)
				down = append(down, shiftCode)
			}
			d.fake(xproto.KeyPress, byte(code), 0, 0)
			down = append(down, code)
		}
		for i := len(down) - 1; i >= 0; i-- {
			d.fake(xproto.KeyRelease, byte(down[i]), 0, 0)
		}
	}
	d.kb.scheduleRestore()
	return d.sync()
}

// Type types text as a sequence of key strokes; '\n' is Return and '\t' is Tab. Characters
// no key produces (e.g. Chinese) are typed through a borrowed spare keycode.
func (d *Display) Type(text string) error {
	if err := d.alive(); err != nil {
		return err
	}
	if !utf8.ValidString(text) {
		return fmt.Errorf("x11: type: text is not valid UTF-8")
	}
	d.kb.mu.Lock()
	defer d.kb.mu.Unlock()
	shiftCode, _, err := d.kb.lookup(ksShiftL)
	if err != nil {
		return err
	}
	for _, r := range text {
		ks := RuneKeysym(r)
		code, shift, err := d.kb.lookup(ks)
		if err != nil {
			return err
		}
		if shift {
			d.fake(xproto.KeyPress, byte(shiftCode), 0, 0)
		}
		d.fake(xproto.KeyPress, byte(code), 0, 0)
		d.fake(xproto.KeyRelease, byte(code), 0, 0)
		if shift {
			d.fake(xproto.KeyRelease, byte(shiftCode), 0, 0)
		}
	}
	d.kb.scheduleRestore()
	return d.sync()
}

func containsCode(codes []xproto.Keycode, c xproto.Keycode) bool {
	for _, x := range codes {
		if x == c {
			return true
		}
	}
	return false
}

// splitChord splits "ctrl+alt+t" at '+', keeping a literal '+' key ("ctrl++" or "+").
func splitChord(chord string) []string {
	var out []string
	for len(chord) > 0 {
		i := strings.IndexByte(chord[1:], '+')
		if i < 0 {
			out = append(out, chord)
			break
		}
		out = append(out, chord[:i+1])
		chord = chord[i+2:]
	}
	return out
}
