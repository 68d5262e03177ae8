#!/usr/bin/env bash
# Runs every test: Go unit + integration tests (real Podman, real Xvfb, real images), the web
# UI's unit tests, and the browser tests against a real `cubicle serve`. Installs what is
# missing first. No test may skip here (CUBICLE_REQUIRE_ALL=1 turns a skip into a failure).
set -euo pipefail
source "$(dirname "$0")/lib.sh"
install_deps
ensure_podman_service
bash "$ROOT/scripts/build.sh"
cd "$ROOT"
export CUBICLE_REQUIRE_ALL=1
mkdir -p test-artifacts

say "go vet"
go vet ./...

say "ports: Windows and macOS builds, Windows tests under Wine"
bash "$ROOT/scripts/ports.sh"

say "Go tests (never from the test cache: many depend on the engine, images and displays)"
go test -count=1 -timeout 40m ./... 2>&1 | tee test-artifacts/go-test.log

say "Go tests of the concurrent core under the race detector"
go test -race -timeout 20m ./backend/control/... ./backend/agent/... ./backend/binding/... \
  ./backend/store/... ./backend/auth/... ./backend/api/... ./backend/screen/... 2>&1 | tee test-artifacts/go-race.log

say "benchmark, quick mode (run so it cannot rot; the numbers are not judged here)"
"$ROOT/bin/cubicle" bench --quick --json test-artifacts/bench.json

say "web UI unit tests"
(cd frontend && npm test --silent)

say "browser tests"
(cd frontend && CUBICLE_BIN="$ROOT/bin/cubicle" CUBICLE_E2E_DESKTOP=1 npm run test:e2e --silent)
