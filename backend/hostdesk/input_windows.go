//go:build windows

package hostdesk

import (
	"fmt"
	"time"
	"unicode/utf16"
	"unsafe"

	"golang.org/x/sys/windows"

	"cubicle/backend/computer"
	"cubicle/backend/fault"
)

// On Windows input goes through SendInput of user32.dll (no cgo), which works on the
// interactive desktop of the session Cubicle runs in.

var (
	user32               = windows.NewLazySystemDLL("user32.dll")
	procSendInput        = user32.NewProc("SendInput")
	procSetCursorPos     = user32.NewProc("SetCursorPos")
	procOpenInputDesktop = user32.NewProc("OpenInputDesktop")
	procCloseDesktop     = user32.NewProc("CloseDesktop")
	procVkKeyScanW       = user32.NewProc("VkKeyScanW")
)

const (
	inputMouse    = 0
	inputKeyboard = 1

	mouseLeftDown   = 0x0002
	mouseLeftUp     = 0x0004
	mouseRightDown  = 0x0008
	mouseRightUp    = 0x0010
	mouseMiddleDown = 0x0020
	mouseMiddleUp   = 0x0040
	mouseWheel      = 0x0800
	mouseHWheel     = 0x1000
	wheelDelta      = 120

	keyUp      = 0x0002
	keyUnicode = 0x0004
)

// mouseInput and keybdInput are MOUSEINPUT and KEYBDINPUT; input is INPUT (its union is as
// large as MOUSEINPUT, the largest member).
type mouseInput struct {
	dx, dy      int32
	mouseData   uint32
	flags       uint32
	time        uint32
	dwExtraInfo uintptr
}

type keybdInput struct {
	vk, scan    uint16
	flags       uint32
	time        uint32
	dwExtraInfo uintptr
	_           [8]byte // pad to the size of mouseInput
}

type input struct {
	typ   uint32
	_     [4]byte // the union is pointer-aligned
	union [unsafe.Sizeof(mouseInput{})]byte
}

func mouseEv(flags, data uint32) input {
	in := input{typ: inputMouse}
	*(*mouseInput)(unsafe.Pointer(&in.union)) = mouseInput{flags: flags, mouseData: data}
	return in
}

func keyEv(vk, scan uint16, flags uint32) input {
	in := input{typ: inputKeyboard}
	*(*keybdInput)(unsafe.Pointer(&in.union)) = keybdInput{vk: vk, scan: scan, flags: flags}
	return in
}

func send(ins ...input) error {
	if len(ins) == 0 {
		return nil
	}
	n, _, err := procSendInput.Call(uintptr(len(ins)), uintptr(unsafe.Pointer(&ins[0])), unsafe.Sizeof(ins[0]))
	if int(n) != len(ins) {
		return fmt.Errorf("SendInput sent %d of %d events: %v (is the desktop locked?)", n, len(ins), err)
	}
	return nil
}

func moveTo(x, y int) error {
	if r, _, err := procSetCursorPos.Call(uintptr(int32(x)), uintptr(int32(y))); r == 0 {
		return fmt.Errorf("SetCursorPos: %v", err)
	}
	return nil
}

type winInjector struct{}

func newInjector() (injector, error) {
	if p := permission(); !p.Granted {
		return nil, fault.Unavailable("host input: %s; %s", p.Missing, p.HowToGrant)
	}
	return winInjector{}, nil
}

func buttons(button int) (uint32, uint32) {
	switch button {
	case 3:
		return mouseRightDown, mouseRightUp
	case 2:
		return mouseMiddleDown, mouseMiddleUp
	}
	return mouseLeftDown, mouseLeftUp
}

func (winInjector) move(x, y int) error { return moveTo(x, y) }

func (winInjector) click(x, y, button, count int) error {
	if err := moveTo(x, y); err != nil {
		return err
	}
	down, up := buttons(button)
	var ins []input
	for i := 0; i < count; i++ {
		ins = append(ins, mouseEv(down, 0), mouseEv(up, 0))
	}
	return send(ins...)
}

