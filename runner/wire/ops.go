package wire

import (
	"encoding/json"
	"fmt"
	"strings"

	"cubicle/backend/fault"
	"cubicle/backend/nodeapi"
)

// Spec is what both ends know of one operation of the link, apart from its argument and
// result types (Op adds those): its name on the wire, the node method that sends it, and the
// capability a runner must advertise for it.
type Spec struct {
	// Name is the op of the Request (the JSON "op"); never renamed within a Protocol.
	Name string
	// Method is the method of the server's side (backend/nodes: Remote's, or Hub's) that
	// sends the op; "" for the ops the link itself sends (Ping, Watch).
	Method string
	// Cap is the capability a runner must have advertised for the server to send the op;
	// "" = every runner of this Protocol. The server refuses before it sends anything.
	Cap string
	// Refusal is the fault class of that refusal (nil = fault.ErrUnavailable); Lacks says
	// what a runner without Cap cannot do ("does not report its desktops' CPU and memory");
	// Fix what to do about it ("" = update it to the server's version; "{version}" in Fix is
	// the server's version).
	Refusal error
	Lacks   string
	Fix     string
	// Stream: after the framed response the stream carries more (raw bytes both ways, the
	// file's bytes, or further frames) until either side closes it.
	Stream bool
}

// Refuse is the error a server answers, without sending anything, when runner name (node
// id, running runnerVersion) did not advertise s.Cap in caps; nil when it did or s needs no
// capability. serverVersion is the version the runner should update to.
func (s Spec) Refuse(caps []string, name, id, runnerVersion, serverVersion string) error {
	if s.Cap == "" {
		return nil
	}
	for _, c := range caps {
		if c == s.Cap {
			return nil
		}
	}
	class := s.Refusal
	if class == nil {
		class = fault.ErrUnavailable
	}
	lacks := s.Lacks
	if lacks == "" {
		lacks = "does not support " + s.Name
	}
	fix := s.Fix
	if fix == "" {
		fix = "update it to version {version}"
	}
	fix = strings.ReplaceAll(fix, "{version}", serverVersion)
	return fault.New(class, "runner %s (%s, version %s) %s (%s): %s", name, id, runnerVersion, lacks, s.Cap, fix)
}

// Op is one operation of the link with its argument type A and result type R: declared
// once below, sent by the server (backend/nodes) and dispatched by the runner (package
// runner) from the same declaration.
type Op[A, R any] struct{ Spec }

// None is the arguments of an op that takes none: sent as null, as protocol 1 always has.
type None struct{}

// MarshalJSON writes null.
func (None) MarshalJSON() ([]byte, error) { return []byte("null"), nil }

// Request is the framed request of op with args.
func (o Op[A, R]) Request(args A) (Request, error) {
	raw, err := json.Marshal(args)
	if err != nil {
		return Request{}, fmt.Errorf("%s: encode the arguments: %w", o.Name, err)
	}
	return Request{Op: o.Name, Args: raw}, nil
}

// Args decodes op's arguments from req (absent or null arguments: A's zero value). A bad
// argument is a fault.ErrInvalid error naming the op.
func (o Op[A, R]) Args(req Request) (A, error) {
	var a A
	if len(req.Args) == 0 {
		return a, nil
	}
	if err := json.Unmarshal(req.Args, &a); err != nil {
		return a, fault.Invalid("%s: bad arguments: %v", o.Name, err)
	}
	return a, nil
}

// Response is the framed response carrying res, or err.
func (o Op[A, R]) Response(res R, err error) Response {
	if err != nil {
		return Response{Error: ErrorOf(err)}
	}
	b, merr := json.Marshal(res)
	if merr != nil {
		return Response{Error: ErrorOf(fmt.Errorf("%s: encode the result: %w", o.Name, merr))}
	}
	return Response{Result: b}
}

// Result decodes op's result from resp, or returns its error.
func (o Op[A, R]) Result(resp Response) (R, error) {
	var r R
	if resp.Error != nil {
		return r, resp.Error.Err()
	}
	if len(resp.Result) == 0 {
		return r, nil
	}
	if err := json.Unmarshal(resp.Result, &r); err != nil {
		return r, fmt.Errorf("%s: decode the result: %w", o.Name, err)
	}
	return r, nil
}

// UnknownOp is the runner's answer to an op it does not know: it is older than the server.
func UnknownOp(op, runnerVersion string) error {
	return fault.Invalid("this runner does not know the operation %q: update it (cubicle runner %s)", op, runnerVersion)
}

