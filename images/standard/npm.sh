#!/bin/sh
# npm.sh — puts npm and npx on the standard image's Node (run as root at build time).
# Debian's own npm package is npm 9 split into about 350 node-* packages: 231 MB and 78 s of
# installing on top of nodejs. The npm registry's tarball is one self-contained package
# (about 11 MB unpacked), so the image takes that instead, pinned by version and by the
# registry's SHA-512 integrity: a changed or truncated download fails the build. npm 10.9 is
# the last line that supports bookworm's Node 18 (engines ^18.17.0 || >=20.5.0).
# python3 downloads it (it honours https_proxy like apt honours http_proxy). The SHA-512 pin is
# what is trusted, as apt trusts the archive's signatures and not its plain-HTTP mirror: the
# server's certificate is not checked, so a TLS-intercepting proxy whose CA the build container
# lacks does not break the build, and nothing but the pinned bytes is ever installed.
set -eu
VERSION=10.9.9
INTEGRITY=sha512-1g+6jLQvaIuB4zwvHL7yrXuXcWZwDsCtBX8bbWDqbvJSSr9nPiDDWTHNgwXR27iIcTTW7v3A57hDW9RYv2W4Yg==
URL=https://registry.npmjs.org/npm/-/npm-$VERSION.tgz
DIR=/usr/local/lib/node_modules/npm
TGZ=/tmp/npm-$VERSION.tgz

python3 - "$URL" "$INTEGRITY" "$TGZ" <<'PY'
import base64, hashlib, ssl, sys, time, urllib.request
url, want, out = sys.argv[1:]
pinned_bytes_only = ssl._create_unverified_context()  # see above: the SHA-512 below is the check
for attempt in range(1, 4):
    try:
        data = urllib.request.urlopen(url, timeout=120, context=pinned_bytes_only).read()
        break
    except OSError as e:
        if attempt == 3:
            sys.exit(f"npm.sh: download {url}: {e} (the build needs the npm registry, or an https_proxy)")
        time.sleep(5 * attempt)
got = "sha512-" + base64.b64encode(hashlib.sha512(data).digest()).decode()
if got != want:
    sys.exit(f"npm.sh: {url}: integrity {got}, want {want}")
with open(out, "wb") as f:
    f.write(data)
PY
mkdir -p "$DIR"
tar -xzf "$TGZ" -C "$DIR" --strip-components=1 --no-same-owner
rm -f "$TGZ"
# npm's built-in config: no "new major version" check against the registry at every npx start
# (npm 11 and later do not run on Node 18).
echo "update-notifier=false" >"$DIR/npmrc"
ln -sf ../lib/node_modules/npm/bin/npm-cli.js /usr/local/bin/npm
ln -sf ../lib/node_modules/npm/bin/npx-cli.js /usr/local/bin/npx
echo "npm.sh: node $(node --version), npm $(npm --version), npx $(npx --version), $(python3 --version)"
