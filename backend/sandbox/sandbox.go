// Package sandbox runs host commands (host_shell and the host file tools) in an OS sandbox,
// so that what the tool guard promises — the data directory, its secrets and the protected
// paths stay out of reach — is kept by the kernel, not by parsing the command (issue 26).
//
// The kinds, best first:
//
//   - Linux: bubblewrap (bwrap), when installed and able to make its namespaces: the root file
//     system read-only, the working directory, the scratch directories and the paths the
//     administrator allows read-write, every hidden path covered by an empty, unreadable tmpfs
//     (a file by an unreadable empty file), all capabilities dropped, a PID namespace of its
//     own (so /proc shows no process outside it), a minimal /dev, and no network when the node
//     says so;
//   - Linux: Landlock, when bubblewrap is missing: a helper mode of this very program (Main,
//     run from the package's init) restricts itself with an allow-list that leaves out every
//     hidden path and then executes the command; no new privileges; TCP bind/connect refused
//     when the node has no network;
//   - macOS: sandbox-exec with a generated SBPL profile (deny reads of the hidden paths, writes
//     outside the allowed ones, and the network when it is off);
//   - Windows: an AppContainer of its own per set of read-write paths (appcontainer.go): the
//     container's SID is granted the read-write paths and denied the hidden ones, everything
//     else of the user's is closed to it by default, no network unless the node allows it
//     (and never this machine's loopback), ended with the helper by a job object. Compiled
//     and its plan unit-tested; never run here (no Windows machine; Wine has no AppContainers).
//
// Without a sandbox, host commands are refused with a message that says what to install,
// unless an administrator allowed "no sandbox" for the node (Policy.AllowNone), in which case
// they run with a warning in their output. A command the sandbox refused says so in its
// result (Explain). A Sandbox is safe for concurrent use.
package sandbox

import (
	"context"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"

	"cubicle/backend/fault"
)

// Kind is a sandbox mechanism.
type Kind string

// The kinds.
const (
	Bwrap    Kind = "bwrap"
	Landlock Kind = "landlock"
	Seatbelt Kind = "sandbox-exec"
	None     Kind = "none"
	// Auto picks the best kind available (a mode, never a detected kind).
	Auto Kind = "auto"
)

// EnvMode forces the kind (bwrap, landlock, sandbox-exec, appcontainer, none or auto); CI uses
// it to exercise each path.
const EnvMode = "CUBICLE_HOST_SANDBOX"

// Policy is what a sandboxed command may touch.
type Policy struct {
	// WorkDir is the agent's working directory on the host: read-write.
	WorkDir string `json:"workDir,omitempty"`
	// ReadWrite are further read-write paths (the administrator's, the scratch directories).
	ReadWrite []string `json:"readWrite,omitempty"`
	// Hidden may be neither read nor written: the data directories, their secrets, the
	// protected paths. A hidden path that does not exist when the command starts is skipped.
	Hidden []string `json:"hidden,omitempty"`
	// Network lets the command use the network (the node's setting; on by default).
	Network bool `json:"network"`
	// AllowNone lets the command run without a sandbox when none is available (an
	// administrator's explicit choice for the node).
	AllowNone bool `json:"allowNone,omitempty"`
}

// Scratch are the shared scratch directories a sandboxed command may write (Unix).
var Scratch = []string{"/tmp", "/var/tmp", "/dev/shm"}

// Secrets are the paths below a home directory that hold credentials: hidden from every
// sandboxed command whatever the settings say.
var Secrets = []string{".ssh", ".gnupg", ".aws", ".azure", ".kube", ".docker", ".config/gcloud", ".config/gh",
	".password-store", ".local/share/keyrings", ".netrc", ".git-credentials", ".pgpass"}

// HomeSecrets returns Secrets below home ("" gives none).
func HomeSecrets(home string) []string {
	if home == "" || !filepath.IsAbs(home) {
		return nil
	}
	out := make([]string, 0, len(Secrets))
	for _, s := range Secrets {
		out = append(out, filepath.Join(home, filepath.FromSlash(s)))
	}
	return out
}

