# Settings of the test cluster, shared by the scripts in this folder.
# shellcheck shell=bash
: "${K8S_VERSION:=1.30.14}"                # 1.31+ staging modules are missing from the proxy; 1.30 still runs on cgroup v1 and etcd 3.4
: "${K8S_CACHE:=/var/cache/cubicle-k8s}"   # built binaries, by version (kept across clones and runs)
: "${K8S_WORK:=/var/tmp/cubicle-k8s}"      # one cluster's state: certs, etcd, containerd, logs (teardown wipes it)
: "${K8S_NODE:=localhost}"                 # node name: "localhost" keeps apiserver → kubelet traffic (exec) on loopback
: "${K8S_REGISTRY_PORT:=15000}"            # the cluster's loopback registry (plain HTTP, containerd pulls from it)
: "${K8S_NAMESPACE:=cubicle}"              # the namespace Cubicle's tests use (RBAC: only this namespace)
export K8S_VERSION K8S_CACHE K8S_WORK K8S_NODE K8S_REGISTRY_PORT K8S_NAMESPACE
K8S_BIN=$K8S_CACHE/v$K8S_VERSION/bin
K8S_API=https://127.0.0.1:6443
K8S_CONTAINERD_SOCK=$K8S_WORK/containerd/containerd.sock

# k8s_api METHOD PATH [curl args…]: the API as the cluster admin (no kubectl needed).
k8s_api() {
  local m=$1 p=$2; shift 2
  curl -fsS --max-time 10 --cacert "$K8S_WORK/pki/ca.crt" --cert "$K8S_WORK/pki/admin.crt" \
    --key "$K8S_WORK/pki/admin.key" -X "$m" "$K8S_API$p" "$@"
}
