#!/usr/bin/env bash
# Proves the ports on every run (test.sh calls it after build.sh; it runs alone too):
#   - scripts/package.sh: the Windows desktop app cross-built with Wails' tags (no cgo on
#     Windows) into build/bin/cubicle.exe and its NSIS installer; the Linux .deb
#   - the macOS serve binary (darwin/arm64; the macOS desktop shell needs cgo and a Mac)
#   - go vet of the serve build for windows and darwin (CGO_ENABLED=0)
#   - the portable packages' Windows test binaries under Wine (scripts/wine/exec.sh)
#   - cubicle.exe under Wine (`version`, `doctor --json`: the Windows engine candidates, none
#     of which answers here), and its installer: silent install, the installed program runs,
#     silent uninstall removes it and keeps the user's data
#   - the .deb's control fields and files, and its program runs
# `ports.sh build` does the builds and vets only, `ports.sh wine` the rest (test.sh starts the
# builds early at the lowest priority, on the CPU the Go tests leave idle, and runs the Wine
# part beside the Kubernetes part); no argument: both.
set -euo pipefail
part=${1:-all}
case "$part" in all | build | wine) ;; *) echo "usage: ports.sh [build|wine]"; exit 2 ;; esac
source "$(dirname "$0")/lib.sh"
cd "$ROOT"
mkdir -p bin test-artifacts
wine="$ROOT/scripts/wine/exec.sh"

if [ "$part" != wine ]; then
  bash "$ROOT/scripts/package.sh"

  say "cross-build: macOS serve binary (bin/cubicle-darwin-arm64)"
  GOOS=darwin GOARCH=arm64 CGO_ENABLED=0 go build -o bin/cubicle-darwin-arm64 .

  say "go vet for windows and darwin (serve build)"
  GOOS=windows GOARCH=amd64 CGO_ENABLED=0 go vet ./...
  GOOS=darwin GOARCH=arm64 CGO_ENABLED=0 go vet ./...
fi
[ "$part" != build ] || exit 0

# The tests below are the ones written for Windows' code paths (host shell and job objects,
# process figures, engine discovery with named pipes, the refused owned service, the host
# sandbox's choice: Wine has no AppContainers). Others
# need a Linux engine, Xvfb or unix sockets, which Wine does not offer.
say "Windows tests under Wine"
WINE_TESTS='^(TestLocalHost.*|TestHelperSleeper|TestWindowsShellChoice|TestPowerShellArgs|TestCmdLine|TestProcessUsage|TestCandidates|TestParseKind|TestFixFor|TestDiscoverNamedPipes|TestDiscoverTLS|TestDiscoverRealNamedPipe|TestStartPodmanServiceRefused|TestClampRlimits|TestAppContainerOrNone|TestModeKinds|TestChildEnv|TestEnvBlock|TestAppContainerName)$'
WINE_PKGS=(./backend/agent/tools ./backend/history ./backend/engine ./backend/sandbox)
# One test binary at a time (-p 1), each followed by the end of every program it left in the
# prefix (CUBICLE_WINE_END_ALL, see scripts/wine/exec.sh).
CUBICLE_WINE_END_ALL=1 GOOS=windows GOARCH=amd64 CGO_ENABLED=0 go test -p 1 -count=1 -timeout 15m -exec "$wine" \
  -run "$WINE_TESTS" -v "${WINE_PKGS[@]}" >test-artifacts/wine-tests.log 2>&1 || true
grep -E '^(--- |ok|FAIL)' test-artifacts/wine-tests.log || true
if grep -q -- '--- FAIL\|^FAIL' test-artifacts/wine-tests.log ||
  [ "$(grep -c '^ok' test-artifacts/wine-tests.log)" != "${#WINE_PKGS[@]}" ]; then
  echo "Windows tests under Wine failed: see test-artifacts/wine-tests.log"; exit 1
fi
echo "under Wine: $(grep -c -- '^--- PASS' test-artifacts/wine-tests.log) passed, $(grep -c -- '^--- SKIP' test-artifacts/wine-tests.log) skipped"
grep -B1 -- '^--- SKIP' test-artifacts/wine-tests.log | grep -v -- '^--' || true

