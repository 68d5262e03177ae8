#!/usr/bin/env bash
# Fails when frontend/src/gen is not what tygo writes from the Go shapes (tygo.yaml): a Go
# shape changed without `go tool tygo generate` being run at the repository root (and the
# client adapted to it). It generates into a temporary folder and compares, so it needs no git
# and leaves the working tree alone. tygo only parses the listed files, so this compiles none
# of the product (tygo itself is built once and cached).
set -euo pipefail
source "$(dirname "$0")/lib.sh"
cd "$ROOT"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
sed "s#output_path: \"frontend/src/gen/#output_path: \"$tmp/gen/#" tygo.yaml >"$tmp/tygo.yaml"
if grep -q 'output_path: "frontend/' "$tmp/tygo.yaml"; then
  echo "tygo.yaml: every output_path must be under frontend/src/gen/" >&2
  exit 1
fi
go tool tygo generate --config "$tmp/tygo.yaml"
if ! diff -ru "$tmp/gen" frontend/src/gen; then
  echo "frontend/src/gen is not what tygo generates from the Go shapes: run \`go tool tygo generate\` at the repository root and commit the result" >&2
  exit 1
fi
echo "frontend/src/gen matches the Go shapes"
