#!/usr/bin/env bash
# Builds the Kubernetes payload of the system image from source, every
# program static, into BINDIR:
#
#   hyperkube                 kube-apiserver, kube-controller-manager,
#   kube-apiserver -> ...     kube-scheduler and kube-proxy in one binary
#   ...                       (hyperkube/), a link per component
#   worker/hyperkube          the kubelet and kube-proxy: hyperkube built
#   worker/kubelet -> ...     for workers (tag worker), a link for each
#   containerd, ctr           the container runtime, with its CRI plugin,
#                             and its client, which imports images
#   containerd-shim-runc-v2   its shim: a binary of its own, since it
#                             re-executes itself
#   runc                      with seccomp (cgo, Debian's libseccomp.a)
#   ptp host-local            the CNI plugins the pod network uses (the
#                             pods' loopback containerd brings up itself),
#   portmap                   and the one that serves pods' host ports
#
# and kubectl, for the host's tests, into KUBECTL. With -e2e it builds
# Kubernetes' e2e.test instead (make conformance).
#
#   build/kubernetes/build.sh BINDIR KUBECTL
#   build/kubernetes/build.sh -e2e E2E_TEST
#
# Kubernetes is pinned by this directory's go.mod, the others here. Each is
# built the way its own Makefile builds a static release: the same build
# tags and version stamps, -trimpath, no symbol table or DWARF (-s -w).
#
# Kubernetes requires its staging modules at v0.0.0 and replaces them in
# its go.mod, which Go honours only in the main module: so it is built
# from the nested module here, which replaces them with their published
# releases. containerd, runc and the CNI plugins have no replace
# directives, so `go install PACKAGE@VERSION` builds each with its own
# go.mod as the main module: the dependency versions its release was
# tested with, checked against the checksum database, never resolved
# together with Kubernetes' or Cairn's.
set -euo pipefail

containerd=github.com/containerd/containerd/v2@v2.4.2
runc=github.com/opencontainers/runc@v1.5.2
cni_plugins=github.com/containernetworking/plugins@v1.9.1

