package backend

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"time"

	"cubicle/backend/api"
	"cubicle/backend/engine"
	"cubicle/backend/engine/kubernetes"
	"cubicle/backend/fault"
	"cubicle/backend/link"
	"cubicle/backend/store"
	"cubicle/backend/vm"
	"cubicle/images"
)

// Which engine the local node's desktops run on: the admin's choice in Settings → Local VM
// (store.NodeSettings.Engine), overridden field by field by the process's flags
// (Config.Engine, Config.Kubernetes) and its environment (CUBICLE_ENGINE, CUBICLE_KUBE*).
// The choice is read when the backend starts: a change in Settings applies at the next
// start (the response says so), since desktops cannot move between engines while they run.

// Environment variables of the kubernetes engine (KubeEnv).
const (
	EnvKubeconfig       = "CUBICLE_KUBECONFIG"
	EnvKubeContext      = "CUBICLE_KUBE_CONTEXT"
	EnvKubeNamespace    = "CUBICLE_KUBE_NAMESPACE"
	EnvKubeStorageClass = "CUBICLE_KUBE_STORAGE_CLASS"
	EnvKubeVolumeSize   = "CUBICLE_KUBE_VOLUME_SIZE"
	EnvKubeRegistry     = "CUBICLE_KUBE_REGISTRY"
	EnvKubeInsecure     = "CUBICLE_KUBE_REGISTRY_INSECURE"
)

// KubeEnv reads engine settings from the environment (CUBICLE_ENGINE and the CUBICLE_KUBE*
// variables); unset variables leave fields empty.
func KubeEnv(getenv func(string) string) store.EngineSettings {
	ins, _ := strconv.ParseBool(getenv(EnvKubeInsecure))
	return store.EngineSettings{
		Kind:       getenv("CUBICLE_ENGINE"),
		Kubeconfig: getenv(EnvKubeconfig), Context: getenv(EnvKubeContext), Namespace: getenv(EnvKubeNamespace),
		StorageClass: getenv(EnvKubeStorageClass), VolumeSize: getenv(EnvKubeVolumeSize),
		Registry: getenv(EnvKubeRegistry), RegistryInsecure: ins,
	}
}

// OverlayEngine returns base with every non-empty field of over put on top.
func OverlayEngine(base, over store.EngineSettings) store.EngineSettings {
	out := base
	out.Kind = cmp.Or(over.Kind, base.Kind)
	out.Kubeconfig = cmp.Or(over.Kubeconfig, base.Kubeconfig)
	out.Context = cmp.Or(over.Context, base.Context)
	out.Namespace = cmp.Or(over.Namespace, base.Namespace)
	out.StorageClass = cmp.Or(over.StorageClass, base.StorageClass)
	out.VolumeSize = cmp.Or(over.VolumeSize, base.VolumeSize)
	out.Registry = cmp.Or(over.Registry, base.Registry)
	out.RegistryInsecure = base.RegistryInsecure || over.RegistryInsecure
	return out
}

// CheckEngineSettings validates settings without connecting: a known kind, and for
// kubernetes a readable kubeconfig (when one is named), a registry and a volume size that
// parse. Errors are fault.ErrInvalid saying what to fix.
func CheckEngineSettings(s store.EngineSettings) error {
	switch engine.Kind(s.Kind) {
	case "", engine.Podman, engine.Docker, "none":
		return nil
	case engine.Kubernetes:
	default:
		return fault.Invalid("engine %q: want podman, docker, kubernetes or none (empty: find one)", s.Kind)
	}
	if s.Kubeconfig != "" {
		f, err := os.Open(s.Kubeconfig)
		if err != nil {
			return fault.Invalid("kubeconfig %s cannot be read on this node: %v", s.Kubeconfig, err)
		}
		f.Close()
	}
	if err := images.CheckRegistry(s.Registry); err != nil {
		return fault.Invalid("kubernetes: %v (prepared images are pushed there and the cluster's nodes pull them from it)", err)
	}
	return nil
}

// kubeOptions are the adapter options of settings s.
func kubeOptions(s store.EngineSettings, log *slog.Logger) kubernetes.Options {
	return kubernetes.Options{Kubeconfig: s.Kubeconfig, Context: s.Context, Namespace: s.Namespace,
		StorageClass: s.StorageClass, VolumeSize: s.VolumeSize, Logger: log}
}

