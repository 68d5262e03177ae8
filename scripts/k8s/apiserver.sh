#!/usr/bin/env bash
# apiserver.sh start|stop: the test cluster's API server alone (tests stop and start it to
# check that Cubicle fails closed and reconciles; up.sh starts it the same way).
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
source "$HERE/env.sh"
pidf=$K8S_WORK/pids/kube-apiserver.pid
case "${1:-}" in
start)
  if [ -f "$pidf" ] && kill -0 "$(cat "$pidf")" 2>/dev/null; then echo "the API server runs already"; exit 0; fi
  nodeip=$(ip -4 -o addr show scope global 2>/dev/null | awk '{print $4}' | cut -d/ -f1 | head -1)
  cd / # a daemon must not keep the checkout as its working directory (scripts/lib.sh)
  nohup "$K8S_BIN/kube-apiserver" --etcd-servers=http://127.0.0.1:12379 \
    --bind-address=127.0.0.1 --secure-port=6443 --advertise-address="${nodeip:-127.0.0.1}" \
    --tls-cert-file="$K8S_WORK/pki/apiserver.crt" --tls-private-key-file="$K8S_WORK/pki/apiserver.key" \
    --client-ca-file="$K8S_WORK/pki/ca.crt" \
    --service-account-key-file="$K8S_WORK/pki/sa.pub" --service-account-signing-key-file="$K8S_WORK/pki/sa.key" \
    --service-account-issuer=https://kubernetes.default.svc.cluster.local \
    --service-cluster-ip-range=10.96.0.0/24 --authorization-mode=Node,RBAC --allow-privileged=false \
    --enable-admission-plugins=NodeRestriction \
    --kubelet-client-certificate="$K8S_WORK/pki/apiserver-kubelet-client.crt" \
    --kubelet-client-key="$K8S_WORK/pki/apiserver-kubelet-client.key" \
    --kubelet-preferred-address-types=Hostname,InternalIP \
    >> "$K8S_WORK/logs/kube-apiserver.log" 2>&1 &
  echo $! > "$pidf"
  for _ in $(seq 300); do k8s_api GET /readyz >/dev/null 2>&1 && exit 0; sleep 0.2; done
  echo "the API server did not become ready; see $K8S_WORK/logs/kube-apiserver.log" >&2; exit 1 ;;
stop)
  [ -f "$pidf" ] || exit 0
  p=$(cat "$pidf"); kill "$p" 2>/dev/null || true
  for _ in $(seq 100); do kill -0 "$p" 2>/dev/null || break; sleep 0.1; done
  kill -9 "$p" 2>/dev/null || true; rm -f "$pidf" ;;
*) echo "usage: $0 start|stop" >&2; exit 2 ;;
esac
