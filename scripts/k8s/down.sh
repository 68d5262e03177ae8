#!/usr/bin/env bash
# Stops everything up.sh started (by pid, never by name), removes what the pods left
# (containers of the cluster's own containerd, mounts, network namespaces, the bridge, cgroups)
# and undoes the host changes the kubelet made (KUBE-* iptables chains, sysctls). Safe to run
# twice or on a cluster that was killed mid-way. Podman's and Docker's containers are never
# touched: only the cluster's containerd (its own socket) and paths under $K8S_WORK.
set -u
HERE=$(cd "$(dirname "$0")" && pwd)
source "$HERE/env.sh"
[ -d "$K8S_WORK" ] || exit 0
cd "$K8S_WORK"
stop() {
  local f=pids/$1.pid p
  [ -f "$f" ] || return 0
  p=$(cat "$f")
  kill "$p" 2>/dev/null
  for _ in $(seq 50); do kill -0 "$p" 2>/dev/null || break; sleep 0.2; done
  kill -9 "$p" 2>/dev/null; rm -f "$f"
}
stop provisioner
stop kubelet
S=$K8S_CONTAINERD_SOCK
if [ -S "$S" ]; then
  for t in $(ctr --address "$S" -n k8s.io tasks ls -q 2>/dev/null); do ctr --address "$S" -n k8s.io tasks kill -s SIGKILL "$t" 2>/dev/null; done
  sleep 1
  for t in $(ctr --address "$S" -n k8s.io tasks ls -q 2>/dev/null); do ctr --address "$S" -n k8s.io tasks rm -f "$t" 2>/dev/null; done
  for c in $(ctr --address "$S" -n k8s.io containers ls -q 2>/dev/null); do ctr --address "$S" -n k8s.io containers rm "$c" 2>/dev/null; done
fi
# shims of OUR containerd (their command line names our socket), by pid
for p in $(pgrep -f -- "-address $S"); do kill -9 "$p" 2>/dev/null; done
stop kube-scheduler; stop kube-controller-manager; stop kube-apiserver; stop containerd; stop registry; stop etcd
# mounts under our directory, deepest first; network namespaces our CRI pinned
grep -E " $K8S_WORK/" /proc/mounts | awk '{print $2}' | sort -r | xargs -r -n1 umount -l 2>/dev/null
# network namespaces pinned by a CRI containerd (Podman names its own netns-*, Docker keeps
# its under /var/run/docker): unpinning one still in use leaves its processes unharmed
for n in /var/run/netns/cni-*; do [ -e "$n" ] || continue; umount "$n" 2>/dev/null; rm -f "$n"; done
ip link del cubicle-k8s0 2>/dev/null
# kubelet cgroups (cgroupfs driver): the kubepods hierarchy it made
for h in /sys/fs/cgroup/*/; do [ -d "${h}kubepods" ] && find "${h}kubepods" -depth -type d -exec rmdir {} \; 2>/dev/null; done
# KUBE-* iptables chains the kubelet made: unhook, flush, delete
for ipt in iptables ip6tables; do
  command -v $ipt >/dev/null || continue
  for t in filter nat mangle; do
    for c in $($ipt -t $t -S 2>/dev/null | awk '/^-N KUBE-/{print $2}'); do
      $ipt -t $t -S 2>/dev/null | grep -E "^-A [A-Za-z0-9_-]+ .*-j $c( |$)" | grep -v "^-A $c " | sed 's/^-A/-D/' |
        while read -r r; do eval "$ipt -t $t $r"; done
      $ipt -t $t -F "$c" 2>/dev/null; $ipt -t $t -X "$c" 2>/dev/null
    done
  done
done
[ -f sysctl.saved ] && while read -r k v; do sysctl -qw "$k=$v"; done < sysctl.saved && rm -f sysctl.saved
rm -rf /run/containerd/runc/k8s.io
echo "cluster down"
