package computer

import (
	"slices"
	"strings"
	"testing"
)

var hostNode = Node{ID: "local", Caps: []string{CapHostTools, CapHostDesktop}, HostScreenControl: true,
	Screen: Permission{Granted: true}}

// every tool family, one representative each.
var probes = []string{"computer_screenshot", "computer_shell", "computer_copy_file", "cloud_computer_screenshot",
	"cloud_computer_shell", "cloud_computer_copy_file", "host_shell", "host_read_file",
	"host_screenshot", "host_click", "browser_navigate", "browser_read"}

// runnerNode is a runner that advertised host tools (and, wrongly, the host desktop: a
// runner's host is never offered through this server's screen; the backend filters it, the
// gate still needs the admin's screen setting).
var runnerNode = Node{ID: "r-1", Name: `runner "mini" (r-1)`, Caps: []string{CapHostTools}}

func offered(p Plan) []string {
	var out []string
	for _, t := range probes {
		if p.Offers(t) {
			out = append(out, t)
		}
	}
	return out
}

func TestDecide(t *testing.T) {
	ready := func() (bool, string) { return true, "" }
	full := func() (bool, string) { return false, "all 2 desktop slots are in use" }
	tests := []struct {
		name    string
		in      Input
		kind    Kind
		offered []string
		refused map[string]string // tool → words its refusal must contain
	}{
		{"none", Input{Selected: "none", Node: hostNode}, None, nil,
			map[string]string{"computer_screenshot": "No computer", "host_shell": "No computer", "browser_navigate": "No computer"}},
		{"empty is none", Input{Selected: "", AllowHost: true, Node: hostNode}, None, nil, nil},
		{"vm", Input{Selected: "vm", Node: hostNode}, VM, []string{"computer_screenshot", "computer_shell"},
			map[string]string{"host_shell": "Allow host environment", "computer_copy_file": "Allow host environment",
				"host_screenshot": "Local VM", "browser_navigate": "Local VM"}},
		{"vm with host", Input{Selected: "vm", AllowHost: true, Node: hostNode}, VM,
			[]string{"computer_screenshot", "computer_shell", "computer_copy_file", "host_shell", "host_read_file"},
			map[string]string{"host_screenshot": "Local VM"}},
		{"vm with host on an old node", Input{Selected: "vm", AllowHost: true, Node: Node{}}, VM,
			[]string{"computer_screenshot", "computer_shell"}, map[string]string{"host_shell": CapHostTools}},
		{"vm with host not granted", Input{Selected: "vm", AllowHost: true, Node: hostNode, Grant: Grant{Denied: true, Reason: "no grant for alice"}}, VM,
			[]string{"computer_screenshot", "computer_shell"}, map[string]string{"host_shell": "no grant for alice"}},
		{"host", Input{Selected: "host", Node: hostNode}, Host,
			[]string{"host_shell", "host_read_file", "host_screenshot", "host_click"},
			map[string]string{"computer_screenshot": "Host", "browser_navigate": "Host"}},
		{"host without screen control", Input{Selected: "host", Node: Node{Caps: hostNode.Caps, Screen: Permission{Granted: true}}}, Host,
			[]string{"host_shell", "host_read_file"}, map[string]string{"host_screenshot": "Host screen control", "host_click": "still work"}},
		{"host without OS permission", Input{Selected: "host", Node: Node{Caps: hostNode.Caps, HostScreenControl: true,
			Screen: Permission{Missing: "no Screen Recording", HowToGrant: "open System Settings"}}}, Host,
			[]string{"host_shell", "host_read_file"}, map[string]string{"host_screenshot": "open System Settings"}},
		{"host never for a helper", Input{Selected: "host", Helper: true, Node: hostNode}, Host, nil,
			map[string]string{"host_shell": "helper", "host_screenshot": "helper"}},
		{"browser", Input{Selected: "browser", AllowHost: true, Node: hostNode}, Browser, []string{"browser_navigate", "browser_read"},
			map[string]string{"computer_shell": "no desktop or shell", "host_shell": "Browser only"}},
		{"auto, VM ready", Input{Selected: "auto", Node: hostNode, VMReady: ready}, VM, []string{"computer_screenshot", "computer_shell"},
			map[string]string{"browser_navigate": "Auto", "host_shell": "Auto"}},
		{"auto, VM full", Input{Selected: "auto", Node: hostNode, VMReady: full}, Browser, []string{"browser_navigate", "browser_read"},
			map[string]string{"computer_shell": "slots are in use", "host_screenshot": "Auto"}},
		{"cloud without a node", Input{Selected: "cloud", Node: hostNode}, None, nil,
			map[string]string{"computer_screenshot": "no cloud execution node", "browser_navigate": "no cloud execution node"}},
		{"cloud without a node keeps granted host tools", Input{Selected: "cloud", AllowHost: true, Node: hostNode}, None,
			[]string{"host_shell", "host_read_file"}, map[string]string{"computer_shell": "no cloud execution node"}},
		{"cloud on a cloud node", Input{Selected: "cloud", Node: Node{ID: "local", Caps: hostNode.Caps, Cloud: true}, CloudNode: "r-c"}, Cloud,
			[]string{"cloud_computer_screenshot", "cloud_computer_shell"},
			map[string]string{"computer_screenshot": "cloud_computer_", "computer_copy_file": "cloud_computer_",
				"host_shell": "Allow host environment", "cloud_computer_copy_file": "Allow host environment", "browser_navigate": "Cloud"}},
		{"cloud with host of the base node", Input{Selected: "cloud", AllowHost: true, Node: Node{ID: "r-1", Name: runnerNode.Name, Caps: runnerNode.Caps, Cloud: true},
			CloudNode: "r-c"}, Cloud,
			[]string{"cloud_computer_screenshot", "cloud_computer_shell", "cloud_computer_copy_file", "host_shell", "host_read_file"},
			map[string]string{"computer_shell": "cloud_computer_", "computer_copy_file": "cloud_computer_", "host_screenshot": "Cloud"}},
		{"cloud node disconnected", Input{Selected: "cloud", Node: hostNode, CloudProblem: "its cloud node runner \"c\" (r-c) is not connected"}, None, nil,
			map[string]string{"cloud_computer_shell": "(r-c) is not connected", "computer_shell": "(r-c) is not connected"}},
		{"cloud helper gets nothing", Input{Selected: "cloud", AllowHost: true, Helper: true, Node: Node{Caps: hostNode.Caps, Cloud: true}, CloudNode: "r-c"}, Cloud, nil,
			map[string]string{"cloud_computer_shell": "task helper", "host_shell": "helper", "cloud_computer_copy_file": "helper"}},
		{"vm on a runner with host tools", Input{Selected: "vm", AllowHost: true, Node: runnerNode}, VM,
			[]string{"computer_screenshot", "computer_shell", "computer_copy_file", "host_shell", "host_read_file"}, nil},
		{"vm on a runner without host tools", Input{Selected: "vm", AllowHost: true, Node: Node{ID: "r-1", Name: runnerNode.Name}}, VM,
			[]string{"computer_screenshot", "computer_shell"},
			map[string]string{"host_shell": `runner "mini" (r-1) does not offer host tools (capability host-computer-tools-v1)`,
				"computer_copy_file": "--no-host-tools"}},
		{"vm on a disconnected runner", Input{Selected: "vm", AllowHost: true, Node: Node{ID: "r-1", Problem: "runner mini is not connected", Caps: runnerNode.Caps}}, VM,
			[]string{"computer_screenshot", "computer_shell"}, map[string]string{"host_shell": "runner mini is not connected"}},
		{"host on a runner without a grant", Input{Selected: "host", Node: runnerNode, Grant: Grant{Denied: true, DesktopDenied: true}}, Host, nil,
			map[string]string{"host_shell": `not granted to this account on runner "mini" (r-1)`}},
		{"host on a runner: no host desktop", Input{Selected: "host", Node: runnerNode}, Host,
			[]string{"host_shell", "host_read_file"}, map[string]string{"host_screenshot": CapHostDesktop}},
		{"vm helper", Input{Selected: "vm", AllowHost: true, Helper: true, Node: hostNode}, VM, []string{"computer_screenshot", "computer_shell"},
			map[string]string{"computer_copy_file": "helper", "host_shell": "helper"}},
		{"unknown", Input{Selected: "mainframe", Node: hostNode}, None, nil, map[string]string{"computer_shell": "not a known type"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := Decide(tt.in)
			if p.Kind != tt.kind {
				t.Fatalf("kind = %s, want %s (%+v)", p.Kind, tt.kind, p)
			}
			if got := offered(p); !slices.Equal(got, tt.offered) {
				t.Fatalf("offered %v, want %v", got, tt.offered)
			}
			for tool, words := range tt.refused {
				why := p.Check(tool)
				if why == "" || !strings.Contains(why, words) {
					t.Errorf("refusal of %s = %q, want it to say %q", tool, why, words)
				}
			}
			if p.Check("task_helper") != "" {
				t.Error("the gate must not judge tools outside the computer families")
			}
			n := p.Notice()
			if n["computer"] != string(tt.kind) {
				t.Errorf("notice %v", n)
			}
			if !p.Host && p.HostNode != "" || p.Host && p.HostNode != tt.in.Node.ID {
				t.Errorf("host tools on node %q with host %v (node %q)", p.HostNode, p.Host, tt.in.Node.ID)
			}
			if p.Cloud && p.CloudNode != tt.in.CloudNode {
				t.Errorf("cloud node %q, want %q", p.CloudNode, tt.in.CloudNode)
			}
		})
	}
}

