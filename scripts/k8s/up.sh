#!/usr/bin/env bash
# Brings the single-node test cluster up from a clean state and prints step timings:
# certificates, pause image, etcd, the loopback registry, containerd, the control plane, the
# kubelet, the volume provisioner, then Cubicle's namespace with its RBAC (docs/kubernetes-rbac.yaml).
# Leftovers of an earlier cluster (even one killed mid-way) are torn down first.
# Writes $K8S_WORK/cluster.env for the tests (CUBICLE_K8S_* variables).
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
source "$HERE/env.sh"

T0=$(date +%s.%N)
lap() { printf '  %-26s %6.1f s\n' "$1" "$(echo "$(date +%s.%N) - $T0" | bc)"; }
need() { command -v "$1" >/dev/null || { echo "up: $1 is missing ($2)" >&2; exit 1; }; }
need etcd "apt-get install etcd-server"; need containerd "apt-get install containerd"; need runc "apt-get install runc"
need ctr "apt-get install containerd"; need docker-registry "apt-get install docker-registry"; need gcc "apt-get install gcc"
need openssl "apt-get install openssl"; need curl "apt-get install curl"; need bc "apt-get install bc"
[ -x /usr/lib/cni/bridge ] || { echo "up: CNI plugins missing (apt-get install containernetworking-plugins)" >&2; exit 1; }
[ -x "$K8S_BIN/kube-apiserver" ] || { echo "up: no Kubernetes binaries in $K8S_BIN: run $HERE/build.sh first" >&2; exit 1; }

"$HERE/down.sh" >/dev/null 2>&1 || true
for port in 6443 10250 10257 10259 12379 12380 $K8S_REGISTRY_PORT; do
  if ss -Hltn "sport = :$port" | grep -q .; then echo "up: port $port is in use by another program: $(ss -Hltnp "sport = :$port")" >&2; exit 1; fi
done
rm -rf "$K8S_WORK"
mkdir -p "$K8S_WORK"/{containerd/certs.d,cni/net.d,cni/ipam,pids,logs,volumes,registry,kubelet-root}
render() { sed "s#\${K8S_WORK}#$K8S_WORK#g" "$1" > "$2"; }
render "$HERE/containerd.toml" "$K8S_WORK/containerd/config.toml"
render "$HERE/kubelet.yaml" "$K8S_WORK/kubelet.yaml"
render "$HERE/cni.conflist" "$K8S_WORK/cni/net.d/10-cubicle-test.conflist"
REG=127.0.0.1:$K8S_REGISTRY_PORT
mkdir -p "$K8S_WORK/containerd/certs.d/$REG"
printf 'server = "http://%s"\n[host."http://%s"]\n  capabilities = ["pull", "resolve"]\n' "$REG" "$REG" > "$K8S_WORK/containerd/certs.d/$REG/hosts.toml"

# start NAME COMMAND…: a daemon with its log and pid file under $K8S_WORK.
# (from /: a daemon must not keep the checkout as its working directory; see scripts/lib.sh)
start() { local n=$1; shift; (cd / && exec nohup "$@" > "$K8S_WORK/logs/$n.log" 2>&1) & echo $! > "$K8S_WORK/pids/$n.pid"; }
# wait_for WHAT SECONDS COMMAND…: poll until COMMAND succeeds.
wait_for() {
  local what=$1 n=$(( $2 * 5 )); shift 2
  for _ in $(seq "$n"); do "$@" >/dev/null 2>&1 && return 0; sleep 0.2; done
  echo "up: $what did not come up; logs in $K8S_WORK/logs" >&2; exit 1
}

"$HERE/pki.sh" >/dev/null; lap certificates
PAUSE=$K8S_CACHE/pause-$(sha256sum "$HERE/pause.c" | cut -c1-12).tar
[ -f "$PAUSE" ] || "$HERE/mkpause.sh" "$PAUSE" >/dev/null
lap pause-image

start etcd etcd --name cubicle-test --data-dir "$K8S_WORK/etcd" \
  --listen-client-urls http://127.0.0.1:12379 --advertise-client-urls http://127.0.0.1:12379 \
  --listen-peer-urls http://127.0.0.1:12380 --initial-advertise-peer-urls http://127.0.0.1:12380 \
  --initial-cluster cubicle-test=http://127.0.0.1:12380 --listen-metrics-urls http://127.0.0.1:12381
wait_for etcd 20 curl -fsS http://127.0.0.1:12379/health
lap etcd

printf 'version: 0.1\nlog:\n  level: warn\nstorage:\n  filesystem:\n    rootdirectory: %s\n  delete:\n    enabled: true\nhttp:\n  addr: %s\n' \
  "$K8S_WORK/registry" "$REG" > "$K8S_WORK/registry.yml"
start registry docker-registry serve "$K8S_WORK/registry.yml"
wait_for registry 20 curl -fsS "http://$REG/v2/"
lap registry

start containerd containerd --config "$K8S_WORK/containerd/config.toml"
wait_for containerd 20 test -S "$K8S_CONTAINERD_SOCK"
ctr --address "$K8S_CONTAINERD_SOCK" -n k8s.io images import "$PAUSE" >/dev/null
lap containerd

