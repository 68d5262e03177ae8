// Package guest speaks the bridge protocol of Cubicle's in-guest driver (cubicle-guest, in
// images/guest): the message framing and types shared by both ends, and the typed Client the
// rest of Cubicle uses to drive a desktop — screenshots, a change-driven frame stream,
// settle waits, input, exec and files — over the unix socket the driver serves in the
// instance's run directory. docs/guest-protocol.md describes the wire format.
package guest

import (
	"bufio"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"time"

	"cubicle/backend/fault"
)

// ProtocolVersion is the bridge protocol this package speaks. Both ends must speak the same
// version; the handshake refuses anything else (see docs/guest-protocol.md, "Versioning").
const ProtocolVersion = 1

// Limits of the protocol. A message whose parts exceed them is refused.
const (
	// MaxHeader caps the JSON part of a message.
	MaxHeader = 1 << 20
	// MaxFileSize caps one file read or write.
	MaxFileSize = 64 << 20
	// MaxExecOutput caps ExecRequest.MaxOutput (per stream).
	MaxExecOutput = 32 << 20
	// MaxBlob caps the binary part of a message (a file, both exec streams, a frame).
	MaxBlob = MaxFileSize
	// DefaultExecOutput is the per-stream output cap when ExecRequest.MaxOutput is 0.
	DefaultExecOutput = 1 << 20
)

// Operation names on the wire.
const (
	OpHello       = "hello"
	OpHealth      = "health"
	OpScreenshot  = "screenshot"
	OpWaitSettled = "wait_settled"
	OpNextFrame   = "next_frame"
	OpInput       = "input"
	OpExec        = "exec"
	OpReadFile    = "read_file"
	OpWriteFile   = "write_file"
	OpStat        = "stat"
	OpListDir     = "list_dir"
	OpMkdir       = "mkdir"
	OpCancel      = "cancel"
)

// Error codes on the wire; each maps to one fault class (CodeInternal to none).
const (
	CodeNotFound    = "not_found"
	CodeExists      = "exists"
	CodeConflict    = "conflict"
	CodeInvalid     = "invalid"
	CodeForbidden   = "forbidden"
	CodeUnavailable = "unavailable"
	CodeInternal    = "internal"
)

// Size is a screen size in pixels.
type Size struct {
	Width  int `json:"width"`
	Height int `json:"height"`
}

// HelloArgs opens a connection: the protocol the client speaks.
type HelloArgs struct {
	Protocol int    `json:"protocol"`
	Client   string `json:"client,omitempty"`
}

// Hello is the driver's side of the handshake.
type Hello struct {
	Protocol int    `json:"protocol"` // the driver's protocol version
	Driver   string `json:"driver"`   // the driver's build version
	Screen   Size   `json:"screen"`
	// Features lists optional operations the driver offers beyond its protocol version (e.g.
	// FeatureTunnel); a client asks for one only when it is listed.
	Features []string `json:"features,omitempty"`
}

// Health reports the state of the desktop inside the guest.
type Health struct {
	XServer   bool          `json:"x_server"`   // the X server accepts connections and capture works
	Session   bool          `json:"session"`    // the desktop session process is running
	Uptime    time.Duration `json:"uptime"`     // since the driver started (nanoseconds on the wire)
	Screen    Size          `json:"screen"`     // 0×0 while the X server is down
	SHM       bool          `json:"shm"`        // captures use MIT-SHM
	Damage    bool          `json:"damage"`     // change detection uses XDAMAGE (else polling)
	XRestarts int           `json:"x_restarts"` // how often the X server was restarted
}

// ScreenshotOptions selects a frame's encoding.
type ScreenshotOptions struct {
	Format   string `json:"format,omitempty"`    // "jpeg" (default) or "png"
	Quality  int    `json:"quality,omitempty"`   // JPEG quality 1–100, default 80
	MaxWidth int    `json:"max_width,omitempty"` // downscale to at most this width; 0 = native
}

