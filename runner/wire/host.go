package wire

import "time"

// Host tool ops (capability CapHostTools): the host tools of an agent whose desktop is on a
// runner run on that runner's host. The server's guard and the computer gate decide before a
// request is sent; the runner refuses them all when it was started with --no-host-tools.
//
// OpHostShell's response comes when the command ended. The server cancels a running command by
// closing the stream (the runner then kills the command's process group) before the response.
// File contents travel as raw bytes after the frames (they may be larger than MaxFrame):
// OpHostReadFile answers HostFile{Size} followed by Size bytes; OpHostWriteFile's request
// HostFileArgs{Size} is followed by Size bytes, then the runner answers.
//
// A runner with CapHostGuard also checks file paths itself before it touches them: it refuses
// (fault.ErrForbidden) a path that resolves, with the symbolic links of its own disk, into its
// data directory or into one of HostFileArgs.Protected, and it answers OpHostInfo (its home and
// the paths it protects of its own), which a server asks instead of OpHostHome.
const (
	OpHostShell     = "hostShell"
	OpHostReadFile  = "hostReadFile"
	OpHostWriteFile = "hostWriteFile"
	OpHostHome      = "hostHome"
	OpHostInfo      = "hostInfo" // capability CapHostGuard; result HostInfo
)

// Limits a runner holds host tool calls to, whatever the server asks.
const (
	MaxHostTimeout = 10 * time.Minute
	MaxHostOutput  = 1 << 20  // per stream (stdout, stderr)
	MaxHostFile    = 25 << 20 // a file read or written
)

// HostShellArgs are the arguments of OpHostShell.
type HostShellArgs struct {
	Command   string `json:"command"`
	Dir       string `json:"dir,omitempty"`
	TimeoutMS int64  `json:"timeoutMs"`
	MaxOutput int    `json:"maxOutput"`
	// Sandbox is the node's host sandbox policy (CapHostSandbox); nil: the runner's default
	// (Dir read-write, network on, never without a sandbox).
	Sandbox *HostSandbox `json:"sandbox,omitempty"`
}

// HostSandbox is what the server asks of a runner's host sandbox for one host tool call
// (CapHostSandbox). The runner adds what it hides of its own (its data directory, the
// credential folders of its user's home) and never runs a call outside a sandbox unless
// AllowNone.
type HostSandbox struct {
	WorkDir   string   `json:"workDir,omitempty"`   // the agent's working directory: read-write
	ReadWrite []string `json:"readWrite,omitempty"` // further read-write paths (the admin's)
	Hidden    []string `json:"hidden,omitempty"`    // the protected paths, for the runner's home
	Network   bool     `json:"network"`
	AllowNone bool     `json:"allowNone,omitempty"` // the admin allowed "no sandbox" for this node
	// Readable are credential folders of the runner user's home an administrator opened for
	// reading (an approved widening, docs/sandbox.md): the runner stops hiding exactly those
	// of its own list (sandbox.HomeSecrets), nothing else. An older runner ignores it.
	Readable []string `json:"readable,omitempty"`
}

// HostShellResult answers OpHostShell.
type HostShellResult struct {
	ExitCode  int    `json:"exitCode"`
	Stdout    []byte `json:"stdout,omitempty"`
	Stderr    []byte `json:"stderr,omitempty"`
	Truncated bool   `json:"truncated,omitempty"`
	TimedOut  bool   `json:"timedOut,omitempty"`
	// Refused are what the sandbox refused, as sentences (sandbox.Explain).
	Refused []string `json:"refused,omitempty"`
	// Unsandboxed: the command ran without a sandbox (the node allows that).
	Unsandboxed bool `json:"unsandboxed,omitempty"`
}

// HostFileArgs are the arguments of OpHostReadFile (Path, Max) and OpHostWriteFile (Path, Size).
type HostFileArgs struct {
	Path string `json:"path"`
	Max  int64  `json:"max,omitempty"`
	Size int64  `json:"size,omitempty"`
	// Protected are the absolute paths the server's file guard protects on this runner's host
	// ("~/…" entries expanded to the runner's home). A runner with CapHostGuard refuses a Path
	// that resolves on its own disk into one of them, as guard.FileGuard.Check does; an entry
	// starting with "~" or holding NUL fails the call, one that is not absolute on the runner's
	// system (another OS family's form) is skipped. Older runners ignore the field.
	Protected []string `json:"protected,omitempty"`
	// Sandbox is the node's sandbox policy (CapHostSandbox), as for HostShellArgs.
	Sandbox *HostSandbox `json:"sandbox,omitempty"`
}

// HostInfo answers OpHostInfo: the runner user's home directory and the absolute paths the
// runner protects of its own (its data directory), which the server's guard then protects on
// that host for every host tool, host_shell included.
type HostInfo struct {
	Home string `json:"home"`
	// HomeProblem says why Home is empty (the runner user has none).
	HomeProblem string   `json:"homeProblem,omitempty"`
	Protected   []string `json:"protected,omitempty"`
	// Sandbox is the kind of host sandbox the runner has (bwrap, landlock, sandbox-exec,
	// none); SandboxProblem says why there is none and what to install.
	Sandbox        string `json:"sandbox,omitempty"`
	SandboxProblem string `json:"sandboxProblem,omitempty"`
}

// HostFile answers OpHostReadFile: Size raw bytes follow the frame.
type HostFile struct {
	Size int64 `json:"size"`
}
