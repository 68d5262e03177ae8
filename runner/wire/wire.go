// Package wire is the runner link's contract, imported by both ends: the runner (package
// runner) and the server's node registry (backend/nodes). See docs/runner-protocol.md.
//
// A runner dials GET /api/runner/connect as a websocket with its token in
// "Authorization: Bearer". It sends one text message, its Hello; the server answers one text
// message, Welcome (or closes the websocket with a close reason saying why it refused). From
// then on binary messages carry a yamux session (Conn adapts the websocket to a net.Conn): the
// server is the yamux client and opens one stream per call, the runner serves them. A stream
// starts with a framed Request; the runner answers a framed Response. The ops OpGuest and
// OpTunnel then carry raw bytes both ways until either side closes the stream.
//
// Every operation is declared once, with its argument and result types and the capability it
// needs, in ops.go (Op, Ops); the server's client and the runner's dispatch table are built
// from those declarations. The payloads are backend/nodeapi's shapes: this package imports
// only leaf packages, so no stored record crosses the link as it is.
package wire

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/hashicorp/yamux"

	"cubicle/backend/fault"
	"cubicle/backend/nodeapi"
)

// Protocol is the link protocol's version. A server refuses a runner with another one.
const Protocol = nodeapi.Version

// ConnectPath is the server's websocket route a runner dials.
const ConnectPath = "/api/runner/connect"

// Capabilities a runner advertises in its Hello.
const (
	// CapHostTools: the runner runs the host tools of agents whose desktop is on it.
	CapHostTools = "host-computer-tools-v1"
	// CapIdlePolicy: the runner stops dynamic desktops by its own idle timer (SPEC §1.5).
	CapIdlePolicy = "idle-policy-v1"
	// CapGuestRelay: OpGuest and OpTunnel relay a desktop's driver over a stream.
	CapGuestRelay = "guest-relay-v1"
	// CapSelfUpdate: the runner replaces its own binary when asked (OpUpdate, Welcome.Update).
	CapSelfUpdate = "self-update-v1"
	// CapNodeSettings: the runner applies node settings (isolation, max instances) and image
	// sources the server sends (OpSetPolicy, OpSetImageSources).
	CapNodeSettings = "node-settings-v1"
	// CapStats: the runner answers OpStats with its running desktops' CPU and memory.
	CapStats = "stats-v1"
	// CapHostGuard: the runner checks host file paths itself (HostFileArgs.Protected, its own
	// data directory, symbolic links resolved on its disk) and answers OpHostInfo.
	CapHostGuard = "host-guard-v1"
	// CapHostSandbox: the runner runs host tools in an OS sandbox under the policy the server
	// sends (HostShellArgs.Sandbox, HostFileArgs.Sandbox) and reports its kind in HostInfo.
	CapHostSandbox = "host-sandbox-v1"
	// CapPause: the runner pauses and resumes desktops (OpPause, OpResume) and applies the
	// idle policy's pause (PolicyArgs.PauseMinutes).
	CapPause = "pause-v1"
	// CapEgress: the runner enforces the desktops' egress policies the server sends
	// (OpSetEgress) and reports refusals on its event stream (WatchEgressBlocked).
	CapEgress = "desktop-egress-v1"
	// CapRecording: the runner records its own desktops on its disk (backend/recording, its
	// retention set by OpSetRecording), takes the server's markers for them (OpRecordMark)
	// and serves their listings, screenshots and replays on demand (docs/recording.md).
	CapRecording = "recording-v1"
)

// DownloadPath is the server's route of runner binaries (?os=&arch=&version=), authenticated
// with the runner's token; the answer carries the binary's SHA-256 in HeaderSHA256.
const DownloadPath = "/api/runner/download"

// Headers of a download.
const (
	HeaderSHA256  = "X-Cubicle-Sha256"
	HeaderVersion = "X-Cubicle-Version"
)

// Update names the binary a runner should switch to: Welcome.Update (with --auto-update) and
// the arguments of OpUpdate (an administrator's Update).
type Update struct {
	Version string `json:"version"`
	SHA256  string `json:"sha256"` // hex
	Size    int64  `json:"size"`
}

// UpdateResult answers OpUpdate: the runner verified the binary and restarts as Version.
type UpdateResult struct {
	From    string `json:"from"`
	Version string `json:"version"`
}

// Hello is the runner's first message.
type Hello struct {
	Protocol     int      `json:"protocol"`
	Version      string   `json:"version"`
	OS           string   `json:"os"`
	Arch         string   `json:"arch"`
	Engine       string   `json:"engine"` // "podman", "docker", "kubernetes" or "" when the runner has none
	EngineError  string   `json:"engineError,omitempty"`
	Capabilities []string `json:"capabilities"`
	MaxInstances int      `json:"maxInstances"`
	Name         string   `json:"name,omitempty"` // --name, for people
	// Running is how many desktops run on the runner as it connects.
	Running int `json:"running"`
	// UpdateError is why the runner's last automatic update failed (it kept its version).
	UpdateError string `json:"updateError,omitempty"`
}

