package cli

import (
	"os"

	"golang.org/x/sys/windows"
)

// attachParentProcess is ATTACH_PARENT_PROCESS ((DWORD)-1) for AttachConsole.
const attachParentProcess = ^uint32(0)

// attachConsole gives a program built for the Windows GUI subsystem (the packaged app is, so
// that no console window opens with the desktop app) the console of the terminal that
// started it, so that `cubicle doctor`, `serve` and the others print there. Output that is
// already redirected stays where it goes; started from Explorer there is no console to
// attach, and nothing changes.
func attachConsole() {
	if h, err := windows.GetStdHandle(windows.STD_OUTPUT_HANDLE); err == nil && h != 0 && h != windows.InvalidHandle {
		return
	}
	attach := windows.NewLazySystemDLL("kernel32.dll").NewProc("AttachConsole")
	if attach.Find() != nil {
		return
	}
	if r, _, _ := attach.Call(uintptr(attachParentProcess)); r == 0 {
		return
	}
	if out, err := os.OpenFile("CONOUT$", os.O_WRONLY, 0); err == nil {
		os.Stdout, os.Stderr = out, out
	}
}
