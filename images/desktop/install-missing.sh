#!/bin/sh
# install-missing.sh — used by recipes built on third-party bases (cursor): installs Xvfb, XFCE,
# dbus and fonts only when the base lacks them. Debian and Ubuntu bases (apt) are supported.
# With --check it only prints "missing: <packages>" and changes nothing.
set -eu
missing=""
need() { command -v "$1" >/dev/null 2>&1 || missing="$missing $2"; }
need Xvfb xvfb
need xauth xauth
need dbus-launch dbus-x11
need dbus-daemon dbus
need xfce4-session xfce4-session
need xfwm4 xfwm4
need xfce4-panel xfce4-panel
need xfdesktop xfdesktop4
need xfsettingsd xfce4-settings
need exo-open exo-utils
need xfce4-terminal xfce4-terminal
need thunar thunar
need xdg-open xdg-utils
if ! command -v fc-list >/dev/null 2>&1 || [ -z "$(fc-list :lang=zh 2>/dev/null)" ]; then
	missing="$missing fonts-wqy-zenhei"
fi
[ -f /usr/share/fonts/truetype/dejavu/DejaVuSans.ttf ] || missing="$missing fonts-dejavu-core"
[ -d /usr/share/icons/Adwaita ] || missing="$missing adwaita-icon-theme librsvg2-common"
if [ "${1:-}" = "--check" ]; then
	echo "missing:$missing"
	exit 0
fi
if [ -z "$missing" ]; then
	echo "install-missing: the base has the desktop packages already"
	exit 0
fi
if ! command -v apt-get >/dev/null 2>&1; then
	echo "install-missing: the base lacks$missing and has no apt-get; use a Debian or Ubuntu base" >&2
	exit 1
fi
echo "install-missing: installing$missing"
apt-get update
# shellcheck disable=SC2086
apt-get install -y --no-install-recommends $missing xkb-data x11-xkb-utils ca-certificates
apt-get clean
rm -rf /var/lib/apt/lists/*
