//go:build conformance

package e2e

// The packages of agnhost, the test program most of the suite's pods run,
// which make conformance builds into its image (build/testimages) with go
// build k8s.io/kubernetes/test/images/agnhost: a main package, which no
// file can import, so its own imports are named here instead.
import (
	_ "k8s.io/kubernetes/test/images/agnhost/connect"
	_ "k8s.io/kubernetes/test/images/agnhost/dns"
	_ "k8s.io/kubernetes/test/images/agnhost/entrypoint-tester"
	_ "k8s.io/kubernetes/test/images/agnhost/fakegitserver"
	_ "k8s.io/kubernetes/test/images/agnhost/fakeregistryserver"
	_ "k8s.io/kubernetes/test/images/agnhost/guestbook"
	_ "k8s.io/kubernetes/test/images/agnhost/inclusterclient"
	_ "k8s.io/kubernetes/test/images/agnhost/liveness"
	_ "k8s.io/kubernetes/test/images/agnhost/mounttest"
	_ "k8s.io/kubernetes/test/images/agnhost/mtlsclient"
	_ "k8s.io/kubernetes/test/images/agnhost/mtlsserver"
	_ "k8s.io/kubernetes/test/images/agnhost/net"
	_ "k8s.io/kubernetes/test/images/agnhost/netexec"
	_ "k8s.io/kubernetes/test/images/agnhost/nettest"
	_ "k8s.io/kubernetes/test/images/agnhost/nonewprivs"
	_ "k8s.io/kubernetes/test/images/agnhost/openidmetadata"
	_ "k8s.io/kubernetes/test/images/agnhost/pause"
	_ "k8s.io/kubernetes/test/images/agnhost/podcertificatesigner"
	_ "k8s.io/kubernetes/test/images/agnhost/porter"
	_ "k8s.io/kubernetes/test/images/agnhost/webhook"
	_ "k8s.io/kubernetes/third_party/forked/vishhstress"
)
