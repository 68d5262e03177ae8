#!/usr/bin/env bash
# Builds Cubicle: the web UI, the in-guest driver, and the `cubicle` binary (with the desktop
# shell when GTK/WebKit development files are present) into bin/cubicle.
#   --runners  also cross-builds the headless `cubicle` (serve and runner, no cgo) for the
#              machines runners run on: bin/cubicle-<os>-<arch>[.exe] for linux, darwin and
#              windows on amd64 and arm64. The server offers the files next to its executable
#              at GET /api/runner/download (Settings → Runners: join command, Update).
set -euo pipefail
runners=0
for arg in "$@"; do
  case "$arg" in
    --runners) runners=1 ;;
    *) echo "usage: scripts/build.sh [--runners]" >&2; exit 2 ;;
  esac
done
source "$(dirname "$0")/lib.sh"
cubicle_build "$runners"
