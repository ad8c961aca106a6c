//go:build conformance

package e2e

// The sample apiserver, which the aggregator test serves through the
// cluster's apiserver: make conformance builds it into its image
// (build/testimages) with go build k8s.io/sample-apiserver at the
// payload's release.
import _ "k8s.io/sample-apiserver/pkg/cmd/server"
