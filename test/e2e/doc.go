// Package e2e holds Cairn's end-to-end suites: they boot the real image
// built by `make image` in qemu (through test/launch) and check what the
// node does by calling its APIs and by reading its serial console: the
// markers a node states (node/marker) and /init's console protocol, never
// the wording of log lines.
//
// The suites sit behind the build tag e2e, so that `go test ./...` stays a
// unit test run; `make e2e` builds the image and runs them:
//
//	go test -tags e2e -count=1 -v ./test/e2e/... [-image-dir DIR] [-cairnctl BIN]
//
// The cluster suites (TestSingleNodeCluster, TestHACluster) form clusters
// through test/launch/cluster and run the cairnctl binary given by
// -cairnctl (default <image dir>/cairnctl) as the operator; they also
// call every RPC from Go, as the owner, as a node the test enrols, and
// as strangers.
//
// The image directory defaults to out/ at the repository's root (or
// $CAIRN_IMAGE_DIR). Every suite runs in parallel with the others, under a
// deadline of its own, and logs its duration and a table of phase timings;
// each node's raw console is kept in out/e2e/<suite>.console.log.
// Timings are reported, never asserted.
package e2e
