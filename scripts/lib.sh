# Shared by the scripts in this folder: paths, Go build tags, and the dependency installer.
# shellcheck shell=bash
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# The Podman bindings need these tags in every go build/test/vet. -trimpath keeps the checkout's
# path out of every build, so Go's build cache serves any clone of the repository on this
# machine (a CI run's fresh clone compiles only what changed, not the whole tree again).
# libsqlite3: the bindings pull in go-sqlite3 (containers/image's blob cache, never used by a
# remote client); with cgo it links the system's SQLite instead of compiling its 8 MB C
# amalgamation (83 s of one core in a fresh build; .ci/install-deps.sh installs libsqlite3-dev
# beside gcc). Without cgo (no gcc, the cross builds) the tag changes nothing.
ENGINE_TAGS="remote,exclude_graphdriver_btrfs,btrfs_noversion,exclude_graphdriver_devicemapper,containers_image_openpgp,libsqlite3"
# -buildvcs=false: no binary carries the checkout's commit, so the in-guest driver built from
# unchanged sources is the same file in every commit — and so is the desktop image made from it
# (its tag hashes the driver's bytes), which CI and the bench then reuse instead of building.
export GOFLAGS="-tags=$ENGINE_TAGS -trimpath -buildvcs=false"
# Cubicle's Wine prefix (scripts/wine) outlives a clone when the machine's cache is writable:
# creating one takes a minute.
if [ -z "${CUBICLE_WINEPREFIX:-}" ] && [ "$(id -u)" = 0 ]; then export CUBICLE_WINEPREFIX=/var/cache/cubicle-wine/prefix; fi
export PATH="$PATH:/usr/local/go/bin:$HOME/go/bin"

say() { printf '\033[1m==> %s\033[0m\n' "$*"; }

# install_deps run|test installs the Debian packages, Node modules and engine config that
# running Cubicle (run) or building and testing it (test) needs; it is quick when everything is
# there already.
install_deps() {
  local sudo="" what=${1:-test}
  [ "$(id -u)" = 0 ] || sudo="sudo"
  say "checking system packages ($what)"
  $sudo bash "$ROOT/.ci/install-deps.sh" "$what"
  command -v go >/dev/null || { echo "Go 1.26 or newer is needed: https://go.dev/dl/ (put it on PATH)"; exit 1; }
  command -v npm >/dev/null || { echo "Node.js 20 and npm are needed (apt-get install nodejs npm, or nodejs.org)"; exit 1; }
  if [ ! -d "$ROOT/frontend/node_modules" ] || [ "$ROOT/frontend/package-lock.json" -nt "$ROOT/frontend/node_modules/.package-lock.json" ]; then
    say "installing frontend packages"
    (cd "$ROOT/frontend" && npm ci --no-audit --no-fund)
  fi
  # the official MCP TypeScript SDK client that drives /mcp in the Go tests, and the MCP
  # conformance suite with the Node 22 it needs (tests/mcp)
  if [ "$what" = test ] && { [ ! -d "$ROOT/tests/mcp/node_modules" ] || [ "$ROOT/tests/mcp/package-lock.json" -nt "$ROOT/tests/mcp/node_modules/.package-lock.json" ]; }; then
    say "installing the MCP test client's packages"
    npm ci --prefix "$ROOT/tests/mcp" --no-audit --no-fund
  fi
  # the npm reference MCP servers the Go tests copy into a real desktop and run there as stdio
  # servers on the image's Node 18 (tests/mcp-desktop; the desktop never reaches the registry)
  if [ "$what" = test ] && { [ ! -d "$ROOT/tests/mcp-desktop/node_modules" ] || [ "$ROOT/tests/mcp-desktop/package-lock.json" -nt "$ROOT/tests/mcp-desktop/node_modules/.package-lock.json" ]; }; then
    say "installing the reference MCP servers for the desktop tests"
    npm ci --prefix "$ROOT/tests/mcp-desktop" --no-audit --no-fund
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

  # from /: every conmon inherits the service's working directory, and a removed one (this
  # checkout, once a CI clone is deleted) makes every later container start fail with
  # "write child: broken pipe"
  # In a session of its own (setsid): the service outlives the script that started it, and a
  # kill of that script's process group (a finished CI job, a tool runner's cleanup) does not
  # take every other run's engine down with it.
  (cd / && exec setsid nohup podman system service --time=0 "unix://$sock" >/tmp/cubicle-podman-service.log 2>&1) &
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
  (cd / && exec setsid nohup dockerd --host "unix://$sock" --data-root /var/lib/cubicle-docker \
    --exec-root /run/cubicle-docker --pidfile "$pidfile" >"$log" 2>&1) &
  for _ in $(seq 150); do
    curl -fsS --max-time 1 --unix-socket "$sock" http://d/_ping >/dev/null 2>&1 && return 0
    sleep 0.2
  done
  echo "the Docker Engine did not start within 30 s; see $log"; tail -20 "$log"; exit 1
}

