#!/usr/bin/env bash
# Runs every test: Go unit + integration tests (real Podman and a real Docker Engine, a real
# single-node Kubernetes cluster (scripts/k8s), real Xvfb, real images), the web UI's unit
# tests, and the browser tests against a real `cubicle serve`. Installs what is missing first.
# No test may skip here (CUBICLE_REQUIRE_ALL=1 turns a skip into a failure). Ends with a table
# of each phase's wall time (also in test-artifacts/phases.txt), however the run ends.
#
# Each Go package is tested once: the packages of the concurrent core only under the race
# detector, the rest in the plain pass. The tests that depend on the guest link or on how node
# "local" is reached run again in the other modes from test binaries built once
# (test-artifacts/bin); their names are listed once, below (LINK_TESTS, NODE_TESTS).
set -euo pipefail
source "$(dirname "$0")/lib.sh"
phases_begin "$ROOT/test-artifacts/phases.txt"

phase "install what is missing (packages, services)"
install_deps test
ensure_podman_service
# A real Docker Engine next to Podman: the Docker adapter's conformance suite and the
# real-desktop lifecycle run against it too (CUBICLE_DOCKER_SOCKET; a missing one fails).
ensure_docker_engine
export CUBICLE_REQUIRE_DOCKER=1

cubicle_build
cd "$ROOT"
export CUBICLE_REQUIRE_ALL=1
mkdir -p test-artifacts test-artifacts/bin

# The ports' builds and vets (Windows app and installer, .deb, darwin build; scripts/ports.sh)
# start now at the lowest CPU and I/O priority: they take only what the checks below leave
# idle (on a fresh machine they compile the whole tree twice more, for windows and darwin);
# their Wine part runs beside the Kubernetes part, their output is printed at the end.
rm -f test-artifacts/ports-build.rc
(
  rc=0
  nice -n 19 ionice -c 3 bash "$ROOT/scripts/ports.sh" build >test-artifacts/ports-build.log 2>&1 || rc=$?
  echo "$rc" >test-artifacts/ports-build.rc
) &
ports_build_pid=$!
on_exit "kill $ports_build_pid 2>/dev/null || true"
TB="$ROOT/test-artifacts/bin"

phase "the installers: running needs none of the test-only packages"
run_needs=" $(bash .ci/install-deps.sh run --dry-run | sed -n 's/^needed (run): //p') "
for p in wine wine64 chromium etcd-server containerd docker.io x11vnc nsis xterm docker-registry busybox-static; do
  case "$run_needs" in *" $p "*) echo "scripts/run.sh would install the test-only package $p"; exit 1 ;; esac
done
echo "run installs: $run_needs"

# The concurrent core: tested once, under the race detector (below), not in the plain pass.
RACE_PKGS=(./backend/control/... ./backend/fleet/... ./backend/agent ./backend/agent/openai ./backend/agent/tools ./backend/binding/...
  ./backend/store/... ./backend/auth/... ./backend/api/... ./backend/liveview/... ./backend/screen/... ./backend/nodes/... ./runner/wire/...)
race_list=$(go list "${RACE_PKGS[@]}")

# Test binaries are linked once per content (internal/testbin keeps them in the machine's cache
# keyed by what the link reads) and run from there in every pass below; results never come from
# a cache (-test.count=1).
phase "link the test binaries (only those whose content changed since they were last linked)"
go build -o "$TB/testbin" ./internal/testbin
testbin() { "$TB/testbin" "$@"; }
plain=$(go list ./... | grep -v '/node_modules/' | grep -v '/backend/engine/kubernetes$' | grep -vxF -f <(printf '%s\n' $race_list))
testbin link $plain ./backend/engine/kubernetes/... >"$TB/plain.list"
testbin link -race "${RACE_PKGS[@]}" >"$TB/race.list"
BACKEND_TEST=$(awk '$1 == "cubicle/backend" {print $2}' "$TB/plain.list")
VM_TEST=$(awk '$1 == "cubicle/backend/vm" {print $2}' "$TB/plain.list")

# The two passes run side by side: most of the plain pass waits on desktops, displays and
# engines, the race pass (the concurrent core, few real desktops) mostly computes (measured on
# 2 cores: 9.5 min together, 15.5 one after the other). The race pass's output is printed when
# it ends (its log per package is in test-artifacts/go-race/).
# go vet reads what the link just compiled, so it is mostly analysis: it runs beside the Go
# tests at the lowest CPU and I/O priority (they mostly wait on desktops) and is waited for
# at the end; a finding fails the run there.
rm -f test-artifacts/vet.rc
(
  rc=0
  nice -n 19 ionice -c 3 go vet ./... >test-artifacts/vet.log 2>&1 || rc=$?
  echo "$rc" >test-artifacts/vet.rc
) &
vet_pid=$!
on_exit "kill $vet_pid 2>/dev/null || true"

