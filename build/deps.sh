#!/usr/bin/env bash
# Installs the Debian packages that building, booting and testing Cairn need.
# It does nothing when they are all present, so every make target that needs
# them can call it. Go modules come through the module proxy on their own.
#
# build/deps.sh kubernetes installs instead what building the Kubernetes
# payload needs besides Go (build/kubernetes): runc is the one program of it
# built with cgo, linking Debian's libseccomp statically. build/deps.sh
# conformance installs the programs that the conformance tests' images
# carry from Debian (build/testimages).
set -euo pipefail

packages=(
  qemu-system-x86
  qemu-utils
  ovmf
  systemd-boot-efi
  sbsigntool openssl
  swtpm swtpm-tools
  protobuf-compiler libprotobuf-dev
  zstd cpio
  kmod dosfstools mtools
  xfsprogs
  erofs-utils cryptsetup-bin
  iproute2
  nftables
)
if [ "${1:-}" = kubernetes ]; then
  packages=(gcc libc6-dev pkg-config libseccomp-dev)
fi
if [ "${1:-}" = conformance ]; then
  packages=(busybox curl bind9-dnsutils netcat-openbsd netcat-traditional wget socat bash iproute2)
fi

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
[ ${#missing[@]} -eq 0 ] && exit 0

echo "deps: installing ${missing[*]}"
sudo=""
[ "$(id -u)" -eq 0 ] || sudo="sudo"
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get update -q
$sudo apt-get install -y -q --no-install-recommends "${missing[@]}"