// Frame is one encoded screen image. ID is the screen generation it shows: it grows whenever
// the screen changes, so equal IDs mean the same content.
type Frame struct {
	ID       uint64    `json:"id"`
	Width    int       `json:"width"`
	Height   int       `json:"height"`
	Format   string    `json:"format"`
	Data     []byte    `json:"-"` // the blob of the message
	Captured time.Time `json:"captured"`
}

// SettleOptions tunes WaitSettled.
type SettleOptions struct {
	Quiet      time.Duration     `json:"quiet,omitempty"` // no change for this long; default 300ms
	Max        time.Duration     `json:"max,omitempty"`   // give up waiting after this; default 5s
	Screenshot ScreenshotOptions `json:"screenshot"`
}

// StreamOptions tunes a frame stream.
type StreamOptions struct {
	ScreenshotOptions
	MaxFPS int `json:"max_fps,omitempty"` // default 30
}

// NextFrameArgs asks for the first frame whose generation is above After.
type NextFrameArgs struct {
	After      uint64            `json:"after"`
	Screenshot ScreenshotOptions `json:"screenshot"`
}

// Input is one input action. Coordinates are screen pixels.
type Input struct {
	// Action is one of move, click, double_click, right_click, middle_click, mouse_down,
	// mouse_up, drag, scroll, key, type.
	Action string `json:"action"`
	X      int    `json:"x,omitempty"`
	Y      int    `json:"y,omitempty"`
	ToX    int    `json:"to_x,omitempty"` // drag target
	ToY    int    `json:"to_y,omitempty"`
	Button int    `json:"button,omitempty"`  // 1 left (default), 2 middle, 3 right
	DeltaX int    `json:"delta_x,omitempty"` // scroll clicks, positive = right
	DeltaY int    `json:"delta_y,omitempty"` // scroll clicks, positive = down
	Keys   string `json:"keys,omitempty"`    // "ctrl+alt+t", "Return", "ctrl+l ctrl+c"
	Text   string `json:"text,omitempty"`    // for type
}

// ExecRequest runs a program in the guest as the driver's user (never a login shell).
type ExecRequest struct {
	Command   []string          `json:"command,omitempty"` // argv; or
	Shell     string            `json:"shell,omitempty"`   // run with /bin/sh -c
	Cwd       string            `json:"cwd,omitempty"`     // default the workspace; relative to it
	Env       map[string]string `json:"env,omitempty"`     // added to the driver's environment
	Timeout   time.Duration     `json:"timeout,omitempty"` // 0 = none; the process group is killed
	MaxOutput int               `json:"max_output,omitempty"`
	Stdin     []byte            `json:"-"` // the blob of the message
}

// ExecResult is how a command ended. A command killed by a signal has ExitCode 128+signal.
type ExecResult struct {
	ExitCode        int           `json:"exit_code"`
	Stdout          []byte        `json:"-"`
	Stderr          []byte        `json:"-"`
	StdoutLen       int           `json:"stdout_len"` // the blob is Stdout followed by Stderr
	StderrLen       int           `json:"stderr_len"`
	StdoutTruncated bool          `json:"stdout_truncated"`
	StderrTruncated bool          `json:"stderr_truncated"`
	TimedOut        bool          `json:"timed_out"`
	Duration        time.Duration `json:"duration"`
}

// FileArgs are the arguments of the file operations.
type FileArgs struct {
	Path     string      `json:"path"`
	MaxBytes int64       `json:"max_bytes,omitempty"` // read_file
	Mode     os.FileMode `json:"mode,omitempty"`      // write_file
	Parents  bool        `json:"parents,omitempty"`   // mkdir -p
}

// FileInfo describes a file in the guest.
type FileInfo struct {
	Name    string      `json:"name"`
	Path    string      `json:"path"` // absolute
	Size    int64       `json:"size"`
	Mode    os.FileMode `json:"mode"`
	ModTime time.Time   `json:"mod_time"`
	IsDir   bool        `json:"is_dir"`
	Link    string      `json:"link,omitempty"` // a symlink's target
}

