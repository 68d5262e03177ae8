//go:build darwin && cgo

package hostdesk

/*
#cgo LDFLAGS: -framework CoreGraphics -framework CoreFoundation -framework ApplicationServices
#include <CoreGraphics/CoreGraphics.h>
#include <ApplicationServices/ApplicationServices.h>

static int cubScreenCaptureAllowed(void) {
	if (__builtin_available(macOS 10.15, *)) {
		return CGPreflightScreenCaptureAccess() ? 1 : 0;
	}
	return 1;
}

static int cubAccessibilityAllowed(void) { return AXIsProcessTrusted() ? 1 : 0; }

static void cubMouse(int type, double x, double y, int button, int clicks) {
	CGEventRef e = CGEventCreateMouseEvent(NULL, (CGEventType)type, CGPointMake(x, y), (CGMouseButton)button);
	if (e == NULL) return;
	if (clicks > 0) CGEventSetIntegerValueField(e, kCGMouseEventClickState, clicks);
	CGEventPost(kCGHIDEventTap, e);
	CFRelease(e);
}

static void cubScroll(int dy, int dx) {
	CGEventRef e = CGEventCreateScrollWheelEvent(NULL, kCGScrollEventUnitLine, 2, dy, dx);
	if (e == NULL) return;
	CGEventPost(kCGHIDEventTap, e);
	CFRelease(e);
}

static void cubKey(int code, int down, unsigned long long flags) {
	CGEventRef e = CGEventCreateKeyboardEvent(NULL, (CGKeyCode)code, down ? true : false);
	if (e == NULL) return;
	CGEventSetFlags(e, (CGEventFlags)flags);
	CGEventPost(kCGHIDEventTap, e);
	CFRelease(e);
}

static void cubUnicode(UniChar *chars, int n) {
	CGEventRef down = CGEventCreateKeyboardEvent(NULL, 0, true);
	CGEventRef up = CGEventCreateKeyboardEvent(NULL, 0, false);
	if (down != NULL) {
		CGEventKeyboardSetUnicodeString(down, n, chars);
		CGEventPost(kCGHIDEventTap, down);
		CFRelease(down);
	}
	if (up != NULL) {
		CGEventKeyboardSetUnicodeString(up, n, chars);
		CGEventPost(kCGHIDEventTap, up);
		CFRelease(up);
	}
}
*/
import "C"

import (
	"time"
	"unicode/utf16"

	"cubicle/backend/computer"
	"cubicle/backend/fault"
)

// On macOS input goes through Quartz event services (CGEventPost), which needs the
// Accessibility permission; capture needs Screen Recording. cgo is unavoidable here: both are
// C frameworks.

// CGEventType values.
const (
	evLeftDown   = 1
	evLeftUp     = 2
	evRightDown  = 3
	evRightUp    = 4
	evMove       = 5
	evLeftDrag   = 6
	evOtherDown  = 25
	evOtherUp    = 26
	flagShift    = 0x00020000
	flagControl  = 0x00040000
	flagAlternat = 0x00080000
	flagCommand  = 0x00100000
)

// macKeys are the virtual key codes of the named keys (HIToolbox Events.h).
var macKeys = map[keyName]int{
	kCtrl: 0x3B, kAlt: 0x3A, kShift: 0x38, kSuper: 0x37,
	kReturn: 0x24, kTab: 0x30, kEscape: 0x35, kBackSpace: 0x33, kDelete: 0x75, kInsert: 0x72,
	kHome: 0x73, kEnd: 0x77, kPageUp: 0x74, kPageDown: 0x79,
	kLeft: 0x7B, kRight: 0x7C, kUp: 0x7E, kDown: 0x7D, kSpace: 0x31,
	kF1: 0x7A, kF1 + 1: 0x78, kF1 + 2: 0x63, kF1 + 3: 0x76, kF1 + 4: 0x60, kF1 + 5: 0x61,
	kF1 + 6: 0x62, kF1 + 7: 0x64, kF1 + 8: 0x65, kF1 + 9: 0x6D, kF1 + 10: 0x67, kF1 + 11: 0x6F,
}

// macChars are the ANSI key codes of letters and digits (for shortcuts like cmd+c).
var macChars = map[rune]int{
	'a': 0x00, 's': 0x01, 'd': 0x02, 'f': 0x03, 'h': 0x04, 'g': 0x05, 'z': 0x06, 'x': 0x07, 'c': 0x08,
	'v': 0x09, 'b': 0x0B, 'q': 0x0C, 'w': 0x0D, 'e': 0x0E, 'r': 0x0F, 'y': 0x10, 't': 0x11, '1': 0x12,
	'2': 0x13, '3': 0x14, '4': 0x15, '6': 0x16, '5': 0x17, '=': 0x18, '9': 0x19, '7': 0x1A, '-': 0x1B,
	'8': 0x1C, '0': 0x1D, ']': 0x1E, 'o': 0x1F, 'u': 0x20, '[': 0x21, 'i': 0x22, 'p': 0x23, 'l': 0x25,
	'j': 0x26, '\'': 0x27, 'k': 0x28, ';': 0x29, '\\': 0x2A, ',': 0x2B, '/': 0x2C, 'n': 0x2D, 'm': 0x2E,
	'.': 0x2F, '`': 0x32,
}

