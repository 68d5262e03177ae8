package nodeapi

import "context"

// Node is an execution node's desktops: the one interface of the node contract. The local
// node's desktop manager (*vm.Manager) and a runner's client (*nodes.Remote) both implement
// it, so the HTTP API (api.VMs) and the backend's placement route an agent's calls the same
// way wherever its desktop runs. Each method of a runner's client is one operation of the
// runner link (runner/wire.Ops).
//
// Methods are safe for concurrent use. Errors carry backend/fault classes; a runner whose
// link is down answers fault.ErrUnavailable naming it.
type Node interface {
	// NodeID is the node's id ("local" or a runner's id).
	NodeID() string
	// Status is the node's Local VM status.
	Status(ctx context.Context) (Status, error)
	// Stats samples the CPU and memory of the node's running desktops.
	Stats(ctx context.Context) ([]InstanceStats, error)
	// StartPrepare starts (or joins) the preparation of image key and returns its progress.
	StartPrepare(key string) (PrepareState, error)
	// Prepare prepares image key and waits for it.
	Prepare(ctx context.Context, key string) (Image, error)
	// SetPolicy sets the node's isolation policy and capacity.
	SetPolicy(ctx context.Context, isolation string, maxInstances int) (NodeSettings, error)
	// SetIdlePolicy sets the node's idle auto-stop (idempotent per requestID) and, unless
	// pauseMinutes is nil (kept as it is), its idle pause (0 = never).
	SetIdlePolicy(ctx context.Context, requestID string, minutes int, pauseMinutes *int) (NodeSettings, error)
	// SetImageSources saves the images' base sources.
	SetImageSources(ctx context.Context, u ImageSourcesUpdate) (ImageSources, error)
	// Agent is the agent's desktop on the node.
	Agent(ctx context.Context, accountID, agentID string) (AgentView, error)
	// Act runs a lifecycle action (start, stop, recreate, …) on the agent's desktop.
	Act(ctx context.Context, accountID, agentID, action string) (AgentView, error)
	// Pause freezes the agent's running desktop (memory kept, no CPU); Resume thaws it.
	Pause(ctx context.Context, accountID, agentID string) (AgentView, error)
	Resume(ctx context.Context, accountID, agentID string) (AgentView, error)
	// SetImage chooses the agent's desktop image.
	SetImage(ctx context.Context, accountID, agentID, key string) (AgentView, error)
	// ChooseDesktop chooses the agent's fixed desktop on a Compose node.
	ChooseDesktop(ctx context.Context, accountID, agentID, desktopID string) (AgentView, error)
	// VMReady reports whether the agent could get a desktop on the node now, and why not.
	VMReady(ctx context.Context, accountID, agentID string) (bool, string)
	// AgentData is what the agent keeps on the node (sizes measured when asked).
	AgentData(ctx context.Context, accountID, agentID string, measure bool) (AgentData, error)
	// ForgetAgent removes the agent's desktop and its data, each when asked.
	ForgetAgent(ctx context.Context, accountID, agentID string, removeDesktop, deleteData bool) error
	// AdminAct runs an administrator's action on desktop id.
	AdminAct(ctx context.Context, id, action string, force bool) (InstanceView, error)
	// StopInstance stops desktop id.
	StopInstance(ctx context.Context, id, reason string) error
	// DeleteData deletes desktop id's retained workspace and browser profile.
	DeleteData(ctx context.Context, instanceID string) error
	// MarkBusy and MarkIdle tell the node's idle timers who holds desktop id.
	MarkBusy(id, who string)
	MarkIdle(id string)
}
