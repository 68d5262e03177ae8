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
cd "$ROOT"
VERSION=$(git describe --tags --always --dirty 2>/dev/null || echo dev)

say "building the web UI"
(cd frontend && npm run build --silent)

# The driver is pure Go: one static binary per architecture a desktop image can have (an
# engine on Apple silicon runs linux/arm64 images); all are embedded and the image builder picks
# the one for the engine's architecture.
say "building the in-guest driver (linux/amd64, linux/arm64)"
rm -f images/bin/cubicle-guest # the single-architecture name of earlier versions
for arch in amd64 arm64; do
  CGO_ENABLED=0 GOOS=linux GOARCH=$arch go build -trimpath -ldflags='-s -w' -o "images/bin/cubicle-guest-$arch" ./images/guest
done

mkdir -p bin
LDFLAGS="-X cubicle/backend/cli.Version=$VERSION"
if pkg-config --exists webkit2gtk-4.1 gtk+-3.0 2>/dev/null; then
  say "building bin/cubicle (desktop app + serve)"
  CGO_ENABLED=1 go build -tags "desktop,production,webkit2_41,$ENGINE_TAGS" -ldflags "$LDFLAGS" -o bin/cubicle .
else
  say "building bin/cubicle (serve only: GTK/WebKit dev files not found)"
  go build -ldflags "$LDFLAGS" -o bin/cubicle .
fi
echo "built bin/cubicle ($VERSION)"
if [ "$runners" = 1 ]; then
  for target in linux/amd64 linux/arm64 darwin/amd64 darwin/arm64 windows/amd64 windows/arm64; do
    os=${target%/*} arch=${target#*/} ext=""
    [ "$os" = windows ] && ext=.exe
    say "building bin/cubicle-$os-$arch$ext (runner binary)"
    CGO_ENABLED=0 GOOS=$os GOARCH=$arch go build -trimpath -ldflags "$LDFLAGS -s -w" -o "bin/cubicle-$os-$arch$ext" .
  done
fi
