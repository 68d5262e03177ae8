package kubernetes

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"path"
	"slices"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"

	"cubicle/backend/engine"
	"cubicle/backend/fault"
)

// defaultStopTimeout is a Pod's grace period when the spec gives none (Docker's and
// Podman's default stop timeout).
const defaultStopTimeout = 10 * time.Second

// podFor returns the Pod a container spec describes (see the package doc for what it keeps
// and refuses). Its name and labels are the container's.
func (c *Client) podFor(spec engine.ContainerSpec) (*corev1.Pod, error) {
	if spec.Image == "" {
		return nil, fault.Invalid("kubernetes: a container needs an image")
	}
	if err := checkName("container", spec.Name); err != nil {
		return nil, err
	}
	if len(spec.Mounts) > 0 {
		return nil, fault.Invalid("kubernetes: a pod cannot bind-mount host directories (%s → %s): desktops on a cluster "+
			"are reached over the exec link, with no host mount", spec.Mounts[0].Source, spec.Mounts[0].Target)
	}
	uid, gid, err := c.user(spec.User)
	if err != nil {
		return nil, err
	}
	labels, ann := objectLabels(spec.Labels)
	labels[labelContainer] = spec.Name
	grace := int64(spec.StopTimeout.Round(time.Second) / time.Second)
	if spec.StopTimeout <= 0 {
		grace = int64(defaultStopTimeout / time.Second)
	}
	ctr := corev1.Container{
		Name:            containerName,
		Image:           spec.Image,
		Args:            slices.Clone(spec.Command), // the image's entrypoint stays, like Docker's Cmd
		ImagePullPolicy: corev1.PullIfNotPresent,
		SecurityContext: &corev1.SecurityContext{
			Capabilities:             &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
			AllowPrivilegeEscalation: ptr(false),
			Privileged:               ptr(false),
			ReadOnlyRootFilesystem:   ptr(spec.ReadOnlyRootfs),
			RunAsNonRoot:             ptr(true),
		},
		Resources: c.resources(spec.Limits),
	}
	for _, capName := range engine.NormalizeCaps(spec.CapAdd) {
		ctr.SecurityContext.Capabilities.Add = append(ctr.SecurityContext.Capabilities.Add, corev1.Capability(strings.TrimPrefix(capName, "CAP_")))
	}
	for _, k := range slices.Sorted(maps.Keys(spec.Env)) {
		ctr.Env = append(ctr.Env, corev1.EnvVar{Name: k, Value: spec.Env[k]})
	}
	pod := &corev1.Pod{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"},
		ObjectMeta: metav1.ObjectMeta{Name: spec.Name, Labels: labels, Annotations: ann},
		Spec: corev1.PodSpec{
			RestartPolicy:                 corev1.RestartPolicyNever, // a desktop that exits is stopped, as with the other engines
			AutomountServiceAccountToken:  ptr(false),                // a desktop gets no credentials to the cluster
			EnableServiceLinks:            ptr(false),
			TerminationGracePeriodSeconds: ptr(grace),
			SecurityContext: &corev1.PodSecurityContext{
				RunAsUser: ptr(uid), RunAsGroup: ptr(gid), FSGroup: ptr(gid), RunAsNonRoot: ptr(true),
				SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
			},
		},
	}
	if len(validation.IsDNS1123Label(spec.Hostname)) == 0 {
		pod.Spec.Hostname = spec.Hostname
	}
	if p := spec.Platform; p != "" {
		osName, arch, _ := strings.Cut(p, "/")
		pod.Spec.NodeSelector = map[string]string{"kubernetes.io/os": osName, "kubernetes.io/arch": arch}
	}
	for i, v := range spec.Volumes {
		if err := checkName("volume", v.Name); err != nil {
			return nil, err
		}
		if !path.IsAbs(v.Target) {
			return nil, fault.Invalid("kubernetes: volume %s: mount point %q is not an absolute path", v.Name, v.Target)
		}
		name := "v" + strconv.Itoa(i)
		pod.Spec.Volumes = append(pod.Spec.Volumes, corev1.Volume{Name: name,
			VolumeSource: corev1.VolumeSource{PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: v.Name}}})
		ctr.VolumeMounts = append(ctr.VolumeMounts, corev1.VolumeMount{Name: name, MountPath: v.Target})
	}
	if spec.Limits.ShmBytes > 0 {
		// /dev/shm of the size asked for (Chromium needs more than the runtime's 64 MiB): a
		// memory-backed emptyDir, counted against the pod's memory limit.
		pod.Spec.Volumes = append(pod.Spec.Volumes, corev1.Volume{Name: "shm", VolumeSource: corev1.VolumeSource{
			EmptyDir: &corev1.EmptyDirVolumeSource{Medium: corev1.StorageMediumMemory,
				SizeLimit: resource.NewQuantity(spec.Limits.ShmBytes, resource.BinarySI)}}})
		ctr.VolumeMounts = append(ctr.VolumeMounts, corev1.VolumeMount{Name: "shm", MountPath: "/dev/shm"})
	}
	pod.Spec.Containers = []corev1.Container{ctr}
	return pod, nil
}