func (winInjector) button(x, y, button int, pressed bool) error {
	if err := moveTo(x, y); err != nil {
		return err
	}
	down, up := buttons(button)
	if pressed {
		return send(mouseEv(down, 0))
	}
	return send(mouseEv(up, 0))
}

func (winInjector) drag(x, y, toX, toY, button int) error {
	down, up := buttons(button)
	if err := moveTo(x, y); err != nil {
		return err
	}
	if err := send(mouseEv(down, 0)); err != nil {
		return err
	}
	const steps = 8
	for i := 1; i <= steps; i++ {
		moveTo(x+(toX-x)*i/steps, y+(toY-y)*i/steps)
		time.Sleep(5 * time.Millisecond)
	}
	return send(mouseEv(up, 0))
}

func (winInjector) scroll(x, y, dx, dy int) error {
	if err := moveTo(x, y); err != nil {
		return err
	}
	var ins []input
	if dy != 0 {
		ins = append(ins, mouseEv(mouseWheel, uint32(int32(-dy*wheelDelta))))
	}
	if dx != 0 {
		ins = append(ins, mouseEv(mouseHWheel, uint32(int32(dx*wheelDelta))))
	}
	return send(ins...)
}

// winKeys are the virtual-key codes of the named keys.
var winKeys = map[keyName]uint16{
	kCtrl: 0x11, kAlt: 0x12, kShift: 0x10, kSuper: 0x5B,
	kReturn: 0x0D, kTab: 0x09, kEscape: 0x1B, kBackSpace: 0x08, kDelete: 0x2E, kInsert: 0x2D,
	kHome: 0x24, kEnd: 0x23, kPageUp: 0x21, kPageDown: 0x22,
	kLeft: 0x25, kRight: 0x27, kUp: 0x26, kDown: 0x28, kSpace: 0x20,
}

func init() {
	for i := 0; i < 12; i++ {
		winKeys[kF1+keyName(i)] = uint16(0x70 + i)
	}
}

func (winInjector) keys(spec string) error {
	for _, chord := range chords(spec) {
		var vks []uint16
		for _, name := range chord {
			k, r, ok := parseKey(name)
			if !ok {
				return errBadKey(name)
			}
			vk, known := winKeys[k]
			if k == kNone {
				res, _, _ := procVkKeyScanW.Call(uintptr(r))
				if int16(res) == -1 {
					return errBadKey(name)
				}
				vk, known = uint16(res&0xff), true
			}
			if !known {
				return errBadKey(name)
			}
			vks = append(vks, vk)
		}
		var ins []input
		for _, vk := range vks {
			ins = append(ins, keyEv(vk, 0, 0))
		}
		for i := len(vks) - 1; i >= 0; i-- {
			ins = append(ins, keyEv(vks[i], 0, keyUp))
		}
		if err := send(ins...); err != nil {
			return err
		}
	}
	return nil
}

func (winInjector) typeText(text string) error {
	var ins []input
	for _, u := range utf16.Encode([]rune(text)) {
		ins = append(ins, keyEv(0, u, keyUnicode), keyEv(0, u, keyUnicode|keyUp))
	}
	return send(ins...)
}

func (winInjector) close() error { return nil }

// permission checks that the process runs on an interactive desktop (not as a service in
// session 0, and not behind a locked screen).
func permission() computer.Permission {
	const desktopReadObjects = 0x0001
	h, _, err := procOpenInputDesktop.Call(0, 0, desktopReadObjects)
	if h == 0 {
		return computer.Permission{Missing: fmt.Sprintf("Cubicle has no interactive desktop (%v): it runs as a service or the screen is locked", err),
			HowToGrant: "run Cubicle in the signed-in user's session and unlock the screen"}
	}
	procCloseDesktop.Call(h)
	return computer.Permission{Granted: true}
}
