#!/bin/sh
# debootstrap.sh DIR MIRROR ARCH — the offline base recipe: a minimal Debian bookworm root
# file system for ARCH (Debian's name: amd64, arm64) built from a Debian package mirror, for
# Linux hosts that cannot pull the pinned base (docker.io/library/debian:bookworm-slim by
# digest). Runs on the host as root; the builder tars DIR and imports it as
# localhost/cubicle-base:bookworm-<hash of this file and ARCH>.
set -eu
dir=$1
mirror=$2
arch=$3
debootstrap --variant=minbase --arch="$arch" bookworm "$dir" "$mirror"
# What a container image does not need: downloaded packages, package lists, logs.
rm -rf "$dir"/var/cache/apt/archives/*.deb "$dir"/var/cache/apt/*.bin \
	"$dir"/var/lib/apt/lists/* "$dir"/var/log/* "$dir"/tmp/* "$dir"/root/.cache
mkdir -p "$dir"/var/lib/apt/lists/partial
cat >"$dir"/etc/apt/sources.list <<SOURCES
deb $mirror bookworm main
deb $mirror bookworm-updates main
SOURCES
# apt inside a container: never keep downloaded packages.
cat >"$dir"/etc/apt/apt.conf.d/90cubicle <<'APT'
APT::Install-Recommends "false";
APT::Install-Suggests "false";
Binary::apt::APT::Keep-Downloaded-Packages "false";
APT
: >"$dir"/etc/machine-id
echo "debootstrap.sh: base ready in $dir"