// Welcome is the server's answer to an accepted Hello.
type Welcome struct {
	NodeID string `json:"nodeId"`
	Name   string `json:"name"`
	Cloud  bool   `json:"cloud"`
	// Update, when set, is the version the runner's channel wants it to run (it differs from
	// the runner's); a runner started with --auto-update switches to it.
	Update *Update `json:"update,omitempty"`
}

// Ops of a Request.
const (
	OpPing            = "ping"
	OpStatus          = "status"
	OpStartPrepare    = "startPrepare"
	OpPrepare         = "prepare"
	OpSetPolicy       = "setPolicy"
	OpSetIdlePolicy   = "setIdlePolicy"
	OpSetImageSources = "setImageSources"
	OpSetEgress       = "setEgress"
	OpAgent           = "agent"
	OpAct             = "act"
	OpSetImage        = "setImage"
	OpChooseDesktop   = "chooseDesktop"
	OpVMReady         = "vmReady"
	OpStopInstance    = "stopInstance"
	OpDeleteData      = "deleteData"
	OpMarkBusy        = "markBusy"
	OpMarkIdle        = "markIdle"
	OpAdminAct        = "adminAct"
	OpAgentData       = "agentData"
	OpForgetAgent     = "forgetAgent"
	OpGuest           = "guest"  // then the driver's protocol, raw, both ways
	OpTunnel          = "tunnel" // then the tunnel's bytes, raw, both ways
	OpUpdate          = "update" // args Update; result UpdateResult, then the runner restarts
	OpStats           = "stats"  // result []nodeapi.InstanceStats (capability CapStats)
	OpPause           = "pause"  // args AgentArgs; result nodeapi.AgentView (capability CapPause)
	OpResume          = "resume" // args AgentArgs; result nodeapi.AgentView (capability CapPause)
	// Recordings (capability CapRecording).
	OpRecordMark      = "recordMark"      // args nodeapi.RecordingMark; result true
	OpSetRecording    = "setRecording"    // args nodeapi.RecordingSettings; result true
	OpRecordings      = "recordings"      // args RecordingArgs; result []nodeapi.Recording
	OpRecording       = "recording"       // args RecordingArgs; result nodeapi.Recording
	OpDeleteRecording = "deleteRecording" // args RecordingArgs; result true
	OpRecordingShot   = "recordingShot"   // args RecordingArgs; result nodeapi.RecordingShot
	OpReplay          = "replay"          // args RecordingArgs; result true, then ReplayMessage frames (and control frames back)
)

// Request opens a stream.
type Request struct {
	Op   string          `json:"op"`
	Args json.RawMessage `json:"args,omitempty"`
}

// Response answers a Request: Result, or Error.
type Response struct {
	Result json.RawMessage `json:"result,omitempty"`
	Error  *Error          `json:"error,omitempty"`
}

// Error is an error crossing the link, with its fault class.
type Error struct {
	Class   string `json:"class,omitempty"` // one of the class names below; "" = unclassified
	Message string `json:"message"`
}

var classes = map[string]error{
	"not_found": fault.ErrNotFound, "exists": fault.ErrExists, "conflict": fault.ErrConflict,
	"invalid": fault.ErrInvalid, "forbidden": fault.ErrForbidden, "unauthenticated": fault.ErrUnauthenticated,
	"unavailable": fault.ErrUnavailable,
}

// ErrorOf encodes err for the wire, keeping its fault class.
func ErrorOf(err error) *Error {
	if err == nil {
		return nil
	}
	c := fault.Class(err)
	for name, class := range classes {
		if c == class {
			return &Error{Class: name, Message: err.Error()}
		}
	}
	return &Error{Message: err.Error()}
}

// Err turns a wire error back into an error of its class.
func (e *Error) Err() error {
	if e == nil {
		return nil
	}
	if class, ok := classes[e.Class]; ok {
		return fault.New(class, "%s", e.Message)
	}
	return errors.New(e.Message)
}

// MaxFrame bounds one framed message (a status with many desktops is a few KiB).
const MaxFrame = 8 << 20

// WriteFrame writes v as JSON behind a 4-byte big-endian length.
func WriteFrame(w io.Writer, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	if len(b) > MaxFrame {
		return fmt.Errorf("runner link: message of %d bytes is over the limit of %d", len(b), MaxFrame)
	}
	buf := make([]byte, 4+len(b))
	binary.BigEndian.PutUint32(buf, uint32(len(b)))
	copy(buf[4:], b)
	_, err = w.Write(buf)
	return err
}

