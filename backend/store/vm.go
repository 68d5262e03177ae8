package store

import (
	"cmp"
	"slices"
	"time"

	"go.etcd.io/bbolt"

	"cubicle/backend/fault"
)

// Buckets of the Local VM records (schema version 3).
var (
	bucketVMImages    = []byte("vm_images")
	bucketVMInstances = []byte("vm_instances")
	bucketVMBindings  = []byte("vm_bindings")
)

// VMImage is a desktop image an execution node has prepared and verified (SPEC §1.2): the
// driver answered its handshake and a real screenshot was taken. Its ID is "<node>/<key>".
type VMImage struct {
	ID            string    `json:"id"`
	NodeID        string    `json:"nodeId"`
	Key           string    `json:"key"`        // "standard" | "cursor"
	Ref           string    `json:"ref"`        // localhost/cubicle-desktop:<key>-<hash12>
	ImageID       string    `json:"imageId"`    // the engine's image id
	RecipeHash    string    `json:"recipeHash"` // content hash of recipe + driver + base
	DriverVersion string    `json:"driverVersion"`
	PreparedAt    time.Time `json:"preparedAt"`
}

// VMImageID returns the record id of key's image on nodeID.
func VMImageID(nodeID, key string) string { return nodeID + "/" + key }

// VMInstance is one desktop (SPEC §1.3): a container plus its persistent named volumes,
// scoped to (account, node, shared | one agent). The record outlives its container: removing
// the container keeps the record (image choice, volume names) with an empty ContainerID.
type VMInstance struct {
	ID        string `json:"id"`
	NodeID    string `json:"nodeId"`
	AccountID string `json:"accountId"`
	// Scope is "shared" (all agents of the account on the node) or "agent" (AgentID's own);
	// "compose" marks a fixed desktop created by Compose (SPEC §5).
	Scope   string `json:"scope"`
	AgentID string `json:"agentId,omitempty"` // scope "agent" only
	Name    string `json:"name,omitempty"`    // compose desktops: the deployment's name

	ImageKey string `json:"imageKey"`           // the chosen prepared image key
	ImageRef string `json:"imageRef,omitempty"` // the image the current container was created from

	// UserNSBase, when set, is the host uid/gid that is root in the desktop's user namespace
	// (container IDs 0..65535 map to UserNSBase..UserNSBase+65535). Fixed when the record is
	// made, so the desktop's volumes keep one owner across recreations; 0 = no mapping (records
	// made before desktops had one keep their volumes' owners).
	UserNSBase int `json:"userNsBase,omitempty"`

	ContainerID   string `json:"containerId,omitempty"` // "" = no container
	ContainerName string `json:"containerName"`
	// WorkDir is the working directory (inside the desktop) the current container was created
	// with (scope "agent": the agent's terminal.cwd resolved); "" = the workspace.
	WorkDir      string `json:"workDir,omitempty"`
	WorkspaceVol string `json:"workspaceVolume"`
	ProfileVol   string `json:"profileVolume"`

	// State is the last known state: "creating", "running", "stopping", "stopped", "removing".
	// The transitional states are written before the engine is touched, so a crash leaves an
	// intent that the next start reconciles against the engine.
	State     string `json:"state"`
	LastError string `json:"lastError,omitempty"`
	// HostWall says whether the running desktop is walled off from the host's services:
	// "on", or why not ("off: …").
	HostWall  string    `json:"hostWall,omitempty"`
	StartedAt time.Time `json:"startedAt,omitzero"`
	CreatedAt time.Time `json:"createdAt"`
	UpdatedAt time.Time `json:"updatedAt"`
}

var (
	vmImages    = table[VMImage]{bucket: bucketVMImages, kind: "prepared image"}
	vmInstances = table[VMInstance]{bucket: bucketVMInstances, kind: "desktop instance"}
	vmBindings  = table[VMBinding]{bucket: bucketVMBindings, kind: "desktop choice"}
)

// VMBinding is an agent's choice of a fixed (Compose) desktop (SPEC §5).
type VMBinding struct {
	AgentID string `json:"agentId"`
	Desktop string `json:"desktop"` // the instance id of the chosen fixed desktop
}