// Clean returns p with its paths cleaned, relative and duplicate entries dropped, and hidden
// paths that contain a read-write one taken out of the read-write set (hiding wins).
func (p Policy) Clean() Policy {
	norm := func(in []string) []string {
		var out []string
		for _, e := range in {
			if e == "" || !filepath.IsAbs(e) || strings.ContainsRune(e, 0) {
				continue
			}
			if e = filepath.Clean(e); !slices.Contains(out, e) {
				out = append(out, e)
			}
		}
		return out
	}
	q := p
	q.Hidden = norm(p.Hidden)
	if p.WorkDir != "" && filepath.IsAbs(p.WorkDir) {
		q.WorkDir = filepath.Clean(p.WorkDir)
	} else {
		q.WorkDir = ""
	}
	rw := norm(append(append([]string{}, p.ReadWrite...), q.WorkDir))
	q.ReadWrite = slices.DeleteFunc(rw, func(e string) bool {
		for _, h := range q.Hidden {
			if Within(e, h) {
				return true // inside a hidden path: hiding wins
			}
		}
		return false
	})
	if q.WorkDir != "" && !slices.Contains(q.ReadWrite, q.WorkDir) {
		q.WorkDir = ""
	}
	return q
}

// Within reports whether p is dir or below it (both clean).
func Within(p, dir string) bool {
	if p == dir {
		return true
	}
	if dir == string(filepath.Separator) {
		return strings.HasPrefix(p, dir)
	}
	return strings.HasPrefix(p, dir+string(filepath.Separator))
}

// Mode reads the kind forced by EnvMode ("" or "auto": Auto); anything else is
// fault.ErrInvalid.
func Mode(getenv func(string) string) (Kind, error) {
	switch m := Kind(strings.ToLower(strings.TrimSpace(getenv(EnvMode)))); m {
	case "", Auto:
		return Auto, nil
	case Bwrap, Landlock, None, Seatbelt, AppContainer:
		return m, nil
	default:
		return "", fault.Invalid("%s=%q: use bwrap, landlock, sandbox-exec, appcontainer, none or auto", EnvMode, m)
	}
}

// Sandbox runs commands in the kind of sandbox this machine offers.
type Sandbox struct {
	kind Kind
	// why says why there is no sandbox (kind None) and what to install.
	why string
	exe string // this program, for the Landlock and file helpers
}

// New detects the best sandbox of this machine, or the one mode forces (an unusable forced
// kind is an error that says why).
func New(mode Kind) (*Sandbox, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, fault.Unavailable("sandbox: this program's path is unknown: %v", err)
	}
	kind, why, err := detect(mode, exe)
	if err != nil {
		return nil, err
	}
	return &Sandbox{kind: kind, why: why, exe: exe}, nil
}

// Kind is the sandbox in use (None when there is none).
func (s *Sandbox) Kind() Kind { return s.kind }

// Problem says why there is no sandbox and what to install ("" with one).
func (s *Sandbox) Problem() string { return s.why }

// Unsandboxed is the warning put before the output of a command that ran without a sandbox.
const Unsandboxed = "warning: this command ran WITHOUT an OS sandbox (an administrator allowed that for this node); the data directory and protected paths are guarded by the command check only"

// refuse is the error when there is no sandbox and the node does not allow that.
func (s *Sandbox) refuse() error {
	return fault.Unavailable("host commands on this node run only in an OS sandbox, and there is none: %s. "+
		"An administrator may instead allow host tools without a sandbox for this node (Settings → Security → host sandbox)", s.why)
}

// Command is a command line to run in the sandbox: Argv with Env added to the environment,
// Cleanup called once it ended.
type Command struct {
	Argv      []string
	Env       []string
	Cleanup   func()
	Sandboxed bool // false: runs without a sandbox (Policy.AllowNone)
}

// Wrap returns argv to run in the sandbox under p (the command's own working directory is
// set by the caller, on the returned command). With no sandbox it is refused (fault.
// ErrUnavailable) unless p.AllowNone, then argv is returned unwrapped.
func (s *Sandbox) Wrap(ctx context.Context, p Policy, argv []string) (Command, error) {
	if s.kind == None {
		if !p.AllowNone {
			return Command{}, s.refuse()
		}
		return Command{Argv: argv, Cleanup: func() {}}, nil
	}
	return s.wrap(ctx, p.Clean(), argv)
}

// Refusal is one access the sandbox refused, as read from a command's error output.
type Refusal struct {
	// Path is the path the refused access was about ("" when the line names none).
	Path string `json:"path,omitempty"`
	// Write: a write outside the writable paths; otherwise a hidden path was touched (read).
	Write bool `json:"write,omitempty"`
	// Hidden is the hidden path that covers Path (a read refusal), "" for a write.
	Hidden string `json:"hidden,omitempty"`
	// Line is the command's own line that reported it.
	Line string `json:"line"`
}

