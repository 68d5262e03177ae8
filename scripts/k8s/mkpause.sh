#!/usr/bin/env bash
# mkpause.sh OUT.tar: the pod sandbox image (registry.k8s.io/pause:3.9) as a docker-archive,
# built offline from pause.c (a static binary that sleeps until SIGINT/SIGTERM and reaps).
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
out=$1 tag=registry.k8s.io/pause:3.9
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
cd "$tmp"
gcc -static -Os -o pause "$HERE/pause.c" && strip pause
mkdir -p img rootfs && cp pause rootfs/pause
tar --numeric-owner --owner=0 --group=0 --mtime=@0 -C rootfs -cf img/layer.tar pause
diff=$(sha256sum img/layer.tar | cut -d' ' -f1)
mkdir -p "img/$diff" && mv img/layer.tar "img/$diff/layer.tar"
printf '{"architecture":"%s","os":"linux","config":{"Entrypoint":["/pause"],"User":"65535:65535"},"rootfs":{"type":"layers","diff_ids":["sha256:%s"]},"history":[{"created_by":"cubicle"}]}' \
  "$(dpkg --print-architecture 2>/dev/null || echo amd64)" "$diff" > img/config.json
cfg=$(sha256sum img/config.json | cut -d' ' -f1); mv img/config.json "img/$cfg.json"
printf '[{"Config":"%s.json","RepoTags":["%s"],"Layers":["%s/layer.tar"]}]' "$cfg" "$tag" "$diff" > img/manifest.json
mkdir -p "$(dirname "$out")"
tar -C img -cf "$out.tmp" . && mv "$out.tmp" "$out"
