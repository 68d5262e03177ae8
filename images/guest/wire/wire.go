// Package wire is the contract between Cubicle and its desktops, in one leaf package that both
// sides import: the host (backend/guest, backend/vm, backend/engine) and the in-guest driver
// (images/guest). It holds the bridge protocol — framing, message types, operation names,
// error codes and the protocol version — the names fixed inside a desktop container (the run
// directory, the socket, mount points, environment variables) and the label keys Cubicle puts
// on engine objects. It imports nothing of Cubicle: the host maps the error codes to its own
// error classes (backend/guest), the driver produces them with the constructors in errors.go.
//
// docs/guest-protocol.md describes the wire format. To extend the protocol, add an operation
// (its Op name and its argument and result types) here, serve it in the driver and call it
// from backend/guest; an older driver answers an unknown operation with CodeInvalid, so new
// operations need no version bump. Change ProtocolVersion only for a change that an older
// peer would misread.
package wire

// ProtocolVersion is the bridge protocol both ends speak. The handshake refuses a peer with
// another version (see docs/guest-protocol.md, "Versioning").
const ProtocolVersion = 1

// Names fixed inside a desktop container (the images' contract, images/README.md).
const (
	// RunDir is the driver's run directory inside a desktop: its socket lives there. The host
	// may bind-mount a directory of its own at RunDir to reach the socket.
	RunDir = "/run/cubicle"
	// SocketName is the file name of the driver's socket in its run directory.
	SocketName = "guest.sock"
	// SocketPath is the driver's socket inside a desktop with the default run directory.
	SocketPath = RunDir + "/" + SocketName
	// WorkspaceDir is the desktop user's persistent workspace (a volume).
	WorkspaceDir = "/home/cua/workspace"
	// BrowserProfileDir is the desktop browser's profile (a volume).
	BrowserProfileDir = "/home/cua/.config/chromium"
	// DriverPath is the driver binary in every desktop image (its entrypoint).
	DriverPath = "/usr/local/bin/cubicle-guest"
	// RelayFlag runs the driver binary as the exec link's relay: it connects to the running
	// driver's socket and copies its stdin/stdout to it. A flag rather than a subcommand, so
	// a driver too old to know it exits at once (unknown flag) instead of starting a second
	// desktop.
	RelayFlag = "--relay"
)

// RelayCommand is the exec link's command line inside a desktop.
func RelayCommand() []string { return []string{DriverPath, RelayFlag} }

// Environment variables the driver reads (each also has a flag, see cubicle-guest --help).
const (
	EnvRunDir    = "CUBICLE_RUN_DIR"
	EnvScreen    = "CUBICLE_SCREEN"
	EnvScreenMax = "CUBICLE_SCREEN_MAX" // largest size a resize may ask for, WxH (default 2560x1600)
	EnvDisplay   = "CUBICLE_DISPLAY"
	EnvSession   = "CUBICLE_SESSION"
	EnvWorkspace = "CUBICLE_WORKSPACE"
	EnvNoXServer = "CUBICLE_NO_XSERVER"
	EnvXvfb      = "CUBICLE_XVFB"
	EnvLogLevel  = "CUBICLE_LOG_LEVEL"
)

// Label keys Cubicle puts on the containers, volumes and images it creates.
const (
	// LabelManaged is "true" on every container, volume and image Cubicle creates.
	LabelManaged = "io.cubicle.managed"
	// LabelInstance is the desktop instance a container or volume belongs to.
	LabelInstance = "io.cubicle.instance"
	// LabelImageKey is the image key ("standard", "cursor", …) an image was built for.
	LabelImageKey = "io.cubicle.image-key"
	// LabelRecipe is the content hash of recipe + driver an image was built from.
	LabelRecipe = "io.cubicle.recipe-hash"
	// LabelNode is the execution node a desktop belongs to.
	LabelNode = "io.cubicle.node"
	// LabelRole is "desktop", "probe" or "task" on containers, "volume" on volumes.
	LabelRole = "io.cubicle.role"
	// LabelVolume is "workspace" or "browser-profile" on a desktop's volumes.
	LabelVolume = "io.cubicle.volume"
	// LabelCompose names a fixed desktop created by Compose.
	LabelCompose = "io.cubicle.compose-desktop"
	// LabelStore is the id of the data file (its store identity) that owns a container or
	// volume: a Cubicle touches only its own data file's objects.
	LabelStore = "io.cubicle.store"
	// LabelDataDir is the absolute data directory whose Cubicle made a container: leftovers
	// are found by it when the container has no run-directory mount (the exec link).
	LabelDataDir = "io.cubicle.data-dir"
	// LabelAccount, LabelAgent, LabelSession and LabelTask identify a helper's task desktop.
	LabelAccount = "io.cubicle.account"
	LabelAgent   = "io.cubicle.agent"
	LabelSession = "io.cubicle.session"
	LabelTask    = "io.cubicle.task"
	// LabelBenchRun marks the containers of one `cubicle bench` run.
	LabelBenchRun = "io.cubicle.bench-run"
	// LabelBenchPeersOf marks the bench's peer image built from a desktop image.
	LabelBenchPeersOf = "io.cubicle.bench-peers-of"
)
