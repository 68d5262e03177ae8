//go:build darwin && !cgo

package hostdesk

import (
	"cubicle/backend/computer"
	"cubicle/backend/fault"
)

// Without cgo a macOS build can neither capture the screen nor send Quartz events.

func newInjector() (injector, error) {
	return nil, fault.Unavailable("host input: this build of Cubicle has no cgo, which macOS screen control needs")
}

func permission() computer.Permission {
	return computer.Permission{Missing: "this build of Cubicle was made without cgo, which macOS screen capture and input need",
		HowToGrant: "use the desktop app's build (made with cgo), or a Local VM"}
}