# The plain pass runs three binaries at a time: its binaries mostly wait on desktops, engines
# and displays, and its longest one (./backend, ~1100 s on a fresh machine) is a third of the
# pass's 3200 binary-seconds, so with two lanes the rest had to queue behind it (the race
# pass, ~400 binary-seconds, ends early).
phase "Go tests (many depend on the engine, images and displays; the concurrent core beside them, under -race)"
# (the Kubernetes tests run below, with the cluster up only for them)
testbin run -race -timeout 35m -logs test-artifacts/go-race "${RACE_PKGS[@]}" >test-artifacts/go-race.log 2>&1 &
race_pid=$!
on_exit "kill $race_pid 2>/dev/null || true"
plain_rc=0
CUBICLE_BENCH_JSON="$ROOT/test-artifacts/bench-quick.json" \
  testbin run -p 3 -timeout 40m -skip '^TestKubernetes' -logs test-artifacts/go $plain 2>&1 | tee test-artifacts/go-test.log || plain_rc=$?
race_rc=0
wait "$race_pid" || race_rc=$?
echo "--- the race pass (test-artifacts/go-race.log):"
cat test-artifacts/go-race.log
if [ "$plain_rc" != 0 ] || [ "$race_rc" != 0 ]; then
  echo "Go tests failed: plain pass exit $plain_rc, race pass exit $race_rc"
  exit 1
fi

# Fuzzing: the store's two page checks (serve's pre-open check and doctor's full check) against damaged
# page headers of every kind: the seed corpus runs in the plain pass; here 3000 new inputs
# (about 20 s here). A count, not a duration: Go 1.26's coordinator can report its own
# -fuzztime deadline as a failure when a worker is mid-call (golang/go#75804, fixed in 1.27).
# It runs beside the reruns below (they mostly wait on desktops); its result is checked after them.
nice -n 19 go test -count=1 -run '^$' -fuzz '^FuzzPageHeaders$' -fuzztime=3000x ./backend/store >test-artifacts/go-fuzz-store.log 2>&1 &
fuzz_pid=$!
on_exit "kill $fuzz_pid 2>/dev/null || true"

run_tests() { # run_tests BINARY PACKAGE_DIR ARGS… — a test binary run where go test would run it
  local bin=$1 dir=$2
  shift 2
  (cd "$ROOT/$dir" && "$bin" -test.count=1 "$@")
}

# The tests that exercise a desktop's guest link end to end, run once more over the exec link
# (issue 10: both guest transports): the desktop lifecycle, preparation's probe, crash
# recovery and repair (backend/vm); chat tools, helpers, computer types with browser tunnels,
# the live screen and the broken-link tests on a real desktop (backend). The engines' exec
# sessions, the relay and the bench's exec-link rows run in the plain pass already.
LINK_TESTS_BACKEND='^(TestAgentOnRealDesktop|TestComputerTypesOnRealEngine|TestHelperOnTaskDesktop|TestPushNotPollOnRealDesktop|TestStopEndsControlAndFrameCount|TestLinkDriverKilled|TestLinkDriverHung|TestLinkExecSessionEnded|TestLinkManySessions|TestNeverBlackAfterIdleStop)$'
LINK_TESTS_VM='^(TestRealLifecycle|TestRealPrepare|TestRealCrashRecovery|TestOneLinkPerDesktop|TestDeadDriverMarksUnhealthyAndStartRepairs|TestRealOutsideChanges|TestTaskDesktops)$'
# Node "local" goes through the managed local runner by default (CUBICLE_LOCAL_NODE=runner);
# these run once more with the server calling its desktops directly.
NODE_TESTS='^(TestPushNotPollOnRealDesktop|TestAgentOnRealDesktop|TestDeleteAgentWithAndWithoutData|TestManagedLocalRunner|TestWiring)$'
check_tests "$BACKEND_TEST" "$LINK_TESTS_BACKEND"
check_tests "$VM_TEST" "$LINK_TESTS_VM"
check_tests "$BACKEND_TEST" "$NODE_TESTS"

