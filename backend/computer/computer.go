// Package computer decides, once per chat turn, which computer an agent works on and which
// tool families it is offered (SPEC §1.6, §7). [Decide] is the single gate: every place that
// offers or runs a computer tool (the toolbox's tool list, each call, the confirmation card,
// the computer panel) asks the [Plan] it returns, so a new rule — an admin's host grant per
// account and node, a cloud node — is added here once.
//
//	selected  → what the turn gets
//	none      → no computer tools
//	vm        → computer_* on the agent's Local VM; host_* and computer_copy_file when
//	            "Allow host environment" is on, the node runs host tools and host access is granted
//	cloud     → until a cloud node exists: no computer, every computer call refused with a clear error
//	            (never a silent Local VM); host tools as for vm
//	host      → host_shell/read/write_file; host desktop tools (host_screenshot and input) only
//	            when the admin enabled "Host screen control" for the node and the OS allows it
//	browser   → browser_* on the agent's own Chromium
//	auto      → vm when the agent's image is prepared and capacity allows, else browser; never host
//
// A temporary task helper gets at most the computer_* tools of its task desktop, never host or
// browser tools. The package is pure: no I/O, safe for concurrent use.
package computer

import (
	"fmt"
	"slices"
	"strings"
)

// Kind is a computer type (store.Agent.Computer).
type Kind string

// The computer types, in display order.
const (
	VM      Kind = "vm"
	Cloud   Kind = "cloud"
	Host    Kind = "host"
	Browser Kind = "browser"
	Auto    Kind = "auto"
	None    Kind = "none"
)

// Kinds lists the computer types in display order.
var Kinds = []Kind{VM, Cloud, Host, Browser, Auto, None}

// Parse reads a stored computer type; "" is None, "hybrid" (a legacy record) is VM. ok is
// false for anything else.
func Parse(s string) (Kind, bool) {
	switch k := Kind(strings.TrimSpace(s)); k {
	case "":
		return None, true
	case "hybrid":
		return VM, true
	case VM, Cloud, Host, Browser, Auto, None:
		return k, true
	}
	return None, false
}

// Label is the computer type's name as the panel shows it.
func (k Kind) Label() string {
	switch k {
	case VM:
		return "Local VM"
	case Cloud:
		return "Cloud"
	case Host:
		return "Host"
	case Browser:
		return "Browser only"
	case Auto:
		return "Auto"
	}
	return "No computer"
}

// CapHostTools is the capability a node advertises when it can run host tools (SPEC §1.6).
const CapHostTools = "host-computer-tools-v1"

// CapHostDesktop is the capability a node advertises when it can run host desktop tools.
const CapHostDesktop = "host-desktop-tools-v1"

// Tool families.
const (
	PrefixVM      = "computer_"
	PrefixHost    = "host_"
	PrefixBrowser = "browser_"
	// ToolCopy copies files between the host and the VM: it needs both.
	ToolCopy = "computer_copy_file"
)

// HostDesktopTools are the host desktop tools (screen and input of the node's own display).
var HostDesktopTools = []string{"host_screenshot", "host_click", "host_type", "host_key", "host_scroll"}

// IsHostDesktop reports whether tool acts on the host's screen or input.
func IsHostDesktop(tool string) bool { return slices.Contains(HostDesktopTools, tool) }

// Permission is what the operating system allows the execution node's process to do with its
// screen: capture it and send input. Missing and HowToGrant explain a refusal to people.
type Permission struct {
	Granted    bool   `json:"granted"`
	Missing    string `json:"missing,omitempty"`    // what is not allowed, e.g. "Screen Recording permission"
	HowToGrant string `json:"howToGrant,omitempty"` // what to do about it
}

// Node is what the gate needs to know about the execution node a turn runs on.
type Node struct {
	ID   string
	Caps []string // advertised capabilities (CapHostTools, CapHostDesktop)
	// HostScreenControl is the admin's node setting "Host screen control".
	HostScreenControl bool
	// Screen is what the OS of the node allows (display present, permissions granted).
	Screen Permission
	// Cloud reports whether a cloud node serves this account (none exists yet).
	Cloud bool
}

func (n Node) has(c string) bool { return slices.Contains(n.Caps, c) }

// Grant says whether host access (host tools, host desktop tools) is granted to the turn's
// account on its node (SPEC §3: "granted by an admin per account and execution node"). The
// zero value grants it, which is what a node without grants does; Reason explains a refusal.
type Grant struct {
	Denied bool
	// DesktopDenied withholds the host desktop tools only (a grant of host tools without the
	// host screen).
	DesktopDenied bool
	Reason        string
}

