#!/usr/bin/env bash
# Builds Cubicle's packages into build/bin/:
#   - cubicle-amd64-installer.exe: the Windows desktop app (cross-built, no cgo), with its
#     icon, manifest and version resources, in an NSIS installer (build/windows/installer);
#   - cubicle_<version>_<arch>.deb: the Linux desktop app (GTK/WebKit) for Debian and Ubuntu.
# The macOS app is built on a Mac (README: "Building the macOS app").
# Needs: Go, Node (wails.json), makensis (nsis), x86_64-w64-mingw32-windres
# (binutils-mingw-w64-x86-64), dpkg-deb, and for the .deb the GTK/WebKit development files.
# Builds the UI and the driver first unless they are built (scripts/build.sh).
set -euo pipefail
source "$(dirname "$0")/lib.sh"
cd "$ROOT"
if [ ! -f frontend/dist/index.html ] || [ ! -x images/bin/cubicle-guest-amd64 ]; then
  bash "$ROOT/scripts/build.sh"
fi
out="$ROOT/build/bin"
mkdir -p "$out"
info() { node -p "require('./wails.json').$1"; }
version=$(info info.productVersion)
gitversion=$(git describe --tags --always --dirty 2>/dev/null || echo "$version")
LDFLAGS="-X cubicle/backend/cli.Version=$gitversion"
tmp=$(mktemp -d)
syso="$ROOT/cubicle-res_windows_amd64.syso" # picked up by go build of the main package
trap 'rm -rf "$tmp" "$syso"' EXIT

say "Windows resources: icon, manifest, version (build/windows)"
IFS=. read -r major minor patch <<<"$version"
node - "$tmp/cubicle.rc" <<'JS'
const fs = require("fs");
const info = JSON.parse(fs.readFileSync("build/windows/info.json", "utf8")).info["0000"];
const v = info.ProductVersion.split(".").concat(["0", "0", "0"]).slice(0, 4).join(",");
const q = s => '"' + String(s).replace(/"/g, '""') + '"';
const root = process.cwd().replace(/\\/g, "/");
const rc = [
  `1 ICON ${q(root + "/build/windows/icon.ico")}`,
  `1 24 ${q(root + "/build/windows/wails.exe.manifest")}`,
  `1 VERSIONINFO`, `FILEVERSION ${v}`, `PRODUCTVERSION ${v}`, `FILEOS 0x40004`, `FILETYPE 0x1`,
  `BEGIN`, `  BLOCK "StringFileInfo"`, `  BEGIN`, `    BLOCK "040904B0"`, `    BEGIN`,
  ...Object.entries(info).map(([k, val]) => `      VALUE ${q(k)}, ${q(val)}`),
  `      VALUE "OriginalFilename", "cubicle.exe"`,
  `      VALUE "FileVersion", ${q(info.ProductVersion)}`,
  `    END`, `  END`, `  BLOCK "VarFileInfo"`, `  BEGIN`, `    VALUE "Translation", 0x409, 1200`, `  END`, `END`, ``,
].join("\n");
fs.writeFileSync(process.argv[2], rc);
JS
x86_64-w64-mingw32-windres -O coff -o "$syso" "$tmp/cubicle.rc"

say "Windows desktop app (cross-built): build/bin/cubicle.exe"
GOOS=windows GOARCH=amd64 CGO_ENABLED=0 go build -tags "desktop,production,$ENGINE_TAGS" \
  -ldflags "$LDFLAGS -H windowsgui -s -w" -o "$out/cubicle.exe" .
rm -f "$syso"

say "Windows installer: build/bin/cubicle-amd64-installer.exe"
makensis -V2 -DCUBICLE_TARGET_AMD64 -DARG_WAILS_AMD64_BINARY="$out/cubicle.exe" -DINFO_PRODUCTVERSION="$version" \
  "$ROOT/build/windows/installer/project.nsi"

say "Linux desktop app and .deb"
if ! pkg-config --exists webkit2gtk-4.1 gtk+-3.0 2>/dev/null; then
  echo "the .deb needs the desktop build: install libgtk-3-dev libwebkit2gtk-4.1-dev pkg-config"; exit 1
fi
arch=$(go env GOARCH)
pkg="$tmp/deb"
mkdir -p "$pkg/DEBIAN" "$pkg/usr/bin" "$pkg/usr/share/applications" \
  "$pkg/usr/share/icons/hicolor/1024x1024/apps" "$pkg/usr/share/doc/cubicle"
CGO_ENABLED=1 go build -tags "desktop,production,webkit2_41,$ENGINE_TAGS" \
  -ldflags "$LDFLAGS -s -w" -o "$pkg/usr/bin/cubicle" .
install -m 0644 build/linux/cubicle.desktop "$pkg/usr/share/applications/cubicle.desktop"
install -m 0644 build/appicon.png "$pkg/usr/share/icons/hicolor/1024x1024/apps/cubicle.png"
printf 'Cubicle %s: AI agents that each work on a real computer.\nRun `cubicle doctor` to check the container engine; `cubicle --help` lists the commands.\n' "$gitversion" > "$pkg/usr/share/doc/cubicle/README"
cat > "$pkg/DEBIAN/control" <<CONTROL
Package: cubicle
Version: $version
Architecture: $arch
Maintainer: Cubicle developers <maintainers@cubicle.invalid>
Section: utils
Priority: optional
Depends: libgtk-3-0, libwebkit2gtk-4.1-0, libsqlite3-0
Recommends: podman | docker.io
Installed-Size: $(du -ks "$pkg/usr" | cut -f1)
Description: AI agents that each work on a real computer
 Cubicle is a desktop app in which AI agents each work on their own desktop:
 a container running XFCE, driven through Podman or Docker. People chat with
 agents, watch their desktops live, take control and hand it back. The same
 program serves the UI over HTTP (cubicle serve).
CONTROL
deb="$out/cubicle_${version}_${arch}.deb"
dpkg-deb --root-owner-group -Zgzip --build "$pkg" "$deb" >/dev/null
echo "built $(ls "$out"/cubicle-amd64-installer.exe) and $deb"
