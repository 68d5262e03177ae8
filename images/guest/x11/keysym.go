package x11

import (
	"fmt"
	"strings"
	"unicode/utf8"

	"github.com/jezek/xgb/xproto"
)

const ksShiftL xproto.Keysym = 0xffe1

// ErrBadKey names a key that KeysymByName does not know.
type ErrBadKey struct{ Name string }

// Error says which key is unknown and which names work.
func (e ErrBadKey) Error() string {
	return fmt.Sprintf("unknown key %q (use names like ctrl, alt, shift, super, Return, Tab, Escape, BackSpace, F1, Left, Page_Up, or a single character)", e.Name)
}

// keyNames maps lower-cased key names (X keysym names plus common aliases) to keysyms.
var keyNames = map[string]xproto.Keysym{
	"ctrl": 0xffe3, "control": 0xffe3, "control_l": 0xffe3, "ctrl_l": 0xffe3, "control_r": 0xffe4, "ctrl_r": 0xffe4,
	"alt": 0xffe9, "alt_l": 0xffe9, "alt_r": 0xffea, "altgr": 0xfe03, "iso_level3_shift": 0xfe03,
	"shift": 0xffe1, "shift_l": 0xffe1, "shift_r": 0xffe2,
	"super": 0xffeb, "super_l": 0xffeb, "super_r": 0xffec, "win": 0xffeb, "cmd": 0xffeb, "meta": 0xffe7, "meta_l": 0xffe7,
	"return": 0xff0d, "enter": 0xff0d, "kp_enter": 0xff8d, "tab": 0xff09, "iso_left_tab": 0xfe20,
	"escape": 0xff1b, "esc": 0xff1b, "backspace": 0xff08, "delete": 0xffff, "del": 0xffff,
	"insert": 0xff63, "ins": 0xff63, "home": 0xff50, "end": 0xff57,
	"page_up": 0xff55, "pageup": 0xff55, "prior": 0xff55, "page_down": 0xff56, "pagedown": 0xff56, "next": 0xff56,
	"left": 0xff51, "up": 0xff52, "right": 0xff53, "down": 0xff54,
	"space": 0x20, "plus": 0x2b, "minus": 0x2d, "comma": 0x2c, "period": 0x2e, "slash": 0x2f,
	"backslash": 0x5c, "semicolon": 0x3b, "apostrophe": 0x27, "grave": 0x60, "equal": 0x3d,
	"bracketleft": 0x5b, "bracketright": 0x5d,
	"menu": 0xff67, "print": 0xff61, "caps_lock": 0xffe5, "num_lock": 0xff7f, "scroll_lock": 0xff14,
	"pause": 0xff13,
}

func init() {
	for i := 1; i <= 12; i++ {
		keyNames[fmt.Sprintf("f%d", i)] = xproto.Keysym(0xffbe + i - 1)
	}
}

// KeysymByName resolves a key name ("ctrl", "Return", "F5", "Page_Up") or a single character
// ("a", "A", "é", "你") to a keysym. Names are case-insensitive; single characters are not.
func KeysymByName(name string) (xproto.Keysym, bool) {
	if utf8.RuneCountInString(name) == 1 {
		r, _ := utf8.DecodeRuneInString(name)
		return RuneKeysym(r), true
	}
	ks, ok := keyNames[strings.ToLower(name)]
	return ks, ok
}

// RuneKeysym returns the keysym that types r: Latin-1 characters have their own code,
// '\n' and '\t' are Return and Tab, everything else is the Unicode keysym 0x01000000+r.
func RuneKeysym(r rune) xproto.Keysym {
	switch {
	case r == '\n' || r == '\r':
		return 0xff0d
	case r == '\t':
		return 0xff09
	case r == '\b':
		return 0xff08
	case r >= 0x20 && r <= 0x7e, r >= 0xa0 && r <= 0xff:
		return xproto.Keysym(r)
	default:
		return xproto.Keysym(0x01000000 + r)
	}
}

// KeysymRune is the inverse of RuneKeysym for printable keysyms (0 when ks is none).
func KeysymRune(ks xproto.Keysym) rune {
	switch {
	case ks >= 0x20 && ks <= 0x7e, ks >= 0xa0 && ks <= 0xff:
		return rune(ks)
	case ks >= 0x01000100 && ks <= 0x0110ffff:
		return rune(ks - 0x01000000)
	}
	return 0
}