type cgInjector struct{}

func newInjector() (injector, error) {
	if p := permission(); !p.Granted {
		return nil, fault.Unavailable("host input: %s; %s", p.Missing, p.HowToGrant)
	}
	return cgInjector{}, nil
}

func mouse(typ int, x, y, button, clicks int) {
	C.cubMouse(C.int(typ), C.double(x), C.double(y), C.int(button), C.int(clicks))
}

func downUp(button int) (int, int, int) {
	switch button {
	case 3:
		return evRightDown, evRightUp, 1
	case 2:
		return evOtherDown, evOtherUp, 2
	}
	return evLeftDown, evLeftUp, 0
}

func (cgInjector) move(x, y int) error { mouse(evMove, x, y, 0, 0); return nil }

func (cgInjector) click(x, y, button, count int) error {
	down, up, b := downUp(button)
	mouse(evMove, x, y, 0, 0)
	for i := 1; i <= count; i++ {
		mouse(down, x, y, b, i)
		mouse(up, x, y, b, i)
	}
	return nil
}

func (cgInjector) button(x, y, button int, pressed bool) error {
	down, up, b := downUp(button)
	if pressed {
		mouse(down, x, y, b, 1)
	} else {
		mouse(up, x, y, b, 1)
	}
	return nil
}

func (cgInjector) drag(x, y, toX, toY, button int) error {
	down, up, b := downUp(button)
	mouse(evMove, x, y, 0, 0)
	mouse(down, x, y, b, 1)
	const steps = 8
	for i := 1; i <= steps; i++ {
		mouse(evLeftDrag, x+(toX-x)*i/steps, y+(toY-y)*i/steps, b, 0)
		time.Sleep(5 * time.Millisecond) // let the window server see a drag, not a jump
	}
	mouse(up, toX, toY, b, 1)
	return nil
}

func (cgInjector) scroll(x, y, dx, dy int) error {
	mouse(evMove, x, y, 0, 0)
	C.cubScroll(C.int(-dy), C.int(-dx)) // positive dy means down; Quartz lines go up
	return nil
}

func (cgInjector) keys(spec string) error {
	for _, chord := range chords(spec) {
		var codes []int
		var flags uint64
		for _, name := range chord {
			k, r, ok := parseKey(name)
			if !ok {
				return errBadKey(name)
			}
			code, known := macKeys[k]
			if k == kNone {
				code, known = macChars[toLower(r)]
			}
			if !known {
				return errBadKey(name)
			}
			switch k {
			case kShift:
				flags |= flagShift
			case kCtrl:
				flags |= flagControl
			case kAlt:
				flags |= flagAlternat
			case kSuper:
				flags |= flagCommand
			}
			codes = append(codes, code)
		}
		for _, c := range codes {
			C.cubKey(C.int(c), 1, C.ulonglong(flags))
		}
		for i := len(codes) - 1; i >= 0; i-- {
			C.cubKey(C.int(codes[i]), 0, C.ulonglong(flags))
		}
	}
	return nil
}

func (cgInjector) typeText(text string) error {
	for _, r := range text {
		u := utf16.Encode([]rune{r})
		chars := make([]C.UniChar, len(u))
		for i, c := range u {
			chars[i] = C.UniChar(c)
		}
		C.cubUnicode(&chars[0], C.int(len(chars)))
	}
	return nil
}

func (cgInjector) close() error { return nil }

func toLower(r rune) rune {
	if r >= 'A' && r <= 'Z' {
		return r + 'a' - 'A'
	}
	return r
}

// permission checks the two macOS privacy permissions Cubicle needs for the host screen.
func permission() computer.Permission {
	var missing []string
	if C.cubScreenCaptureAllowed() == 0 {
		missing = append(missing, "Screen Recording")
	}
	if C.cubAccessibilityAllowed() == 0 {
		missing = append(missing, "Accessibility")
	}
	switch len(missing) {
	case 0:
		return computer.Permission{Granted: true}
	case 1:
		return computer.Permission{Missing: "macOS has not granted Cubicle the " + missing[0] + " permission",
			HowToGrant: "open System Settings → Privacy & Security → " + missing[0] + ", turn Cubicle on, then restart Cubicle"}
	}
	return computer.Permission{Missing: "macOS has not granted Cubicle the Screen Recording and Accessibility permissions",
		HowToGrant: "open System Settings → Privacy & Security → Screen Recording and → Accessibility, turn Cubicle on in both, then restart Cubicle"}
}
