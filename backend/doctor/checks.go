package doctor

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"time"

	"cubicle/backend/engine"
	"cubicle/backend/link"
)

// Discover lists the engines of this machine (engineconn.DiscoverEngines, which also probes
// ssh:// endpoints; engine.Discover otherwise).
type Discover func(ctx context.Context, opts engine.DiscoverOptions) ([]engine.Endpoint, error)

// Engine checks for a container engine Cubicle can drive. prefer is CUBICLE_ENGINE ("" =
// any); discover nil means engine.Discover. The check carries every endpoint it probed
// (Check.Engines), which Run lists in the report.
func Engine(prefer string, getenv func(string) string, discover Discover) Checker {
	if discover == nil {
		discover = engine.Discover
	}
	return func(ctx context.Context) []Check {
		c := Check{Name: "container engine", Required: true}
		kind, err := engine.ParseKind(prefer)
		if err != nil {
			c.Status, c.Detail, c.Fix = Fail, "CUBICLE_ENGINE: "+err.Error(), "set CUBICLE_ENGINE to podman or docker, or unset it"
			return []Check{c}
		}
		eps, err := discover(ctx, engine.DiscoverOptions{Prefer: kind, Getenv: getenv, Timeout: 10 * time.Second})
		c.Engines = eps
		if err != nil {
			c.Status, c.Detail = Fail, "checking engines: "+err.Error()
			return []Check{c}
		}
		if ep, ok := engine.Pick(eps); ok {
			mode := "rootful"
			if ep.Rootless {
				mode = "rootless"
			}
			where := ""
			switch {
			case ep.Remote:
				where = ", on another machine"
			case ep.VM:
				where = ", in a VM"
			}
			c.Status, c.Detail = OK, fmt.Sprintf("%s %s running, %s%s, socket %s (%s)", ep.Kind, ep.Version, mode, where, ep.Socket, ep.Source)
			return []Check{c}
		}
		for _, ep := range eps {
			if ep.Kind == engine.Podman && ep.CLI != "" && runtime.GOOS == "linux" {
				c.Status = Warn
				c.Detail = fmt.Sprintf("podman is installed (%s) but its API service does not answer (%s); Cubicle starts and owns one when it needs it", ep.CLI, ep.Err)
				c.Fix = ep.Fix
				return []Check{c}
			}
		}
		c.Status = Fail
		var tried []string
		for _, ep := range eps {
			tried = append(tried, ep.Describe())
		}
		c.Detail = "no Podman or Docker found (" + strings.Join(tried, "; ") + ")"
		c.Fix = installHint()
		for _, ep := range eps {
			if ep.CLI != "" && ep.Fix != "" {
				c.Fix = ep.Fix
				break
			}
		}
		return []Check{c}
	}
}

func installHint() string {
	rel, _ := os.ReadFile("/etc/os-release")
	return InstallHint(runtime.GOOS, string(rel))
}

// InstallHint says exactly what to install for a container engine on goos; on Linux
// osRelease (the text of /etc/os-release) picks the distribution's package command.
func InstallHint(goos, osRelease string) string {
	switch goos {
	case "darwin":
		return "install Podman Desktop (https://podman-desktop.io) or Docker Desktop and start it; with Homebrew: brew install podman && podman machine init && podman machine start"
	case "windows":
		return "install Podman Desktop (https://podman-desktop.io) or Docker Desktop and start it; with winget: winget install RedHat.Podman"
	}
	ids := map[string]bool{}
	for _, line := range strings.Split(osRelease, "\n") {
		k, v, ok := strings.Cut(strings.TrimSpace(line), "=")
		if !ok || (k != "ID" && k != "ID_LIKE") {
			continue
		}
		for _, id := range strings.Fields(strings.Trim(v, `"'`)) {
			ids[id] = true
		}
	}
	switch {
	case ids["debian"] || ids["ubuntu"]:
		return "sudo apt-get install -y podman"
	case ids["fedora"] || ids["rhel"] || ids["centos"]:
		return "sudo dnf install -y podman"
	case ids["arch"]:
		return "sudo pacman -S podman"
	case ids["opensuse"] || ids["suse"] || ids["sles"]:
		return "sudo zypper install podman"
	case ids["alpine"]:
		return "sudo apk add podman"
	}
	return "install your distribution's podman package (or Docker), e.g. sudo apt-get install podman on Debian or Ubuntu"
}

