// Package kubernetes is the Kubernetes payload of Cairn's system image:
// the programs a node runs as child processes to be a Kubernetes node,
// built from source through the Go module proxy. It holds no node code;
// build.sh builds the payload and payload_test.go (build tag payload)
// checks what was built.
//
//	k8s.io/kubernetes ─▶ hyperkube/ (this module) ─▶ hyperkube + a link per
//	  + staging modules    (twice: tag worker ─▶      component, and ─────┤
//	                        worker/)                 worker/hyperkube     │
//	containerd/v2 ─▶ go install @version ─▶ containerd,                  │
//	                                        containerd-shim-runc-v2 ─────┤
//	runc ─▶ go install @version, cgo ─▶ runc (static libseccomp) ────────┤
//	CNI plugins ─▶ go install @version ─▶ ptp, host-local, portmap ──────┤
//	                                                                     ▼
//	         out/kubernetes/bin ─▶ mkimage system -kubernetes ─▶ /system/kubernetes/bin
//
// # Why a module of its own
//
// Kubernetes is millions of lines with hundreds of dependencies. In
// Cairn's own module it would be compiled by every go vet, staticcheck
// and unit test run, and its dependencies would be resolved together with
// Cairn's, so that either would build against versions its authors never
// tested. Here it is resolved as its own go.mod resolves it (a test of
// the build checks no version moved), and the main module never sees it:
// `go ... ./...` stops at a directory with a go.mod.
//
// # Everything static
//
// The node runs the payload from the verified system partition with no
// libraries but those it carries for its host binaries, so every program
// here is static: Go's own network and user lookups (netgo, osusergo),
// cgo only for runc, which links Debian's libseccomp.a, static and not
// position-independent (build.sh says why).
//
// # Patches
//
// patches/ holds the few fixes Kubernetes' release lacks, each a diff
// with a note on why. build.sh applies them to a copy of the module
// (out/kubernetes/patched) and builds through a copy of go.mod that
// replaces k8s.io/kubernetes with it; the module cache is never edited,
// and each binary's build information names the patched copy, which
// payload_test.go checks. A patch that no longer applies to a new
// release stops the build.
package kubernetes
