// Package ports declares every TCP port a Cairn node listens on or dials,
// in one table, so that servers, clients and tests agree on them and no
// client imports a server package for a constant.
//
// Code takes a Table in its Config and calls WithDefaults on it: a zero
// field means the node's fixed port, so production passes nothing and a
// test that runs several nodes in one process sets only the ports it must
// move.
package ports

import (
	"net"
	"strconv"
	"strings"
)

// The node's fixed ports.
const (
	// Curator is the curator's public gRPC service (AAA, Management,
	// Curator), on the node's IP.
	Curator = 7833
	// EtcdPeer is etcd's peer (raft) listener, on the node's IP. etcd's
	// clients use a local unix socket instead.
	EtcdPeer = 7834
	// NodeManagement is the per-node management service (logs, reboot,
	// power-off), on every address of the node.
	NodeManagement = 7835
	// Metrics serves the node's metrics over HTTPS to metrics
	// certificates (node/metrics), on every address of the node.
	Metrics = 7836
	// KubernetesAPI is the Kubernetes apiserver.
	KubernetesAPI = 6443
	// Kubelet is the kubelet's API.
	Kubelet = 10250
	// KubernetesAPIBalancer is where a worker's kubelet reaches the
	// controllers' apiservers, on the node's loopback only.
	KubernetesAPIBalancer = 6444
	// ResourceMetrics is where a controller serves the resource metrics
	// API (metrics.k8s.io) to the apiserver's aggregation layer, on the
	// node's IP: the port of the cairn-metrics Service's endpoints, the
	// same on every node, so not in the Table.
	ResourceMetrics = 7837
	// ClusterDNS is where a worker serves the cluster's DNS, UDP and
	// TCP, on the node's IP: the port of the kube-dns Service's
	// endpoints, the same on every node, so not in the Table.
	ClusterDNS = 53
	// PodTunnel is where a worker's WireGuard interface takes the pod
	// traffic of the other workers, UDP, on the node's IP: the same on
	// every node, so not in the Table.
	PodTunnel = 7838
)

// Table names one port per service. A zero field means the fixed port of
// that service (WithDefaults).
type Table struct {
	Curator        int
	EtcdPeer       int
	NodeManagement int
	KubernetesAPI  int
	Kubelet        int

	KubernetesAPIBalancer int
}

// Default is the table of the node's fixed ports.
func Default() Table {
	return Table{
		Curator:        Curator,
		EtcdPeer:       EtcdPeer,
		NodeManagement: NodeManagement,
		KubernetesAPI:  KubernetesAPI,
		Kubelet:        Kubelet,

		KubernetesAPIBalancer: KubernetesAPIBalancer,
	}
}

// WithDefaults returns t with every zero field set to the fixed port.
func (t Table) WithDefaults() Table {
	d := Default()
	or := func(p *int, def int) {
		if *p == 0 {
			*p = def
		}
	}
	or(&t.Curator, d.Curator)
	or(&t.EtcdPeer, d.EtcdPeer)
	or(&t.NodeManagement, d.NodeManagement)
	or(&t.KubernetesAPI, d.KubernetesAPI)
	or(&t.Kubelet, d.Kubelet)
	or(&t.KubernetesAPIBalancer, d.KubernetesAPIBalancer)
	return t
}

// Join returns host:port for a port of the table, for dialling; an IPv6
// host is bracketed, whether or not it came with brackets.
func Join(host string, port int) string {
	return net.JoinHostPort(strings.Trim(host, "[]"), strconv.Itoa(port))
}
