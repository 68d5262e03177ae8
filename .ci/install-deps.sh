#!/usr/bin/env bash
# Installs what Cubicle needs on a fresh Debian bookworm machine. Idempotent: re-running skips
# what is already there.
#   install-deps.sh run    what running Cubicle needs (scripts/run.sh): the container engine,
#                          the offline image build, the host-tool sandbox, and the desktop
#                          app's build dependencies when a display is present
#   install-deps.sh test   that plus everything the tests need (scripts/test.sh, CI; the default)
#   --dry-run              print the packages that would be installed, install nothing
set -euo pipefail
what=test dry=0
for arg in "$@"; do
  case "$arg" in
    run | test) what=$arg ;;
    --dry-run) dry=1 ;;
    *) echo "usage: install-deps.sh [run|test] [--dry-run]" >&2; exit 2 ;;
  esac
done

run_pkgs=(
  podman runc slirp4netns fuse-overlayfs uidmap  # container engine (runc: crun fails on hybrid cgroups)
  debootstrap                                    # offline base image build (Prepare)
  bubblewrap                                     # the host tools' OS sandbox (backend/sandbox; Landlock is the fallback)
  ca-certificates git curl procps
)
if [ -n "${DISPLAY:-}${WAYLAND_DISPLAY:-}" ] || [ "$what" = test ]; then
  run_pkgs+=(libgtk-3-dev libwebkit2gtk-4.1-dev pkg-config gcc libc6-dev) # the Wails desktop app
  run_pkgs+=(libsqlite3-dev) # with gcc, go-sqlite3 links the system's SQLite (scripts/lib.sh ENGINE_TAGS)
fi
test_pkgs=(
  xvfb x11-utils xauth                           # display for driver tests and the desktop app
  x11vnc                                         # the live view benchmark's peer (its RFB client test)
  xterm                                          # a real X application for the host desktop tests
  chromium                                       # headless browser for UI tests
  docker-registry                                # loopback registry for pull-by-digest tests
  busybox-static                                 # tiny static rootfs for the engine conformance suite
  etcd-server containerd containernetworking-plugins iptables conntrack bc openssl
                                                 # the single-node Kubernetes test cluster (scripts/k8s)
  psmisc
  wine wine64 gcc-mingw-w64-x86-64-win32        # Windows tests under Wine (scripts/ports.sh, scripts/wine)
  nsis binutils-mingw-w64-x86-64                # the Windows installer and its resources (scripts/package.sh)
)
pkgs=("${run_pkgs[@]}")
[ "$what" = test ] && pkgs+=("${test_pkgs[@]}" docker.io) # docker.io: a real Docker Engine for the Docker adapter's tests

missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ "$dry" = 1 ]; then
  printf 'would install (%s): %s\n' "$what" "${missing[*]:-nothing}"
  printf 'needed (%s): %s\n' "$what" "${pkgs[*]}"
  exit 0
fi

export DEBIAN_FRONTEND=noninteractive
if [ ${#missing[@]} -gt 0 ]; then
  # docker.io's package scripts must not start a dockerd on the default socket (scripts/lib.sh
  # ensure_docker_engine runs one on its own socket, data root and exec root, so it never
  # touches Podman's storage or /var/run/docker.sock): service starts are refused while it
  # installs (policy-rc.d), unless the admin has a policy of their own.
  policy=/usr/sbin/policy-rc.d own_policy=""
  if [ ! -e "$policy" ]; then
    printf '#!/bin/sh\nexit 101\n' >"$policy" && chmod 0755 "$policy" && own_policy=1
  fi
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}"
  [ -z "$own_policy" ] || rm -f "$policy"
fi

# Podman on restricted hosts: crun cannot run with hybrid cgroups and systemd may be absent;
# runc with cgroupfs works everywhere. Only written when the admin has no config of their own.
if [ ! -f /etc/containers/containers.conf ]; then
  mkdir -p /etc/containers
  cat >/etc/containers/containers.conf <<'CONF'
[engine]
runtime = "runc"
cgroup_manager = "cgroupfs"
events_logger = "file"
CONF
fi

# The tests (image pulls from a loopback registry, model endpoints, the browser suites) name
# this machine "localhost", which every Debian machine resolves through /etc/hosts; a machine
# whose hosts file lacks it gets the two standard lines (RFC 6761). Only for the tests: the
# product's own model-endpoint dialer maps localhost to loopback by itself (backend/egress).
if [ "$what" = test ] && ! getent hosts localhost >/dev/null 2>&1; then
  echo "this machine does not resolve localhost: adding it to /etc/hosts"
  printf '127.0.0.1 localhost\n::1 localhost ip6-localhost ip6-loopback\n' >>/etc/hosts
fi
