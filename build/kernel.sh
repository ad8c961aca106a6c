#!/usr/bin/env bash
# Usage: build/kernel.sh CACHE_DIR VERSION_FILE
#
# Finds Debian's current kernel through the linux-image-amd64 metapackage,
# makes sure that exact package is unpacked under CACHE_DIR/<release>_<version>
# (downloaded with apt-get download, never installed on this machine), and
# writes "<release> <package version>" to VERSION_FILE. VERSION_FILE is only
# rewritten when the kernel changed, so make rebuilds everything that depends
# on it exactly when Debian ships a new kernel, and a lookup on every make
# costs a fraction of a second.
#
# Debian's archive keeps only the current kernel of a release: when the
# package lists are missing or stale (the download fails), this runs
# apt-get update once, resolves again and retries.
set -euo pipefail

cache=${1:?usage: kernel.sh CACHE_DIR VERSION_FILE}
version_file=${2:?usage: kernel.sh CACHE_DIR VERSION_FILE}
meta=linux-image-amd64

sudo=""
[ "$(id -u)" -eq 0 ] || sudo="sudo"

# resolve sets pkg, ver and release from the metapackage's candidate, or
# returns 1 when apt knows no candidate (no package lists yet).
resolve() {
  local info dep
  # --no-all-versions shows the candidate only; one apt-cache call keeps
  # the lookup that runs on every make short.
  info=$(apt-cache show --no-all-versions "$meta" 2>/dev/null) || return 1
  [ -n "$info" ] || return 1
  # "Depends: linux-image-6.1.0-56-amd64 (= 6.1.192-2)"
  dep=$(sed -n 's/^Depends: //p' <<<"$info" | head -n1)
  dep=${dep%%,*}
  dep=${dep%%|*}
  pkg=$(awk '{print $1}' <<<"$dep")
  ver=$(sed -n 's/.*(= *\([^)]*\)).*/\1/p' <<<"$dep")
  if [ -z "$ver" ]; then
    ver=$(apt-cache policy "$pkg" | awk '/Candidate:/ {print $2}')
  fi
  case $pkg in
    linux-image-*) release=${pkg#linux-image-} ;;
    *) echo "kernel: $meta depends on '$pkg', not a linux-image package" >&2; return 2 ;;
  esac
  [ -n "$ver" ] && [ "$ver" != "(none)" ]
}

apt_update() {
  echo "image: kernel: $1; running apt-get update once and retrying"
  $sudo apt-get update -q >/dev/null
}

# fetch downloads and unpacks $pkg=$ver into a fresh directory and only then
# moves it into place, so an interrupted build never leaves half a kernel.
fetch() {
  local tmp="$cache/.fetch"
  rm -rf "$tmp"
  mkdir -p "$tmp/root"
  (cd "$tmp" && apt-get download -q -o APT::Sandbox::User=root "$pkg=$ver" >/dev/null) || return 1
  dpkg-deb -x "$tmp"/*.deb "$tmp/root"
  # The package leaves modules.dep and modules.alias to depmod at install
  # time; generate them here for the unpacked tree.
  PATH=$PATH:/usr/sbin:/sbin depmod -b "$tmp/root" "$release"
  local dir
  for f in "boot/vmlinuz-$release" "boot/config-$release" "lib/modules/$release/modules.dep" \
    "lib/modules/$release/modules.alias" "lib/modules/$release/modules.builtin"; do
    if [ ! -e "$tmp/root/$f" ]; then
      echo "kernel: $pkg $ver has no $f" >&2
      exit 1
    fi
  done
  rm -f "$tmp"/*.deb
  dir="$cache/${release}_$ver"
  rm -rf "$dir"
  mv "$tmp/root" "$dir"
  rmdir "$tmp"
  touch "$dir/.unpacked"
}

mkdir -p "$cache"
if ! resolve; then
  apt_update "no candidate for $meta in apt's package lists"
  resolve || { echo "kernel: apt knows no candidate for $meta" >&2; exit 1; }
fi

dir="$cache/${release}_$ver"
state=cached
if [ ! -e "$dir/.unpacked" ]; then
  if ! fetch; then
    apt_update "downloading $pkg $ver failed"
    resolve || { echo "kernel: apt knows no candidate for $meta" >&2; exit 1; }
    dir="$cache/${release}_$ver"
    fetch || { echo "kernel: downloading $pkg $ver failed after apt-get update" >&2; exit 1; }
  fi
  state=downloaded
  # Keep only the kernel in use: each unpacked kernel is a few hundred MB.
  for old in "$cache"/*_*; do
    [ "$old" = "$dir" ] || rm -rf "$old"
  done
fi
echo "image: kernel $release ($ver) $state"

line="$release $ver"
if [ ! -e "$version_file" ] || [ "$(cat "$version_file")" != "$line" ]; then
  mkdir -p "$(dirname "$version_file")"
  echo "$line" >"$version_file.tmp"
  mv "$version_file.tmp" "$version_file"
fi