# Phases: a script calls phases_begin FILE once, then phase NAME before each step; the table
# of each phase's wall time is printed (and written to FILE) when the script exits, however it
# exits. on_exit CMD adds a command to run at exit (before the table).
PHASE_NAMES=() PHASE_SECS=() PHASE_NAME="" PHASE_T0=0 PHASE_FILE="" PHASES_T0=0 ON_EXIT=()
phases_begin() {
  PHASE_FILE=$1 PHASES_T0=$(date +%s)
  mkdir -p "$(dirname "$PHASE_FILE")"
  trap phases_exit EXIT
}
phase() {
  local now
  now=$(date +%s)
  if [ -n "$PHASE_NAME" ]; then
    PHASE_NAMES+=("$PHASE_NAME") PHASE_SECS+=($((now - PHASE_T0)))
  fi
  PHASE_NAME=$1 PHASE_T0=$now
  [ -z "$1" ] || say "$1"
}
on_exit() { ON_EXIT+=("$1"); }
phases_end() { phase ""; }
phases_exit() {
  local rc=$? i cmd
  for cmd in "${ON_EXIT[@]}"; do eval "$cmd"; done
  [ -z "$PHASE_NAME" ] || { PHASE_NAME="$PHASE_NAME (unfinished: exit $rc)"; phase ""; }
  {
    printf '\n%-100s %7s\n' "phase" "seconds"
    for i in "${!PHASE_NAMES[@]}"; do printf '%-100s %7d\n' "${PHASE_NAMES[$i]}" "${PHASE_SECS[$i]}"; done
    printf '%-100s %7d\n' "total ($(date -u +%FT%TZ), exit $rc)" $(($(date +%s) - PHASES_T0))
  } | tee "$PHASE_FILE"
  return $rc
}

# check_tests BIN PATTERN: every name PATTERN lists (^(A|B|…)$) is a test in test binary BIN, so
# a renamed test cannot silently drop out of a pass.
check_tests() {
  local bin=$1 pat=$2 names missing=()
  names=$("$bin" -test.list '.*')
  for n in $(sed -e 's/^\^(//' -e 's/)\$$//' <<<"$pat" | tr '|' ' '); do
    grep -qxF "$n" <<<"$names" || missing+=("$n")
  done
  [ ${#missing[@]} = 0 ] || { echo "$(basename "$bin") has no test named: ${missing[*]} (update the list in scripts/test.sh)"; return 1; }
}

# step NAME: a phase when the calling script keeps a phase table, else a heading.
step() { if [ -n "$PHASE_FILE" ]; then phase "$1"; else say "$1"; fi; }

# cubicle_build [1]: the web UI, the in-guest driver and bin/cubicle (with the desktop shell
# when GTK/WebKit development files are present); with 1 also the runner binaries of every
# os/arch (scripts/build.sh --runners). Each part is a step of the caller's phase table.
cubicle_build() {
  local runners=${1:-0} version ldflags arch target os ext
  cd "$ROOT"
  version=$(git describe --tags --always --dirty 2>/dev/null || echo dev)
  step "build: the web UI"
  (cd frontend && npm run build --silent)
  # The driver is pure Go: one static binary per architecture a desktop image can have (an
  # engine on Apple silicon runs linux/arm64 images); all are embedded and the image builder
  # picks the one for the engine's architecture.
  step "build: the in-guest driver (linux/amd64, linux/arm64)"
  rm -f images/bin/cubicle-guest # the single-architecture name of earlier versions
  # Its version is the last commit that changed a package it is built from (not the checkout's).
  local driver_pkgs driver_rev
  driver_pkgs=$(go list -deps -f '{{if not .Standard}}{{.ImportPath}}{{end}}' ./images/guest | sed -n 's|^cubicle/||p')
  # shellcheck disable=SC2086
  driver_rev=$(git log -1 --format=%h --abbrev=12 -- $driver_pkgs 2>/dev/null || true)
  for arch in amd64 arm64; do
    CGO_ENABLED=0 GOOS=linux GOARCH=$arch go build -trimpath -ldflags="-s -w -X main.driverVersion=${driver_rev:-dev}" \
      -o "images/bin/cubicle-guest-$arch" ./images/guest
  done
  mkdir -p bin
  ldflags="-X cubicle/backend/cli.Version=$version"
  if pkg-config --exists webkit2gtk-4.1 gtk+-3.0 2>/dev/null; then
    step "build: bin/cubicle (desktop app + serve)"
    CGO_ENABLED=1 go build -tags "desktop,production,webkit2_41,$ENGINE_TAGS" -ldflags "$ldflags" -o bin/cubicle .
  else
    step "build: bin/cubicle (serve only: GTK/WebKit dev files not found)"
    go build -ldflags "$ldflags" -o bin/cubicle .
  fi
  echo "built bin/cubicle ($version)"
  if [ "$runners" = 1 ]; then
    for target in linux/amd64 linux/arm64 darwin/amd64 darwin/arm64 windows/amd64 windows/arm64; do
      os=${target%/*} arch=${target#*/} ext=""
      [ "$os" = windows ] && ext=.exe
      step "build: bin/cubicle-$os-$arch$ext (runner binary)"
      CGO_ENABLED=0 GOOS=$os GOARCH=$arch go build -trimpath -ldflags "$ldflags -s -w" -o "bin/cubicle-$os-$arch$ext" .
    done
  fi
}
