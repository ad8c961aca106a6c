// Package testhooks holds /init's test hooks: kernel command-line flags,
// all starting "cairn.test.", that make a node misbehave on purpose or
// run test services, for the end-to-end suites. Only the /init of test
// images (make test-image, build tag cairntest) has them; a production
// /init ignores every cairn.test.* flag and says so (off.go), and
// cmd/init's TestProductionHasNoTestHooks checks that its binary does not
// even contain their names.
//
//	kernel command line ─▶ Parse ─▶ Flags ─┬─▶ RootFailure: the root fails at once
//	                                       ├─▶ ArmTestPoint: stop at a step of first boot
//	                                       ├─▶ Services: echo server, echo client
//	                                       └─▶ Storage: the data partition without
//	                                           enrolment, a marker, node tests
//
// cmd/init wires them in unconditionally: under the production build
// every one of them does nothing.
package testhooks

import (
	"context"

	"cairn.dev/cairn/pkg/supervisor"
)

// Prefix starts every test-only flag.
const Prefix = "cairn.test."

// A Service is a test service the root of the node's tree starts.
type Service struct {
	Name string
	Run  supervisor.Runnable
}

// Disks are what the storage hooks do to the data partition: the methods
// of *localstorage.Storage, and a fake in tests.
type Disks interface {
	MountNew(ctx context.Context, nodeKey, clusterKey []byte) error
	MountExisting(nodeKey, clusterKey []byte) error
}
