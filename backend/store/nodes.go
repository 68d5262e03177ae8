package store

import (
	"errors"
	"time"

	"go.etcd.io/bbolt"

	"cubicle/backend/fault"
)

// NodeSettings are the Local VM settings of one execution node (SPEC §1.5, §1.11).
type NodeSettings struct {
	NodeID              string `json:"nodeId"`
	IdleStopMinutes     int    `json:"idleStopMinutes"`               // default 5; 0 = never
	PauseAfterMinutes   int    `json:"pauseAfterMinutes,omitempty"`   // idle pause before the stop; 0 (default) = never
	Isolation           string `json:"isolation"`                     // "shared" | "per-agent"; default "per-agent"
	MaxInstances        int    `json:"maxInstances"`                  // 1..4, default 2
	IdlePolicyRequestID string `json:"idlePolicyRequestId,omitempty"` // last applied requestId
	// HostScreenControl lets "host" computers on this node see and control its screen (the
	// admin's "Host screen control"; off by default).
	HostScreenControl bool `json:"hostScreenControl,omitempty"`
	// HostRequestID is the last applied requestId of a host setting change.
	HostRequestID string `json:"hostRequestId,omitempty"`
	// The desktop images' base sources an admin saved (Settings → Local VM); "" inherits the
	// environment's (CUBICLE_BASE_IMAGE, …) or the built-in pin. Validated by backend/vm.
	BaseImage    string `json:"baseImage,omitempty"`    // the standard image's Debian base
	BaseDigest   string `json:"baseDigest,omitempty"`   // sha256:…
	CursorBase   string `json:"cursorBase,omitempty"`   // the cursor image's base
	CursorDigest string `json:"cursorDigest,omitempty"` // sha256:…
	// Engine is the container engine the node's desktops run on, as an admin saved it in
	// Settings → Local VM (it applies from the node's next start; flags and environment
	// variables of the process override it). The zero value is "find one" (Podman first).
	Engine EngineSettings `json:"engine,omitzero"`
	// EngineRequestID is the last applied requestId of an engine change.
	EngineRequestID string `json:"engineRequestId,omitempty"`
	// Egress is what the node's desktops may reach on the network (package deskegress); the
	// zero value is "open". AgentEgress overrides it for single agents' own desktops.
	Egress      EgressPolicy            `json:"egress,omitzero"`
	AgentEgress map[string]EgressPolicy `json:"agentEgress,omitempty"`
}

// EgressPolicy is a desktop egress policy as an administrator saved it (validated by
// backend/deskegress): Mode "" or "open", "allow-list" or "closed"; Allow lists host names
// (example.com, *.example.com), addresses and CIDRs (allow-list only).
type EgressPolicy struct {
	Mode      string    `json:"mode,omitempty"`
	Allow     []string  `json:"allow,omitempty"`
	UpdatedBy string    `json:"updatedBy,omitempty"`
	UpdatedAt time.Time `json:"updatedAt,omitzero"`
}

// EngineSettings choose a node's container engine: Kind "" (find one), "podman", "docker",
// "kubernetes" or "none"; the other fields configure the kubernetes engine (desktops as Pods
// of a cluster, docs/kubernetes.md).
type EngineSettings struct {
	Kind string `json:"kind,omitempty"`
	// Kubeconfig is a kubeconfig file on the node ("" = $KUBECONFIG, ~/.kube/config, or the
	// in-cluster service account); Context picks one of its contexts.
	Kubeconfig string `json:"kubeconfig,omitempty"`
	Context    string `json:"context,omitempty"`
	// Namespace holds the desktops ("" = the context's).
	Namespace string `json:"namespace,omitempty"`
	// StorageClass of the workspaces and browser profiles ("" = the cluster's default).
	StorageClass string `json:"storageClass,omitempty"`
	// VolumeSize of each of them ("" = 10Gi).
	VolumeSize string `json:"volumeSize,omitempty"`
	// Registry the prepared images are pushed to and the nodes pull from (host[:port][/path]);
	// RegistryInsecure pushes over plain HTTP or without verifying TLS.
	Registry         string `json:"registry,omitempty"`
	RegistryInsecure bool   `json:"registryInsecure,omitempty"`
}

// defaultNodeSettings returns the settings of a node that never saved any.
func defaultNodeSettings(nodeID string) NodeSettings {
	return NodeSettings{NodeID: nodeID, IdleStopMinutes: 5, Isolation: "per-agent", MaxInstances: 2}
}

var nodeSettings = table[NodeSettings]{bucket: bucketNodeSettings, kind: "node settings"}

// NodeSettings returns the settings of nodeID, or the defaults (idle stop 5 min, per-agent
// isolation, 2 instances) when none were saved.
func (s *Store) NodeSettings(nodeID string) (NodeSettings, error) {
	if nodeID == "" {
		return NodeSettings{}, fault.Invalid("node settings: empty node id")
	}
	var ns NodeSettings
	err := s.view("get node settings", func(tx *bbolt.Tx) (err error) {
		ns, err = nodeSettingsOrDefault(tx, nodeID)
		return err
	})
	return ns, err
}

// UpdateNodeSettings changes the settings of nodeID (starting from the defaults when none
// were saved) with fn in one transaction and returns the result. An error from fn aborts the
// update (nothing changes) and is returned as is. fn may not change NodeID.
func (s *Store) UpdateNodeSettings(nodeID string, fn func(*NodeSettings) error) (NodeSettings, error) {
	if nodeID == "" {
		return NodeSettings{}, fault.Invalid("update node settings: empty node id")
	}
	var ns NodeSettings
	err := s.update("update node settings", func(tx *bbolt.Tx) error {
		cur, err := nodeSettingsOrDefault(tx, nodeID)
		if err != nil {
			return err
		}
		if err := fn(&cur); err != nil {
			return err
		}
		if cur.NodeID != nodeID {
			return fault.Invalid("update node settings %q: the node id cannot change", nodeID)
		}
		ns = cur
		return nodeSettings.put(tx, nodeID, cur)
	})
	if err != nil {
		return NodeSettings{}, err
	}
	return ns, nil
}

func nodeSettingsOrDefault(tx *bbolt.Tx, nodeID string) (NodeSettings, error) {
	ns, err := nodeSettings.get(tx, nodeID)
	if errors.Is(err, fault.ErrNotFound) {
		return defaultNodeSettings(nodeID), nil
	}
	return ns, err
}
