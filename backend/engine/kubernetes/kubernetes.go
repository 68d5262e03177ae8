// Package kubernetes is the container engine adapter for a Kubernetes cluster: Cubicle's
// desktops run as Pods in one namespace, reached over the exec subresource (no Service, no
// port, no node access). It offers the container methods of engine/podman and engine/docker,
// with the semantics a cluster allows:
//
//   - A container is a record and, while it runs, a Pod. CreateContainer stores the Pod the
//     spec describes in a ConfigMap of the container's name (its labels mirror the spec's);
//     StartContainer creates the Pod from it (owned by the ConfigMap, so the cluster's garbage
//     collector removes a Pod whose record is deleted) and waits until it runs; StopContainer
//     deletes the Pod (grace period = the stop timeout) and waits until it is gone;
//     RemoveContainer deletes both. A stopped container is a ConfigMap without a Pod.
//   - A volume is a PersistentVolumeClaim (Options.StorageClass, Options.VolumeSize). Stopping
//     or removing a desktop never deletes its claims; only RemoveVolume does.
//   - Pods are hardened as containers are elsewhere and more: every capability dropped, no
//     privilege escalation, the RuntimeDefault seccomp profile, never root (a spec without a
//     user runs as Options.RunAsUser; the claims get that group through fsGroup), no
//     service-account token, no service links. They pass the "restricted" Pod Security
//     Standard. Limits are the spec's; requests are the limits × Options.RequestRatio.
//   - State comes from the cluster: InspectContainer and ListContainers read Pods and
//     ConfigMaps; Events turns watches of both into engine events.
//   - ExecAttach runs a process through the exec subresource (client-go remotecommand over
//     SPDY) and returns it as an engine.ExecStream: the guest link's exec transport works
//     unchanged.
//
// What a cluster cannot do, and the adapter therefore refuses or ignores (docs/kubernetes.md):
// host bind mounts (fault.ErrInvalid: desktops are reached over the exec link), pause
// (fault.ErrConflict), running as root (fault.ErrInvalid), per-container RLIMIT_NOFILE and
// RLIMIT_NPROC (the node's), a per-pod process limit (the kubelet's podPidsLimit) and a host
// pid (always 0). Images are not stored by the cluster: they are pulled from a registry by
// the nodes (see images.Publisher, which pushes prepared images there).
//
// Errors are translated at this boundary: a missing object is fault.ErrNotFound, a name in
// use fault.ErrExists, an object in the wrong state or a cluster without room for a desktop
// (quota, no node fits) fault.ErrConflict, a refused request fault.ErrForbidden (with what
// RBAC is missing), and an API server that does not answer fault.ErrUnavailable with a
// message that names it.
package kubernetes

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/version"
	corev1client "k8s.io/client-go/kubernetes/typed/core/v1"
	networkingv1client "k8s.io/client-go/kubernetes/typed/networking/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"cubicle/backend/engine"
	"cubicle/backend/fault"
)

// Defaults of Options.
const (
	DefaultVolumeSize   = "10Gi"
	DefaultRequestRatio = 0.25
	DefaultRunAsUser    = 1000 // the desktop images' user cua
)

// Options configure a Client. Namespace is required (directly or through the kubeconfig
// context); everything else has a default.
type Options struct {
	// Kubeconfig is the kubeconfig file; "" = $KUBECONFIG, else ~/.kube/config, else the
	// in-cluster service account.
	Kubeconfig string
	// Context picks a context of the kubeconfig; "" = its current context.
	Context string
	// Namespace holds the desktops; "" = the context's namespace.
	Namespace string
	// StorageClass of the desktops' claims; "" = the cluster's default class.
	StorageClass string
	// VolumeSize requested per claim; "" = DefaultVolumeSize.
	VolumeSize string
	// RequestRatio: a Pod requests this share of its limits (CPU and memory), so that a
	// node's idle desktops do not reserve it whole; 0 = DefaultRequestRatio, at most 1.
	RequestRatio float64
	// RunAsUser is the uid (and gid, and fsGroup) of a desktop whose spec names no user;
	// 0 = DefaultRunAsUser. Root is never allowed.
	RunAsUser int64
	// StartTimeout bounds StartContainer's wait for a running Pod (image pull included);
	// 0 = 5 minutes. The caller's context bounds it too.
	StartTimeout time.Duration
	Logger       *slog.Logger
}