# The three reruns are three binaries' runs, side by side (each mostly waits on its desktops):
# the backend's link tests in front, the desktop lifecycle's link tests and then the direct
# path behind them; each log is printed when its run ends.
phase "real-desktop Go tests again over the exec link (CUBICLE_GUEST_LINK=exec), and with the direct path (CUBICLE_LOCAL_NODE=direct); beside them, fuzzing the store's page checks (3000 inputs)"
(
  CUBICLE_GUEST_LINK=exec run_tests "$VM_TEST" backend/vm -test.timeout 30m -test.run "$LINK_TESTS_VM" >test-artifacts/go-test-exec-link-vm.log 2>&1
  CUBICLE_LOCAL_NODE=direct run_tests "$BACKEND_TEST" backend -test.timeout 20m -test.run "$NODE_TESTS" >test-artifacts/go-test-local-direct.log 2>&1
) &
behind_pid=$!
on_exit "kill $behind_pid 2>/dev/null || true"
front_rc=0
CUBICLE_GUEST_LINK=exec run_tests "$BACKEND_TEST" backend -test.timeout 30m -test.run "$LINK_TESTS_BACKEND" >test-artifacts/go-test-exec-link.log 2>&1 || front_rc=$?
behind_rc=0
wait "$behind_pid" || behind_rc=$?
for f in go-test-exec-link go-test-exec-link-vm go-test-local-direct; do echo "--- test-artifacts/$f.log:"; cat "test-artifacts/$f.log"; done
if [ "$front_rc" != 0 ] || [ "$behind_rc" != 0 ]; then
  echo "the exec-link and direct reruns failed: backend exit $front_rc, backend/vm and direct exit $behind_rc"
  exit 1
fi
fuzz_rc=0
wait "$fuzz_pid" || fuzz_rc=$?
echo "--- fuzzing the store's page checks (3000 inputs; test-artifacts/go-fuzz-store.log):"
cat test-artifacts/go-fuzz-store.log
if [ "$fuzz_rc" != 0 ]; then echo "fuzzing the store's page checks failed (exit $fuzz_rc)"; exit 1; fi

# The Kubernetes part (scripts/k8s): its binaries are built once per version into
# /var/cache/cubicle-k8s (about 5.5 min cold on 2 cores) and reused; the desktop image is the
# one Podman built above (same content hash), pushed to the cluster's loopback registry. The
# cluster is up only for this part and torn down (host changes undone) however it ends; the
# lock keeps two runs on one machine from sharing its fixed ports.
# The ports (Windows and macOS builds, the Windows tests, app and installer under Wine) run
# beside the Kubernetes part, which mostly waits on its cluster; their output is printed after.
# The web UI's checks (generated types, ESLint, vitest; about a minute of CPU) run beside it too.
phase "Kubernetes test cluster: build check and bring-up (beside it: the ports' Wine part, the web UI's checks)"
(
  # frontend/src/gen is what tygo writes from the Go shapes (tygo.yaml); the lint is ESLint with
  # typescript-eslint (frontend/eslint.config.js)
  bash scripts/gen-types-check.sh
  cd frontend
  npm run --silent lint
  npm test --silent
) >test-artifacts/web-ui.log 2>&1 &
webui_pid=$!
on_exit "kill $webui_pid 2>/dev/null || true"
(
  while [ ! -f test-artifacts/ports-build.rc ]; do sleep 2; done
  rc=$(cat test-artifacts/ports-build.rc)
  [ "$rc" = 0 ] || { echo "the ports' builds failed (exit $rc): see test-artifacts/ports-build.log"; exit 1; }
  bash "$ROOT/scripts/ports.sh" wine
) >test-artifacts/ports.log 2>&1 &
ports_pid=$!
on_exit "kill $ports_pid 2>/dev/null || true"
exec 8>/var/tmp/cubicle-k8s.lock
flock 8
bash scripts/k8s/cluster.sh build
on_exit 'bash scripts/k8s/cluster.sh down >/dev/null 2>&1 || true'
bash scripts/k8s/cluster.sh up
set -a
# shellcheck disable=SC1090
source <(bash scripts/k8s/cluster.sh env)
set +a

phase "Kubernetes: engine conformance beside the desktop tests"
testbin run -timeout 20m -logs test-artifacts/go-k8s ./backend/engine/kubernetes/... >test-artifacts/go-test-k8s-engine.log 2>&1 &
k8s_engine_pid=$!
on_exit "kill $k8s_engine_pid 2>/dev/null || true"
k8s_rc=0
run_tests "$BACKEND_TEST" backend -test.timeout 30m -test.run '^TestKubernetes' -test.skip 'TestKubernetesAPIServerDown' >test-artifacts/go-test-k8s.log 2>&1 || k8s_rc=$?
k8s_engine_rc=0
wait "$k8s_engine_pid" || k8s_engine_rc=$?
cat test-artifacts/go-test-k8s-engine.log test-artifacts/go-test-k8s.log
if [ "$k8s_rc" != 0 ] || [ "$k8s_engine_rc" != 0 ]; then
  echo "the Kubernetes tests failed: engine conformance exit $k8s_engine_rc, desktop tests exit $k8s_rc"
  exit 1