// Input is everything the gate decides from.
type Input struct {
	Selected  string // the agent's computer (store.Agent.Computer)
	AllowHost bool   // "Allow host environment" (only meaningful next to vm and cloud)
	Helper    bool   // a temporary task helper's turn
	Node      Node
	Grant     Grant
	// VMReady is asked only for auto: whether the agent's Local VM can be used this turn (its
	// image is prepared and a desktop slot is free or its desktop already runs), and if not, why.
	VMReady func() (ok bool, why string)
}

// Plan is what one turn works with. Its zero value offers nothing.
type Plan struct {
	Selected Kind `json:"selected"` // what the agent chose
	Kind     Kind `json:"computer"` // what the turn uses: vm, cloud, host, browser or none
	// Reason says why auto chose Kind, or why the selected computer is unavailable.
	Reason string `json:"reason,omitempty"`
	// Unavailable is set when the selected computer cannot be used at all (cloud without a
	// cloud node): every computer call is refused with Reason.
	Unavailable bool `json:"unavailable,omitempty"`

	VM          bool `json:"vm"`          // computer_* (except computer_copy_file)
	Host        bool `json:"host"`        // host_shell, host_read_file, host_write_file
	HostDesktop bool `json:"hostDesktop"` // host_screenshot and host input
	Copy        bool `json:"copy"`        // computer_copy_file
	Browser     bool `json:"browser"`     // browser_*
	// HostProblem says why host tools are not offered although the computer wants them.
	HostProblem string `json:"hostProblem,omitempty"`
	// HostDesktopProblem says why host desktop tools are not offered to a host computer (and
	// how to fix it).
	HostDesktopProblem string `json:"hostDesktopProblem,omitempty"`
	Helper             bool   `json:"-"`
}

// Decide is the gate: the plan of one turn.
func Decide(in Input) Plan {
	sel, ok := Parse(in.Selected)
	if !ok {
		return Plan{Selected: None, Kind: None, Unavailable: true,
			Reason: fmt.Sprintf("the agent's computer %q is not a known type; choose one in the computer panel", in.Selected)}
	}
	p := Plan{Selected: sel, Kind: sel, Helper: in.Helper}
	switch sel {
	case None:
	case VM:
		p.VM = true
		p.hostTools(in, in.AllowHost)
		p.Copy = p.Host
	case Cloud:
		if !in.Node.Cloud {
			p.Kind, p.Unavailable = None, true
			p.Reason = "this agent's computer is Cloud, but no cloud execution node is connected to this server; " +
				"choose Local VM (or another computer) in the computer panel, or connect a cloud runner"
		}
		p.hostTools(in, in.AllowHost)
	case Host:
		p.hostTools(in, true)
		if p.Host {
			p.hostDesktop(in)
		}
	case Browser:
		p.Browser = true
	case Auto:
		ok, why := false, "the Local VM cannot be checked"
		if in.VMReady != nil {
			ok, why = in.VMReady()
		}
		if ok {
			p.Kind, p.VM = VM, true
			p.Reason = "auto chose the Local VM: its image is prepared and a desktop slot is free"
		} else {
			p.Kind, p.Browser = Browser, true
			p.Reason = "auto chose Browser only: " + why
		}
	}
	if in.Helper {
		p = p.ForHelper()
	}
	return p
}

// ForHelper is the plan of a temporary task helper working for a turn with plan p: at most the
// computer_* tools of its task desktop (when the turn runs on a Local VM), never host, browser
// or copy tools (SPEC §1.6: helpers do not inherit host tools).
func (p Plan) ForHelper() Plan {
	return Plan{Selected: p.Selected, Kind: p.Kind, Reason: p.Reason, Unavailable: p.Unavailable, VM: p.VM, Helper: true}
}

func (p *Plan) hostTools(in Input, wanted bool) {
	switch {
	case !wanted:
	case !in.Node.has(CapHostTools):
		p.HostProblem = fmt.Sprintf("this execution node does not offer host tools (capability %s); update its runner", CapHostTools)
	case in.Grant.Denied:
		p.HostProblem = "host access is not granted to this account on this execution node"
		if in.Grant.Reason != "" {
			p.HostProblem = in.Grant.Reason
		}
	default:
		p.Host = true
	}
}

func (p *Plan) hostDesktop(in Input) {
	switch {
	case in.Grant.DesktopDenied:
		p.HostDesktopProblem = "host screen control is not granted to this account on this execution node: an administrator " +
			"grants it in Settings → Users; host command and file tools still work"
	case !in.Node.has(CapHostDesktop):
		p.HostDesktopProblem = fmt.Sprintf("this execution node cannot control its screen (capability %s); update its runner", CapHostDesktop)
	case !in.Node.HostScreenControl:
		p.HostDesktopProblem = "\"Host screen control\" is off for this execution node: an admin turns it on in " +
			"Settings → Host; host command and file tools still work"
	case !in.Node.Screen.Granted:
		p.HostDesktopProblem = "the host's screen cannot be used: " + in.Node.Screen.Missing
		if in.Node.Screen.HowToGrant != "" {
			p.HostDesktopProblem += "; " + in.Node.Screen.HowToGrant
		}
		p.HostDesktopProblem += "; host command and file tools still work"
	default:
		p.HostDesktop = true
	}
}

