//go:build linux

package hostdesk

import (
	"errors"
	"fmt"
	"os"

	"github.com/jezek/xgb"
	"github.com/jezek/xgb/xinerama"
	"github.com/jezek/xgb/xtest"

	"cubicle/backend/computer"
	"cubicle/backend/fault"
	"cubicle/images/guest/x11"
)

// On Linux the host's screen is the X display of $DISPLAY: captured by kbinani/screenshot
// (which needs Xinerama) and driven with XTEST through the desktop driver's own X11 code.

// x11Injector sends input through XTEST on one persistent X connection.
type x11Injector struct{ d *x11.Display }

func newInjector() (injector, error) {
	if p := permission(); !p.Granted {
		return nil, fault.Unavailable("host input: %s; %s", p.Missing, p.HowToGrant)
	}
	d, err := x11.Open(os.Getenv("DISPLAY"))
	if err != nil {
		return nil, fault.Unavailable("host input: %v", err)
	}
	return x11Injector{d: d}, nil
}

func (j x11Injector) move(x, y int) error                 { return j.d.Move(x, y) }
func (j x11Injector) click(x, y, button, count int) error { return j.d.Click(x, y, button, count) }
func (j x11Injector) button(x, y, button int, down bool) error {
	return j.d.Button(x, y, button, down)
}
func (j x11Injector) drag(x, y, toX, toY, button int) error { return j.d.Drag(x, y, toX, toY, button) }
func (j x11Injector) scroll(x, y, dx, dy int) error         { return j.d.Scroll(x, y, dx, dy) }
func (j x11Injector) typeText(text string) error            { return j.d.Type(text) }
func (j x11Injector) close() error                          { return j.d.Close() }

func (j x11Injector) keys(spec string) error {
	err := j.d.Keys(spec)
	var bad x11.ErrBadKey
	if errors.As(err, &bad) {
		return fault.Invalid("%s", bad.Error())
	}
	return err
}

// permission checks for a usable X display: $DISPLAY set, not a Wayland session, reachable,
// with the XTEST (input) and Xinerama (capture of each display) extensions.
func permission() computer.Permission {
	if os.Getenv("XDG_SESSION_TYPE") == "wayland" {
		return computer.Permission{Missing: "this is a Wayland session, and Cubicle sees and controls the screen through X11",
			HowToGrant: "log in with an X11 (Xorg) session, or use a Local VM instead"}
	}
	display := os.Getenv("DISPLAY")
	if display == "" {
		return computer.Permission{Missing: "there is no graphical session ($DISPLAY is not set for the Cubicle process)",
			HowToGrant: "run Cubicle inside the desktop session you want it to control (or set DISPLAY for it)"}
	}
	c, err := xgb.NewConnDisplay(display)
	if err != nil {
		return computer.Permission{Missing: fmt.Sprintf("the X display %s cannot be reached (%v)", display, err),
			HowToGrant: "start the desktop session, or allow this user on the display (xhost +si:localuser:$USER)"}
	}
	defer c.Close()
	if err := xtest.Init(c); err != nil {
		return computer.Permission{Missing: fmt.Sprintf("the X display %s lacks the XTEST extension, so input cannot be sent", display),
			HowToGrant: "enable XTEST in the X server (it is on by default in Xorg)"}
	}
	if err := xinerama.Init(c); err != nil {
		return computer.Permission{Missing: fmt.Sprintf("the X display %s lacks the Xinerama extension, so its displays cannot be listed", display),
			HowToGrant: "enable Xinerama in the X server (Xorg and Xvfb +xinerama have it)"}
	}
	return computer.Permission{Granted: true}
}