// WireError is an error on the wire.
type WireError struct {
	Code    string `json:"code"`
	Message string `json:"message"`
}

// Envelope is the JSON part of every message. Requests carry Op and Args, responses Result
// or Error; ID pairs them.
type Envelope struct {
	ID     uint64          `json:"id"`
	Op     string          `json:"op,omitempty"`
	Args   json.RawMessage `json:"args,omitempty"`
	Result json.RawMessage `json:"result,omitempty"`
	Error  *WireError      `json:"error,omitempty"`
}

// WriteMessage writes one message: two big-endian uint32 lengths (JSON, blob), the JSON
// envelope and the blob, in a single write.
func WriteMessage(w io.Writer, env *Envelope, blob []byte) error {
	js, err := json.Marshal(env)
	if err != nil {
		return err
	}
	if len(js) > MaxHeader || len(blob) > MaxBlob+MaxHeader {
		return fault.Invalid("message too large (%d bytes of JSON, %d of data)", len(js), len(blob))
	}
	var hdr [8]byte
	binary.BigEndian.PutUint32(hdr[0:], uint32(len(js)))
	binary.BigEndian.PutUint32(hdr[4:], uint32(len(blob)))
	if c, ok := w.(net.Conn); ok {
		bufs := net.Buffers{hdr[:], js, blob}
		_, err = bufs.WriteTo(c)
		return err
	}
	buf := append(append(hdr[:0:0], hdr[:]...), js...)
	if _, err := w.Write(buf); err != nil {
		return err
	}
	_, err = w.Write(blob)
	return err
}

// ErrTooLarge is returned by ReadMessage for a message over the limits; the stream is then
// out of sync and must be closed.
var ErrTooLarge = errors.New("guest: message exceeds protocol limits")

// ReadMessage reads one message written by WriteMessage.
func ReadMessage(r *bufio.Reader, env *Envelope) (blob []byte, err error) {
	var hdr [8]byte
	if _, err := io.ReadFull(r, hdr[:]); err != nil {
		return nil, err
	}
	jn, bn := binary.BigEndian.Uint32(hdr[0:]), binary.BigEndian.Uint32(hdr[4:])
	if jn > MaxHeader || bn > MaxBlob+MaxHeader {
		return nil, fmt.Errorf("%w (%d bytes of JSON, %d of data)", ErrTooLarge, jn, bn)
	}
	buf := make([]byte, int(jn)+int(bn))
	if _, err := io.ReadFull(r, buf); err != nil {
		return nil, err
	}
	*env = Envelope{}
	if err := json.Unmarshal(buf[:jn], env); err != nil {
		return nil, fmt.Errorf("guest: malformed message: %w", err)
	}
	if bn == 0 {
		return nil, nil
	}
	return buf[jn:], nil
}

// ErrorFor converts a wire error into an error of the matching fault class.
func ErrorFor(op string, we *WireError) error {
	class := map[string]error{
		CodeNotFound: fault.ErrNotFound, CodeExists: fault.ErrExists, CodeConflict: fault.ErrConflict,
		CodeInvalid: fault.ErrInvalid, CodeForbidden: fault.ErrForbidden, CodeUnavailable: fault.ErrUnavailable,
	}[we.Code]
	if class == nil {
		return fmt.Errorf("desktop driver: %s: %s", op, we.Message)
	}
	return fault.New(class, "desktop driver: %s: %s", op, we.Message)
}

// CodeOf returns the wire code for err's fault class (CodeInternal when it has none).
func CodeOf(err error) string {
	switch fault.Class(err) {
	case fault.ErrNotFound:
		return CodeNotFound
	case fault.ErrExists:
		return CodeExists
	case fault.ErrConflict:
		return CodeConflict
	case fault.ErrInvalid:
		return CodeInvalid
	case fault.ErrForbidden:
		return CodeForbidden
	case fault.ErrUnavailable:
		return CodeUnavailable
	}
	return CodeInternal
}
