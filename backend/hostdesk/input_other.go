//go:build !linux && !darwin && !windows

package hostdesk

import (
	"runtime"

	"cubicle/backend/computer"
	"cubicle/backend/fault"
)

func newInjector() (injector, error) {
	return nil, fault.Unavailable("host input: %v (%s)", errNoInput, runtime.GOOS)
}

func permission() computer.Permission {
	return computer.Permission{Missing: "host screen control is not supported on " + runtime.GOOS,
		HowToGrant: "use a Local VM instead"}
}