"$HERE/apiserver.sh" start
# the controller-manager signs nothing for us and runs no cloud: namespaces, service
# accounts, garbage collection (a pod whose desktop record is deleted) and quotas are its part
start kube-controller-manager "$K8S_BIN/kube-controller-manager" --kubeconfig="$K8S_WORK/controller-manager.kubeconfig" \
  --authentication-kubeconfig="$K8S_WORK/controller-manager.kubeconfig" \
  --authorization-kubeconfig="$K8S_WORK/controller-manager.kubeconfig" \
  --bind-address=127.0.0.1 --secure-port=10257 --leader-elect=false \
  --service-account-private-key-file="$K8S_WORK/pki/sa.key" --root-ca-file="$K8S_WORK/pki/ca.crt" \
  --use-service-account-credentials=true --service-cluster-ip-range=10.96.0.0/24 \
  --controllers='*,-csrsigning,-csrapproving,-nodeipam,-cloud-node-lifecycle,-service-lb-controller,-route'
start kube-scheduler "$K8S_BIN/kube-scheduler" --kubeconfig="$K8S_WORK/scheduler.kubeconfig" \
  --authentication-kubeconfig="$K8S_WORK/scheduler.kubeconfig" --authorization-kubeconfig="$K8S_WORK/scheduler.kubeconfig" \
  --bind-address=127.0.0.1 --secure-port=10259 --leader-elect=false
lap control-plane

# kubelet changes these kernel settings; down.sh puts them back
for k in kernel.panic kernel.panic_on_oops vm.overcommit_memory; do echo "$k $(sysctl -n $k)"; done > "$K8S_WORK/sysctl.saved"
start kubelet "$K8S_BIN/kubelet" --config="$K8S_WORK/kubelet.yaml" --kubeconfig="$K8S_WORK/kubelet.kubeconfig" \
  --root-dir="$K8S_WORK/kubelet-root" --hostname-override="$K8S_NODE" --v=1
node_ready() { k8s_api GET "/api/v1/nodes/$K8S_NODE" | tr -d ' \n' | grep -q '"type":"Ready","status":"True"'; } # the API server pretty-prints for curl
wait_for "the node" 120 node_ready
lap node-ready

# the test cluster's storage: a small provisioner of local volumes (see provisioner/)
start provisioner "$K8S_CACHE/provisioner" --kubeconfig "$K8S_WORK/admin.kubeconfig" --dir "$K8S_WORK/volumes" \
  --node "$K8S_NODE" --class cubicle-local
# Cubicle's namespace (Pod Security "restricted" enforced: desktops must pass it) and its RBAC
apply() { k8s_api POST "$1" -H 'Content-Type: application/yaml' --data-binary "$2" >/dev/null; }
apply /api/v1/namespaces "apiVersion: v1
kind: Namespace
metadata:
  name: $K8S_NAMESPACE
  labels: {pod-security.kubernetes.io/enforce: restricted, pod-security.kubernetes.io/enforce-version: latest}"
apply /apis/storage.k8s.io/v1/storageclasses "apiVersion: storage.k8s.io/v1
kind: StorageClass
metadata: {name: cubicle-local}
provisioner: cubicle.test/local
reclaimPolicy: Delete
volumeBindingMode: WaitForFirstConsumer"
# docs/kubernetes-rbac.yaml as shipped (documents split at ---), for the user "cubicle"
apply_doc() {
  local doc=${1//namespace: cubicle/namespace: $K8S_NAMESPACE}
  case "$doc" in
    *"kind: RoleBinding"*) apply "/apis/rbac.authorization.k8s.io/v1/namespaces/$K8S_NAMESPACE/rolebindings" "$doc" ;;
    *"kind: Role"*) apply "/apis/rbac.authorization.k8s.io/v1/namespaces/$K8S_NAMESPACE/roles" "$doc" ;;
  esac
}
doc=""
while IFS= read -r line || [ -n "$line" ]; do
  if [ "$line" = "---" ]; then apply_doc "$doc"; doc=""; else doc+="$line"$'\n'; fi
done < "$ROOT/docs/kubernetes-rbac.yaml"
apply_doc "$doc"
sa_ready() { k8s_api GET "/api/v1/namespaces/$K8S_NAMESPACE/serviceaccounts/default"; }
wait_for "the namespace's service account" 60 sa_ready
lap namespace-rbac

cat > "$K8S_WORK/cluster.env" <<ENV
CUBICLE_K8S_KUBECONFIG=$K8S_WORK/cubicle.kubeconfig
CUBICLE_K8S_ADMIN_KUBECONFIG=$K8S_WORK/admin.kubeconfig
CUBICLE_K8S_NAMESPACE=$K8S_NAMESPACE
CUBICLE_K8S_REGISTRY=$REG
CUBICLE_K8S_STORAGE_CLASS=cubicle-local
CUBICLE_K8S_CLUSTER=$HERE/cluster.sh
CUBICLE_K8S_CONTAINERD=$K8S_CONTAINERD_SOCK
ENV
echo "cluster up: KUBECONFIG=$K8S_WORK/admin.kubeconfig (admin), $K8S_WORK/cubicle.kubeconfig (Cubicle, namespace $K8S_NAMESPACE)"
