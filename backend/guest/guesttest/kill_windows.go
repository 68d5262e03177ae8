package guesttest

import "os"

// killAndWait kills process pid and waits for it to end. The driver and its X server only
// run on Linux; this keeps the package building for Windows, where its tests are compiled.
func killAndWait(pid int) {
	if p, err := os.FindProcess(pid); err == nil {
		p.Kill()
		p.Wait()
	}
}