fi
# alone, after the others: it stops the cluster's API server under a running desktop
CUBICLE_K8S_DISRUPT=1 run_tests "$BACKEND_TEST" backend -test.timeout 20m -test.run '^TestKubernetesAPIServerDown$' 2>&1 | tee test-artifacts/go-test-k8s-disrupt.log

# The quick benchmark's other rows ran once in the plain pass (backend/bench TestQuickRun, its
# report in test-artifacts/bench-quick.json); here `cubicle bench` itself measures the
# cluster's rows next to Podman's cold start of the same run.
phase "benchmark, quick mode: the cluster's rows (run so they cannot rot)"
"$ROOT/bin/cubicle" bench --quick --only "k8s_cold_start,k8s_exec" --json test-artifacts/bench-k8s.json \
  --kubeconfig "$CUBICLE_K8S_KUBECONFIG" --namespace "$CUBICLE_K8S_NAMESPACE" --storage-class "$CUBICLE_K8S_STORAGE_CLASS" \
  --registry "$CUBICLE_K8S_REGISTRY" --registry-insecure
node -e '
const r = JSON.parse(require("fs").readFileSync(process.argv[1], "utf8"));
for (const id of ["k8s_cold_start", "k8s_exec"]) {
  const row = r.rows.find(x => x.id === id);
  if (!row || !row.ours.samples || row.ours.samples.length === 0) { console.error("bench: no samples for " + id + ": " + JSON.stringify(row)); process.exit(1); }
}' test-artifacts/bench-k8s.json

phase "Kubernetes test cluster: down"
bash scripts/k8s/cluster.sh down
flock -u 8

phase "web UI: generated types, lint, unit tests (started beside the Kubernetes part)"
webui_rc=0
wait "$webui_pid" || webui_rc=$?
cat test-artifacts/web-ui.log
if [ "$webui_rc" != 0 ]; then echo "the web UI's checks failed (exit $webui_rc): see test-artifacts/web-ui.log"; exit 1; fi

# Each file starts its own server (own port, data dir, desktops) in its own process: three
# files at a time, the longest first (a measured order: with two at a time in name order the
# phase left a fifth of the two cores idle and ended on the longest file). The real desktop
# flow and the live screen v2 run a second time over the exec link (issue 10: both guest
# transports) as two more files (e2e/*-exec.test.mjs) beside the rest, not in a phase of
# their own. Files not named here run after these, in name order.
phase "browser tests (with the real-desktop flows again over the exec link, beside the rest)"
e2e_first=(operate live-exec live groupchat firstrun desktop-exec desktop workspace recording viewer runner)
e2e_files=()
for f in "${e2e_first[@]}"; do e2e_files+=("e2e/$f.test.mjs"); done
for f in frontend/e2e/*.test.mjs; do
  case " ${e2e_files[*]} " in *" e2e/${f##*/} "*) ;; *) e2e_files+=("e2e/${f##*/}") ;; esac
done
(cd frontend && CUBICLE_BIN="$ROOT/bin/cubicle" CUBICLE_E2E_DESKTOP=1 node --test --test-concurrency=3 "${e2e_files[@]}")

# Last: on a fresh machine the ports' builds (the whole tree compiled for windows and darwin at
# the lowest priority) can still be running here; the browser tests above did not wait for them.
phase "go vet (started beside the Go tests)"
vet_rc=0
wait "$vet_pid" || vet_rc=$?
cat test-artifacts/vet.log
[ -f test-artifacts/vet.rc ] && vet_rc=$(cat test-artifacts/vet.rc)
if [ "$vet_rc" != 0 ]; then echo "go vet failed (exit $vet_rc): see test-artifacts/vet.log"; exit 1; fi

phase "ports: waiting for the Windows and macOS builds (started early) and the Wine part (started beside the Kubernetes part)"
ports_rc=0
wait "$ports_pid" || ports_rc=$?
cat test-artifacts/ports-build.log test-artifacts/ports.log
if [ "$ports_rc" != 0 ]; then echo "the ports failed (exit $ports_rc): see test-artifacts/ports.log"; exit 1; fi

phases_end