// Note is the sentence for the chat that says what r was.
func (r Refusal) Note(p Policy) string {
	switch {
	case r.Hidden != "":
		return "the sandbox refused access to " + r.Path + ": " + r.Hidden + " is hidden from host commands (Cubicle's data, secrets or a protected path)"
	case r.Write:
		return "the sandbox refused write access to " + r.Path + ": host commands may write only in " + strings.Join(p.Clean().ReadWrite, ", ") +
			" (an administrator can approve more in Settings → Security → host sandbox)"
	}
	return "the sandbox (or the file's permissions) refused an access: " + r.Line
}

// Refusals reads what the sandbox refused from a command's error output: each line that
// reports a refused access ("Permission denied", "Operation not permitted", "Read-only file
// system", in any case), with the path it names: inside a hidden path it was a hidden path touched; a
// "Read-only file system", or a denial of a write (create, touch, mkdir, …) outside the
// writable paths, was a write (under Landlock a refused write reads "Permission denied").
// At most five, no duplicates.
func Refusals(p Policy, out []byte) []Refusal {
	p = p.Clean()
	var rs []Refusal
	for _, line := range strings.Split(string(out), "\n") {
		if len(rs) == 5 {
			break
		}
		if !MayReport(line) {
			continue
		}
		ro := strings.Contains(strings.ToLower(line), "read-only file system")
		r := Refusal{Line: strings.TrimSpace(line)}
		ms := pathInLine.FindAllString(line, -1)
		slices.Reverse(ms) // the path nearest the error is the one it was about ("/bin/sh: 1: cannot create /x: …")
		for _, m := range ms {
			m = filepath.Clean(strings.TrimRight(m, ".,;:'\")]"))
			for _, h := range p.Hidden {
				if Within(m, h) {
					r.Path, r.Hidden = m, h
					break
				}
			}
			if r.Hidden == "" && (ro || writeVerb.MatchString(line) && !slices.ContainsFunc(p.ReadWrite, func(d string) bool { return Within(m, d) })) {
				r.Path, r.Write = m, true
			}
			if r.Path != "" {
				break
			}
		}
		if !slices.ContainsFunc(rs, func(o Refusal) bool {
			return o.Path == r.Path && o.Write == r.Write && (r.Path != "" || o.Line == r.Line)
		}) {
			rs = append(rs, r)
		}
	}
	return rs
}

// MayReport reports whether out has a line that says an access was refused, in any case
// (Node says "EACCES: permission denied, open '/x'"): a quick test before Refusals.
func MayReport(out string) bool {
	low := strings.ToLower(out)
	return strings.Contains(low, "permission denied") || strings.Contains(low, "operation not permitted") ||
		strings.Contains(low, "read-only file system")
}

// Explain returns what the sandbox refused, as sentences for the chat, from a command's
// error output (Refusals, each as its Note).
func Explain(p Policy, out []byte) []string {
	var notes []string
	for _, r := range Refusals(p, out) {
		if n := r.Note(p); !slices.Contains(notes, n) {
			notes = append(notes, n)
		}
	}
	return notes
}

// writeVerb is how common tools say they were writing.
var writeVerb = regexp.MustCompile(`(?i)\b(?:cannot create|cannot touch|cannot create directory|mkdir|cannot remove|cannot move|rename|cannot open .* for writing|write|cannot overwrite|cannot make|cannot link|chmod|chown)`)

var pathInLine = regexp.MustCompile(`/[^\s'"` + "`" + `:]+`)

// SetupAttempts is how many times a command is run when bubblewrap failed to make its
// sandbox for a passing cause (SetupRaced).
const SetupAttempts = 5

// SetupRaced reports whether a command run by bubblewrap ended because bubblewrap could not
// make its sandbox while a mount of the host vanished under it, so that nothing of the
// command ran and running it again is safe. bubblewrap binds the root with its submounts
// and then remounts each one read-only; its mount namespace follows the host's unmounts, so
// a network namespace or container mount removed on the host in between (Podman does that
// for every container it stops) makes the remount fail with ENOENT:
//
//	bwrap: Can't bind mount /oldroot/ on /newroot/: Unable to apply mount flags: remount "/newroot/run/netns/netns-…": No such file or directory
//
// (or "Invalid argument", when the remount meets the mount half removed). Only that: exit
// code 1 and an error output that is exactly one such line of bubblewrap's.
func SetupRaced(exitCode int, stderr []byte) bool {
	line, rest, _ := strings.Cut(string(stderr), "\n")
	return exitCode == 1 && rest == "" &&
		strings.HasPrefix(line, "bwrap: Can't bind mount ") &&
		strings.Contains(line, ": Unable to apply mount flags: remount ") &&
		(strings.HasSuffix(line, ": No such file or directory") || strings.HasSuffix(line, ": Invalid argument"))
}