// ReadFrame reads one framed JSON message into v; it reads nothing past the frame, so raw
// bytes may follow on the same stream.
func ReadFrame(r io.Reader, v any) error {
	var hdr [4]byte
	if _, err := io.ReadFull(r, hdr[:]); err != nil {
		return err
	}
	n := binary.BigEndian.Uint32(hdr[:])
	if n > MaxFrame {
		return fmt.Errorf("runner link: message of %d bytes is over the limit of %d", n, MaxFrame)
	}
	b := make([]byte, n)
	if _, err := io.ReadFull(r, b); err != nil {
		return err
	}
	return json.Unmarshal(b, v)
}

// Keepalive settings of the session on both ends: a link that stops carrying bytes is noticed
// within about KeepAlive + WriteTimeout, and every stream on it then fails.
const (
	KeepAlive    = 5 * time.Second
	WriteTimeout = 10 * time.Second
)

// BufferSize is the websocket read and write buffer of both ends (the runner's dialer, the
// server's upgrader). gorilla/websocket's default of 4 KiB splits every yamux frame larger than
// that into several websocket frames, each its own write (and, from the runner, its own mask
// pass); a frame stream's updates are tens of KiB.
const BufferSize = 64 << 10

// SessionConfig is the yamux configuration of both ends.
func SessionConfig() *yamux.Config {
	c := yamux.DefaultConfig()
	c.KeepAliveInterval = KeepAlive
	c.ConnectionWriteTimeout = WriteTimeout
	c.StreamOpenTimeout = 30 * time.Second
	c.LogOutput = io.Discard
	return c
}

// AgentArgs carries the agent a desktop call is for: the server's agent as a node is told of
// it (never its model settings), which the runner keeps so its manager can resolve the
// agent's desktop.
type AgentArgs struct {
	Agent     nodeapi.Agent `json:"agent"`
	Action    string        `json:"action,omitempty"`
	ImageKey  string        `json:"imageKey,omitempty"`
	DesktopID string        `json:"desktopId,omitempty"`
	// AgentData and ForgetAgent
	Measure       bool `json:"measure,omitempty"`
	RemoveDesktop bool `json:"removeDesktop,omitempty"`
	DeleteData    bool `json:"deleteData,omitempty"`
}

// PolicyArgs are the arguments of wire.OpSetPolicy and wire.OpSetIdlePolicy.
type PolicyArgs struct {
	Isolation    string `json:"isolation,omitempty"`
	MaxInstances int    `json:"maxInstances,omitempty"`
	RequestID    string `json:"requestId,omitempty"`
	Minutes      int    `json:"minutes,omitempty"`
	// PauseMinutes is the idle pause (nil: keep it; sent only to a runner with CapPause).
	PauseMinutes *int `json:"pauseMinutes,omitempty"`
}

// EgressArgs are the arguments of wire.OpSetEgress: the node's desktop egress policy and the
// agents' own (docs/egress.md), replacing what the runner had.
type EgressArgs struct {
	Node   nodeapi.EgressPolicy            `json:"node"`
	Agents map[string]nodeapi.EgressPolicy `json:"agents,omitempty"`
}

// InstanceArgs name a desktop of the runner (and, for a tunnel, the address inside it).
type InstanceArgs struct {
	ID       string `json:"id"`
	Reason   string `json:"reason,omitempty"`
	Who      string `json:"who,omitempty"`
	Address  string `json:"address,omitempty"`
	ImageKey string `json:"imageKey,omitempty"`
	Action   string `json:"action,omitempty"` // AdminAct
	Force    bool   `json:"force,omitempty"`  // AdminAct
}

// RecordingArgs name a runner's recording (or an agent's, for OpRecordings). AccountID and
// AgentID scope it as the API does: a recording of another account, or not listed under the
// agent, is not found. An empty AccountID (OpRecording, OpDeleteRecording) is an
// administrator's look-up: the recording must still be listed under AgentID.
type RecordingArgs struct {
	AccountID string `json:"accountId,omitempty"`
	AgentID   string `json:"agentId"`
	ID        string `json:"id,omitempty"`
	// Marker is the marker's index (OpRecordingShot).
	Marker int `json:"marker,omitempty"`
	// FromMs and Speed start a replay (OpReplay).
	FromMs int64   `json:"fromMs,omitempty"`
	Speed  float64 `json:"speed,omitempty"`
}

// ReplayMessage is one message of a replay, as the computer channel's websocket carries it:
// binary (a version 2 update) or text (cursor, pointer, the replay's position). The runner
// writes them as frames after OpReplay's answer; the server writes the viewer's controls back
// as frames (the JSON the viewer sent: seek, speed, pause, play).
type ReplayMessage struct {
	Binary bool   `json:"binary,omitempty"`
	Data   []byte `json:"data"`
}

// ReadyResult answers wire.OpVMReady.
type ReadyResult struct {
	OK  bool   `json:"ok"`
	Why string `json:"why,omitempty"`
}
