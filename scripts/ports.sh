#!/usr/bin/env bash
# Proves the ports on every run (called by test.sh; run it alone after build.sh):
#   - the Windows desktop app cross-built with Wails' tags (no cgo on Windows): bin/cubicle.exe
#   - the macOS serve binary (darwin/arm64; the macOS desktop shell needs cgo and a Mac)
#   - go vet of the serve build for windows and darwin (CGO_ENABLED=0)
#   - the portable packages' Windows test binaries under Wine (scripts/wine/exec.sh)
#   - bin/cubicle.exe under Wine: `version` and `doctor --json` (the Windows engine
#     candidates: named pipes, none of which answers here)
set -euo pipefail
source "$(dirname "$0")/lib.sh"
cd "$ROOT"
mkdir -p bin test-artifacts
VERSION=$(git describe --tags --always --dirty 2>/dev/null || echo dev)
LDFLAGS="-X cubicle/backend/cli.Version=$VERSION"

say "cross-build: Windows desktop app (bin/cubicle.exe)"
GOOS=windows GOARCH=amd64 CGO_ENABLED=0 go build -tags "desktop,production,$ENGINE_TAGS" \
  -ldflags "$LDFLAGS -H windowsgui" -o bin/cubicle.exe .

say "cross-build: macOS serve binary (bin/cubicle-darwin-arm64)"
GOOS=darwin GOARCH=arm64 CGO_ENABLED=0 go build -ldflags "$LDFLAGS" -o bin/cubicle-darwin-arm64 .

say "go vet for windows and darwin (serve build)"
GOOS=windows GOARCH=amd64 CGO_ENABLED=0 go vet ./...
GOOS=darwin GOARCH=arm64 CGO_ENABLED=0 go vet ./...

# The tests below are the ones written for Windows' code paths (host shell and job objects,
# process figures, engine discovery with named pipes, the refused owned service). Others
# need a Linux engine, Xvfb or unix sockets, which Wine does not offer.
say "Windows tests under Wine"
WINE_TESTS='^(TestLocalHost.*|TestHelperSleeper|TestWindowsShellChoice|TestPowerShellArgs|TestCmdLine|TestProcessUsage|TestCandidates|TestParseKind|TestFixFor|TestDiscoverNamedPipes|TestDiscoverTLS|TestDiscoverRealNamedPipe|TestStartPodmanServiceRefused|TestClampRlimits)$'
GOOS=windows GOARCH=amd64 CGO_ENABLED=0 go test -count=1 -timeout 15m -exec "$ROOT/scripts/wine/exec.sh" \
  -run "$WINE_TESTS" -v ./backend/agent/tools ./backend/history ./backend/engine 2>&1 \
  | tee test-artifacts/wine-tests.log | grep -E '^(--- |ok|FAIL|PASS)' || true
if grep -q -- '--- FAIL\|^FAIL' test-artifacts/wine-tests.log || ! grep -q '^ok .*backend/engine' test-artifacts/wine-tests.log; then
  echo "Windows tests under Wine failed: test-artifacts/wine-tests.log"; exit 1
fi
echo "under Wine: $(grep -c -- '^--- PASS' test-artifacts/wine-tests.log) passed, $(grep -c -- '^--- SKIP' test-artifacts/wine-tests.log) skipped:"
grep -B1 -- '^--- SKIP' test-artifacts/wine-tests.log | grep -v -- '^--$' || true

say "the Windows build under Wine"
"$ROOT/scripts/wine/exec.sh" bin/cubicle.exe version
set +e
"$ROOT/scripts/wine/exec.sh" bin/cubicle.exe doctor --json --data-dir 'C:\cubicle-ci-data' >test-artifacts/windows-doctor.json
code=$?
set -e
node -e '
const r = JSON.parse(require("fs").readFileSync(process.argv[1], "utf8"));
const pipes = r.engines.filter(e => e.socket.startsWith("npipe://") && e.vm === true && e.remote === false);
const need = ["npipe:////./pipe/docker_engine", "npipe:////./pipe/dockerDesktopLinuxEngine"];
for (const n of need) if (!pipes.some(e => e.socket === n && e.source === "docker-desktop")) { console.error("missing " + n); process.exit(1); }
if (r.ok !== false || !r.checks.some(c => c.name === "container engine" && c.status === "fail")) { console.error("expected a failed engine check (no engine under Wine)"); process.exit(1); }
console.log("cubicle.exe doctor --json: " + r.engines.length + " candidates, " + r.checks.length + " checks");
' test-artifacts/windows-doctor.json
[ "$code" = 1 ] || { echo "cubicle.exe doctor exited $code, want 1 (no engine)"; exit 1; }
