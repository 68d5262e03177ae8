#!/usr/bin/env bash
# One command for a newcomer: install what is missing, build, and start Cubicle — the desktop
# app when a display is available, otherwise the web UI on http://127.0.0.1:8765 (its URL and
# login are printed). Extra arguments go to `cubicle`.
set -euo pipefail
source "$(dirname "$0")/lib.sh"
install_deps
ensure_podman_service
bash "$ROOT/scripts/build.sh"
cd "$ROOT"
if [ -n "${DISPLAY:-}${WAYLAND_DISPLAY:-}" ]; then
  exec bin/cubicle "$@"
fi
exec bin/cubicle serve "$@"
