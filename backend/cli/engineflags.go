package cli

import (
	"flag"

	"cubicle/backend/store"
)

// engineFlags are the flags that choose the node's container engine (serve, runner): they
// override the environment and the admin's saved choice (backend/enginechoice.go).
type engineFlags struct {
	kind, kubeconfig, context, namespace, storageClass, volumeSize, registry *string
	insecure                                                                 *bool
}

func addEngineFlags(fs *flag.FlagSet) engineFlags {
	return engineFlags{
		kind:         fs.String("engine", "", "the desktops' engine: podman, docker, kubernetes or none (default: $CUBICLE_ENGINE, else Settings → Local VM, else the one found)"),
		kubeconfig:   fs.String("kubeconfig", "", "kubernetes: the kubeconfig file (default: $CUBICLE_KUBECONFIG, $KUBECONFIG, ~/.kube/config)"),
		context:      fs.String("kube-context", "", "kubernetes: the kubeconfig context (default: its current one)"),
		namespace:    fs.String("namespace", "", "kubernetes: the namespace of the desktops' pods (default: $CUBICLE_KUBE_NAMESPACE, else the context's)"),
		storageClass: fs.String("storage-class", "", "kubernetes: StorageClass of workspaces and browser profiles (default: the cluster's)"),
		volumeSize:   fs.String("volume-size", "", "kubernetes: size of each claim (default 10Gi)"),
		registry:     fs.String("registry", "", "kubernetes: registry host[:port][/path] prepared images are pushed to and pulled from by digest"),
		insecure:     fs.Bool("registry-insecure", false, "kubernetes: push over plain HTTP / without TLS verification (a loopback or private registry)"),
	}
}

// settings returns what the flags set (Kind included); unset flags stay empty.
func (f engineFlags) settings() store.EngineSettings {
	return store.EngineSettings{Kind: *f.kind, Kubeconfig: *f.kubeconfig, Context: *f.context, Namespace: *f.namespace,
		StorageClass: *f.storageClass, VolumeSize: *f.volumeSize, Registry: *f.registry, RegistryInsecure: *f.insecure}
}