// The operations of protocol 1. Adding one: declare it here and in Ops, implement it on the
// runner (its dispatch table) and on the server (a nodes.Remote method that sends it); the
// tests of both packages fail until each has it.
var (
	Ping = Op[None, bool]{Spec{Name: OpPing}}

	Status = Op[None, nodeapi.Status]{Spec{Name: OpStatus, Method: "Status"}}
	Stats  = Op[None, []nodeapi.InstanceStats]{Spec{Name: OpStats, Method: "Stats", Cap: CapStats,
		Lacks: "does not report its desktops' CPU and memory"}}

	StartPrepare = Op[InstanceArgs, nodeapi.PrepareState]{Spec{Name: OpStartPrepare, Method: "StartPrepare"}}
	Prepare      = Op[InstanceArgs, nodeapi.Image]{Spec{Name: OpPrepare, Method: "Prepare"}}

	SetPolicy     = Op[PolicyArgs, nodeapi.NodeSettings]{Spec{Name: OpSetPolicy, Method: "SetPolicy"}}
	SetIdlePolicy = Op[PolicyArgs, nodeapi.NodeSettings]{Spec{Name: OpSetIdlePolicy, Method: "SetIdlePolicy", Cap: CapIdlePolicy,
		Refusal: fault.ErrConflict, Lacks: "does not support the idle policy", Fix: "update it to version {version} before this setting can be changed"}}
	SetImageSources = Op[nodeapi.ImageSourcesUpdate, nodeapi.ImageSources]{Spec{Name: OpSetImageSources, Method: "SetImageSources"}}
	SetEgress       = Op[EgressArgs, nodeapi.NodeSettings]{Spec{Name: OpSetEgress, Method: "SetEgress", Cap: CapEgress,
		Refusal: fault.ErrConflict, Lacks: "does not enforce desktop egress policies", Fix: "update it to version {version} before its desktops can have one"}}

	Agent         = Op[AgentArgs, nodeapi.AgentView]{Spec{Name: OpAgent, Method: "Agent"}}
	Act           = Op[AgentArgs, nodeapi.AgentView]{Spec{Name: OpAct, Method: "Act"}}
	SetImage      = Op[AgentArgs, nodeapi.AgentView]{Spec{Name: OpSetImage, Method: "SetImage"}}
	ChooseDesktop = Op[AgentArgs, nodeapi.AgentView]{Spec{Name: OpChooseDesktop, Method: "ChooseDesktop"}}
	Pause         = Op[AgentArgs, nodeapi.AgentView]{Spec{Name: OpPause, Method: "Pause", Cap: CapPause,
		Refusal: fault.ErrConflict, Lacks: "cannot pause desktops", Fix: "update it to version {version}, or stop the desktop instead"}}
	Resume = Op[AgentArgs, nodeapi.AgentView]{Spec{Name: OpResume, Method: "Resume", Cap: CapPause,
		Refusal: fault.ErrConflict, Lacks: "cannot resume paused desktops", Fix: "update it to version {version}, or start the desktop instead"}}
	VMReady     = Op[AgentArgs, ReadyResult]{Spec{Name: OpVMReady, Method: "VMReady"}}
	AgentData   = Op[AgentArgs, nodeapi.AgentData]{Spec{Name: OpAgentData, Method: "AgentData"}}
	ForgetAgent = Op[AgentArgs, bool]{Spec{Name: OpForgetAgent, Method: "ForgetAgent"}}

	StopInstance = Op[InstanceArgs, bool]{Spec{Name: OpStopInstance, Method: "StopInstance"}}
	DeleteData   = Op[InstanceArgs, bool]{Spec{Name: OpDeleteData, Method: "DeleteData"}}
	MarkBusy     = Op[InstanceArgs, bool]{Spec{Name: OpMarkBusy, Method: "MarkBusy"}}
	MarkIdle     = Op[InstanceArgs, bool]{Spec{Name: OpMarkIdle, Method: "MarkIdle"}}
	AdminAct     = Op[InstanceArgs, nodeapi.InstanceView]{Spec{Name: OpAdminAct, Method: "AdminAct"}}

	// Guest and Tunnel answer true, then relay raw bytes.
	Guest = Op[InstanceArgs, bool]{Spec{Name: OpGuest, Method: "Link", Stream: true, Cap: CapGuestRelay,
		Lacks: "does not relay its desktops' drivers"}}
	Tunnel = Op[InstanceArgs, bool]{Spec{Name: OpTunnel, Method: "Tunnel", Stream: true, Cap: CapGuestRelay,
		Lacks: "does not relay its desktops' drivers"}}
	// Watch answers true, then writes WatchEvent frames.
	Watch = Op[None, bool]{Spec{Name: OpWatch, Stream: true, Cap: CapEvents,
		Lacks: "has no event stream"}}
	// SelfUpdate answers once the runner verified the binary; the runner then restarts.
	SelfUpdate = Op[Update, UpdateResult]{Spec{Name: OpUpdate, Method: "Update", Cap: CapSelfUpdate, Refusal: fault.ErrConflict,
		Lacks: "cannot update itself", Fix: "install the new version on that machine by hand"}}

	HostShell = Op[HostShellArgs, HostShellResult]{hostSpec(OpHostShell, "HostShell", false)}
	// HostReadFile answers HostFile, then its Size raw bytes.
	HostReadFile = Op[HostFileArgs, HostFile]{hostSpec(OpHostReadFile, "HostReadFile", true)}
	// HostWriteFile's request is followed by HostFileArgs.Size raw bytes; it answers true.
	HostWriteFile = Op[HostFileArgs, bool]{hostSpec(OpHostWriteFile, "HostWriteFile", true)}
	HostHome      = Op[None, string]{hostSpec(OpHostHome, "HostHome", false)}
	// HostInfo is asked instead of HostHome of a runner with CapHostGuard.
	HostInfoOp = Op[None, HostInfo]{Spec{Name: OpHostInfo, Method: "HostHome", Cap: CapHostGuard, Refusal: fault.ErrConflict,
		Lacks: "does not check host paths itself"}}

	RecordMark = Op[nodeapi.RecordingMark, bool]{recordingSpec(OpRecordMark, "RecordMark", false)}
	// SetRecording is sent when the runner connects and when an administrator changes the
	// recording settings.
	SetRecording    = Op[nodeapi.RecordingSettings, bool]{recordingSpec(OpSetRecording, "SetRecording", false)}
	Recordings      = Op[RecordingArgs, []nodeapi.Recording]{recordingSpec(OpRecordings, "Recordings", false)}
	Recording       = Op[RecordingArgs, nodeapi.Recording]{recordingSpec(OpRecording, "Recording", false)}
	DeleteRecording = Op[RecordingArgs, bool]{recordingSpec(OpDeleteRecording, "DeleteRecording", false)}
	RecordingShot   = Op[RecordingArgs, nodeapi.RecordingShot]{recordingSpec(OpRecordingShot, "RecordingShot", false)}
	// Replay answers true, then ReplayMessage frames until the replay ends or the server
	// closes the stream; the server sends the viewer's controls as frames.
	Replay = Op[RecordingArgs, bool]{recordingSpec(OpReplay, "Replay", true)}
)

