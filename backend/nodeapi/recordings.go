package nodeapi

import "time"

// Recording is one recording of a desktop as the API lists it (backend/recording.Info is this
// type): a runner records its own desktops and answers the server's listings with it.
type Recording struct {
	ID        string `json:"id"`
	DesktopID string `json:"desktopId"`
	Node      string `json:"node"`
	// AccountID owns the recording (the desktop's account); AgentIDs are the agents it is
	// listed under: the desktop's own agent and every agent whose tool calls it shows.
	AccountID string    `json:"accountId"`
	AgentIDs  []string  `json:"agentIds"`
	StartedAt time.Time `json:"startedAt"`
	// EndedAt is zero while the recording is being written (Live).
	EndedAt    time.Time         `json:"endedAt,omitzero"`
	Live       bool              `json:"live"`
	DurationMs int64             `json:"durationMs"`
	Bytes      int64             `json:"bytes"`
	Keyframes  int               `json:"keyframes"`
	Width      int               `json:"width,omitempty"`
	Height     int               `json:"height,omitempty"`
	Markers    []RecordingMarker `json:"markers"`
	// Notes say what was found wrong when reading it back (a damaged segment skipped, the
	// end lost to a crash).
	Notes []string `json:"notes,omitempty"`
	// Runner is the runner node that keeps the recording ("" = this process). The server
	// sets it on what a runner answers; it never crosses the link or the API.
	Runner string `json:"-"`
}

// RecordingMarker is a moment of a recording worth jumping to.
type RecordingMarker struct {
	// At is the time since the recording started, in ms; for a tool call the moment its
	// result (and the agent's screenshot) came back.
	At int64 `json:"at"`
	// Kind is tool, turn, control or desktop.
	Kind  string `json:"kind"`
	Label string `json:"label"`
	RunID string `json:"runId,omitempty"`
	// AgentID is the agent of a tool call or turn; Tool the tool's name; BeganAt when the
	// call started (ms since the recording started).
	AgentID string `json:"agentId,omitempty"`
	Tool    string `json:"tool,omitempty"`
	BeganAt int64  `json:"beganAt,omitempty"`
	// Screenshot: the screenshot the agent received is kept with the recording
	// (GET …/recordings/:rid/markers/:index/screenshot).
	Screenshot bool   `json:"screenshot,omitempty"`
	Shot       string `json:"-"` // its file in the recording's directory
	ShotType   string `json:"-"`
}

// RecordingMark is a marker made on the server for a desktop a runner records (a tool call
// with the screenshot the agent received, a turn, a takeover): the runner adds it to the
// desktop's recording being written. Times are relative to when it was sent, so that the two
// machines' clocks need not agree.
type RecordingMark struct {
	DesktopID string          `json:"desktopId"`
	Marker    RecordingMarker `json:"marker"`
	// AgoMs is how long before sending the marked moment was; BeganAgoMs, when the marker
	// has a start (a tool call), how long before sending it began (0: none).
	AgoMs      int64 `json:"agoMs"`
	BeganAgoMs int64 `json:"beganAgoMs,omitempty"`
	// ShotType and Shot are the screenshot the agent received (none: empty).
	ShotType string `json:"shotType,omitempty"`
	Shot     []byte `json:"shot,omitempty"`
}

// RecordingSettings are the administrator's recording settings for one runner node, sent to
// it when it connects and when they change; the runner applies them to its own recordings.
type RecordingSettings struct {
	Record   bool  `json:"record"`   // false: the node's desktops are never recorded
	KeepDays int   `json:"keepDays"` // 0: kept whatever their age
	MaxBytes int64 `json:"maxBytes"` // 0: no limit
}

// RecordingShot is the screenshot kept with a recording's marker.
type RecordingShot struct {
	MediaType string `json:"mediaType"`
	Data      []byte `json:"data"`
}
