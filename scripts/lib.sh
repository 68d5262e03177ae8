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
  # Slow is not dead: a service busy with other runs' containers on a loaded machine can take
  # seconds to answer; replacing its socket would cut every other run off it.
  if [ -S "$sock" ] && curl -fsS --max-time 30 --unix-socket "$sock" http://d/_ping >/dev/null 2>&1; then return 0; fi
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

# ensure_docker_engine makes sure a real Docker Engine answers on its own socket next to Podman
# (tests of the Docker adapter and the real-desktop lifecycle on Docker use it). dockerd gets its
# own socket, data root and exec root, so it never touches Podman's storage, the default
# /var/run/docker.sock or a Docker the admin runs; its data root persists, so images it built
# are reused by content hash. Idempotent; exports CUBICLE_DOCKER_SOCKET for the tests.
CUBICLE_DOCKER_SOCK=/run/cubicle-docker.sock
ensure_docker_engine() {
  local sock=$CUBICLE_DOCKER_SOCK pidfile=/run/cubicle-docker.pid log=/tmp/cubicle-docker.log
  [ "$(id -u)" = 0 ] || return 0
  command -v dockerd >/dev/null || { echo "dockerd is not installed (apt-get install docker.io)"; exit 1; }
  export CUBICLE_DOCKER_SOCKET="unix://$sock"
  if curl -fsS --max-time 2 --unix-socket "$sock" http://d/_ping >/dev/null 2>&1; then return 0; fi
  # A dockerd of ours that stopped answering: stop it by its pid file, never by name. Slow is
  # not dead: one busy with another run's containers on a loaded machine can take seconds to
  # answer, and restarting it would break that run's tests.
  if [ -s "$pidfile" ] && kill -0 "$(cat "$pidfile")" 2>/dev/null; then
    if curl -fsS --max-time 30 --unix-socket "$sock" http://d/_ping >/dev/null 2>&1; then return 0; fi
    say "restarting the Docker Engine (pid $(cat "$pidfile") does not answer)"
    kill "$(cat "$pidfile")" 2>/dev/null || true
    for _ in $(seq 50); do kill -0 "$(cat "$pidfile")" 2>/dev/null || break; sleep 0.2; done
  fi
  say "starting the Docker Engine on $sock"
  rm -f "$sock" "$pidfile"
  mkdir -p /var/lib/cubicle-docker /run/cubicle-docker
  nohup dockerd --host "unix://$sock" --data-root /var/lib/cubicle-docker \
    --exec-root /run/cubicle-docker --pidfile "$pidfile" >"$log" 2>&1 &
  for _ in $(seq 150); do
    curl -fsS --max-time 1 --unix-socket "$sock" http://d/_ping >/dev/null 2>&1 && return 0
    sleep 0.2
  done
  echo "the Docker Engine did not start within 30 s; see $log"; tail -20 "$log"; exit 1
}
