package store

import (
	"errors"

	"go.etcd.io/bbolt"

	"cubicle/backend/fault"
)

// NodeSettings are the Local VM settings of one execution node (SPEC §1.5, §1.11).
type NodeSettings struct {
	NodeID              string `json:"nodeId"`
	IdleStopMinutes     int    `json:"idleStopMinutes"`               // default 5; 0 = never
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
