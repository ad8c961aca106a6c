// Package testpoint lets end-to-end tests stop a node at a named step of
// its first boot, so that they can cut its power exactly there: after the
// data partition's GPT entry is written, while mkfs.xfs runs, after the
// node registered with its cluster, and so on (Steps).
//
// Code that does something a power cut could interrupt calls Reach with
// the step it has just reached. In a production build Reach does nothing
// and returns nil: it is an empty function of reach_off.go, and nothing
// else of this package's test half is compiled in. In a test image (build
// tag cairntest) /init arms one step from the kernel command line
// (cairn.test.stop-at=<step>, node/testhooks) with WithStopAt on
// the context its supervision tree runs under; Reach at that step then
// states marker.TestPointReached and blocks until the runnable is
// stopped:
//
//	kernel command line ─▶ /init (test image) ─▶ WithStopAt(root context)
//	                                                  │ (context values reach
//	                                                  ▼  every runnable)
//	enrolment, localstorage ─▶ Reach(ctx, step) ─▶ @cairn-mark test-point-reached name=<step>
//	                                                  │ blocks
//	test (test/e2e) waits for the marker ─▶ kills qemu ─▶ boots again, unarmed
//
// Why a context value rather than a flag in a package variable: a step is
// armed for one supervision tree, which keeps the steps out of every
// Config and keeps unit tests that run several trees in one process apart.
package testpoint
