// Package cairn holds repository-wide checks: tests that read the whole tree
// and hold it to the rules every package shares (a package comment in every
// package, the direction of imports, no bare goroutines in node code). The
// operating system itself lives under cmd/, node/ and pkg/; see README.md.
package cairn
