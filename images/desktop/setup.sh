#!/bin/sh
# setup.sh — shared by every Cubicle desktop recipe (run as root at build time).
# Creates the desktop user cua (uid/gid 1000, taking over an existing uid-1000 account of a
# base image), its workspace and browser-profile directories (owned by cua, so a volume mounted
# there copies up with the right owner), installs the XFCE and browser defaults from rootfs/,
# and pre-seeds the panel so its first-run dialog never blocks the desktop.
set -eu
D=/opt/cubicle/desktop

# --- user cua --------------------------------------------------------------------------------
if ! getent group cua >/dev/null; then
	old=$(getent group 1000 | cut -d: -f1 || true)
	if [ -n "$old" ]; then groupmod -n cua "$old"; else groupadd -g 1000 cua; fi
fi
if ! id cua >/dev/null 2>&1; then
	old=$(getent passwd 1000 | cut -d: -f1 || true)
	if [ -n "$old" ]; then
		usermod -l cua -d /home/cua -m -g cua -s /bin/bash "$old"
	else
		useradd -m -u 1000 -g cua -s /bin/bash cua
	fi
fi
[ "$(id -u cua)" = 1000 ] || { echo "setup: user cua exists with uid $(id -u cua), need 1000" >&2; exit 1; }

# --- files -----------------------------------------------------------------------------------
cp -R "$D/rootfs/." /
chmod 0755 /etc/chromium.d 2>/dev/null || true
chmod 0755 /usr/local/bin/cubicle-session
install -d -m 0755 -o cua -g cua /home/cua /home/cua/workspace /home/cua/Desktop \
	/home/cua/.config /home/cua/.config/chromium /home/cua/.cache /home/cua/.local \
	/home/cua/.local/share
install -d -m 0700 -o cua -g cua /run/cubicle
install -d -m 1777 /tmp/.X11-unix /tmp/.ICE-unix

# The panel shows a "first start" dialog when its xfconf channel is empty: ship the packaged
# default layout as the system-wide channel instead.
if [ -f /etc/xdg/xfce4/panel/default.xml ] &&
	[ ! -f /etc/xdg/xfce4/xfconf/xfce-perchannel-xml/xfce4-panel.xml ]; then
	cp /etc/xdg/xfce4/panel/default.xml /etc/xdg/xfce4/xfconf/xfce-perchannel-xml/xfce4-panel.xml
fi

# A desktop that is never locked or blanked: nobody is there to unlock it.
rm -f /etc/xdg/autostart/light-locker.desktop /etc/xdg/autostart/xscreensaver.desktop \
	/etc/xdg/autostart/xfce4-screensaver.desktop /etc/xdg/autostart/xfce4-power-manager.desktop

# Chromium is the default browser wherever x-www-browser is used.
if [ -x /usr/bin/chromium ] && command -v update-alternatives >/dev/null; then
	update-alternatives --set x-www-browser /usr/bin/chromium 2>/dev/null || true
fi
# Fontconfig accepts its cache of a font directory only when the directory's mtime matches the
# one recorded, nanoseconds included; image layers keep whole seconds, so the caches the font
# packages built never match in a container and every GTK program started rescans the fonts and
# writes its own copy under ~/.cache. Whole-second mtimes on the font directories, then fresh
# system caches, keep them valid.
if command -v fc-cache >/dev/null; then
	now=$(date +%s)
	for d in /usr/share/fonts /usr/local/share/fonts /usr/share/X11/fonts; do
		if [ -d "$d" ]; then find "$d" -type d -exec touch -m -d "@$now" {} +; fi
	done
	fc-cache -s -f || true
fi
rm -rf /opt/cubicle/desktop/rootfs
