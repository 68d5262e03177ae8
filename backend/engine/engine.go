// Package engine holds the vocabulary shared by the container engine adapters
// (engine/podman, engine/docker) and their consumers: the specs and states the adapters take
// and return, engine detection, and the error translation rules.
//
// Consumers (backend/vm, images) declare the small interfaces they need, using these types;
// adapters return concrete types and translate their client's errors at the boundary into
// cubicle/backend/fault classes (a missing container or image is fault.ErrNotFound, a name in
// use fault.ErrExists, a container in the wrong state fault.ErrConflict, an unreachable
// service fault.ErrUnavailable).
package engine

import (
	"io"
	"time"

	"cubicle/images/guest/wire"
)

// Kind names an engine implementation.
type Kind string

// The engines Cubicle drives.
const (
	Podman Kind = "podman"
	Docker Kind = "docker"
	// Kubernetes runs desktops as Pods of a cluster (engine/kubernetes): no image store, no
	// host mounts; images come from a registry.
	Kubernetes Kind = "kubernetes"
)

// Labels every object Cubicle creates carries, so that a restart can find its own objects.
const (
	LabelManaged  = wire.LabelManaged  // "true" on every container, volume and image we create
	LabelInstance = wire.LabelInstance // the instance id a container or volume belongs to
	LabelImageKey = wire.LabelImageKey
	LabelRecipe   = wire.LabelRecipe // content hash of recipe + driver an image was built from
)

// Info describes a reachable engine.
type Info struct {
	Kind       Kind
	Socket     string // unix socket URI the adapter talks to
	Version    string // server version, e.g. "4.3.1"
	APIVersion string
	Rootless   bool
	Arch       string // server architecture in GOARCH terms ("amd64", "arm64")
	OS         string
	// OperatingSystem is the engine host's own description ("Docker Desktop", "Debian
	// GNU/Linux 12 (bookworm)"): it tells a VM-backed engine apart (backend/link).
	OperatingSystem string
}

// Mount binds a host directory into a container. Only the instance run directory is ever
// bind-mounted; user data lives in named volumes.
type Mount struct {
	Source   string // host path
	Target   string // container path
	ReadOnly bool
}

// VolumeMount attaches a named volume.
type VolumeMount struct {
	Name   string
	Target string
}

// Limits bound what a container may consume. Zero means the engine default. Adapters give a
// container no swap beyond its memory limit (memory+swap = memory).
type Limits struct {
	MemoryBytes int64
	NanoCPUs    int64 // 1e9 = one CPU
	PIDs        int64
	NoFile      uint64 // RLIMIT_NOFILE; adapters clamp it to the host's own hard limit
	NProc       uint64 // RLIMIT_NPROC; likewise clamped
	ShmBytes    int64  // /dev/shm size (Chromium needs more than the 64 MiB default)
}

// ContainerSpec is everything needed to create a hardened desktop container.
type ContainerSpec struct {
	Name     string
	Image    string
	Labels   map[string]string
	Env      map[string]string
	Command  []string // empty: the image's entrypoint and command
	User     string   // "" = the image's user
	Hostname string
	Mounts   []Mount
	Volumes  []VolumeMount
	Limits   Limits
	// Hardening. Adapters always set no-new-privileges and drop every capability except CapAdd.
	CapAdd         []string
	ReadOnlyRootfs bool
	NetworkMode    string // "" = engine default bridge; "none" disables networking
	// IDMap runs the container in its own user namespace: container IDs 0..Size-1 are host
	// IDs HostID..HostID+Size-1 (uid and gid alike), so no process of the container is a real
	// user of the host. nil = the engine's default. Only Podman maps per container (Docker
	// only daemon-wide, with userns-remap): the Docker adapter refuses it (fault.ErrInvalid).
	IDMap       *IDMap
	StopTimeout time.Duration // grace period before SIGKILL on stop
	Platform    string        // "linux/amd64" when an image needs it; "" = native
}

// IDMap is a container's user-namespace mapping (see ContainerSpec.IDMap).
type IDMap struct {
	HostID int
	Size   int
}

// ContainerState is what an engine reports about a container.
type ContainerState struct {
	ID        string
	Name      string
	Image     string // image reference or id it was created from
	ImageID   string
	Labels    map[string]string
	Running   bool   // running and not paused
	Paused    bool   // frozen by a pause; Running is then false
	Status    string // engine's word: created, running, paused, exited, …
	ExitCode  int
	StartedAt time.Time
	PID       int // host pid of the container's init, 0 when not running
}

// Image is what an engine reports about an image.
type Image struct {
	ID      string
	Names   []string // tags
	Digests []string // repo@sha256:… when pulled by digest
	Labels  map[string]string
	Size    int64
	Created time.Time
	Arch    string
}

// BuildSpec describes an image build from a context directory or tar stream.
type BuildSpec struct {
	ContextDir string    // directory holding the Containerfile and its files, or
	Context    io.Reader // a tar stream of the same (exactly one of the two)
	Dockerfile string    // relative path inside the context; "" = Containerfile
	Tag        string
	Labels     map[string]string
	BuildArgs  map[string]string
	Platform   string
	Progress   io.Writer // build output lines are written here as they arrive
}
