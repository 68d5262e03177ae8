package events

import "time"

// The payloads of the event types. They are the JSON the UI's stream carries in "data" (the
// field names are the wire contract, docs/events.md); publishers fill them, readers switch on
// Event.Type and assert the payload type.

// Desktop is the payload of DesktopState: one desktop's recorded state changed.
type Desktop struct {
	InstanceID string `json:"instanceId"`
	NodeID     string `json:"nodeId,omitempty"`
	Scope      string `json:"scope"` // shared | agent | browser | task | compose
	AccountID  string `json:"accountId,omitempty"`
	AgentID    string `json:"agentId,omitempty"`
	State      string `json:"state"`
	Previous   string `json:"previous,omitempty"`
	LastError  string `json:"lastError,omitempty"`
	// Removed: the record itself is gone (a task desktop whose task ended, an orphaned desktop
	// an administrator removed, a deleted agent's desktop).
	Removed bool `json:"removed,omitempty"`
}

// Stats is the payload of DesktopStats: a sample of every running desktop's resources.
type Stats struct {
	NodeID    string          `json:"nodeId"`
	Instances []InstanceStats `json:"instances"`
}

// InstanceStats is one desktop's resources as the engine reports them.
type InstanceStats struct {
	InstanceID  string  `json:"instanceId"`
	CPUPercent  float64 `json:"cpuPercent"` // of one CPU: 200 = two CPUs busy
	MemoryBytes uint64  `json:"memoryBytes"`
	MemoryLimit uint64  `json:"memoryLimit,omitempty"`
	PIDs        uint64  `json:"pids,omitempty"`
}

// Prepare is the payload of PrepareProgress.
type Prepare struct {
	NodeID     string    `json:"nodeId"`
	ImageKey   string    `json:"imageKey"`
	Running    bool      `json:"running"`
	Phase      string    `json:"phase"`
	Message    string    `json:"message"`
	Percent    float64   `json:"percent"`
	StartedAt  time.Time `json:"startedAt"`
	FinishedAt time.Time `json:"finishedAt,omitzero"`
	Error      string    `json:"error,omitempty"`
}

// Images is the payload of ImagesChanged: the image keys now prepared on a node.
type Images struct {
	NodeID   string   `json:"nodeId"`
	Prepared []string `json:"prepared"`
}

// Control is the payload of ControlChanged.
type Control struct {
	DesktopID string `json:"desktopId"`
	// Kind is the change: taken, renewed, handed_back, expired, revoked, task_started, task_ended.
	Kind string `json:"kind"`
	// HolderKind is person or agent; Holder names them ("alice", "agent Bot"); Activity is a
	// sentence for people.
	HolderKind string    `json:"holderKind"`
	Holder     string    `json:"holder"`
	Activity   string    `json:"activity"`
	AgentID    string    `json:"agentId,omitempty"` // the agent whose channel or task it is
	Version    uint64    `json:"version"`
	ExpiresAt  time.Time `json:"expiresAt,omitzero"`
}

// Timeline is the payload of TimelineEntry: a tool run of a chat session was recorded
// (RUNNING) or finished. Run is the run as GET /api/app/chat/sessions/:id/history lists it.
type Timeline struct {
	SessionID string `json:"sessionId"`
	RunID     string `json:"runId"`
	Tool      string `json:"tool"`
	Status    string `json:"status"`
	Run       any    `json:"run"`
}

// Confirm is the payload of ConfirmRequested: calls of chat session SessionID (made by Source,
// e.g. "MCP: laptop") wait for the person's answer (State "asked"), given like any other
// confirmation (POST /api/app/chat with confirmResults for that session), or the wait ended
// (State "answered", "expired" or "cancelled").
type Confirm struct {
	SessionID string `json:"sessionId"`
	AgentID   string `json:"agentId"`
	Source    string `json:"source"`
	State     string `json:"state"`
	ToolCalls any    `json:"toolCalls,omitempty"`
	Reason    string `json:"reason,omitempty"`
	Deadline  string `json:"deadline,omitempty"` // RFC 3339: when an unanswered request is denied
}

// Agent is the payload of AgentChanged.
type Agent struct {
	AgentID   string `json:"agentId"`
	AccountID string `json:"accountId"`
	// Change is created, updated or deleted.
	Change string `json:"change"`
}

// Agent changes.
const (
	AgentCreated = "created"
	AgentUpdated = "updated"
	AgentDeleted = "deleted"
)

// Node is the payload of NodeChanged: the node's settings as they are now.
type Node struct {
	NodeID            string `json:"nodeId"`
	Isolation         string `json:"isolation"`
	MaxInstances      int    `json:"maxInstances"`
	IdleStopMinutes   int    `json:"idleStopMinutes"`
	PauseAfterMinutes int    `json:"pauseAfterMinutes"`
	HostScreenControl bool   `json:"hostScreenControl"`
}

// Runner is the payload of RunnerStatus: an execution node connected, disconnected, was
// revoked, or its desktop counts changed. The managed local runner announces itself as
// connected when the backend starts; the hub (backend/nodes) publishes the runners'.
type Runner struct {
	NodeID       string   `json:"nodeId"`
	Name         string   `json:"name,omitempty"`
	State        string   `json:"state"` // connected | disconnected | revoked
	Managed      bool     `json:"managed"`
	Cloud        bool     `json:"cloud,omitempty"`
	Version      string   `json:"version,omitempty"`
	OS           string   `json:"os,omitempty"`
	Arch         string   `json:"arch,omitempty"`
	Engine       string   `json:"engine,omitempty"`
	EngineError  string   `json:"engineError,omitempty"`
	Capabilities []string `json:"capabilities,omitempty"`
	// Desktops counts the node's desktops (running of max) as last known.
	Desktops *RunnerDesktops `json:"desktops,omitempty"`
	// LastSeen is when a disconnected runner was last connected.
	LastSeen time.Time `json:"lastSeen,omitzero"`
	Message  string    `json:"message,omitempty"`
	// Duplicate: a second runner process tried to connect with this runner's token while its
	// link was alive, and was refused (two machines, or a copied token).
	Duplicate *RunnerDuplicate `json:"duplicate,omitempty"`
}

// RunnerDuplicate is the last refused second connection on a runner's token.
type RunnerDuplicate struct {
	From string    `json:"from"` // its network address
	At   time.Time `json:"at"`
}

// RunnerDesktops counts a runner's desktops.
type RunnerDesktops struct {
	Running int `json:"running"`
	Max     int `json:"max"`
}

// Runner states.
const (
	RunnerConnecting   = "connecting" // the server's managed local runner while it starts
	RunnerConnected    = "connected"
	RunnerDisconnected = "disconnected"
	RunnerRevoked      = "revoked"
)

// DesktopUnreachable is the Desktop.State of a runner's desktop while its runner's link is
// down (the desktop itself may still run there; nobody can reach it).
const DesktopUnreachable = "unreachable"

// EgressBlocked is the payload of DesktopEgressBlocked: the desktop's egress policy refused a
// connection (Proto tcp, udp, icmp, other) or a DNS name (Proto dns) at Time.
type EgressBlocked struct {
	NodeID      string    `json:"nodeId"`
	InstanceID  string    `json:"instanceId"`
	AccountID   string    `json:"accountId,omitempty"`
	AgentID     string    `json:"agentId,omitempty"`
	Destination string    `json:"destination"`
	Port        int       `json:"port,omitempty"`
	Proto       string    `json:"proto"`
	Time        time.Time `json:"time"`
}
