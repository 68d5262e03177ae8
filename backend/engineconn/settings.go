package engineconn

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"os"
	"strconv"

	"cubicle/backend/engine"
	"cubicle/backend/engine/kubernetes"
	"cubicle/backend/fault"
	"cubicle/backend/link"
	"cubicle/backend/store"
	"cubicle/images"
)

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

// KubeOptions are the adapter options of settings s.
func KubeOptions(s store.EngineSettings, log *slog.Logger) kubernetes.Options {
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
	kc, err := kubernetes.Connect(ctx, KubeOptions(s, log.With("engine", "kubernetes")))
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

// KubeLinkChoice is how desktops on a cluster are reached: always the exec link (through the
// API server; no host mount is possible), whatever CUBICLE_GUEST_LINK asks.
func KubeLinkChoice(mode link.Mode, host string) link.Choice {
	reason := "desktops are Pods of the Kubernetes cluster at " + host + ": reached through the exec subresource (no Service, no port, no host mount)"
	if mode == link.SocketMode {
		reason += "; " + link.EnvVar + "=socket cannot apply to a cluster"
	}
	return link.Choice{Mode: mode, Primary: link.NameExec, Reason: reason}
}
