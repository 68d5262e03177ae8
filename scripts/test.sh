#!/usr/bin/env bash
# Runs every test: Go unit + integration tests (real Podman and a real Docker Engine, a real
# single-node Kubernetes cluster (scripts/k8s), real Xvfb,
# real images), the web UI's unit tests, and the browser tests against a real `cubicle serve`.
# Installs what is missing first. No test may skip here (CUBICLE_REQUIRE_ALL=1 turns a skip into a failure).
set -euo pipefail
source "$(dirname "$0")/lib.sh"
install_deps
ensure_podman_service
# A real Docker Engine next to Podman: the Docker adapter's conformance suite and the
# real-desktop lifecycle run against it too (CUBICLE_DOCKER_SOCKET; a missing one fails).
ensure_docker_engine
export CUBICLE_REQUIRE_DOCKER=1
bash "$ROOT/scripts/build.sh"
cd "$ROOT"
export CUBICLE_REQUIRE_ALL=1
mkdir -p test-artifacts

say "go vet"
go vet ./...

say "ports: Windows and macOS builds, Windows tests under Wine"
bash "$ROOT/scripts/ports.sh"

say "Go tests (never from the test cache: many depend on the engine, images and displays)"
# (the Kubernetes tests run below, with the cluster up only for them)
go test -count=1 -timeout 40m -skip '^TestKubernetes' $(go list ./... | grep -v '/backend/engine/kubernetes$') 2>&1 | tee test-artifacts/go-test.log

# The packages whose tests run real desktops once more over the exec link (issue 10: both
# guest transports; only these, to keep CI time down): the desktop lifecycle, preparation's
# probe and crash recovery (backend/vm), and chat tools, helpers, computer types with browser
# tunnels and the broken-link tests on a real desktop (backend). The engines' exec sessions,
# the relay and the bench's exec-link rows run in the first pass already.
say "real-desktop Go tests again over the exec link (CUBICLE_GUEST_LINK=exec)"
CUBICLE_GUEST_LINK=exec go test -count=1 -timeout 40m -skip 'TestKubernetes' ./backend ./backend/vm/... 2>&1 | tee test-artifacts/go-test-exec-link.log

# Node "local" goes through the managed local runner by default (CUBICLE_LOCAL_NODE=runner);
# the local node's main real-desktop tests run once more with the server calling its desktops
# directly, so both ways stay tested (the desktop and its events, the live channel, take over
# and type, an agent's tools and operator /shell, deletion with data, the upgrade test).
say "the local node's real-desktop Go tests again with the direct path (CUBICLE_LOCAL_NODE=direct)"
CUBICLE_LOCAL_NODE=direct go test -count=1 -timeout 20m \
  -run 'TestPushNotPollOnRealDesktop$|TestAgentOnRealDesktop$|TestDeleteAgentWithAndWithoutData$|TestManagedLocalRunner$|TestWiring$' \
  ./backend 2>&1 | tee test-artifacts/go-test-local-direct.log

say "Go tests of the concurrent core under the race detector"
go test -race -timeout 20m ./backend/control/... ./backend/agent/... ./backend/binding/... \
  ./backend/store/... ./backend/auth/... ./backend/api/... ./backend/screen/... ./backend/nodes/... ./runner/wire/... 2>&1 | tee test-artifacts/go-race.log

# The Kubernetes part (scripts/k8s): its binaries are built once per version into
# /var/cache/cubicle-k8s (about 5.5 min cold on 2 cores) and reused; the desktop image is the
# one Podman built above (same content hash), pushed to the cluster's loopback registry. The
# cluster is up only for this part and torn down (host changes undone) however it ends; the
# lock keeps two runs on one machine from sharing its fixed ports. Its duration is printed.
say "Kubernetes test cluster: up, engine and desktop tests, bench, down"
k8s_t0=$(date +%s)
exec 8>/var/tmp/cubicle-k8s.lock
flock 8
bash scripts/k8s/cluster.sh build
trap 'bash scripts/k8s/cluster.sh down >/dev/null 2>&1 || true' EXIT
bash scripts/k8s/cluster.sh up
set -a
# shellcheck disable=SC1090
source <(bash scripts/k8s/cluster.sh env)
set +a
k8s_t1=$(date +%s)
go test -count=1 -timeout 20m ./backend/engine/kubernetes/... 2>&1 | tee test-artifacts/go-test-k8s-engine.log
go test -count=1 -timeout 30m -run '^TestKubernetes' -skip 'TestKubernetesAPIServerDown' ./backend 2>&1 | tee test-artifacts/go-test-k8s.log
# alone, after the others: it stops the cluster's API server under a running desktop
CUBICLE_K8S_DISRUPT=1 go test -count=1 -timeout 20m -run '^TestKubernetesAPIServerDown$' ./backend 2>&1 | tee test-artifacts/go-test-k8s-disrupt.log

say "benchmark, quick mode, with the cluster's rows next to Podman's (run so it cannot rot; the numbers are not judged here)"
"$ROOT/bin/cubicle" bench --quick --json test-artifacts/bench.json \
  --kubeconfig "$CUBICLE_K8S_KUBECONFIG" --namespace "$CUBICLE_K8S_NAMESPACE" --storage-class "$CUBICLE_K8S_STORAGE_CLASS" \
  --registry "$CUBICLE_K8S_REGISTRY" --registry-insecure
k8s_t2=$(date +%s)
bash scripts/k8s/cluster.sh down
trap - EXIT
flock -u 8
echo "Kubernetes part: $(( $(date +%s) - k8s_t0 )) s (build check + bring-up $(( k8s_t1 - k8s_t0 )) s, tests and bench $(( k8s_t2 - k8s_t1 )) s)" | tee test-artifacts/k8s-timing.txt

say "web UI unit tests"
(cd frontend && npm test --silent)

say "browser tests"
(cd frontend && CUBICLE_BIN="$ROOT/bin/cubicle" CUBICLE_E2E_DESKTOP=1 npm run test:e2e --silent)

say "the real-desktop browser flows again over the exec link (the desktop, the live screen v2)"
(cd frontend && CUBICLE_BIN="$ROOT/bin/cubicle" CUBICLE_E2E_DESKTOP=1 CUBICLE_GUEST_LINK=exec \
  node --test e2e/desktop.test.mjs e2e/live.test.mjs)
