# Shared by the scripts in this folder: paths, Go build tags, and the dependency installer.
# shellcheck shell=bash
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# The Podman bindings need these tags in every go build/test/vet.
ENGINE_TAGS="remote,exclude_graphdriver_btrfs,btrfs_noversion,exclude_graphdriver_devicemapper,containers_image_openpgp"
export GOFLAGS="-tags=$ENGINE_TAGS"
export PATH="$PATH:/usr/local/go/bin:$HOME/go/bin"

say() { printf '\033[1m==> %s\033[0m\n' "$*"; }

# install_deps installs the Debian packages, Node modules and engine config the build and tests
# need; it is quick when everything is there already.
install_deps() {
  local sudo=""
  [ "$(id -u)" = 0 ] || sudo="sudo"
  say "checking system packages"
  $sudo bash "$ROOT/.ci/install-deps.sh"
  command -v go >/dev/null || { echo "Go 1.26 or newer is needed: https://go.dev/dl/ (put it on PATH)"; exit 1; }
  command -v npm >/dev/null || { echo "Node.js 20 and npm are needed (apt-get install nodejs npm, or nodejs.org)"; exit 1; }
  if [ ! -d "$ROOT/frontend/node_modules" ] || [ "$ROOT/frontend/package-lock.json" -nt "$ROOT/frontend/node_modules/.package-lock.json" ]; then
    say "installing frontend packages"
    (cd "$ROOT/frontend" && npm ci --no-audit --no-fund)
  fi
}

# ensure_podman_service makes sure a Podman API service answers on the rootful socket (tests
# use it; the app itself starts its own when none runs).
ensure_podman_service() {
  local sock=/run/podman/podman.sock
  [ "$(id -u)" = 0 ] || return 0
  if curl -fsS --max-time 2 --unix-socket "$sock" http://d/_ping >/dev/null 2>&1; then return 0; fi
  say "starting the Podman API service"
  mkdir -p /run/podman
  rm -f "$sock" # a socket left by a service that was killed

  nohup podman system service --time=0 "unix://$sock" >/tmp/cubicle-podman-service.log 2>&1 &
  for _ in $(seq 50); do
    curl -fsS --max-time 1 --unix-socket "$sock" http://d/_ping >/dev/null 2>&1 && return 0
    sleep 0.2
  done
  echo "the Podman API service did not start; see /tmp/cubicle-podman-service.log"; exit 1
}