// ConnectEngineWith connects the engine settings s choose (see ConnectEngine for the
// local engines). For kubernetes it connects the cluster and, for building the images it
// pushes, the local engine; without a local engine desktops still run but images cannot be
// prepared here (ImagesProblem says why).
func ConnectEngineWith(ctx context.Context, s store.EngineSettings, log *slog.Logger) (*ConnectedEngine, error) {
	if engine.Kind(s.Kind) != engine.Kubernetes {
		return ConnectEngine(ctx, s.Kind, log)
	}
	if err := CheckEngineSettings(s); err != nil {
		return nil, err
	}
	kc, err := kubernetes.Connect(ctx, kubeOptions(s, log.With("engine", "kubernetes")))
	if err != nil {
		return nil, fmt.Errorf("kubernetes engine: %w", err)
	}
	ce := &ConnectedEngine{Kube: kc, Settings: s,
		Endpoint: engine.Endpoint{Kind: engine.Kubernetes, Socket: kc.Host(), Reachable: true}}
	local, err := ConnectEngine(ctx, "", log)
	if err != nil {
		ce.ImagesProblem = "images for the cluster are built with Podman or Docker on this node before they are pushed to " +
			s.Registry + ", and none answers here: " + err.Error()
		log.Warn("kubernetes engine without a local engine: images cannot be prepared here", "err", err)
		return ce, nil
	}
	ce.Client, ce.Endpoint.Version, ce.owned = local.Client, "", local.owned
	ce.Local = local.Endpoint
	return ce, nil
}

// kubeLinkChoice is how desktops on a cluster are reached: always the exec link (through the
// API server; no host mount is possible), whatever CUBICLE_GUEST_LINK asks.
func kubeLinkChoice(mode link.Mode, host string) link.Choice {
	reason := "desktops are Pods of the Kubernetes cluster at " + host + ": reached through the exec subresource (no Service, no port, no host mount)"
	if mode == link.SocketMode {
		reason += "; " + link.EnvVar + "=socket cannot apply to a cluster"
	}
	return link.Choice{Mode: mode, Primary: link.NameExec, Reason: reason}
}

// engineChoice returns the effective engine settings and the overrides that made them.
func (b *Backend) engineChoice() (effective, saved store.EngineSettings, overrides []string, err error) {
	ns, err := b.Store.NodeSettings("local")
	if err != nil {
		return store.EngineSettings{}, store.EngineSettings{}, nil, err
	}
	saved = ns.Engine
	flags := b.cfg.Kubernetes
	flags.Kind = b.cfg.Engine
	env := KubeEnv(os.Getenv)
	for _, o := range []struct {
		name string
		s    store.EngineSettings
	}{{"flags", flags}, {"environment (CUBICLE_ENGINE, CUBICLE_KUBE*)", env}} {
		if o.s != (store.EngineSettings{}) {
			overrides = append(overrides, o.name)
		}
	}
	effective = OverlayEngine(OverlayEngine(saved, env), flags)
	return effective, saved, overrides, nil
}

// EngineStatus reports the engine in force, the saved choice and whether a restart is
// needed to apply it.
func (b *Backend) EngineStatus() (api.EngineStatus, error) {
	eff, saved, over, err := b.engineChoice()
	if err != nil {
		return api.EngineStatus{}, err
	}
	b.engMu.Lock()
	eng, problem := b.engine, b.engineProblem
	b.engMu.Unlock()
	st := api.EngineStatus{Settings: eff, Saved: saved, Overrides: over, Problem: problem, Connecting: problem == vm.ErrConnecting}
	if eng != nil {
		st.Active, st.Endpoint, st.ImagesProblem = string(eng.Endpoint.Kind), eng.Endpoint.Socket, eng.ImagesProblem
	}
	st.RestartNeeded = eff != b.engineInUse
	return st, nil
}

// SetEngine saves the node's engine choice after checking it (for kubernetes: the settings
// and a connection to the cluster, so that a typo never takes effect at the next start).
// requestID makes a repeated request a no-op. It applies at the next start.
func (b *Backend) SetEngine(ctx context.Context, requestID string, s store.EngineSettings) (api.EngineStatus, error) {
	if requestID == "" {
		return api.EngineStatus{}, fault.Invalid("send a requestId with the engine change")
	}
	s.Kind = strings.ToLower(strings.TrimSpace(s.Kind))
	if err := CheckEngineSettings(s); err != nil {
		return api.EngineStatus{}, err
	}
	if ns, err := b.Store.NodeSettings("local"); err == nil && ns.EngineRequestID == requestID {
		return b.EngineStatus()
	}
	if engine.Kind(s.Kind) == engine.Kubernetes {
		cctx, cancel := context.WithTimeout(ctx, 20*time.Second)
		kc, err := kubernetes.Connect(cctx, kubeOptions(s, b.log))
		cancel()
		if err != nil {
			return api.EngineStatus{}, fmt.Errorf("the cluster was not saved as this node's engine: %w", err)
		}
		kc.Close()
	} else {
		s = store.EngineSettings{Kind: s.Kind}
	}
	if _, err := b.Store.UpdateNodeSettings("local", func(ns *store.NodeSettings) error {
		ns.Engine, ns.EngineRequestID = s, requestID
		return nil
	}); err != nil {
		return api.EngineStatus{}, err
	}
	b.log.Info("engine choice saved; it applies at the next start", "kind", s.Kind, "namespace", s.Namespace)
	return b.EngineStatus()
}

// errNoEngine is the problem when the effective kind is "none".
var errNoEngine = errors.New(`Local VM is turned off (engine "none")`)