// recordingSpec is an op of a runner that records its own desktops. The server does not send
// it to a runner without CapRecording: it records that runner's desktops itself, as before.
func recordingSpec(name, method string, stream bool) Spec {
	return Spec{Name: name, Method: method, Stream: stream, Cap: CapRecording,
		Lacks: "does not record its desktops itself"}
}

// hostSpec is a host tool op: refused for a runner that does not run host tools.
func hostSpec(name, method string, stream bool) Spec {
	return Spec{Name: name, Method: method, Stream: stream, Cap: CapHostTools, Refusal: fault.ErrConflict,
		Lacks: "does not run host tools", Fix: "update it, and start it without --no-host-tools"}
}

// Ops is every operation of the link, the one list both ends and their tests check against.
var Ops = []Spec{
	Ping.Spec, Status.Spec, Stats.Spec, StartPrepare.Spec, Prepare.Spec, SetPolicy.Spec, SetIdlePolicy.Spec,
	SetImageSources.Spec, Agent.Spec, Act.Spec, SetImage.Spec, ChooseDesktop.Spec, VMReady.Spec, AgentData.Spec,
	ForgetAgent.Spec, StopInstance.Spec, DeleteData.Spec, MarkBusy.Spec, MarkIdle.Spec, AdminAct.Spec,
	Guest.Spec, Tunnel.Spec, Watch.Spec, SelfUpdate.Spec,
	HostShell.Spec, HostReadFile.Spec, HostWriteFile.Spec, HostHome.Spec, HostInfoOp.Spec,
	Pause.Spec, Resume.Spec, SetEgress.Spec,
	RecordMark.Spec, SetRecording.Spec, Recordings.Spec, Recording.Spec, DeleteRecording.Spec, RecordingShot.Spec, Replay.Spec,
}