// user parses a spec's user ("" = Options.RunAsUser; "uid" or "uid:gid", numeric): the
// cluster cannot look names up in the image, and root is refused.
func (c *Client) user(u string) (uid, gid int64, err error) {
	if u == "" {
		return c.opts.RunAsUser, c.opts.RunAsUser, nil
	}
	us, gs, hasGroup := strings.Cut(u, ":")
	uid, err = strconv.ParseInt(us, 10, 64)
	if err != nil {
		return 0, 0, fault.Invalid("kubernetes: user %q: give a numeric uid (a cluster cannot look names up in the image)", u)
	}
	gid = uid
	if hasGroup {
		if gid, err = strconv.ParseInt(gs, 10, 64); err != nil {
			return 0, 0, fault.Invalid("kubernetes: user %q: give a numeric gid", u)
		}
	}
	if uid <= 0 || gid < 0 {
		return 0, 0, fault.Invalid("kubernetes: user %q: desktops on a cluster never run as root", u)
	}
	return uid, gid, nil
}

// resources turns limits into a Pod's limits and requests (the limits × RequestRatio).
func (c *Client) resources(l engine.Limits) corev1.ResourceRequirements {
	r := corev1.ResourceRequirements{Limits: corev1.ResourceList{}, Requests: corev1.ResourceList{}}
	if l.MemoryBytes > 0 {
		r.Limits[corev1.ResourceMemory] = *resource.NewQuantity(l.MemoryBytes, resource.BinarySI)
		r.Requests[corev1.ResourceMemory] = *resource.NewQuantity(int64(float64(l.MemoryBytes)*c.opts.RequestRatio), resource.BinarySI)
	}
	if l.NanoCPUs > 0 {
		milli := l.NanoCPUs / 1e6
		r.Limits[corev1.ResourceCPU] = *resource.NewMilliQuantity(milli, resource.DecimalSI)
		r.Requests[corev1.ResourceCPU] = *resource.NewMilliQuantity(max(1, int64(float64(milli)*c.opts.RequestRatio)), resource.DecimalSI)
	}
	return r
}

// CreateContainer stores the container's Pod in a ConfigMap of its name; nothing runs yet.
// A name in use is fault.ErrExists.
func (c *Client) CreateContainer(ctx context.Context, spec engine.ContainerSpec) (engine.ContainerState, error) {
	op := fmt.Sprintf("create container %q", spec.Name)
	pod, err := c.podFor(spec)
	if err != nil {
		return engine.ContainerState{}, err
	}
	raw, err := json.Marshal(pod)
	if err != nil {
		return engine.ContainerState{}, fmt.Errorf("%s: %w", op, err)
	}
	labels, ann := maps.Clone(pod.Labels), maps.Clone(pod.Annotations)
	cm := &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: spec.Name, Labels: labels, Annotations: ann},
		Data:       map[string]string{dataPod: string(raw), dataStopTimeout: strconv.FormatInt(*pod.Spec.TerminationGracePeriodSeconds, 10)},
	}
	created, err := c.cs.CoreV1().ConfigMaps(c.ns).Create(ctx, cm, metav1.CreateOptions{})
	if err != nil {
		return engine.ContainerState{}, c.wrap(op, err)
	}
	return c.state(created, nil), nil
}

// record returns the ConfigMap of container id (its name).
func (c *Client) record(ctx context.Context, op, id string) (*corev1.ConfigMap, error) {
	cm, err := c.cs.CoreV1().ConfigMaps(c.ns).Get(ctx, id, metav1.GetOptions{})
	if err != nil {
		return nil, c.wrap(op, err)
	}
	if cm.Labels[labelContainer] == "" {
		return nil, &engine.Error{Op: op, Class: fault.ErrNotFound, Err: fmt.Errorf("configmap %q is not a Cubicle container", id)}
	}
	return cm, nil
}

// pod returns container id's Pod, nil when there is none.
func (c *Client) pod(ctx context.Context, op, id string) (*corev1.Pod, error) {
	p, err := c.cs.CoreV1().Pods(c.ns).Get(ctx, id, metav1.GetOptions{})
	if err != nil {
		if err := c.wrap(op, err); !errors.Is(err, fault.ErrNotFound) {
			return nil, err
		}
		return nil, nil
	}
	return p, nil
}

