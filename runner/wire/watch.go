package wire

import (
	"time"

	"cubicle/backend/nodeapi"
)

// CapEvents: the runner answers OpWatch with what changes on it (desktop states, preparation
// progress, node settings), so the server's UI follows a runner's desktops live.
const CapEvents = "events-v1"

// OpWatch opens the runner's event stream: the runner answers OK, then writes one framed
// WatchEvent per change until either side closes the stream. The server opens it once per
// link, before it reads the runner's status, so no change falls between the two.
const OpWatch = "watch"

// Kinds of a WatchEvent.
const (
	// WatchDesktop: a desktop's recorded state changed (WatchEvent.Desktop).
	WatchDesktop = "desktop"
	// WatchPrepare: an image preparation progressed or ended (WatchEvent.Prepare).
	WatchPrepare = "prepare"
	// WatchSettings: the node's settings changed (WatchEvent.Settings).
	WatchSettings = "settings"
	// WatchEgressBlocked: a desktop's egress policy refused a connection or a name
	// (WatchEvent.Blocked; runners with CapEgress).
	WatchEgressBlocked = "egressBlocked"
	// WatchResync: events were lost (the server was slower than the changes): read the
	// status afresh.
	WatchResync = "resync"
)

// WatchEvent is one frame of an OpWatch stream.
type WatchEvent struct {
	Kind     string                `json:"kind"`
	Desktop  *DesktopChange        `json:"desktop,omitempty"`
	Prepare  *nodeapi.PrepareState `json:"prepare,omitempty"`
	Settings *nodeapi.NodeSettings `json:"settings,omitempty"`
	Blocked  *EgressBlocked        `json:"blocked,omitempty"`
}

// EgressBlocked is a refusal of a runner desktop's egress policy (deskegress.Blocked on the
// wire).
type EgressBlocked struct {
	InstanceID  string    `json:"instanceId"`
	AgentID     string    `json:"agentId,omitempty"`
	AccountID   string    `json:"accountId,omitempty"`
	Destination string    `json:"destination"`
	Port        int       `json:"port,omitempty"`
	Proto       string    `json:"proto"`
	Time        time.Time `json:"time"`
}

// DesktopChange is a runner's desktop changing state (vm.InstanceChange on the wire; the
// runner converts it).
type DesktopChange struct {
	InstanceID string    `json:"instanceId"`
	Scope      string    `json:"scope"`
	AccountID  string    `json:"accountId,omitempty"`
	AgentID    string    `json:"agentId,omitempty"`
	State      string    `json:"state"`
	Previous   string    `json:"previous,omitempty"`
	LastError  string    `json:"lastError,omitempty"`
	Removed    bool      `json:"removed,omitempty"`
	At         time.Time `json:"at,omitzero"`
}
