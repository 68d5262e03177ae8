//go:build !desktop

package app

import (
	"context"

	"cubicle/backend/cli"
	"cubicle/backend/fault"
)

// run is the desktop shell of a binary built without the desktop tag: there is no window
// to show, so it says how to get one or how to use Cubicle without it.
// built reports whether this binary contains the desktop shell.
const built = false

func run(context.Context, cli.Desktop) error {
	return fault.Unavailable("desktop app: this cubicle binary was built without the desktop shell; " +
		"run `cubicle serve` and open the printed URL in a browser, or build the desktop app with `make build`")
}
