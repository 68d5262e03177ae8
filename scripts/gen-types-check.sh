#!/usr/bin/env bash
# Regenerates the web client's TypeScript shapes from the Go ones (tygo.yaml →
# frontend/src/gen/) and fails when they differ from what is committed: a Go shape changed
# without `go tool tygo generate` being run (and the client adapted). tygo only parses the
# listed packages' files, so this costs no compile of the product (tygo itself is built once
# and cached).
set -euo pipefail
source "$(dirname "$0")/lib.sh"
cd "$ROOT"
go tool tygo generate
if ! git diff --exit-code -- frontend/src/gen || [ -n "$(git ls-files --others --exclude-standard -- frontend/src/gen)" ]; then
  echo "frontend/src/gen is not what tygo generates from the Go shapes: run \`go tool tygo generate\` at the repository root and commit the result" >&2
  exit 1
fi