// Display checks whether a desktop window can open (the desktop app needs one; `serve` does not).
func Display(getenv func(string) string) Checker {
	return func(ctx context.Context) []Check {
		c := Check{Name: "display"}
		if runtime.GOOS != "linux" {
			c.Status, c.Detail = OK, "native window system"
			return []Check{c}
		}
		if w := getenv("WAYLAND_DISPLAY"); w != "" {
			dir := getenv("XDG_RUNTIME_DIR")
			path := w
			if !filepath.IsAbs(w) {
				path = filepath.Join(dir, w)
			}
			if reachable(ctx, path) {
				c.Status, c.Detail = OK, "Wayland display "+w
				return []Check{c}
			}
		}
		d := getenv("DISPLAY")
		if d == "" {
			c.Status, c.Detail, c.Fix = Warn, "no display (DISPLAY is unset): the desktop app cannot open a window; `cubicle serve` works", "run Cubicle inside a desktop session, or use `cubicle serve`"
			return []Check{c}
		}
		if path, ok := x11Socket(d); ok && !reachable(ctx, path) {
			c.Status, c.Detail, c.Fix = Warn, "DISPLAY="+d+" but no X server answers at "+path, "start the X server, or use `cubicle serve`"
			return []Check{c}
		}
		c.Status, c.Detail = OK, "X display "+d
		return []Check{c}
	}
}

// x11Socket returns the local socket of a display such as ":0" or ":1.0"; false for remote
// displays ("host:0"), which are not probed.
func x11Socket(display string) (string, bool) {
	if !strings.HasPrefix(display, ":") {
		return "", false
	}
	n := strings.SplitN(display[1:], ".", 2)[0]
	return "/tmp/.X11-unix/X" + n, true
}

func reachable(ctx context.Context, path string) bool {
	d := net.Dialer{Timeout: 500 * time.Millisecond}
	conn, err := d.DialContext(ctx, "unix", path)
	if err != nil {
		return false
	}
	conn.Close()
	return true
}

// DataDir checks that the data directory exists or can be made, and is writable.
func DataDir(dir string) Checker {
	return func(ctx context.Context) []Check {
		c := Check{Name: "data directory", Required: true}
		if err := os.MkdirAll(dir, 0o700); err != nil {
			c.Status, c.Detail, c.Fix = Fail, err.Error(), "choose a writable directory with --data-dir or CUBICLE_DATA_DIR"
			return []Check{c}
		}
		f, err := os.CreateTemp(dir, ".doctor-*")
		if err != nil {
			c.Status, c.Detail, c.Fix = Fail, dir+" is not writable: "+err.Error(), "fix its permissions or choose another with --data-dir"
			return []Check{c}
		}
		f.Close()
		os.Remove(f.Name())
		c.Status, c.Detail = OK, dir
		return []Check{c}
	}
}

// Version reports the program's version.
func Version(v string) Checker {
	return func(ctx context.Context) []Check {
		return []Check{{Name: "version", Status: OK, Detail: fmt.Sprintf("cubicle %s (%s %s/%s)", v, runtime.Version(), runtime.GOOS, runtime.GOARCH)}}
	}
}

// GuestLink says how new desktops' drivers will be reached (CUBICLE_GUEST_LINK, see
// backend/link) and why: the unix socket for a local Linux engine, the exec link for a
// remote or VM-backed one. mode is the variable's value; discover nil means engine.Discover.
func GuestLink(mode string, getenv func(string) string, discover Discover) Checker {
	if discover == nil {
		discover = engine.Discover
	}
	return func(ctx context.Context) []Check {
		c := Check{Name: "guest link"}
		m, err := link.ParseMode(mode)
		if err != nil {
			c.Status, c.Detail, c.Fix = Fail, err.Error(), "set "+link.EnvVar+" to auto, socket or exec, or unset it"
			return []Check{c}
		}
		kind, _ := engine.ParseKind(getenv("CUBICLE_ENGINE"))
		eps, _ := discover(ctx, engine.DiscoverOptions{Prefer: kind, Getenv: getenv, Timeout: 10 * time.Second})
		ep, ok := engine.Pick(eps)
		if !ok {
			c.Status = Warn
			c.Detail = fmt.Sprintf("%s=%s; no engine answers yet, so the link is chosen when one does", link.EnvVar, m)
			if m != link.Auto || runtime.GOOS != "linux" {
				// Forced, or off Linux where every engine runs its containers in a VM: the
				// choice does not depend on which engine answers.
				ch := link.Choose(m, link.Engine{GOOS: runtime.GOOS})
				c.Detail = "no engine answers yet; new desktops will use the " + ch.Primary + " link: " + ch.Reason
			}
			return []Check{c}
		}
		le := link.Engine{GOOS: runtime.GOOS, Socket: ep.Socket, Remote: ep.Remote, VM: ep.VM}
		ch := link.Choose(m, le)
		c.Status = OK
		c.Detail = "new desktops use the " + ch.Primary + " link"
		if ch.Fallback != "" {
			c.Detail += " (the " + ch.Fallback + " link if a desktop's socket does not answer)"
		}
		c.Detail += ": " + ch.Reason
		if m == link.SocketMode && ch.Primary == link.NameSocket && link.Choose(link.Auto, le).Primary == link.NameExec {
			c.Status = Warn
			c.Fix = "this engine's containers cannot share this host's sockets: unset " + link.EnvVar + " (or set it to exec)"
		}
		return []Check{c}
	}
}