func TestForHelperKeepsOnlyTheVM(t *testing.T) {
	p := Decide(Input{Selected: "vm", AllowHost: true, Node: hostNode}).ForHelper()
	if got := offered(p); !slices.Equal(got, []string{"computer_screenshot", "computer_shell"}) {
		t.Fatalf("helper offered %v", got)
	}
	if b := Decide(Input{Selected: "browser", Node: hostNode}).ForHelper(); len(offered(b)) != 0 {
		t.Fatalf("a helper of a browser agent got %v", offered(b))
	}
}

func TestVMTool(t *testing.T) {
	for in, want := range map[string]string{"cloud_computer_shell": "computer_shell", "cloud_computer_copy_file": "computer_copy_file"} {
		if got, ok := VMTool(in); !ok || got != want {
			t.Errorf("VMTool(%q) = %q, %v", in, got, ok)
		}
	}
	for _, in := range []string{"computer_shell", "cloud_shell", "host_shell", "xcloud_computer_shell"} {
		if got, ok := VMTool(in); ok || got != in {
			t.Errorf("VMTool(%q) = %q, %v", in, got, ok)
		}
	}
}

func TestParse(t *testing.T) {
	for in, want := range map[string]Kind{"": None, "hybrid": VM, "vm": VM, " host ": Host, "auto": Auto} {
		if k, ok := Parse(in); !ok || k != want {
			t.Errorf("Parse(%q) = %s, %v", in, k, ok)
		}
	}
	if _, ok := Parse("VM"); ok {
		t.Error("types are case-sensitive")
	}
}