// Offers reports whether the plan offers tool.
func (p Plan) Offers(tool string) bool {
	return p.Check(tool) == ""
}

// Check returns "" when the plan offers tool, else why not in words for the model and the
// person (what to use instead, or what to change).
func (p Plan) Check(tool string) string {
	switch {
	case tool == ToolCopy:
		if p.Copy {
			return ""
		}
		if p.Helper {
			return tool + " is not available to a task helper: helpers never get host tools; use the computer_* tools of the task desktop"
		}
		if !p.VM {
			return p.notHere(tool)
		}
		return p.hostRefusal(tool)
	case strings.HasPrefix(tool, PrefixVM):
		if p.VM {
			return ""
		}
		return p.notHere(tool)
	case IsHostDesktop(tool):
		if p.HostDesktop {
			return ""
		}
		if p.Helper {
			return tool + " is not available to a task helper: helpers never get host tools; use the computer_* tools of the task desktop"
		}
		if p.Kind == Host && p.Host {
			return tool + " is not available: " + p.HostDesktopProblem
		}
		if p.Kind == Host {
			return p.hostRefusal(tool)
		}
		return p.notHere(tool)
	case strings.HasPrefix(tool, PrefixHost):
		if p.Host {
			return ""
		}
		if p.Helper {
			return tool + " is not available to a task helper: helpers never get host tools; use the computer_* tools of the task desktop"
		}
		return p.hostRefusal(tool)
	case strings.HasPrefix(tool, PrefixBrowser):
		if p.Browser {
			return ""
		}
		return p.notHere(tool)
	}
	return "" // not a computer tool: the gate has no say
}

func (p Plan) hostRefusal(tool string) string {
	if p.Selected == Auto {
		return p.notHere(tool) // auto never gives host tools
	}
	if p.HostProblem != "" {
		return tool + " is not available: " + p.HostProblem
	}
	switch p.Kind {
	case VM, Cloud:
		return tool + " needs \"Allow host environment\", which is off for this agent; use the computer_* tools, which run inside the agent's desktop"
	case Host:
		return tool + " is not available on this host"
	}
	return p.notHere(tool)
}

// notHere explains a tool of another computer type.
func (p Plan) notHere(tool string) string {
	if p.Unavailable {
		return tool + " cannot run: " + p.Reason
	}
	var use string
	switch p.Kind {
	case VM:
		use = "use the computer_* tools of its Local VM"
	case Host:
		use = "use the host_* tools"
	case Browser:
		use = "it has no desktop or shell; use the browser_* tools"
	default:
		use = "it has no computer tools; a person can choose a computer for it in the computer panel"
	}
	if p.Helper && !p.VM {
		return fmt.Sprintf("%s is not available: a task helper works only on a task desktop, and this agent's computer this turn is %s", tool, p.Kind.Label())
	}
	if p.Selected == Auto {
		return fmt.Sprintf("%s is not available: this agent's computer is Auto, and this turn it is %s (%s); %s", tool, p.Kind.Label(), p.Reason, use)
	}
	return fmt.Sprintf("%s is not available: this agent's computer is %s; %s", tool, p.Kind.Label(), use)
}

// Notice is what the first events of a turn say about the plan (AGENT_START metadata and the
// CUSTOM "computer" event).
func (p Plan) Notice() map[string]any {
	n := map[string]any{"selected": string(p.Selected), "computer": string(p.Kind), "label": p.Kind.Label(),
		"tools": p.Families()}
	if p.Reason != "" {
		n["reason"] = p.Reason
	}
	if p.Unavailable {
		n["unavailable"] = true
	}
	if p.HostProblem != "" {
		n["hostProblem"] = p.HostProblem
	}
	if p.HostDesktopProblem != "" {
		n["hostDesktopProblem"] = p.HostDesktopProblem
	}
	return n
}

// Families lists the offered tool families by name: computer, host, host_desktop, copy, browser.
func (p Plan) Families() []string {
	out := []string{}
	for _, f := range []struct {
		on   bool
		name string
	}{{p.VM, "computer"}, {p.Host, "host"}, {p.HostDesktop, "host_desktop"}, {p.Copy, "copy"}, {p.Browser, "browser"}} {
		if f.on {
			out = append(out, f.name)
		}
	}
	return out
}
