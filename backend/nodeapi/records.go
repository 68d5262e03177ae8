package nodeapi

import "time"

// NodeSettings are a node's settings as the node reports them (the answers of the policy and
// idle-policy operations, the settings events of a runner's watch stream). They are the
// stored settings' wire form: what crosses is listed here field by field, never the stored
// record itself.
type NodeSettings struct {
	NodeID          string `json:"nodeId"`
	IdleStopMinutes int    `json:"idleStopMinutes"` // 0 = never
	// PauseAfterMinutes pauses an idle desktop before its idle stop; 0 = never.
	PauseAfterMinutes   int    `json:"pauseAfterMinutes,omitempty"`
	Isolation           string `json:"isolation"` // "shared" | "per-agent"
	MaxInstances        int    `json:"maxInstances"`
	IdlePolicyRequestID string `json:"idlePolicyRequestId,omitempty"` // last applied requestId
	// HostScreenControl lets "host" computers on this node see and control its screen.
	HostScreenControl bool   `json:"hostScreenControl,omitempty"`
	HostRequestID     string `json:"hostRequestId,omitempty"`
	// The desktop images' base sources an admin saved ("" inherits).
	BaseImage    string `json:"baseImage,omitempty"`
	BaseDigest   string `json:"baseDigest,omitempty"`
	CursorBase   string `json:"cursorBase,omitempty"`
	CursorDigest string `json:"cursorDigest,omitempty"`
	// Engine is the container engine an admin saved for the node.
	Engine          EngineSettings `json:"engine,omitzero"`
	EngineRequestID string         `json:"engineRequestId,omitempty"`
	// Egress is what the node's desktops may reach; AgentEgress overrides it per agent.
	Egress      EgressPolicy            `json:"egress,omitzero"`
	AgentEgress map[string]EgressPolicy `json:"agentEgress,omitempty"`
}

// EngineSettings are a node's saved container engine choice (see NodeSettings.Engine).
type EngineSettings struct {
	Kind             string `json:"kind,omitempty"`
	Kubeconfig       string `json:"kubeconfig,omitempty"`
	Context          string `json:"context,omitempty"`
	Namespace        string `json:"namespace,omitempty"`
	StorageClass     string `json:"storageClass,omitempty"`
	VolumeSize       string `json:"volumeSize,omitempty"`
	Registry         string `json:"registry,omitempty"`
	RegistryInsecure bool   `json:"registryInsecure,omitempty"`
}

// EgressPolicy is a desktop egress policy as an administrator saved it.
type EgressPolicy struct {
	Mode      string    `json:"mode,omitempty"`
	Allow     []string  `json:"allow,omitempty"`
	UpdatedBy string    `json:"updatedBy,omitempty"`
	UpdatedAt time.Time `json:"updatedAt,omitzero"`
}

// Agent is what a node is told of the agent a desktop call is for: enough to resolve the
// agent's desktop (its computer, working directory, node). An agent's model settings and
// keys are never part of it.
type Agent struct {
	ID                   string    `json:"id"`
	AccountID            string    `json:"accountId"`
	Name                 string    `json:"name"`
	Computer             string    `json:"computer"`
	AllowHostEnvironment bool      `json:"allowHostEnvironment"`
	WorkDir              string    `json:"workDir,omitempty"`
	LazyInit             *bool     `json:"lazyInit,omitempty"`
	NodeID               string    `json:"nodeId,omitempty"`
	CreatedAt            time.Time `json:"createdAt"`
	UpdatedAt            time.Time `json:"updatedAt"`
}
