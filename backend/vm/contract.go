package vm

import (
	"cubicle/backend/link"
	"cubicle/backend/nodeapi"
	"cubicle/backend/store"
	"cubicle/images"
)

// The node contract's shapes (package nodeapi) under the names this package has always used
// for them. They are views, not stored records: the conversions below are the one place where
// a stored record becomes what a node answers with or is sent, field by field.
type (
	EngineView         = nodeapi.EngineView
	ImageView          = nodeapi.ImageView
	InstanceView       = nodeapi.InstanceView
	AgentRef           = nodeapi.AgentRef
	Policy             = nodeapi.Policy
	Status             = nodeapi.Status
	AgentView          = nodeapi.AgentView
	PrepareState       = nodeapi.PrepareState
	SourceView         = nodeapi.SourceView
	ImageSources       = nodeapi.ImageSources
	SourceUpdate       = nodeapi.SourceUpdate
	ImageSourcesUpdate = nodeapi.ImageSourcesUpdate
	InstanceStats      = nodeapi.InstanceStats
	AgentData          = nodeapi.AgentData
	VolumeView         = nodeapi.VolumeView
)

// The local node's desktops are a node of the contract.
var _ nodeapi.Node = (*Manager)(nil)

// NodeSettingsView is the stored settings ns as a node reports them.
func NodeSettingsView(ns store.NodeSettings) nodeapi.NodeSettings {
	v := nodeapi.NodeSettings{
		NodeID: ns.NodeID, IdleStopMinutes: ns.IdleStopMinutes, PauseAfterMinutes: ns.PauseAfterMinutes, Isolation: ns.Isolation, MaxInstances: ns.MaxInstances,
		IdlePolicyRequestID: ns.IdlePolicyRequestID, HostScreenControl: ns.HostScreenControl, HostRequestID: ns.HostRequestID,
		BaseImage: ns.BaseImage, BaseDigest: ns.BaseDigest, CursorBase: ns.CursorBase, CursorDigest: ns.CursorDigest,
		Engine: nodeapi.EngineSettings{Kind: ns.Engine.Kind, Kubeconfig: ns.Engine.Kubeconfig, Context: ns.Engine.Context,
			Namespace: ns.Engine.Namespace, StorageClass: ns.Engine.StorageClass, VolumeSize: ns.Engine.VolumeSize,
			Registry: ns.Engine.Registry, RegistryInsecure: ns.Engine.RegistryInsecure},
		EngineRequestID: ns.EngineRequestID,
		Egress:          egressView(ns.Egress),
	}
	if ns.AgentEgress != nil {
		v.AgentEgress = make(map[string]nodeapi.EgressPolicy, len(ns.AgentEgress))
		for id, p := range ns.AgentEgress {
			v.AgentEgress[id] = egressView(p)
		}
	}
	return v
}

func egressView(p store.EgressPolicy) nodeapi.EgressPolicy {
	return nodeapi.EgressPolicy{Mode: p.Mode, Allow: append([]string(nil), p.Allow...), UpdatedBy: p.UpdatedBy, UpdatedAt: p.UpdatedAt}
}

// ImageOf is the stored prepared image img as a node reports it.
func ImageOf(img store.VMImage) nodeapi.Image {
	return nodeapi.Image{ID: img.ID, NodeID: img.NodeID, Key: img.Key, Ref: img.Ref, ImageID: img.ImageID,
		RecipeHash: img.RecipeHash, DriverVersion: img.DriverVersion, PreparedAt: img.PreparedAt}
}

// AgentOf is what a node is told of the stored agent a (never its model settings).
func AgentOf(a store.Agent) nodeapi.Agent {
	return nodeapi.Agent{ID: a.ID, AccountID: a.AccountID, Name: a.Name, Computer: a.Computer,
		AllowHostEnvironment: a.AllowHostEnvironment, WorkDir: a.WorkDir, LazyInit: a.LazyInit, NodeID: a.NodeID,
		CreatedAt: a.CreatedAt, UpdatedAt: a.UpdatedAt}
}

// StoredAgent is the record a node keeps of the agent a it was told of (a runner keeps the
// server's agents so its manager can resolve their desktops).
func StoredAgent(a nodeapi.Agent) store.Agent {
	return store.Agent{ID: a.ID, AccountID: a.AccountID, Name: a.Name, Computer: a.Computer,
		AllowHostEnvironment: a.AllowHostEnvironment, WorkDir: a.WorkDir, LazyInit: a.LazyInit, NodeID: a.NodeID,
		CreatedAt: a.CreatedAt, UpdatedAt: a.UpdatedAt}
}

// guestLinkView is c as a status shows it.
func guestLinkView(c link.Choice) nodeapi.GuestLink {
	return nodeapi.GuestLink{Mode: string(c.Mode), Primary: c.Primary, Fallback: c.Fallback, Mount: c.Mount, Reason: c.Reason}
}

// pinView is p as a status shows it.
func pinView(p images.Pin) nodeapi.Pin { return nodeapi.Pin{Image: p.Image, Digest: p.Digest} }
