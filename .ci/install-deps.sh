#!/usr/bin/env bash
# Installs everything Cubicle's build and tests need on a fresh Debian bookworm machine.
# Idempotent: re-running skips what is already there.
set -euo pipefail

pkgs=(
  podman runc slirp4netns fuse-overlayfs uidmap  # container engine (runc: crun fails on hybrid cgroups)
  xvfb x11-utils xauth                           # display for driver tests and the desktop app
  x11vnc                                         # the live view benchmark's peer (its RFB client test)
  xterm                                          # a real X application for the host desktop tests
  bubblewrap                                     # the host tools' OS sandbox (backend/sandbox; Landlock is the fallback)
  chromium                                       # headless browser for UI tests
  libgtk-3-dev libwebkit2gtk-4.1-dev pkg-config  # Wails desktop build
  debootstrap                                    # offline base image build
  docker-registry                                # loopback registry for pull-by-digest tests
  busybox-static                                 # tiny static rootfs for the engine conformance suite
  etcd-server containerd containernetworking-plugins iptables conntrack bc gcc libc6-dev openssl
                                                 # the single-node Kubernetes test cluster (scripts/k8s)
  ca-certificates git curl procps psmisc
  wine wine64 gcc-mingw-w64-x86-64-win32        # Windows tests under Wine (scripts/ports.sh, scripts/wine)
  nsis binutils-mingw-w64-x86-64                # the Windows installer and its resources (scripts/package.sh)
)
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

# A real Docker Engine next to Podman, for the Docker adapter's tests (scripts/lib.sh
# ensure_docker_engine runs dockerd on its own socket, data root and exec root, so it never
# touches Podman's storage or the default /var/run/docker.sock). docker.io shares Debian's runc
# with Podman and brings Debian's containerd. Its package scripts must not start a dockerd on the
# default socket: service starts are refused while it installs (policy-rc.d), unless the admin
# has a policy of their own.
if ! dpkg-query -W -f='${Status}' docker.io 2>/dev/null | grep -q "install ok installed"; then
  export DEBIAN_FRONTEND=noninteractive
  policy=/usr/sbin/policy-rc.d
  own_policy=""
  if [ ! -e "$policy" ]; then
    printf '#!/bin/sh\nexit 101\n' > "$policy" && chmod 0755 "$policy" && own_policy=1
  fi
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends docker.io
  [ -z "$own_policy" ] || rm -f "$policy"
fi

# Podman on restricted hosts: crun cannot run with hybrid cgroups and systemd may be absent;
# runc with cgroupfs works everywhere. Only written when the admin has no config of their own.
if [ ! -f /etc/containers/containers.conf ]; then
  mkdir -p /etc/containers
  cat > /etc/containers/containers.conf <<'CONF'
[engine]
runtime = "runc"
cgroup_manager = "cgroupfs"
events_logger = "file"
CONF
fi