// Client is a connection to one namespace of a cluster. It is safe for concurrent use.
type Client struct {
	cs coreClient
	// netpol is the networking group, for the desktops' egress policies (egress.go).
	netpol networkingv1client.NetworkingV1Interface
	rest   *rest.Config
	ns     string
	host   string // the API server's URL, for messages
	opts   Options
	log    *slog.Logger

	volumeSize resource.Quantity
}

// Connect loads the kubeconfig, checks that the API server answers and that the
// namespace's Pods may be listed, and returns a Client. An API server that does not answer
// is fault.ErrUnavailable; missing rights are fault.ErrForbidden naming the RBAC to apply.
func Connect(ctx context.Context, opts Options) (*Client, error) {
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.VolumeSize == "" {
		opts.VolumeSize = DefaultVolumeSize
	}
	size, err := resource.ParseQuantity(opts.VolumeSize)
	if err != nil || size.Sign() <= 0 {
		return nil, fault.Invalid("kubernetes: volume size %q: want a quantity such as 10Gi", opts.VolumeSize)
	}
	switch {
	case opts.RequestRatio == 0:
		opts.RequestRatio = DefaultRequestRatio
	case opts.RequestRatio < 0 || opts.RequestRatio > 1:
		return nil, fault.Invalid("kubernetes: request ratio %v: want a share of the limits between 0 and 1", opts.RequestRatio)
	}
	switch {
	case opts.RunAsUser == 0:
		opts.RunAsUser = DefaultRunAsUser
	case opts.RunAsUser < 0:
		return nil, fault.Invalid("kubernetes: run-as user %d: want a uid above 0", opts.RunAsUser)
	}
	if opts.StartTimeout <= 0 {
		opts.StartTimeout = 5 * time.Minute
	}
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	rules.ExplicitPath = opts.Kubeconfig
	cc := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{CurrentContext: opts.Context})
	rc, err := cc.ClientConfig()
	if err != nil {
		where := opts.Kubeconfig
		if where == "" {
			where = "$KUBECONFIG or ~/.kube/config"
		}
		return nil, fault.Invalid("kubernetes: load the kubeconfig (%s): %v", where, err)
	}
	if opts.Namespace == "" {
		ns, _, err := cc.Namespace()
		if err != nil || ns == "" {
			return nil, fault.Invalid("kubernetes: no namespace: give one (--namespace) or set it in the kubeconfig's context")
		}
		opts.Namespace = ns
	}
	// Desktops make bursts of calls (a start is a handful, a resync two lists): the client's
	// default of 5 per second would queue them.
	rc.QPS, rc.Burst = 50, 100
	rc.UserAgent = "cubicle"
	core, err := corev1client.NewForConfig(rc)
	if err != nil {
		return nil, fault.Invalid("kubernetes: %v", err)
	}
	cs := coreClient{core}
	netpol, err := networkingv1client.NewForConfig(rc)
	if err != nil {
		return nil, fault.Invalid("kubernetes: %v", err)
	}
	c := &Client{cs: cs, netpol: netpol, rest: rc, ns: opts.Namespace, host: rc.Host, opts: opts, log: opts.Logger, volumeSize: size}
	cctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	if _, err := c.Info(cctx); err != nil {
		return nil, err
	}
	if _, err := cs.CoreV1().Pods(c.ns).List(cctx, metav1.ListOptions{Limit: 1}); err != nil {
		return nil, c.wrap(fmt.Sprintf("list pods in namespace %q", c.ns), err)
	}
	c.log.Info("kubernetes connected", "server", c.host, "namespace", c.ns)
	return c, nil
}

