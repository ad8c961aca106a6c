// Package kubernetes runs Kubernetes on a Cairn node: the control plane on
// a node with the KubernetesController role (Controller), the kubelet and
// its container runtime on a node with KubernetesWorker (Worker). Every
// Kubernetes program is a child process, supervised like any runnable, so
// that a crash in one never takes the node down; the node's own code here
// writes their configuration, gets their certificates from the curator,
// confines the apiserver to its part of etcd (EtcdProxy), balances the
// kubelet over the apiservers, and keeps Cairn's objects in the cluster.
//
//	roleserve ─roles─▶ Controller: etcd proxy, apiserver, controller-manager,
//	                               scheduler, reconciler
//	                 └▶ Worker:    balancer, containerd (+ pause image),
//	                               kubelet, pod network configuration
//
// docs/kubernetes.md says what an operator sees of it.
package kubernetes
