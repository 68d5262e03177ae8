#!/usr/bin/env bash
# One command for a newcomer: install what running needs (not what only the tests need),
# build, and start Cubicle — the desktop app when a display is available, otherwise the web UI
# on http://127.0.0.1:8765 (its URL and login are printed). Extra arguments go to `cubicle`.
# Before starting it prints how long each phase took (also in test-artifacts/run-phases.txt).
set -euo pipefail
source "$(dirname "$0")/lib.sh"
phases_begin "$ROOT/test-artifacts/run-phases.txt"
phase "install what running needs (packages, frontend modules, Podman service)"
install_deps run
ensure_podman_service
cubicle_build
cd "$ROOT"
phases_end
phases_exit
trap - EXIT
if [ -n "${DISPLAY:-}${WAYLAND_DISPLAY:-}" ]; then
  exec bin/cubicle "$@"
fi
exec bin/cubicle serve "$@"
