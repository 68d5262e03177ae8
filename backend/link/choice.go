package link

import (
	"fmt"
	"net/url"
	"strings"
)

// Mode is the CUBICLE_GUEST_LINK setting.
type Mode string

// The modes: Auto picks per engine (see Choose); Socket and Exec force one transport.
const (
	Auto       Mode = "auto"
	SocketMode Mode = "socket"
	ExecMode   Mode = "exec"
)

// EnvVar is the environment variable that sets the mode.
const EnvVar = "CUBICLE_GUEST_LINK"

// ParseMode reads a mode; "" is Auto.
func ParseMode(s string) (Mode, error) {
	switch m := Mode(strings.ToLower(strings.TrimSpace(s))); m {
	case "":
		return Auto, nil
	case Auto, SocketMode, ExecMode:
		return m, nil
	}
	return "", fmt.Errorf("%s=%q: want auto, socket or exec", EnvVar, s)
}

// Engine describes the engine a choice is made for.
type Engine struct {
	GOOS   string // the OS Cubicle runs on (runtime.GOOS)
	Socket string // the engine's API endpoint: unix:///…, tcp://…, ssh://…, npipe://…
	// OperatingSystem is what the engine reports about its host ("Docker Desktop", "Debian
	// GNU/Linux 12 (bookworm)"); "" when unknown.
	OperatingSystem string
	// Remote and VM are what engine discovery knows about the endpoint (engine.Endpoint):
	// reached over the network, or running its containers in a VM on this machine (Docker
	// Desktop, Podman machine, Colima, OrbStack, Rancher Desktop). Either means exec.
	Remote, VM bool
}

// Choice is how new desktops are reached and why.
type Choice struct {
	Mode     Mode   `json:"mode"`
	Primary  string `json:"transport"`          // NameSocket or NameExec
	Fallback string `json:"fallback,omitempty"` // NameExec when a failing socket falls back to it
	// Mount says whether desktops get the run-directory bind mount (the socket needs it; the
	// exec link does not, so without it a desktop has no host mount at all).
	Mount  bool   `json:"mount"`
	Reason string `json:"reason"`
}

// vmSockets are path fragments of engine sockets that forward into a VM.
var vmSockets = []string{"/.docker/desktop/", "/.docker/run/", "/podman/machine/", "/.colima/", "/.lima/", "/.orbstack/", "/.rd/"}

// Choose decides how desktops on engine e are reached under mode. Auto uses the exec link
// whenever the engine's containers cannot share this host's file system: Cubicle not on
// Linux (the engine runs in a VM), a remote engine (tcp://, ssh://), or a VM-backed engine
// (Docker Desktop, Podman machine, Colima, Lima, OrbStack, Rancher Desktop); otherwise the
// socket, falling back to the exec link when a desktop's socket does not answer.
func Choose(mode Mode, e Engine) Choice {
	switch mode {
	case SocketMode:
		return Choice{Mode: mode, Primary: NameSocket, Mount: true, Reason: EnvVar + "=socket"}
	case ExecMode:
		return Choice{Mode: mode, Primary: NameExec, Reason: EnvVar + "=exec (no host mount)"}
	}
	exec := func(why string) Choice { return Choice{Mode: Auto, Primary: NameExec, Reason: why} }
	if e.GOOS != "" && e.GOOS != "linux" {
		return exec(fmt.Sprintf("Cubicle runs on %s: the engine's containers live in a Linux VM whose sockets this host cannot open", e.GOOS))
	}
	u, err := url.Parse(e.Socket)
	if e.Remote || err != nil || (u.Scheme != "unix" && u.Scheme != "") {
		return exec(fmt.Sprintf("the engine is remote (%s): its containers do not share this host's files", e.Socket))
	}
	if e.VM {
		return exec(fmt.Sprintf("the engine (%s) runs its containers in a VM", e.Socket))
	}
	if strings.Contains(strings.ToLower(e.OperatingSystem), "docker desktop") {
		return exec("the engine is Docker Desktop: its containers live in a VM")
	}
	for _, frag := range vmSockets {
		if strings.Contains(u.Path, frag) {
			return exec(fmt.Sprintf("the engine's socket %s forwards into a VM", u.Path))
		}
	}
	return Choice{Mode: Auto, Primary: NameSocket, Fallback: NameExec, Mount: true,
		Reason: "a local Linux engine: its containers share this host's files"}
}
