// Command etcd is etcd's own server (etcdmain), at the release Kubernetes'
// payload requires, for the etcd image of the conformance suite's
// aggregator test, which runs it beside the sample apiserver
// (build/testimages builds both). Its module is this one, not Cairn's,
// so that etcd's proxy and its dependencies stay out of the node's build.
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() {
	etcdmain.Main(os.Args)
}
