package hostdesk

import (
	"strings"
	"unicode/utf8"
)

// chords splits a key spec into chords of key names: "ctrl+l ctrl+c" → [[ctrl l] [ctrl c]].
// A literal '+' key is written "+" or "ctrl++".
func chords(spec string) [][]string {
	var out [][]string
	for _, chord := range strings.Fields(spec) {
		var keys []string
		for len(chord) > 0 {
			i := strings.IndexByte(chord[1:], '+')
			if i < 0 {
				keys = append(keys, chord)
				break
			}
			keys = append(keys, chord[:i+1])
			chord = chord[i+2:]
		}
		out = append(out, keys)
	}
	return out
}

// keyName is a named key of the shared vocabulary (the desktop driver's names), independent of
// the platform's codes.
type keyName int

const (
	kNone keyName = iota
	kCtrl
	kAlt
	kShift
	kSuper
	kReturn
	kTab
	kEscape
	kBackSpace
	kDelete
	kInsert
	kHome
	kEnd
	kPageUp
	kPageDown
	kLeft
	kRight
	kUp
	kDown
	kSpace
	kF1 // kF1..kF1+11 are F1..F12
)

// namedKeys maps lower-cased names and aliases to keys.
var namedKeys = map[string]keyName{
	"ctrl": kCtrl, "control": kCtrl, "ctrl_l": kCtrl, "control_l": kCtrl,
	"alt": kAlt, "alt_l": kAlt, "option": kAlt,
	"shift": kShift, "shift_l": kShift,
	"super": kSuper, "super_l": kSuper, "win": kSuper, "cmd": kSuper, "command": kSuper, "meta": kSuper,
	"return": kReturn, "enter": kReturn, "tab": kTab, "escape": kEscape, "esc": kEscape,
	"backspace": kBackSpace, "delete": kDelete, "del": kDelete, "insert": kInsert, "ins": kInsert,
	"home": kHome, "end": kEnd, "page_up": kPageUp, "pageup": kPageUp, "prior": kPageUp,
	"page_down": kPageDown, "pagedown": kPageDown, "next": kPageDown,
	"left": kLeft, "right": kRight, "up": kUp, "down": kDown, "space": kSpace,
	"f1": kF1, "f2": kF1 + 1, "f3": kF1 + 2, "f4": kF1 + 3, "f5": kF1 + 4, "f6": kF1 + 5,
	"f7": kF1 + 6, "f8": kF1 + 7, "f9": kF1 + 8, "f10": kF1 + 9, "f11": kF1 + 10, "f12": kF1 + 11,
}

// parseKey reads one key of a chord: a named key, or a single character (r != 0).
func parseKey(name string) (k keyName, r rune, ok bool) {
	if utf8.RuneCountInString(name) == 1 {
		r, _ := utf8.DecodeRuneInString(name)
		if r == ' ' {
			return kSpace, 0, true
		}
		return kNone, r, true
	}
	k, ok = namedKeys[strings.ToLower(name)]
	return k, 0, ok
}