// InspectContainer reports container id (its name) as the cluster has it.
func (c *Client) InspectContainer(ctx context.Context, id string) (engine.ContainerState, error) {
	op := fmt.Sprintf("inspect container %q", id)
	cm, err := c.record(ctx, op, id)
	if err != nil {
		return engine.ContainerState{}, err
	}
	p, err := c.pod(ctx, op, id)
	if err != nil {
		return engine.ContainerState{}, err
	}
	return c.state(cm, p), nil
}

// ListContainers lists the containers whose labels satisfy the selector (see
// engine.LabelFilters), with their Pods' state.
func (c *Client) ListContainers(ctx context.Context, labels map[string]string) ([]engine.ContainerState, error) {
	sel := metav1.ListOptions{LabelSelector: joinSelector(selector(labels), labelContainer)}
	cms, err := c.cs.CoreV1().ConfigMaps(c.ns).List(ctx, sel)
	if err != nil {
		return nil, c.wrap("list containers", err)
	}
	pods, err := c.cs.CoreV1().Pods(c.ns).List(ctx, sel)
	if err != nil {
		return nil, c.wrap("list containers' pods", err)
	}
	byName := map[string]*corev1.Pod{}
	for i := range pods.Items {
		byName[pods.Items[i].Name] = &pods.Items[i]
	}
	out := make([]engine.ContainerState, 0, len(cms.Items))
	for i := range cms.Items {
		st := c.state(&cms.Items[i], byName[cms.Items[i].Name])
		if engine.MatchLabels(st.Labels, labels) {
			out = append(out, st)
		}
	}
	return out, nil
}

func joinSelector(parts ...string) string {
	return strings.Join(slices.DeleteFunc(parts, func(s string) bool { return s == "" }), ",")
}

// Container statuses beyond the other engines' words: a Pod that is scheduled or pulling
// its image is "created", one being deleted is "stopping" (what the VM manager waits out).
const (
	statusCreated  = "created"
	statusRunning  = "running"
	statusStopping = "stopping"
	statusExited   = "exited"
	statusUnknown  = "unknown"
)

// state is the engine state of a container record and its Pod (nil: none).
func (c *Client) state(cm *corev1.ConfigMap, p *corev1.Pod) engine.ContainerState {
	st := engine.ContainerState{ID: cm.Name, Name: cm.Name, Labels: decodeLabels(cm.Labels, cm.Annotations), Status: statusExited}
	var tmpl corev1.Pod
	if json.Unmarshal([]byte(cm.Data[dataPod]), &tmpl) == nil && len(tmpl.Spec.Containers) > 0 {
		st.Image = tmpl.Spec.Containers[0].Image
	}
	if p == nil {
		return st
	}
	cs := containerStatus(p)
	if cs != nil {
		st.ImageID = cs.ImageID
		if t := cs.State.Terminated; t != nil {
			st.ExitCode = int(t.ExitCode)
		}
	}
	switch {
	case p.DeletionTimestamp != nil:
		st.Status = statusStopping
	case p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed:
		st.Status = statusExited
	case cs != nil && cs.State.Running != nil:
		st.Status, st.Running, st.StartedAt = statusRunning, true, cs.State.Running.StartedAt.Time
	case cs != nil && cs.State.Terminated != nil:
		st.Status = statusExited
	case p.Status.Phase == corev1.PodPending || p.Status.Phase == corev1.PodRunning:
		st.Status = statusCreated
	default:
		st.Status = statusUnknown
	}
	return st
}

// containerStatus returns the status of the desktop's container in p, nil before it has one.
func containerStatus(p *corev1.Pod) *corev1.ContainerStatus {
	for i := range p.Status.ContainerStatuses {
		if p.Status.ContainerStatuses[i].Name == containerName {
			return &p.Status.ContainerStatuses[i]
		}
	}
	return nil
}

// PauseContainer is refused: Kubernetes cannot freeze a Pod. A missing container is
// fault.ErrNotFound.
func (c *Client) PauseContainer(ctx context.Context, id string) error {
	if _, err := c.record(ctx, fmt.Sprintf("pause container %q", id), id); err != nil {
		return err
	}
	return fault.Conflict("kubernetes: a pod cannot be paused; stop the desktop instead (its files stay)")
}

// UnpauseContainer is refused like PauseContainer (no container of this engine is ever
// paused).
func (c *Client) UnpauseContainer(ctx context.Context, id string) error {
	if _, err := c.record(ctx, fmt.Sprintf("unpause container %q", id), id); err != nil {
		return err
	}
	return fault.Conflict("kubernetes: container %s is not paused (pods cannot be)", id)
}

func ptr[T any](v T) *T { return &v }