// coreClient is the part of a cluster's API the adapter uses: the core group (Pods, claims,
// ConfigMaps, Secrets, Events, quotas; /version through its REST client). Not the umbrella
// clientset (k8s.io/client-go/kubernetes): that one compiles the typed clients and apply
// configurations of every API group, the largest share of a first build of the app.
type coreClient struct{ core corev1client.CoreV1Interface }

func (c coreClient) CoreV1() corev1client.CoreV1Interface { return c.core }

// Namespace returns the namespace the desktops live in.
func (c *Client) Namespace() string { return c.ns }

// Host returns the API server's URL.
func (c *Client) Host() string { return c.host }

// Info reports the API server's version and platform.
func (c *Client) Info(ctx context.Context) (engine.Info, error) {
	raw, err := c.cs.CoreV1().RESTClient().Get().AbsPath("/version").Do(ctx).Raw()
	if err != nil {
		return engine.Info{}, c.wrap("ask the API server's version", err)
	}
	var v version.Info
	if err := json.Unmarshal(raw, &v); err != nil {
		return engine.Info{}, fault.Unavailable("kubernetes: the API server at %s answered /version with %q: %v", c.host, raw, err)
	}
	osName, arch, _ := strings.Cut(v.Platform, "/")
	return engine.Info{Kind: engine.Kubernetes, Socket: c.host, Version: v.GitVersion, APIVersion: "v1", OS: osName, Arch: arch,
		OperatingSystem: "Kubernetes " + v.GitVersion + ", namespace " + c.ns}, nil
}

// Close releases nothing: the client holds no connections of its own beyond the HTTP pool.
func (c *Client) Close() error { return nil }

// wrap translates a client error at the adapter boundary (see the package doc).
func (c *Client) wrap(op string, err error) error {
	if err == nil {
		return nil
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return &engine.Error{Op: op, Class: fault.ErrUnavailable, Err: err}
	}
	if c := fault.Class(err); c != nil {
		return &engine.Error{Op: op, Class: c, Err: err}
	}
	var st apierrors.APIStatus
	if !errors.As(err, &st) {
		return &engine.Error{Op: op, Class: fault.ErrUnavailable,
			Err: fmt.Errorf("the Kubernetes API server at %s does not answer (%w); desktops on this node are unreachable until it does", c.host, err)}
	}
	code := int(st.Status().Code)
	switch {
	case apierrors.IsNotFound(err):
		return &engine.Error{Op: op, Class: fault.ErrNotFound, Status: code, Err: err}
	case apierrors.IsAlreadyExists(err):
		return &engine.Error{Op: op, Class: fault.ErrExists, Status: code, Err: err}
	case apierrors.IsConflict(err):
		return &engine.Error{Op: op, Class: fault.ErrConflict, Status: code, Err: err}
	case apierrors.IsInvalid(err), apierrors.IsBadRequest(err):
		return &engine.Error{Op: op, Class: fault.ErrInvalid, Status: code, Err: err}
	case apierrors.IsUnauthorized(err):
		return &engine.Error{Op: op, Class: fault.ErrForbidden, Status: code,
			Err: fmt.Errorf("the API server at %s does not accept the kubeconfig's credentials (%w); renew them", c.host, err)}
	case apierrors.IsForbidden(err):
		return &engine.Error{Op: op, Class: fault.ErrForbidden, Status: code,
			Err: fmt.Errorf("%w; the kubeconfig's user needs the Role in docs/kubernetes-rbac.yaml in namespace %q", err, c.ns)}
	}
	if code == 0 || code >= http.StatusInternalServerError || code == http.StatusTooManyRequests {
		return &engine.Error{Op: op, Class: fault.ErrUnavailable, Status: code, Err: err}
	}
	return &engine.Error{Op: op, Class: engine.ClassForStatus(code), Status: code, Err: err}
}
