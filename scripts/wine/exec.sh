#!/usr/bin/env bash
# Runs a Windows program under Wine in Cubicle's own Wine prefix: exec.sh [--wait] PROGRAM
# ARGS… (CUBICLE_WINE_END_ALL=1: end the prefix's programs after PROGRAM). It is the -exec of
# `GOOS=windows go test -exec scripts/wine/exec.sh …`, and how scripts/ports.sh runs the
# Windows build and its installer. The prefix ($CUBICLE_WINEPREFIX, default .cache/wine-prefix
# in the repository) is made on first use, under a lock:
#   - wineboot creates it;
#   - bcryptprimitives.dll (bcryptprimitives.c, built with mingw-w64) goes into system32:
#     Wine 8 has none and Go 1.24+ programs need its ProcessPrng;
#   - crashes end the crashing program instead of starting winedbg (Wine's chcp.com crashes
#     now and then without a console; cmd.exe carries on without it);
#   - the prefix reports Windows 10 (Debian's Wine 8 makes Windows 7 prefixes; Go programs
#     and the installer want 10).
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/../.." && pwd)
wine=$(command -v wine64 || true)
[ -n "$wine" ] || wine=/usr/lib/wine/wine64
[ -x "$wine" ] || { echo "wine64 not found: apt-get install wine wine64" >&2; exit 127; }
export WINEPREFIX=${CUBICLE_WINEPREFIX:-$root/.cache/wine-prefix}
export WINEDEBUG=${WINEDEBUG:--all}
export WINEDLLOVERRIDES=${WINEDLLOVERRIDES:-mscoree,mshtml=} # no Mono/Gecko install prompts

setup() {
  mkdir -p "$(dirname "$WINEPREFIX")"
  exec 9>"$WINEPREFIX.lock"
  flock 9
  [ -f "$WINEPREFIX/.cubicle-ready-2" ] && return
  [ -f "$WINEPREFIX/system.reg" ] || "$wine" wineboot --init >/dev/null 2>&1 || true
  local dll
  dll=$(mktemp -d)
  x86_64-w64-mingw32-gcc -shared -O2 -o "$dll/bcryptprimitives.dll" "$here/bcryptprimitives.c" -ladvapi32
  cp "$dll/bcryptprimitives.dll" "$WINEPREFIX/drive_c/windows/system32/"
  rm -rf "$dll"
  "$wine" reg add 'HKLM\Software\Microsoft\Windows NT\CurrentVersion\AeDebug' /v Auto /t REG_SZ /d 0 /f >/dev/null 2>&1
  "$wine" reg delete 'HKLM\Software\Microsoft\Windows NT\CurrentVersion\AeDebug' /v Debugger /f >/dev/null 2>&1 || true
  "$wine" winecfg -v win10 >/dev/null 2>&1
  touch "$WINEPREFIX/.cubicle-ready-2"
}
setup
exec 9>&-
if [ "${1:-}" = "--wait" ]; then
  # For programs that hand their work to another process (an NSIS uninstaller copies itself
  # away and runs from there): wait until every program of the prefix has ended.
  shift
  code=0
  "$wine" "$@" || code=$?
  "$(dirname "$wine")/wineserver" -w || true
  exit $code
fi
if [ "${CUBICLE_WINE_END_ALL:-}" = 1 ]; then
  # For test binaries run one at a time (ports.sh: go test -p 1): end every program of the
  # prefix once the test binary has exited. A child Wine left hanging (a crashed chcp.com
  # waiting on its crash handler) would otherwise hold go test's output pipe open until it
  # gives up ("Test I/O incomplete") and linger into the next steps.
  code=0
  "$wine" "$@" || code=$?
  "$(dirname "$wine")/wineserver" -k 2>/dev/null || true
  exit $code
fi
exec "$wine" "$@"
