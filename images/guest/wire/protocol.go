package wire

import (
	"encoding/json"
	"os"
	"time"
)

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
	OpPing        = "ping" // answered at once with an empty result (heartbeats)
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
	// MaxScreen is the largest size resize accepts (FeatureResize).
	MaxScreen *Size `json:"max_screen,omitempty"`
}

// CancelArgs asks the driver to cancel the request with ID (sent with envelope id 0).
type CancelArgs struct {
	ID uint64 `json:"id"`
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
	// Drawn: the desktop session has drawn the screen (screenshots no longer wait for it).
	Drawn bool `json:"drawn"`
	// Cursor: the pointer's image and its changes come from XFIXES.
	Cursor bool `json:"cursor"`
}

// ScreenshotOptions selects a frame's encoding.
type ScreenshotOptions struct {
	Format   string `json:"format,omitempty"`    // "jpeg" (default) or "png"
	Quality  int    `json:"quality,omitempty"`   // JPEG quality 1–100, default 80
	MaxWidth int    `json:"max_width,omitempty"` // downscale to at most this width; 0 = native
	// NoPointer leaves the mouse pointer out; by default it is drawn into the image where
	// the screen shows it (like `scrot -p`), so a model sees where it points. Frame streams
	// (next_frame) never draw it.
	NoPointer bool `json:"no_pointer,omitempty"`
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
	// Settle reports how the settle wait before the capture went (wait_settled only).
	Settle *SettleReport `json:"settle,omitempty"`
}

// SettleOptions tunes a settle wait. With Quiet 0 (the default) the quiet period adapts to
// what is drawing (React, MinQuiet, MaxQuiet; docs/guest-protocol.md, "wait_settled"); a
// Quiet above 0 asks for exactly that quiet period instead.
type SettleOptions struct {
	Quiet      time.Duration     `json:"quiet,omitempty"`     // fixed: no change for this long
	Max        time.Duration     `json:"max,omitempty"`       // give up waiting after this; default 5s
	React      time.Duration     `json:"react,omitempty"`     // adaptive: wait this long for a first change; default 100ms
	MinQuiet   time.Duration     `json:"min_quiet,omitempty"` // adaptive: quiet after small changes; default 60ms
	MaxQuiet   time.Duration     `json:"max_quiet,omitempty"` // adaptive: quiet after large or staged changes; default 300ms
	Screenshot ScreenshotOptions `json:"screenshot"`
}

// StreamOptions tunes a frame stream (a client-side loop of next_frame requests).
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
	// CPUTime and MaxRSS are what the command cost, from the driver's wait4 of the child it
	// ran: user+system CPU time of the child and of the descendants it waited for, and the
	// peak resident memory in bytes of the largest of them. Older drivers send neither (0).
	CPUTime time.Duration `json:"cpu_time,omitempty"`
	MaxRSS  int64         `json:"max_rss,omitempty"`
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

// Envelope is the JSON part of every message. Requests carry Op and Args, responses Result
// or Error; ID pairs them.
type Envelope struct {
	ID     uint64          `json:"id"`
	Op     string          `json:"op,omitempty"`
	Args   json.RawMessage `json:"args,omitempty"`
	Result json.RawMessage `json:"result,omitempty"`
	Error  *WireError      `json:"error,omitempty"`
}