[ $# -eq 2 ] || { echo "usage: $0 BINDIR KUBECTL | $0 -e2e E2E_TEST" >&2; exit 2; }
GO=${GO:-go}
here=$(cd "$(dirname "$0")" && pwd)

# Kubernetes' version stamps (hack/lib/version.sh), from the module
# proxy's answer: the release's version and time, which keeps the build
# reproducible. The proxy does not know the commit, so none is claimed.
read -r kversion ktime < <(cd "$here" &&
  $GO list -m -f '{{.Version}} {{.Time.UTC.Format "2006-01-02T15:04:05Z"}}' k8s.io/kubernetes)
kminor=${kversion#v1.}
kminor=${kminor%%.*}
kldflags="-s -w"
for pkg in k8s.io/client-go/pkg/version k8s.io/component-base/version; do
  kldflags+=" -X $pkg.gitVersion=$kversion -X $pkg.gitMajor=1 -X $pkg.gitMinor=$kminor"
  kldflags+=" -X $pkg.gitTreeState=clean -X $pkg.buildDate=$ktime -X $pkg.gitCommit="
done

# -e2e builds Kubernetes' end-to-end suite instead, for make conformance:
# stamped as the payload is, since tests pick fixtures by the version
# the suite says it is. go vet is off: the code is upstream's, and vet
# analyses every package the suite imports first, which took several
# minutes of a first build after the link had ended.
if [ "$1" = -e2e ]; then
  e2e=$(cd "$(dirname "$2")" && pwd)/$(basename "$2")
  cd "$here" && exec $GO test -c -vet=off -trimpath -ldflags "$kldflags" -o "$e2e" k8s.io/kubernetes/test/e2e
fi
mkdir -p "$1" "$(dirname "$2")"
out=$(cd "$1" && pwd)
kubectl=$(cd "$(dirname "$2")" && pwd)/$(basename "$2")

# Go writes a binary again even when its build cache already held it. So
# everything is built into a staging directory next to BINDIR, and a
# program replaces its copy in BINDIR only when its bytes changed: make
# rebuilds the system image from the payload's times, and a payload that
# did not change must not rebuild it.
bin=$out.staging
rm -rf "$bin"
mkdir "$bin"
trap 'rm -rf "$bin"' EXIT

# step NAME COMMAND... runs one build and says how long it took.
step() {
  local name=$1 start=$SECONDS
  shift
  "$@"
  echo "kubernetes: built $name in $((SECONDS - start)) s"
}

# Kubernetes' release tags: SELinux labels, no test-only code paths, no
# x/net/trace in gRPC.
ktags=selinux,notest,grpcnotrace

# patches/*.patch are fixes the release lacks, each a diff against the
# k8s.io/kubernetes module with a note on top saying why. They are
# applied to a copy of the module, BINDIR/../patched (hard links to the
# module cache, but for the files patched), which a copy of this go.mod
# puts in its place: the module cache stays what the checksum database vouches
# for, and Go records the replacement in every binary. A patch that no
# longer applies (a new release changed its lines) stops the build.
# go list names the module's directory only once it is in the module
# cache, which on a new machine it is not yet.
(cd "$here" && $GO mod download k8s.io/kubernetes)
kdir=$(cd "$here" && $GO list -m -f '{{.Dir}}' k8s.io/kubernetes)
[ -n "$kdir" ] || { echo "kubernetes: k8s.io/kubernetes $kversion is not in the module cache after its download" >&2; exit 1; }
src=$(dirname "$out")/patched
# remove DIR removes a copy of the module. The module cache's directories
# are read-only; the copy's are its own, made writable first. (Its files
# are the cache's: their modes stay.)
remove() {
  [ ! -e "$1" ] || find "$1" -type d -exec chmod u+w {} +
  rm -rf "$1"
}
remove "$src"
rm -f "$src.mod" "$src.sum"
if ! cp -al "$kdir" "$src" 2>/dev/null; then
  # Hard links cannot cross file systems: a copy, then.
  remove "$src"
  cp -a "$kdir" "$src"
fi
# Writable, so that a patch, and make clean, can change them.
find "$src" -type d -exec chmod u+w {} +
for p in "$here"/patches/*.patch; do
  [ -e "$p" ] || continue
  while read -r _ _ f; do
    # A copy of its own, not a link to the module cache's file.
    cp --remove-destination "$kdir/$f" "$src/$f"
    chmod u+w "$src/$f"
  done < <(git apply --numstat "$p")
  (cd "$src" && git apply "$p") ||
    { echo "kubernetes: $(basename "$p") does not apply to k8s.io/kubernetes $kversion" >&2; exit 1; }
  echo "kubernetes: applied $(basename "$p")"
done
# Relative to this directory, as Go resolves it: the path is written
# into the binaries, and is the same in every clone.
cp "$here/go.mod" "$src.mod"
cp "$here/go.sum" "$src.sum"
(cd "$here" && $GO mod edit -modfile "$src.mod" -replace "k8s.io/kubernetes=$(realpath --relative-to=. "$src")")

# kbuild TAGS ARGS... builds the patched Kubernetes with the release tags
# and TAGS.
kbuild() {
  local tags=$ktags${1:+,$1}
  shift
  (cd "$here" && CGO_ENABLED=0 $GO build -modfile "$src.mod" -trimpath -tags "$tags" -ldflags "$kldflags" "$@")
}
step "hyperkube (Kubernetes $kversion)" kbuild "" -o "$bin/hyperkube" ./hyperkube
mkdir "$bin/worker"
step "hyperkube for workers (Kubernetes $kversion)" kbuild worker -o "$bin/worker/hyperkube" ./hyperkube
step "kubectl (Kubernetes $kversion)" kbuild "" -o "$bin/kubectl" k8s.io/kubernetes/cmd/kubectl

# containerd's Makefile with STATIC=1: netgo and osusergo so that nothing
# needs libc, no btrfs (it needs cgo), no gRPC in the shim. Nor the
# devmapper and ZFS snapshotters, nor OpenTelemetry tracing: the node
# uses overlayfs and exports no traces, and each plugin linked in is code
# and data that containerd's start touches and keeps resident.
cpath=${containerd%@*}
cversion=${containerd#*@}
ctags="urfave_cli_no_docs osusergo netgo static_build no_btrfs no_devmapper no_zfs no_tracing"
cldflags="-s -w -X $cpath/version.Version=$cversion -X $cpath/version.Package=$cpath"
step "containerd $cversion" env GOBIN="$bin" CGO_ENABLED=0 \
  $GO install -trimpath -tags "$ctags" -ldflags "$cldflags" "$cpath/cmd/containerd@$cversion"
# ctr imports the pause image, which Cairn builds itself, at start.
step "ctr $cversion" env GOBIN="$bin" CGO_ENABLED=0 \
  $GO install -trimpath -tags "$ctags" -ldflags "$cldflags" "$cpath/cmd/ctr@$cversion"
step "containerd-shim-runc-v2 $cversion" env GOBIN="$bin" CGO_ENABLED=0 \
  $GO install -trimpath -tags "$ctags no_grpc" -ldflags "$cldflags" "$cpath/cmd/containerd-shim-runc-v2@$cversion"

# runc as its Makefile's `static` target builds it, static and linked by
# the C linker, but not position-independent: every pod's start and end
# runs runc several times (create, its init, start, kill, delete),
# and under emulation a static PIE cost about 120-150 ms of CPU a run
# where this costs 30 ms, as other Go programs do (runc --version and
# runc state, timed in an emulated VM). The PIE run without address
# randomization cost 30 ms too: qemu's translator keeps the code it has
# translated by virtual address, and a PIE that lands at another address
# each run is translated anew each time. What is given up is the
# randomized address of runc's own code, as for every pure Go program,
# whose default is not PIE either. Without its libpathrs tag: libpathrs
# is a Rust library Debian does not package, and runc falls back to its
# Go implementation (pathrs-lite).
step "runc ${runc#*@}" env GOBIN="$bin" CGO_ENABLED=1 \
  $GO install -trimpath -tags "seccomp urfave_cli_no_docs netgo osusergo" \
  -ldflags "-s -w -linkmode external -extldflags -static" "$runc"

# The CNI plugins' release build: static, stamped with the version.
ppath=${cni_plugins%@*}
pversion=${cni_plugins#*@}
step "CNI plugins $pversion" env GOBIN="$bin" CGO_ENABLED=0 \
  $GO install -trimpath -ldflags "-s -w -X $ppath/pkg/utils/buildversion.BuildVersion=$pversion" \
  "$ppath/plugins/main/ptp@$pversion" "$ppath/plugins/ipam/host-local@$pversion" \
  "$ppath/plugins/meta/portmap@$pversion"

# update FILE DEST moves FILE to DEST unless DEST has the same bytes.
update() {
  if cmp -s "$1" "$2"; then
    rm "$1"
  else
    mv -f "$1" "$2"
  fi
}
update "$bin/kubectl" "$kubectl"
mkdir -p "$out/worker"
for f in "$bin"/* "$bin"/worker/*; do
  [ -d "$f" ] || update "$f" "$out/${f#"$bin"/}"
done
# link DIR COMPONENT... links each COMPONENT to the hyperkube in DIR.
link() {
  local dir=$1 c
  shift
  for c in "$@"; do
    [ "$(readlink "$dir/$c")" = hyperkube ] || ln -sfn hyperkube "$dir/$c"
  done
}
link "$out" kube-apiserver kube-controller-manager kube-scheduler kube-proxy
link "$out/worker" kubelet kube-proxy
# The kubelet was linked beside the apiserver before it moved to worker/.
rm -f "$out/kubelet"