say "cubicle.exe under Wine"
"$wine" build/bin/cubicle.exe version
code=0
"$wine" build/bin/cubicle.exe doctor --json --data-dir 'C:\cubicle-ci-data' >test-artifacts/windows-doctor.json || code=$?
node -e '
const r = JSON.parse(require("fs").readFileSync(process.argv[1], "utf8"));
const pipes = r.engines.filter(e => e.socket.startsWith("npipe://") && e.vm === true && e.remote === false && e.reachable === false);
for (const n of ["npipe:////./pipe/docker_engine", "npipe:////./pipe/dockerDesktopLinuxEngine"])
  if (!pipes.some(e => e.socket === n && e.source === "docker-desktop")) { console.error("doctor --json lacks " + n); process.exit(1); }
if (r.ok !== false || !r.checks.some(c => c.name === "container engine" && c.status === "fail")) { console.error("want a failed engine check: no engine runs under Wine"); process.exit(1); }
const gl = r.checks.find(c => c.name === "guest link");
if (!gl || !/new desktops will use the exec link: Cubicle runs on windows/.test(gl.detail)) { console.error("want the exec guest link on Windows: " + JSON.stringify(gl)); process.exit(1); }
console.log("cubicle.exe doctor --json: " + r.engines.length + " engine candidates, " + r.checks.length + " checks");
' test-artifacts/windows-doctor.json
[ "$code" = 1 ] || { echo "cubicle.exe doctor exited $code, want 1 (no engine)"; exit 1; }

say "the Windows installer under Wine"
prefix=${CUBICLE_WINEPREFIX:-$ROOT/.cache/wine-prefix}
target="$prefix/drive_c/cubicle-ci-install"
uninst='HKLM\Software\Microsoft\Windows\CurrentVersion\Uninstall\CubicleCubicle'
data=$(ls -d "$prefix"/drive_c/users/*/AppData/Roaming 2>/dev/null | head -1)/Cubicle
rm -rf "$target"
"$wine" --wait build/bin/cubicle-amd64-installer.exe /S '/D=C:\cubicle-ci-install'
for f in "$target/cubicle.exe" "$target/uninstall.exe" "$prefix/drive_c/users/Public/Desktop/Cubicle.lnk" \
  "$prefix/drive_c/ProgramData/Microsoft/Windows/Start Menu/Programs/Cubicle.lnk"; do
  [ -f "$f" ] || { echo "the installer did not create $f"; exit 1; }
done
cmp -s "$target/cubicle.exe" build/bin/cubicle.exe || { echo "the installed cubicle.exe differs from the built one"; exit 1; }
"$wine" reg query "$uninst" /v DisplayVersion | grep -q "$(node -p "require('./wails.json').info.productVersion")" ||
  { echo "no uninstall entry with the version"; exit 1; }
"$wine" 'C:\cubicle-ci-install\cubicle.exe' version
mkdir -p "$data" && echo "user data" >"$data/keep-me.txt"
"$wine" --wait 'C:\cubicle-ci-install\uninstall.exe' /S
[ ! -e "$target" ] || { echo "the uninstaller left $target"; exit 1; }
[ ! -e "$prefix/drive_c/users/Public/Desktop/Cubicle.lnk" ] || { echo "the uninstaller left the desktop shortcut"; exit 1; }
if "$wine" reg query "$uninst" >/dev/null 2>&1; then echo "the uninstaller left its registry entry"; exit 1; fi
[ -f "$data/keep-me.txt" ] || { echo "the uninstaller removed the user's data ($data)"; exit 1; }
rm -f "$data/keep-me.txt"
echo "installed, ran and uninstalled; the user's data stayed"

say "the .deb"
deb=$(ls build/bin/cubicle_*.deb)
for field in Package Version Architecture Depends; do printf '%s: %s\n' "$field" "$(dpkg-deb -f "$deb" "$field")"; done
dpkg-deb -c "$deb" >test-artifacts/deb-contents.txt
for f in ./usr/bin/cubicle ./usr/share/applications/cubicle.desktop ./usr/share/icons/hicolor/1024x1024/apps/cubicle.png; do
  grep -q " $f\$" test-artifacts/deb-contents.txt || { echo "the .deb lacks $f"; exit 1; }
done
x=$(mktemp -d)
dpkg-deb -x "$deb" "$x"
"$x/usr/bin/cubicle" version
rm -rf "$x"
