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
//	cloud     → cloud_computer_* on the agent's desktop on a cloud node (a runner an admin marked
//	            "cloud"); with "Allow host environment" the host tools of the agent's base node
//	            (and cloud_computer_copy_file between that host and the cloud desktop). Without
//	            a cloud node: no computer, every computer call refused with a clear error (never
//	            a silent Local VM); host tools as for vm
//	host      → host_shell/read/write_file; host desktop tools (host_screenshot and input) only
//	            when the admin enabled "Host screen control" for the node and the OS allows it
//	browser   → browser_* on the agent's own Chromium
//	auto      → vm when the agent's image is prepared and capacity allows, else browser; never host
//
// Host tools run on the host of the node the agent is placed on (its base node, [Plan.HostNode]):
// the server's own machine for the local node, a runner's machine for a runner — only when that
// runner advertises [CapHostTools] and an administrator granted host access to the account on
// that node. They never fall back to another node's host.
//
// A temporary task helper gets at most the computer_* tools of its task desktop, never host,
// cloud or browser tools. The package is pure: no I/O, safe for concurrent use.
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
	// PrefixCloud names the computer_* tools aimed at a cloud node's desktop.
	PrefixCloud = "cloud_" + PrefixVM
	// ToolCopy copies files between the host and the VM: it needs both.
	ToolCopy = "computer_copy_file"
	// ToolCloudCopy copies files between the base node's host and the cloud desktop.
	ToolCloudCopy = "cloud_" + ToolCopy
)

// VMTool returns the computer_* tool a cloud_computer_* tool runs on the cloud desktop, and
// whether tool is one.
func VMTool(tool string) (string, bool) {
	if strings.HasPrefix(tool, PrefixCloud) {
		return strings.TrimPrefix(tool, "cloud_"), true
	}
	return tool, false
}

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
	ID string
	// Name names the node in refusals, e.g. `runner "mac-mini" (r-1a2b)`; "" = "this execution node".
	Name string
	Caps []string // advertised capabilities (CapHostTools, CapHostDesktop)
	// Problem says why the node cannot be asked now (a disconnected runner); host tools are
	// then refused with it.
	Problem string
	// HostScreenControl is the admin's node setting "Host screen control".
	HostScreenControl bool
	// Screen is what the OS of the node allows (display present, permissions granted).
	Screen Permission
	// Cloud reports whether a cloud node serves this agent's cloud computer now.
	Cloud bool
}

func (n Node) has(c string) bool { return slices.Contains(n.Caps, c) }

func (n Node) label() string {
	if n.Name != "" {
		return n.Name
	}
	return "this execution node"
}

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
	// CloudNode is the cloud node serving a cloud computer ("" when none does; then Node.Cloud
	// is false) and CloudProblem why none does, when there is more to say than "none is
	// connected".
	CloudNode, CloudProblem string
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
	Cloud       bool `json:"cloud"`       // cloud_computer_* (except cloud_computer_copy_file)
	Host        bool `json:"host"`        // host_shell, host_read_file, host_write_file
	HostDesktop bool `json:"hostDesktop"` // host_screenshot and host input
	Copy        bool `json:"copy"`        // computer_copy_file
	Browser     bool `json:"browser"`     // browser_*
	// HostProblem says why host tools are not offered although the computer wants them.
	HostProblem string `json:"hostProblem,omitempty"`
	// HostDesktopProblem says why host desktop tools are not offered to a host computer (and
	// how to fix it).
	HostDesktopProblem string `json:"hostDesktopProblem,omitempty"`
	// HostNode is the node whose host runs the host tools (set when Host is).
	HostNode string `json:"hostNode,omitempty"`
	// CloudNode is the cloud node whose desktop the cloud_computer_* tools act on.
	CloudNode string `json:"cloudNode,omitempty"`
	Helper    bool   `json:"-"`
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
		p.hostTools(in, in.AllowHost)
		if !in.Node.Cloud {
			p.Kind, p.Unavailable = None, true
			p.Reason = "this agent's computer is Cloud, but no cloud execution node is connected to this server; " +
				"choose Local VM (or another computer) in the computer panel, or connect a cloud runner"
			if in.CloudProblem != "" {
				p.Reason = "this agent's computer is Cloud, but " + in.CloudProblem
			}
			break
		}
		p.Cloud, p.CloudNode = true, in.CloudNode
		p.Copy = p.Host
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

// helperRefusal explains a tool a task helper never gets.
func helperRefusal(tool string) string {
	return tool + " is not available to a task helper: helpers never get host tools; use the computer_* tools of the task desktop"
}

func (p *Plan) hostTools(in Input, wanted bool) {
	switch {
	case !wanted:
	case in.Node.Problem != "":
		p.HostProblem = in.Node.Problem
	case !in.Node.has(CapHostTools):
		p.HostProblem = fmt.Sprintf("%s does not offer host tools (capability %s): update its runner, and do not start it with --no-host-tools",
			in.Node.label(), CapHostTools)
	case in.Grant.Denied:
		p.HostProblem = fmt.Sprintf("host access is not granted to this account on %s", in.Node.label())
		if in.Grant.Reason != "" {
			p.HostProblem = in.Grant.Reason
		}
	default:
		p.Host, p.HostNode = true, in.Node.ID
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
	case tool == ToolCloudCopy:
		if p.Copy && p.Cloud {
			return ""
		}
		if p.Helper {
			return helperRefusal(tool)
		}
		if !p.Cloud {
			return p.notHere(tool)
		}
		return p.hostRefusal(tool)
	case strings.HasPrefix(tool, PrefixCloud):
		if p.Cloud {
			return ""
		}
		return p.notHere(tool)
	case tool == ToolCopy && p.Cloud:
		return p.notHere(tool)
	case tool == ToolCopy:
		if p.Copy {
			return ""
		}
		if p.Helper {
			return helperRefusal(tool)
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
			return helperRefusal(tool)
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
			return helperRefusal(tool)
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
	case VM:
		return tool + " needs \"Allow host environment\", which is off for this agent; use the computer_* tools, which run inside the agent's desktop"
	case Cloud:
		return tool + " needs \"Allow host environment\", which is off for this agent; use the cloud_computer_* tools, which run inside the agent's cloud desktop"
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
	case Cloud:
		use = "use the cloud_computer_* tools, which act on its desktop on the cloud node"
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
	if p.HostNode != "" {
		n["hostNode"] = p.HostNode
	}
	if p.CloudNode != "" {
		n["cloudNode"] = p.CloudNode
	}
	return n
}

// Families lists the offered tool families by name: computer, cloud_computer, host,
// host_desktop, copy, browser.
func (p Plan) Families() []string {
	out := []string{}
	for _, f := range []struct {
		on   bool
		name string
	}{{p.VM, "computer"}, {p.Cloud, "cloud_computer"}, {p.Host, "host"}, {p.HostDesktop, "host_desktop"}, {p.Copy, "copy"}, {p.Browser, "browser"}} {
		if f.on {
			out = append(out, f.name)
		}
	}
	return out
}
