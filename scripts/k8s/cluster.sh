#!/usr/bin/env bash
# cluster.sh build|up|down|env|apiserver-stop|apiserver-start — the single-node Kubernetes
# test cluster (README in this folder). `env` prints the CUBICLE_K8S_* variables of a running
# cluster (source it: `set -a; . <(scripts/k8s/cluster.sh env); set +a`).
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
source "$HERE/env.sh"
case "${1:-}" in
build)
  "$HERE/build.sh"
  # the volume provisioner is this repository's code: rebuilt every time, from the Go build cache
  # the tests fill (same GOFLAGS and cgo setting as theirs, so it is only linked)
  mkdir -p "$K8S_CACHE"
  (cd "$ROOT" && go build -o "$K8S_CACHE/provisioner" ./scripts/k8s/provisioner) ;;
up) "$HERE/up.sh" ;;
down) "$HERE/down.sh" ;;
env) cat "$K8S_WORK/cluster.env" ;;
apiserver-stop) "$HERE/apiserver.sh" stop ;;
apiserver-start) "$HERE/apiserver.sh" start ;;
*) echo "usage: $0 build|up|down|env|apiserver-stop|apiserver-start" >&2; exit 2 ;;
esac
