// Package nodeapi is the contract of an execution node's desktops: the views and payloads a
// node answers with and is sent, whether the node is this process's desktop manager (package
// vm) or a runner reached over its link (runner/wire, backend/nodes). It is a leaf: it
// imports nothing of the product, so both ends of the runner link, the HTTP API and the
// desktop manager share one definition of each shape.
//
// These shapes are not stored records. Package store keeps its own records; the node
// converts them to these shapes in one place (vm's contract.go), so a field added to a
// stored record never reaches the wire, the API or an older runner by accident. The JSON
// names are the wire format of runner link protocol Version: a field may be added (older
// peers ignore it, newer ones read its zero value from older peers), but a JSON name is
// never renamed or given another meaning within a version.
package nodeapi

import "time"

// Version is the version of these shapes and of the runner link protocol that carries them
// (runner/wire.Protocol).
const Version = 1

// EngineView says which container engine the node uses, or what is wrong.
type EngineView struct {
	Found    bool   `json:"found"`
	Kind     string `json:"kind,omitempty"`
	Version  string `json:"version,omitempty"`
	Socket   string `json:"socket,omitempty"`
	Rootless bool   `json:"rootless"`
	Arch     string `json:"arch,omitempty"`
	Problem  string `json:"problem,omitempty"` // what is wrong and how to fix it
	// Unreachable says why the engine stopped answering (its event stream or a comparison
	// failed), while it does not; desktops are then unreachable and refused (fail closed).
	Unreachable string `json:"unreachable,omitempty"`
	// Connecting: the engine is still being connected (the server has just started); the
	// desktops are shown as they were recorded and answer once it is there.
	Connecting bool `json:"connecting,omitempty"`
}

// ImageView is one image key with its prepared record, if any.
type ImageView struct {
	Key           string        `json:"imageKey"`
	Prepared      bool          `json:"prepared"`
	Ref           string        `json:"ref,omitempty"`
	ImageID       string        `json:"imageId,omitempty"`
	RecipeHash    string        `json:"recipeHash,omitempty"`
	DriverVersion string        `json:"driverVersion,omitempty"`
	PreparedAt    time.Time     `json:"preparedAt,omitzero"`
	Prepare       *PrepareState `json:"prepare,omitempty"` // running or last preparation
}

// InstanceView is a desktop as the API shows it.
type InstanceView struct {
	ID          string `json:"id"`
	NodeID      string `json:"nodeId"`
	Scope       string `json:"scope"` // shared | agent | browser | task | compose
	AccountID   string `json:"accountId,omitempty"`
	AgentID     string `json:"agentId,omitempty"`
	Description string `json:"description"`
	// Owner is the owning account's username ("" for fixed desktops or a deleted account).
	Owner string `json:"owner,omitempty"`
	// Agents are the agents that use the desktop: the agent of an own desktop, browser or task
	// desktop; every agent of the account on a Local VM (or auto) for a shared one.
	Agents []AgentRef `json:"agents"`
	// Orphaned: the desktop's agent (or, for a shared desktop, its account) was deleted.
	Orphaned bool `json:"orphaned"`
	// Removed: the record is gone (an answer to the removal of an orphaned or task desktop).
	Removed bool   `json:"removed,omitempty"`
	Name    string `json:"name,omitempty"` // compose desktops
	Fixed   bool   `json:"fixed"`          // a Compose desktop: no create/remove/count change
	// Task marks a helper's task-isolated desktop: removed when its task ends, never started,
	// stopped, recreated or removed by people.
	Task          bool      `json:"task"`
	ImageKey      string    `json:"imageKey,omitempty"`
	ImageRef      string    `json:"imageRef,omitempty"`
	ImagePending  bool      `json:"imagePending"` // the chosen image differs from the container's: recreate to apply
	State         string    `json:"state"`        // running, paused, stopped, absent, creating, stopping, removing, missing; unreachable (views only)
	Container     string    `json:"container,omitempty"`
	Workspace     string    `json:"workspaceVolume,omitempty"`
	BrowserVolume string    `json:"browserProfileVolume,omitempty"`
	BusyBy        string    `json:"busyBy,omitempty"`
	IdleStopAt    time.Time `json:"idleStopAt,omitzero"`
	// IdleStopInSeconds counts down to IdleStopAt; absent when no idle timer runs.
	IdleStopInSeconds *float64  `json:"idleStopInSeconds,omitempty"`
	StartedAt         time.Time `json:"startedAt,omitzero"`
	LastError         string    `json:"lastError,omitempty"`
	// HostWall: "on" when the running desktop cannot reach this machine's services, else why
	// not ("off: …"); empty when no wall is configured.
	HostWall string `json:"hostWall,omitempty"`
	// GuestLink is how the desktop's driver is reached: "socket" or "exec" (the transport
	// of its link, or the one it will use); empty when it does not run.
	GuestLink string `json:"guestLink,omitempty"`
	// Health is "ok" while the running desktop's driver answers over its link, "unhealthy"
	// when the link ended or cannot be made (LastError says why; Start repairs it),
	// "unreachable" when the engine or the node does not answer; empty when not running or
	// not yet connected.
	Health string `json:"health,omitempty"`
}