// PutVMBinding stores an agent's desktop choice.
func (s *Store) PutVMBinding(b VMBinding) error {
	return s.update("put desktop choice", func(tx *bbolt.Tx) error { return vmBindings.put(tx, b.AgentID, b) })
}

// VMBinding returns agentID's desktop choice, or a fault.ErrNotFound error.
func (s *Store) VMBinding(agentID string) (VMBinding, error) {
	var b VMBinding
	err := s.view("get desktop choice", func(tx *bbolt.Tx) (err error) {
		b, err = vmBindings.get(tx, agentID)
		return err
	})
	return b, err
}

// PutVMImage records (or replaces) a prepared image.
func (s *Store) PutVMImage(img VMImage) error {
	if img.NodeID == "" || img.Key == "" {
		return fault.Invalid("record prepared image: node and key are required")
	}
	img.ID = VMImageID(img.NodeID, img.Key)
	return s.update("put prepared image", func(tx *bbolt.Tx) error { return vmImages.put(tx, img.ID, img) })
}

// VMImage returns key's prepared image on nodeID, or a fault.ErrNotFound error.
func (s *Store) VMImage(nodeID, key string) (VMImage, error) {
	var img VMImage
	err := s.view("get prepared image", func(tx *bbolt.Tx) (err error) {
		img, err = vmImages.get(tx, VMImageID(nodeID, key))
		return err
	})
	return img, err
}

// VMImages returns the prepared images of nodeID, by key.
func (s *Store) VMImages(nodeID string) ([]VMImage, error) {
	var out []VMImage
	err := s.view("list prepared images", func(tx *bbolt.Tx) (err error) {
		out, err = vmImages.list(tx, func(i VMImage) bool { return i.NodeID == nodeID })
		return err
	})
	return out, err
}

// PutVMInstance stores (creating or replacing) a desktop instance record.
func (s *Store) PutVMInstance(in VMInstance) error {
	if in.ID == "" || in.NodeID == "" {
		return fault.Invalid("store desktop instance: id and node are required")
	}
	return s.update("put desktop instance", func(tx *bbolt.Tx) error { return vmInstances.put(tx, in.ID, in) })
}

// VMInstance returns instance id, or a fault.ErrNotFound error.
func (s *Store) VMInstance(id string) (VMInstance, error) {
	var in VMInstance
	err := s.view("get desktop instance", func(tx *bbolt.Tx) (err error) {
		in, err = vmInstances.get(tx, id)
		return err
	})
	return in, err
}

// VMInstances returns the instances of nodeID, oldest first (ties by ID).
func (s *Store) VMInstances(nodeID string) ([]VMInstance, error) {
	var out []VMInstance
	err := s.view("list desktop instances", func(tx *bbolt.Tx) (err error) {
		out, err = vmInstances.list(tx, func(i VMInstance) bool { return i.NodeID == nodeID })
		return err
	})
	slices.SortFunc(out, func(a, b VMInstance) int {
		return cmp.Or(a.CreatedAt.Compare(b.CreatedAt), cmp.Compare(a.ID, b.ID))
	})
	return out, err
}

// UpdateVMInstance changes instance id with fn in one transaction and returns the result. An
// error from fn aborts the update and is returned as is. fn may not change the ID.
func (s *Store) UpdateVMInstance(id string, fn func(*VMInstance) error) (VMInstance, error) {
	var in VMInstance
	err := s.update("update desktop instance", func(tx *bbolt.Tx) (err error) {
		in, err = vmInstances.modify(tx, id, fn, func(old, new VMInstance) error {
			if new.ID != old.ID {
				return fault.Invalid("update desktop instance %q: the id cannot change", id)
			}
			return nil
		})
		return err
	})
	return in, err
}

// DeleteVMInstance removes instance id's record, or returns a fault.ErrNotFound error.
func (s *Store) DeleteVMInstance(id string) error {
	return s.update("delete desktop instance", func(tx *bbolt.Tx) error { return vmInstances.del(tx, id) })
}

// migrateVMBuckets is version 2 → 3: it adds the Local VM buckets.
func migrateVMBuckets(tx *bbolt.Tx) error {
	for _, b := range [][]byte{bucketVMImages, bucketVMInstances, bucketVMBindings} {
		if _, err := tx.CreateBucketIfNotExists(b); err != nil {
			return err
		}
	}
	return nil
}