// AgentRef names an agent.
type AgentRef struct {
	ID   string `json:"id"`
	Name string `json:"name"`
}

// Policy is the node's isolation policy and idle policy.
type Policy struct {
	Isolation       string `json:"isolation"`
	MaxInstances    int    `json:"maxInstances"`
	IdleStopMinutes int    `json:"idleStopMinutes"` // 0 = never
	// PauseAfterMinutes: an idle desktop is paused (memory kept, no CPU) this long after it
	// became idle, before IdleStopMinutes stops it; 0 = never.
	PauseAfterMinutes int `json:"pauseAfterMinutes"`
}

// GuestLink is how a node's new desktops' drivers are reached, and why (CUBICLE_GUEST_LINK;
// backend/link.Choice on the wire).
type GuestLink struct {
	Mode     string `json:"mode"`               // auto | socket | exec
	Primary  string `json:"transport"`          // socket or exec
	Fallback string `json:"fallback,omitempty"` // exec when a failing socket falls back to it
	// Mount says whether desktops get the run-directory bind mount.
	Mount  bool   `json:"mount"`
	Reason string `json:"reason"`
}

// Status is a node's Local VM status (GET /api/app/admin/local-vm, the runner's status op).
type Status struct {
	NodeID    string      `json:"nodeId"`
	Engine    EngineView  `json:"engine"`
	Compose   bool        `json:"compose"` // fixed desktops from compose.desktops.yaml
	Images    []ImageView `json:"images"`
	Preparing bool        `json:"preparing"`
	Policy    Policy      `json:"policy"`
	// ImageSources are the images' pinned bases and where each value comes from.
	ImageSources ImageSources   `json:"imageSources"`
	Running      int            `json:"running"`
	Instances    []InstanceView `json:"instances"`
	Strays       []string       `json:"strays,omitempty"` // containers with our labels no record knows
	// GuestLink is how new desktops' drivers are reached, and why (CUBICLE_GUEST_LINK).
	GuestLink GuestLink `json:"guestLink"`
}

// AgentView is an agent's desktop on its node (GET /api/app/agents/:id/local-vm).
type AgentView struct {
	AgentID   string       `json:"agentId"`
	Isolation string       `json:"isolation"`
	Desktop   InstanceView `json:"desktop"`
	// Images are the prepared image keys the desktop may use.
	Images []string `json:"images"`
	// Desktops are the fixed desktops to choose from (Compose mode only).
	Desktops []InstanceView `json:"desktops,omitempty"`
}

// PrepareState is the progress of one image preparation.
type PrepareState struct {
	Key        string    `json:"imageKey"`
	Running    bool      `json:"running"`
	Phase      string    `json:"phase"` // stopping, image, probe, verify, done, failed
	Message    string    `json:"message"`
	Percent    float64   `json:"percent"` // 0..100, -1 unknown
	StartedAt  time.Time `json:"startedAt"`
	FinishedAt time.Time `json:"finishedAt,omitzero"`
	Error      string    `json:"error,omitempty"`
	// Cancelled says an administrator cancelled it (Phase is then "failed").
	Cancelled bool `json:"cancelled,omitempty"`
}

// Image is a prepared desktop image of a node (the answer of a preparation).
type Image struct {
	ID            string    `json:"id"`
	NodeID        string    `json:"nodeId"`
	Key           string    `json:"key"`        // "standard" | "cursor"
	Ref           string    `json:"ref"`        // localhost/cubicle-desktop:<key>-<hash12>
	ImageID       string    `json:"imageId"`    // the engine's image id
	RecipeHash    string    `json:"recipeHash"` // content hash of recipe + driver + base
	DriverVersion string    `json:"driverVersion"`
	PreparedAt    time.Time `json:"preparedAt"`
}

// Pin is a base image pinned by digest (images.Pin on the wire).
type Pin struct {
	Image  string `json:"image"`
	Digest string `json:"digest"`
}

// SourceView is one base image's source as the admin page shows it.
type SourceView struct {
	Image      string `json:"image"`      // the repository in force (fully qualified)
	Digest     string `json:"digest"`     // the digest in force
	ImageFrom  string `json:"imageFrom"`  // settings | environment | default
	DigestFrom string `json:"digestFrom"` // likewise
	// SavedImage and SavedDigest are what an admin saved ("" = inherit).
	SavedImage  string `json:"savedImage"`
	SavedDigest string `json:"savedDigest"`
	// Inherited is what applies without the saved values: the environment's or the default.
	Inherited Pin `json:"inherited"`
	// Problem is set when an environment value is invalid (preparing the image fails with it
	// until it is fixed); it says which variable and why.
	Problem string `json:"problem,omitempty"`
}

// ImageSources are the bases of the two images (the base reference and digest are
// configuration, so a private mirror can serve them).
type ImageSources struct {
	Standard SourceView `json:"standard"` // the Debian base of the standard image
	Cursor   SourceView `json:"cursor"`   // the Cursor Universal base
	// BaseSource is how the standard base is obtained: auto, pull or debootstrap
	// (CUBICLE_BASE_SOURCE; not a setting).
	BaseSource string `json:"baseSource"`
}

// SourceUpdate sets one base's saved values; "" clears a value (inherit).
type SourceUpdate struct {
	Image  string `json:"image"`
	Digest string `json:"digest"`
}

// ImageSourcesUpdate is PUT /api/app/admin/local-vm/image-sources: a nil part is left as it
// is.
type ImageSourcesUpdate struct {
	Standard *SourceUpdate `json:"standard"`
	Cursor   *SourceUpdate `json:"cursor"`
}

// InstanceStats is one running desktop's resources.
type InstanceStats struct {
	InstanceID  string  `json:"instanceId"`
	CPUPercent  float64 `json:"cpuPercent"` // of one CPU: 200 = two CPUs busy
	MemoryBytes uint64  `json:"memoryBytes"`
	MemoryLimit uint64  `json:"memoryLimit,omitempty"`
	PIDs        uint64  `json:"pids,omitempty"`
}

// AgentData is what an agent keeps on a node: its desktops and their volumes.
type AgentData struct {
	AgentID string `json:"agentId"`
	// Desktops are the agent's own desktop and browser that exist (a record, running or not).
	Desktops []InstanceView `json:"desktops"`
	// Shared is the account's shared desktop, which the agent uses and which stays (the
	// account's other agents use it); nil when there is none.
	Shared *InstanceView `json:"shared,omitempty"`
	// Volumes hold the agent's work files and browser profiles.
	Volumes []VolumeView `json:"volumes"`
	// SizeBytes is the volumes' total size; -1 when the engine could not measure one of them.
	SizeBytes int64 `json:"sizeBytes"`
	// SizeProblem says why sizes are unknown.
	SizeProblem string `json:"sizeProblem,omitempty"`
}

// VolumeView is a named volume of a desktop.
type VolumeView struct {
	Name       string `json:"name"`
	Kind       string `json:"kind"` // workspace | browser-profile
	InstanceID string `json:"instanceId"`
	SizeBytes  int64  `json:"sizeBytes"` // -1 unknown
}
